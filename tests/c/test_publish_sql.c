/* lq_publish_sql: the insert rendered for each dialect (text, placeholders,
 * typed values, times on the host's clock, the wake-up on PostgreSQL), and
 * the SQLite one run through SQLite's own API on a file whose table
 * lq_table_create_sql made, then claimed by a subscription. Through the
 * public ABI alone. */
#include "check.h"
#include "libqueue.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Epoch ms of "YYYY-MM-DD?HH:MM:SS.fff..." (UTC), or -1. */
static int64_t parse_ms(const char *text) {
    struct tm tm = {0};
    int ms = 0;
    char sep;
    if (sscanf(text, "%4d-%2d-%2d%c%2d:%2d:%2d.%3d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &sep,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 8)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

static const char *text_at(const lq_rendered_sql *r, size_t i) {
    return lq_rendered_sql_param_type(r, i) == LQ_SQL_TEXT ? lq_rendered_sql_param_data(r, i) : NULL;
}

/* Every role a publish writes, under names that need their quotes. */
static lq_table *hostile_table(const char *schema) {
    lq_table *t;
    lq_table_new(&t, "we\"i`rd $1 ?%s");
    if (schema) lq_table_set_schema(t, schema);
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "pay?load");
    lq_table_set_column(t, LQ_ROLE_ATTEMPT, "attempt");
    lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    lq_table_set_column(t, LQ_ROLE_GROUP, "grp%");
    lq_table_set_column(t, LQ_ROLE_PARTITION_KEY, "pkey");
    lq_table_set_column(t, LQ_ROLE_PRIORITY, "prio$2");
    lq_table_set_column(t, LQ_ROLE_RETRY_AFTER, "retry_after");
    lq_table_set_column(t, LQ_ROLE_HEADERS, "headers");
    lq_table_set_column(t, LQ_ROLE_DEDUP_KEY, "dedup");
    lq_table_set_column(t, LQ_ROLE_EXPIRES_AT, "expires_at");
    lq_table_set_column(t, LQ_ROLE_CREATED_AT, "created_at");
    return t;
}

static lq_message *full_message(void) {
    lq_message *m;
    lq_message_new(&m);
    lq_message_set_payload(m, "a\0b", 3);
    lq_message_set_group(m, "g'1");
    lq_message_set_partition_key(m, "k");
    lq_message_set_priority(m, -5);
    lq_message_set_delay_ms(m, 60000);
    lq_message_set_expires_in_ms(m, 120000);
    lq_message_set_header(m, "trace", "t\"1");
    lq_message_set_dedup_key(m, "once");
    return m;
}

/* Each placeholder is where the handle says: "$n" on PostgreSQL, "?" else. */
static void check_offsets(const lq_rendered_sql *r, int numbered) {
    const char *sql = lq_rendered_sql_text(r);
    for (size_t i = 0; i < lq_rendered_sql_param_count(r); i++) {
        size_t at = lq_rendered_sql_param_offset(r, i);
        CHECK(at < strlen(sql));
        if (at >= strlen(sql)) continue;
        char want[32];
        snprintf(want, sizeof want, numbered ? "$%zu" : "?", i + 1);
        CHECK(strncmp(sql + at, want, strlen(want)) == 0);
        if (numbered) CHECK(sql[at + strlen(want)] < '0' || sql[at + strlen(want)] > '9');
    }
    CHECK(lq_rendered_sql_param_offset(r, lq_rendered_sql_param_count(r)) == SIZE_MAX);
}

/* The values of the full message in the insert's column order: payload,
 * group, partition key, priority, retry_after, headers, dedup key,
 * expires_at, created_at; the times from one clock reading. */
static void check_values(const lq_rendered_sql *r, int64_t before, int64_t after) {
    CHECK(lq_rendered_sql_param_type(r, 0) == LQ_SQL_BYTES);
    CHECK(lq_rendered_sql_param_size(r, 0) == 3 && memcmp(lq_rendered_sql_param_data(r, 0), "a\0b", 3) == 0);
    CHECK_STR(text_at(r, 1), "g'1");
    CHECK_STR(text_at(r, 2), "k");
    CHECK(lq_rendered_sql_param_type(r, 3) == LQ_SQL_INT64 && lq_rendered_sql_param_int64(r, 3) == -5);
    CHECK_STR(text_at(r, 5), "{\"trace\":\"t\\\"1\"}");
    CHECK_STR(text_at(r, 6), "once");
    int64_t due = parse_ms(text_at(r, 4) ? text_at(r, 4) : ""), expires = parse_ms(text_at(r, 7) ? text_at(r, 7) : ""),
            created = parse_ms(text_at(r, 8) ? text_at(r, 8) : "");
    CHECK(created >= before - 1 && created <= after + 1);
    CHECK(due - created == 60000 && expires - created == 120000);
}

static void postgresql(void) {
    lq_table *t = hostile_table("app");
    lq_message *m = full_message();
    lq_rendered_sql *r = NULL;
    int64_t before = (int64_t)time(NULL) * 1000;
    CHECK(lq_publish_sql(&r, "postgresql", t, m, 0) == LQ_OK);
    int64_t after = (int64_t)time(NULL) * 1000 + 1000;
    CHECK_STR(lq_rendered_sql_text(r),
              "WITH \"lq_ins\" AS (INSERT INTO \"app\".\"we\"\"i`rd $1 ?%s\" (\"attempt\", \"pay?load\", "
              "\"grp%\", \"pkey\", \"prio$2\", \"retry_after\", \"headers\", \"dedup\", \"expires_at\", "
              "\"created_at\") VALUES (1, $1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING \"id\") SELECT "
              "\"lq_ins\".\"id\", pg_notify($10, COALESCE($11, '')) FROM \"lq_ins\"");
    CHECK(lq_rendered_sql_param_count(r) == 11);
    check_values(r, before, after);
    CHECK_CONTAINS(text_at(r, 4), "+00:00");
    CHECK_STR(text_at(r, 9), "app.we\"i`rd $1 ?%s"); /* the channel: the qualified name */
    CHECK_STR(text_at(r, 10), "g'1");
    CHECK(lq_rendered_sql_returns_id(r) == 1);
    check_offsets(r, 1);
    lq_rendered_sql_free(r);

    /* Without the wake-up: the insert alone, still returning the id. */
    CHECK(lq_publish_sql(&r, "postgresql", t, m, LQ_PUBLISH_SQL_NO_NOTIFY) == LQ_OK);
    CHECK(strncmp(lq_rendered_sql_text(r), "INSERT INTO", 11) == 0);
    CHECK_CONTAINS(lq_rendered_sql_text(r), "RETURNING \"id\"");
    CHECK(strstr(lq_rendered_sql_text(r), "pg_notify") == NULL);
    CHECK(lq_rendered_sql_param_count(r) == 9 && lq_rendered_sql_returns_id(r) == 1);
    lq_rendered_sql_free(r);
    /* PostgreSQL's drivers have no last insert id: RETURNING stays. */
    CHECK(lq_publish_sql(&r, "postgresql", t, m, LQ_PUBLISH_SQL_NO_RETURNING) == LQ_OK);
    CHECK_CONTAINS(lq_rendered_sql_text(r), "RETURNING \"id\"");
    CHECK(lq_rendered_sql_returns_id(r) == 1);
    lq_rendered_sql_free(r);

    /* A name longer than a channel holds: no wake-up, nothing refused. */
    lq_table_set_schema(t, "a_schema_name_long_enough_to_pass_what_a_channel_holds_at_all");
    CHECK(lq_publish_sql(&r, "postgresql", t, m, 0) == LQ_OK);
    CHECK(strstr(lq_rendered_sql_text(r), "pg_notify") == NULL);
    lq_rendered_sql_free(r);
    lq_message_free(m);
    lq_table_free(t);
}

static void mysql(void) {
    lq_table *t = hostile_table(NULL);
    lq_message *m = full_message();
    lq_rendered_sql *r = NULL;
    int64_t before = (int64_t)time(NULL) * 1000;
    CHECK(lq_publish_sql(&r, "mysql", t, m, 0) == LQ_OK);
    int64_t after = (int64_t)time(NULL) * 1000 + 1000;
    CHECK_STR(lq_rendered_sql_text(r),
              "INSERT INTO `we\"i``rd $1 ?%s` (`attempt`, `pay?load`, `grp%`, `pkey`, `prio$2`, "
              "`retry_after`, `headers`, `dedup`, `expires_at`, `created_at`) VALUES (1, ?, ?, ?, ?, "
              "?, ?, ?, ?, ?)");
    CHECK(lq_rendered_sql_param_count(r) == 9 && lq_rendered_sql_returns_id(r) == 0);
    check_values(r, before, after);
    /* DATETIME's text: a space, microseconds, no offset (UTC). */
    CHECK(strlen(text_at(r, 4)) == 26 && text_at(r, 4)[10] == ' ');
    check_offsets(r, 0);
    lq_rendered_sql_free(r);
    /* "mariadb" is the same dialect. */
    CHECK(lq_publish_sql(&r, "mariadb", t, m, 0) == LQ_OK);
    lq_rendered_sql_free(r);

    /* A table whose ids are the messages': the id is the first value. */
    lq_table *given;
    lq_table_new(&given, "plain");
    lq_table_set_id(given, "job_id", 0);
    lq_message *bare;
    lq_message_new(&bare);
    CHECK(lq_publish_sql(&r, "mysql", given, bare, 0) == LQ_SCHEMA); /* no id */
    CHECK(r == NULL);
    lq_message_set_id(bare, INT64_C(9007199254740993));
    CHECK(lq_publish_sql(&r, "mysql", given, bare, 0) == LQ_OK);
    CHECK_STR(lq_rendered_sql_text(r), "INSERT INTO `plain` (`job_id`) VALUES (?)");
    CHECK(lq_rendered_sql_param_int64(r, 0) == INT64_C(9007199254740993));
    lq_rendered_sql_free(r);
    lq_message_free(bare);
    lq_table_free(given);
    lq_message_free(m);
    lq_table_free(t);
}

/* What a caller's driver does: bind each value by its type, in order. */
static int run_rendered(int64_t *id, sqlite3 *db, const lq_rendered_sql *r) {
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, lq_rendered_sql_text(r), -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    for (size_t i = 0; i < lq_rendered_sql_param_count(r); i++) {
        int at = (int)i + 1;
        const void *data = lq_rendered_sql_param_data(r, i);
        int size = (int)lq_rendered_sql_param_size(r, i);
        switch (lq_rendered_sql_param_type(r, i)) {
        case LQ_SQL_INT64: sqlite3_bind_int64(st, at, lq_rendered_sql_param_int64(r, i)); break;
        case LQ_SQL_DOUBLE: sqlite3_bind_double(st, at, lq_rendered_sql_param_double(r, i)); break;
        case LQ_SQL_TEXT: sqlite3_bind_text(st, at, data, size, SQLITE_STATIC); break;
        case LQ_SQL_BYTES: sqlite3_bind_blob(st, at, data, size, SQLITE_STATIC); break;
        default: sqlite3_bind_null(st, at);
        }
    }
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && lq_rendered_sql_returns_id(r)) *id = sqlite3_column_int64(st, 0);
    if (rc == SQLITE_ROW) rc = sqlite3_step(st);
    int done = sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : done;
}

static void sqlite_run(const char *dir) {
    char path[512], url[600];
    snprintf(path, sizeof path, "%s/publish_sql.db", dir);
    unlink(path);
    snprintf(url, sizeof url, "sqlite://%s", path);
    lq_table *t = hostile_table(NULL);
    lq_message *m = full_message();
    lq_message_set_delay_ms(m, 0);
    lq_rendered_sql *r = NULL;
    CHECK(lq_publish_sql(&r, "sqlite", t, m, 0) == LQ_OK);
    CHECK_STR(lq_rendered_sql_text(r),
              "INSERT INTO \"we\"\"i`rd $1 ?%s\" (\"attempt\", \"pay?load\", \"grp%\", \"pkey\", "
              "\"prio$2\", \"retry_after\", \"headers\", \"dedup\", \"expires_at\", \"created_at\") "
              "VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING \"id\"");
    CHECK(lq_rendered_sql_returns_id(r) == 1);
    check_offsets(r, 0);
    lq_rendered_sql *plain = NULL;
    CHECK(lq_publish_sql(&plain, "sqlite", t, m, LQ_PUBLISH_SQL_NO_RETURNING) == LQ_OK);
    CHECK(strstr(lq_rendered_sql_text(plain), "RETURNING") == NULL && lq_rendered_sql_returns_id(plain) == 0);
    lq_rendered_sql_free(plain);

    sqlite3 *db;
    char *ddl = NULL;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(lq_table_create_sql(&ddl, t, "sqlite") == LQ_OK);
    CHECK(sqlite3_exec(db, ddl, NULL, NULL, NULL) == SQLITE_OK);
    lq_free(ddl);

    /* Rolled back: nothing. Committed: the row, with its id. */
    int64_t id = 0;
    CHECK(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK);
    CHECK(run_rendered(&id, db, r) == SQLITE_OK && id == 1);
    CHECK(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK);
    CHECK(run_rendered(&id, db, r) == SQLITE_OK && id == 1);
    CHECK(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
    /* The same dedup key again: the unique index refuses it. */
    int64_t again = 0;
    CHECK(run_rendered(&again, db, r) == SQLITE_CONSTRAINT && again == 0);
    CHECK(sqlite3_extended_errcode(db) == SQLITE_CONSTRAINT_UNIQUE);
    sqlite3_close(db);
    lq_rendered_sql_free(r);

    /* A subscription claims the row as lq_publish would have written it. */
    lq_broker *b;
    lq_subscription *s;
    lq_options *o;
    lq_delivery *d = NULL;
    lq_options_new(&o);
    lq_options_set_str(o, LQ_OPT_GROUP, "g'1");
    CHECK(lq_broker_open(&b, url, NULL) == LQ_OK);
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    CHECK(lq_subscription_next(&d, s, 5000) == LQ_OK);
    if (d) {
        CHECK(lq_delivery_id(d) == 1 && lq_delivery_attempt(d) == 1);
        CHECK(lq_delivery_payload_size(d) == 3 && memcmp(lq_delivery_payload(d), "a\0b", 3) == 0);
        CHECK_STR(lq_delivery_partition_key(d), "k");
        CHECK_STR(lq_delivery_header(d, "trace"), "t\"1");
        CHECK(lq_delivery_ack(d) == LQ_OK);
        lq_delivery_free(d);
    }
    lq_subscription_close(s);
    lq_options_free(o);
    lq_broker_close(b);
    lq_message_free(m);
    lq_table_free(t);
}

static void refusals(void) {
    lq_table *t;
    lq_message *m;
    lq_rendered_sql *r = (lq_rendered_sql *)&t; /* must come back NULL */
    lq_table_new(&t, "jobs");
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload");
    lq_message_new(&m);
    CHECK(lq_publish_sql(&r, "oracle", t, m, 0) == LQ_DIALECT && r == NULL);
    CHECK_CONTAINS(lq_errmsg(), "oracle");
    CHECK(lq_publish_sql(&r, "sqlite", t, m, 4) == LQ_MISUSE);
    lq_message_set_group(m, "g");
    CHECK(lq_publish_sql(&r, "sqlite", t, m, 0) == LQ_SCHEMA);
    CHECK_CONTAINS(lq_errmsg(), "no group column");
    lq_message_set_group(m, NULL);
    lq_table_set_column(t, LQ_ROLE_DEDUP_KEY, "dedup");
    lq_message_set_dedup_key(m, "k");
    lq_message_set_on_duplicate(m, LQ_ON_DUPLICATE_EXISTING);
    CHECK(lq_publish_sql(&r, "postgresql", t, m, 0) == LQ_MISUSE && r == NULL);
    CHECK_CONTAINS(lq_errmsg(), "existing");
    lq_message_set_on_duplicate(m, LQ_ON_DUPLICATE_REFUSE);
    CHECK(lq_publish_sql(&r, "sqlite", t, m, 0) == LQ_OK && r != NULL);
    /* Past the end, every accessor reads as empty. */
    CHECK(lq_rendered_sql_param_type(r, 99) == LQ_SQL_NULL && lq_rendered_sql_param_data(r, 99) == NULL);
    CHECK(lq_rendered_sql_param_int64(r, 0) == 0 && lq_rendered_sql_param_double(r, 0) == 0.0);
    lq_rendered_sql_free(r);
    lq_message_free(m);
    lq_table_free(t);
}

int main(int argc, char **argv) {
    postgresql();
    mysql();
    sqlite_run(argc > 1 ? argv[1] : ".");
    refusals();
    CHECK_DONE();
}
