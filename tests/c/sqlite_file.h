/* A test's SQLite file, reached around the library: a statement run, and
 * a count read. The test sets `path` first. */
#ifndef LQ_SQLITE_FILE_H
#define LQ_SQLITE_FILE_H

#include "check.h"

#include <sqlite3.h>
#include <stdio.h>

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

#endif
