/* Cron expressions: what the parser takes and refuses (with the message),
 * and next ticks checked by hand in UTC and across the 2027 changes of
 * Europe/Berlin, America/New_York and Australia/Lord_Howe (half an hour),
 * and in Asia/Tokyo. tests/python/test_cron_oracle.py compares with
 * croniter on thousands more. */
#include "check.h"
#include "base/clock.h"
#include "base/cron.h"
#include "base/tzfile.h"

#include <stdio.h>
#include <string.h>

static int64_t at_ms(const char *text) {
    int64_t ms = 0;
    if (!lq__time_parse(&ms, text)) fprintf(stderr, "bad time %s\n", text);
    return ms;
}

/* The tick after `after` (UTC) as "YYYY-MM-DD HH:MM:SS" UTC, or the error. */
static const char *next_of(const char *expr, const lq__tz *zone, const char *after) {
    static char text[LQ__TIME_TEXT_SIZE + 64];
    lq__cron c;
    int64_t tick;
    if (lq__cron_parse(&c, expr) != LQ_OK ||
        lq__cron_next(&tick, &c, zone, at_ms(after)) != LQ_OK) {
        snprintf(text, sizeof text, "error: %s", lq_errmsg());
        return text;
    }
    lq__time_text(text, tick);
    text[10] = ' ';
    text[tick % 1000 ? 23 : 19] = '\0';
    return text;
}

/* The `n` ticks after `after`, each after the one before, joined by ", ". */
static const char *ticks_of(const char *expr, const lq__tz *zone, const char *after, int n) {
    static char out[1024];
    char from[32];
    snprintf(from, sizeof from, "%s", after);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *tick = next_of(expr, zone, from);
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? ", " : "", tick);
        snprintf(from, sizeof from, "%s", tick);
    }
    return out;
}

static void refused(const char *expr, const char *says) {
    lq__cron c;
    int rc = lq__cron_parse(&c, expr);
    CHECK(rc == LQ_MISUSE);
    if (rc != LQ_MISUSE) fprintf(stderr, "  taken: \"%s\"\n", expr);
    else CHECK_CONTAINS(lq_errmsg(), says);
}

static void test_refused(void) {
    refused("0 24 * * *", "cron field hour: 24 is out of range 0-23");
    refused("60 * * * *", "cron field minute: 60 is out of range 0-59");
    refused("60 * * * * *", "cron field second: 60 is out of range 0-59");
    refused("* * 0 * *", "cron field day-of-month: 0 is out of range 1-31");
    refused("* * 32 * *", "cron field day-of-month: 32 is out of range 1-31");
    refused("* * * 13 *", "cron field month: 13 is out of range 1-12");
    refused("* * * 0 *", "cron field month: 0 is out of range 1-12");
    refused("* * * * 8", "cron field day-of-week: 8 is out of range 0-7");
    refused("99999999999 * * * *", "cron field minute: 99999999999 is out of range");
    refused("*/0 * * * *", "cron field minute: bad step");
    refused("*/x * * * *", "cron field minute: bad step");
    refused("0 1-10/ * * *", "cron field hour: bad step");
    refused("0 */25 * * *", "cron field hour: bad step");
    refused("0 0 */-1 * *", "cron field day-of-month: bad step");
    refused("5-2 * * * *", "cron field minute: range \"5-2\" runs backwards");
    refused("1,,2 * * * *", "cron field minute: an empty list item");
    refused("1, * * * *", "cron field minute: an empty list item");
    refused("a * * * *", "cron field minute: bad value \"a\"");
    refused("* * * FOO *", "cron field month: bad value \"FOO\"");
    refused("* * * JANUARY *", "cron field month: bad value \"JANUARY\"");
    refused("* * * * MON-", "cron field day-of-week: bad value \"\"");
    refused("* * * MON *", "cron field month: bad value \"MON\"");
    refused("* * L * *", "cron field day-of-month: bad value \"L\"");
    refused("* * * * 5#2", "cron field day-of-week: bad value \"5#2\"");
    refused("* * ? * *", "cron field day-of-month: bad value \"?\"");
    refused("-1 * * * *", "cron field minute: bad value \"\"");
    refused("@fortnightly", "unknown shorthand @fortnightly");
    refused("@reboot", "unknown shorthand @reboot");
    refused("@", "unknown shorthand @");
    refused("@daily 5", "cron shorthand @daily stands alone");
    refused("* * * *", "has 4 fields");
    refused("* * * * * * *", "has 7 fields");
    refused("", "has 0 fields");
    refused("   ", "has 0 fields");
    refused("0 0 30 2 *", "never fires");
    refused("0 0 31 4,6,9,11 *", "never fires");
    lq__cron c;
    CHECK(lq__cron_parse(&c, NULL) == LQ_MISUSE);
}

