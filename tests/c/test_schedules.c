#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* Schedules through the public ABI on a SQLite file: two brokers on one
 * interval enqueue each tick once, remove stops a schedule, a close stops
 * the rest, and bad timings are refused; run under valgrind too. */
#include "check.h"

#include <libqueue.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char path[4096];

static long long scalar(const char *text) {
    sqlite3 *db;
    sqlite3_stmt *st;
    long long n = -1;
    sqlite3_open(path, &db);
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_prepare_v2(db, text, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

static void sleep_ms(long ms) {
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

static lq_options *timing(const char *cron, long long every_ms) {
    lq_options *o;
    lq_options_new(&o);
    if (cron) lq_options_set_str(o, LQ_OPT_CRON, cron);
    if (every_ms) lq_options_set_int(o, LQ_OPT_EVERY_MS, every_ms);
    return o;
}

/* lq_schedule_add's status for a timing, with `want` in its message. */
static void refused(lq_broker *b, const lq_table *t, const lq_message *m, lq_options *o,
                    const char *want) {
    CHECK(lq_schedule_add(b, t, "bad", o, m) == LQ_MISUSE);
    CHECK_CONTAINS(lq_errmsg(), want);
    lq_options_free(o);
}

int main(int argc, char **argv) {
    snprintf(path, sizeof path, "%s/schedules-%d.db", argc > 1 ? argv[1] : ".", (int)getpid());
    char url[4200];
    snprintf(url, sizeof url, "sqlite:%s", path);
    lq_table *t;
    lq_table_new(&t, "jobs");
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload");
    lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    lq_table_set_column(t, LQ_ROLE_HEADERS, "headers");
    lq_broker *one, *two;
    CHECK(lq_broker_open(&one, url, NULL) == LQ_OK);
    CHECK(lq_broker_open(&two, url, NULL) == LQ_OK);
    CHECK(lq_table_create(one, t, 0) == LQ_OK);
    lq_message *m;
    lq_message_new(&m);
    lq_message_set_payload(m, "tick", 4);

    lq_options *every = timing(NULL, 50), *daily = timing("0 3 * * *", 0);
    lq_options_set_str(daily, LQ_OPT_TZ, "Europe/Berlin");
    CHECK(lq_schedule_add(one, t, "fast", every, m) == LQ_OK);
    CHECK(lq_schedule_add(two, t, "fast", every, m) == LQ_OK);
    CHECK(lq_schedule_add(one, t, "fast", every, m) == LQ_MISUSE);
    CHECK(lq_schedule_add(one, t, "nightly", daily, m) == LQ_OK);
    sleep_ms(600);
    CHECK(lq_schedule_remove(one, "fast") == LQ_OK);
    CHECK(lq_schedule_remove(one, "fast") == LQ_MISUSE);
    CHECK(lq_schedule_remove(two, "fast") == LQ_OK);
    long long rows = scalar("SELECT count(*) FROM jobs");
    long long ticks = scalar("SELECT count(DISTINCT json_extract(headers, '$.\"lq-scheduled-for\"')) "
                             "FROM jobs");
    CHECK(rows >= 8 && rows == ticks); /* every 50 ms for 600 ms, each tick once */
    CHECK(scalar("SELECT count(*) FROM lq_schedule_ticks WHERE schedule = 'fast'") == rows);
    sleep_ms(200);
    CHECK(scalar("SELECT count(*) FROM jobs") == rows); /* removed: nothing more */

    /* A close with schedules still running stops them, leaking nothing. */
    CHECK(lq_schedule_add(two, t, "fast", every, m) == LQ_OK);
    sleep_ms(200);
    lq_broker_close(two);
    rows = scalar("SELECT count(*) FROM jobs");
    sleep_ms(200);
    CHECK(scalar("SELECT count(*) FROM jobs") == rows);

    refused(one, t, m, timing("*/0 * * * *", 0), "cron field minute");
    refused(one, t, m, timing("* * * * * * *", 0), "cron");
    refused(one, t, m, timing(NULL, 0), "needs cron or every_ms");
    refused(one, t, m, timing("@hourly", 10), "not both");
    lq_options *zone = timing("@hourly", 0);
    lq_options_set_str(zone, LQ_OPT_TZ, "Atlantis/Capital");
    refused(one, t, m, zone, "Atlantis/Capital");
    lq_options *catch_up = timing("@hourly", 0);
    lq_options_set_str(catch_up, LQ_OPT_CATCH_UP, "twice");
    refused(one, t, m, catch_up, "catch_up");
    lq_message_set_id(m, 7);
    CHECK(lq_schedule_add(one, t, "with-id", every, m) == LQ_MISUSE);
    CHECK_CONTAINS(lq_errmsg(), "takes no id");
    CHECK(lq_schedule_add(one, t, "", every, m) == LQ_MISUSE);
    CHECK(lq_schedule_add(NULL, t, "x", every, m) == LQ_MISUSE);
    CHECK(lq_schedule_remove(NULL, "x") == LQ_MISUSE);

    lq_options_free(every);
    lq_options_free(daily);
    lq_message_free(m);
    lq_broker_close(one);
    lq_table_free(t);
    unlink(path);
    CHECK_DONE();
}
