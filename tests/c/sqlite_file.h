/* A test's SQLite file, reached around the library: a statement run, and
 * a count read. The test sets `path` first. */
#ifndef LQ_SQLITE_FILE_H
#define LQ_SQLITE_FILE_H

#include "check.h"

#include <libqueue.h>
#include <sqlite3.h>
#include <stdio.h>
#include <unistd.h>

static char path[4096];

static inline void sql(const char *text) {
    sqlite3 *db;
    sqlite3_open(path, &db);
    sqlite3_busy_timeout(db, 5000);
    char *err = NULL;
    if (sqlite3_exec(db, text, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "sql: %s: %s\n", text, err);
        check_failures++;
    }
    sqlite3_free(err);
    sqlite3_close(db);
}

static inline long long count_rows(const char *text) {
    sqlite3 *db;
    sqlite3_stmt *st;
    long long n = -1;
    sqlite3_open(path, &db);
    if (sqlite3_prepare_v2(db, text, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* A lease queue, table "jobs", in a file of its own: <dir>/<name>-<pid>.db
 * (which `path` then names), made and opened. */
static inline lq_broker *open_lease_file(lq_table **t, const char *dir, const char *name) {
    snprintf(path, sizeof path, "%s/%s-%d.db", dir, name, (int)getpid());
    char url[4200];
    snprintf(url, sizeof url, "sqlite:%s", path);
    lq_table_new(t, "jobs");
    lq_table_set_column(*t, LQ_ROLE_PAYLOAD, "payload");
    lq_table_set_column(*t, LQ_ROLE_ATTEMPT, "attempt");
    lq_table_set_column(*t, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    lq_broker *b = NULL;
    CHECK(lq_broker_open(&b, url, NULL) == LQ_OK);
    CHECK(lq_table_create(b, *t, 0) == LQ_OK);
    return b;
}

#endif