static void test_parsed(void) {
    lq__cron c, d;
    CHECK(lq__cron_parse(&c, "*/15 * * * *") == LQ_OK &&
          c.minutes == (1ull | 1ull << 15 | 1ull << 30 | 1ull << 45) && c.seconds == 1 &&
          c.hours_interval && c.mdays_all && c.wdays_all);
    CHECK(lq__cron_parse(&c, "5/15 1-10/3 * * *") == LQ_OK &&
          c.minutes == (1ull << 5 | 1ull << 20 | 1ull << 35 | 1ull << 50) &&
          c.hours == (1u << 1 | 1u << 4 | 1u << 7 | 1u << 10) && c.hours_interval);
    CHECK(lq__cron_parse(&c, "0 2 * * MON-FRI") == LQ_OK && c.wdays == 0x3E && !c.wdays_all &&
          !c.hours_interval);
    CHECK(lq__cron_parse(&c, "0 1-3 * * fri-sun") == LQ_OK && c.wdays == (1 << 5 | 1 << 6 | 1) &&
          !c.hours_interval);
    CHECK(lq__cron_parse(&c, "0 0-23 * * 0-7") == LQ_OK && c.wdays_all && c.hours_interval);
    CHECK(lq__cron_parse(&c, "0 0 * * 7") == LQ_OK && c.wdays == 1);
    CHECK(lq__cron_parse(&c, "0 0 * * 1/2") == LQ_OK &&
          c.wdays == (1 << 1 | 1 << 3 | 1 << 5 | 1)); /* 7 too */
    CHECK(lq__cron_parse(&c, "0 0 1 jan-Mar,DEC *") == LQ_OK &&
          c.months == (1 << 1 | 1 << 2 | 1 << 3 | 1 << 12) && c.mdays == 2 && !c.mdays_all);
    CHECK(lq__cron_parse(&c, "0 0 */2 * *") == LQ_OK &&
          !c.mdays_all); /* restricted, as in croniter */
    CHECK(lq__cron_parse(&c, "0 0 1-31 * *") == LQ_OK && c.mdays_all);
    CHECK(lq__cron_parse(&c, "30 0 12 * * *") == LQ_OK && c.seconds == 1ull << 30 &&
          c.minutes == 1 && c.hours == 1u << 12);
    CHECK(lq__cron_parse(&c, " \t0 0 29 2 *\t ") == LQ_OK);
    CHECK(lq__cron_parse(&c, "0 0 31 4 1") == LQ_OK); /* April has no 31st, but Mondays */
    const char *same[][2] = {{"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
                             {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
                             {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
                             {"@HOURLY", "0 * * * *"},  {"  @daily  ", "0 0 * * *"}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        CHECK(lq__cron_parse(&c, same[i][0]) == LQ_OK && lq__cron_parse(&d, same[i][1]) == LQ_OK &&
              memcmp(&c, &d, sizeof c) == 0);
}

static void test_utc(void) {
    CHECK_STR(next_of("0 3 * * *", NULL, "2027-01-01 00:00:00"), "2027-01-01 03:00:00");
    CHECK_STR(next_of("0 3 * * *", NULL, "2027-01-01 03:00:00"),
              "2027-01-02 03:00:00"); /* strictly after */
    CHECK_STR(next_of("0 3 * * *", NULL, "2027-01-01 02:59:59.999"), "2027-01-01 03:00:00");
    CHECK_STR(next_of("* * * * * *", NULL, "2027-01-01 00:00:00.500"), "2027-01-01 00:00:01");
    CHECK_STR(next_of("* * * * *", NULL, "2027-01-01 00:00:30"), "2027-01-01 00:01:00");
    CHECK_STR(next_of("*/20 * * * * *", NULL, "2027-12-31 23:59:50"), "2028-01-01 00:00:00");
    CHECK_STR(next_of("@yearly", NULL, "2027-06-01 00:00:00"), "2028-01-01 00:00:00");
    CHECK_STR(next_of("@weekly", NULL, "2027-01-01 00:00:00"),
              "2027-01-03 00:00:00"); /* a Friday */
    CHECK_STR(next_of("0 0 29 2 *", NULL, "2027-01-01 00:00:00"), "2028-02-29 00:00:00");
    CHECK_STR(next_of("0 0 29 2 *", NULL, "2096-03-01 00:00:00"),
              "2104-02-29 00:00:00"); /* not 2100 */
    CHECK_STR(next_of("0 0 31 * *", NULL, "2027-04-01 00:00:00"), "2027-05-31 00:00:00");
    /* Both days restricted: either; one of them "*": the other alone. */
    CHECK_STR(ticks_of("0 0 13 * 5", NULL, "2027-01-01 00:00:00", 3),
              "2027-01-08 00:00:00, 2027-01-13 00:00:00, 2027-01-15 00:00:00");
    CHECK_STR(next_of("0 0 13 * *", NULL, "2027-01-01 00:00:00"), "2027-01-13 00:00:00");
    CHECK_STR(next_of("0 0 * * 5", NULL, "2027-01-01 00:00:00"), "2027-01-08 00:00:00");
    CHECK_STR(next_of("0 0 13 * 0-7", NULL, "2027-01-01 00:00:00"), "2027-01-13 00:00:00");
    CHECK_STR(next_of("0 0 31 4 1", NULL, "2027-01-01 00:00:00"), "2027-04-05 00:00:00");
    CHECK_STR(next_of("15 10 * * MON-FRI", NULL, "2027-01-01 10:15:00"), "2027-01-04 10:15:00");
    CHECK_STR(next_of("0 12 * * 7", NULL, "2027-01-01 00:00:00"), "2027-01-03 12:00:00");
    CHECK_STR(ticks_of("0 0 1 */5 *", NULL, "2027-01-01 00:00:00", 3),
              "2027-06-01 00:00:00, 2027-11-01 00:00:00, 2028-01-01 00:00:00");
    CHECK_STR(next_of("59 59 23 31 12 *", NULL, "1969-12-31 23:59:59"), "1970-12-31 23:59:59");
    CHECK_STR(next_of("* * * * *", NULL, "0001-01-01 00:00:00"), "0001-01-01 00:01:00");
    /* The end of time. */
    CHECK_STR(next_of("59 23 31 12 *", NULL, "9999-12-31 23:58:00"), "9999-12-31 23:59:00");
    CHECK_CONTAINS(next_of("59 23 31 12 *", NULL, "9999-12-31 23:59:00"),
                   "no tick comes before the year 10000");
    lq__cron c;
    int64_t tick;
    CHECK(lq__cron_parse(&c, "* * * * *") == LQ_OK);
    CHECK(lq__cron_next(&tick, &c, NULL, LQ__TIME_MAX_MS + 1) == LQ_MISUSE);
    CHECK_CONTAINS(lq_errmsg(), "outside the years 1-9999");
    CHECK(lq__cron_next(&tick, &c, NULL, INT64_MIN) == LQ_MISUSE);
}

static void test_berlin(const lq__tz *z) {
    /* Spring, 2027-03-28: 02:00 CET becomes 03:00 CEST (01:00 UTC). A fixed
     * 02:30 ticks once, at 03:00 CEST; then 02:30 CEST the day after. */
    CHECK_STR(ticks_of("30 2 * * *", z, "2027-03-27 12:00:00", 3),
              "2027-03-28 01:00:00, 2027-03-29 00:30:00, 2027-03-30 00:30:00");
    CHECK_STR(ticks_of("15,45 2 * * *", z, "2027-03-27 23:00:00", 2),
              "2027-03-28 01:00:00, 2027-03-29 00:15:00");
    CHECK_STR(next_of("0 3 * * *", z, "2027-03-27 23:00:00"), "2027-03-28 01:00:00");
    /* Hourly: 01:00 CET, then 03:00 CEST; no 02:00 that day. */
    CHECK_STR(ticks_of("0 * * * *", z, "2027-03-27 23:30:00", 3),
              "2027-03-28 00:00:00, 2027-03-28 01:00:00, 2027-03-28 02:00:00");
    CHECK_STR(ticks_of("30 * * * *", z, "2027-03-27 23:40:00", 2),
              "2027-03-28 00:30:00, 2027-03-28 01:30:00");
    CHECK_STR(ticks_of("*/15 * * * *", z, "2027-03-28 00:40:00", 3),
              "2027-03-28 00:45:00, 2027-03-28 01:00:00, 2027-03-28 01:15:00");
    /* Fall, 2027-10-31: 03:00 CEST becomes 02:00 CET (01:00 UTC). A fixed
     * 02:30 ticks once, at 02:30 CEST; looking from inside the repeated
     * hour finds the next day's. */
    CHECK_STR(ticks_of("30 2 * * *", z, "2027-10-30 12:00:00", 3),
              "2027-10-31 00:30:00, 2027-11-01 01:30:00, 2027-11-02 01:30:00");
    CHECK_STR(next_of("30 2 * * *", z, "2027-10-31 01:10:00"), "2027-11-01 01:30:00");
    CHECK_STR(ticks_of("0 1-3 * * *", z, "2027-10-30 22:30:00", 3),
              "2027-10-30 23:00:00, 2027-10-31 00:00:00, 2027-10-31 02:00:00");
    /* "*" and stepped hours tick at every real hour, the repeat too. */
    CHECK_STR(ticks_of("0 * * * *", z, "2027-10-30 23:30:00", 3),
              "2027-10-31 00:00:00, 2027-10-31 01:00:00, 2027-10-31 02:00:00");
    CHECK_STR(ticks_of("0 */2 * * *", z, "2027-10-30 21:30:00", 3),
              "2027-10-30 22:00:00, 2027-10-31 00:00:00, 2027-10-31 01:00:00");
    CHECK_STR(ticks_of("*/30 * * * *", z, "2027-10-31 00:10:00", 4),
              "2027-10-31 00:30:00, 2027-10-31 01:00:00, 2027-10-31 01:30:00, 2027-10-31 02:00:00");
    CHECK_STR(ticks_of("0 0-23 * * *", z, "2027-10-31 00:30:00", 2),
              "2027-10-31 01:00:00, 2027-10-31 02:00:00");
    /* Daily jobs keep their wall time either side. */
    CHECK_STR(ticks_of("0 12 * * *", z, "2027-03-27 12:00:00", 2),
              "2027-03-28 10:00:00, 2027-03-29 10:00:00");
    CHECK_STR(ticks_of("@daily", z, "2027-10-30 12:00:00", 2),
              "2027-10-30 22:00:00, 2027-10-31 23:00:00");
    /* Past the file's table of changes (the footer's rule), 2050-03-27. */
    CHECK_STR(next_of("30 2 * * *", z, "2050-03-27 00:00:00"), "2050-03-27 01:00:00");
}

static void test_new_york(const lq__tz *z) {
    /* 2027-03-14 02:00 EST becomes 03:00 EDT (07:00 UTC). */
    CHECK_STR(ticks_of("30 2 * * *", z, "2027-03-13 12:00:00", 2),
              "2027-03-14 07:00:00, 2027-03-15 06:30:00");
    CHECK_STR(ticks_of("0 * * * *", z, "2027-03-14 05:30:00", 2),
              "2027-03-14 06:00:00, 2027-03-14 07:00:00");
    /* 2027-11-07 02:00 EDT becomes 01:00 EST (06:00 UTC). */
    CHECK_STR(ticks_of("30 1 * * *", z, "2027-11-06 12:00:00", 2),
              "2027-11-07 05:30:00, 2027-11-08 06:30:00");
    CHECK_STR(ticks_of("0 * * * *", z, "2027-11-07 04:30:00", 3),
              "2027-11-07 05:00:00, 2027-11-07 06:00:00, 2027-11-07 07:00:00");
    CHECK_STR(ticks_of("0 9 * * 1-5", z, "2027-11-05 12:00:00", 2),
              "2027-11-05 13:00:00, 2027-11-08 14:00:00");
}

static void test_lord_howe(const lq__tz *z) {
    /* 2027-10-03 02:00 +10:30 becomes 02:30 +11 (15:30 UTC the day before). */
    CHECK_STR(next_of("15 2 * * *", z, "2027-10-02 12:00:00"), "2027-10-02 15:30:00");
    CHECK_STR(next_of("45 2 * * *", z, "2027-10-02 12:00:00"),
              "2027-10-02 15:45:00"); /* 02:45 comes */
    CHECK_STR(next_of("15 * * * *", z, "2027-10-02 14:50:00"),
              "2027-10-02 16:15:00"); /* 02:15 never */
    CHECK_STR(ticks_of("*/30 * * * *", z, "2027-10-02 15:10:00", 2),
              "2027-10-02 15:30:00, 2027-10-02 16:00:00");
    /* 2027-04-04 02:00 +11 becomes 01:30 +10:30 (15:00 UTC the day before). */
    CHECK_STR(ticks_of("45 1 * * *", z, "2027-04-03 12:00:00", 2),
              "2027-04-03 14:45:00, 2027-04-04 15:15:00");
    CHECK_STR(ticks_of("*/30 * * * *", z, "2027-04-03 13:50:00", 4),
              "2027-04-03 14:00:00, 2027-04-03 14:30:00, 2027-04-03 15:00:00, 2027-04-03 15:30:00");
}

static void test_tokyo(const lq__tz *z) {
    CHECK_STR(ticks_of("0 9 * * *", z, "2027-03-28 00:00:00", 2),
              "2027-03-29 00:00:00, 2027-03-30 00:00:00");
    CHECK_STR(ticks_of("30 2 * * *", z, "2027-03-27 12:00:00", 2),
              "2027-03-27 17:30:00, 2027-03-28 17:30:00");
    CHECK_STR(next_of("0 0 1 1 *", z, "2027-06-01 00:00:00"), "2027-12-31 15:00:00");
}

int main(void) {
    test_refused();
    test_parsed();
    test_utc();
    const char *names[] = {"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Tokyo",
                           "UTC"};
    lq__tz *zones[5] = {NULL};
    for (int i = 0; i < 5; i++)
        if (lq__tz_load(&zones[i], names[i]) != LQ_OK)
            fprintf(stderr, "%s: %s\n", names[i], lq_errmsg());
    CHECK(zones[0] && zones[1] && zones[2] && zones[3] && zones[4]);
    if (zones[0]) test_berlin(zones[0]);
    if (zones[1]) test_new_york(zones[1]);
    if (zones[2]) test_lord_howe(zones[2]);
    if (zones[3]) test_tokyo(zones[3]);
    if (zones[4])
        CHECK_STR(next_of("30 2 * * *", zones[4], "2027-03-28 00:00:00"), "2027-03-28 02:30:00");
    for (int i = 0; i < 5; i++) lq__tz_free(zones[i]);
    CHECK_DONE();
}
