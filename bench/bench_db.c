#include "bench_db.h"

#include <libpq-fe.h>
#include <mysql.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PRELOAD_BATCH 1000

lq_table *bench_table(bench_form form) {
    lq_table *t;
    if (lq_table_new(&t, BENCH_TABLE) != LQ_OK) bench_die("lq_table_new: %s", lq_errmsg());
    int rc = lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload");
    if (rc == LQ_OK) rc = lq_table_set_column(t, LQ_ROLE_ATTEMPT, "attempt");
    if (rc == LQ_OK && form == BENCH_LEASE) rc = lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    if (rc == LQ_OK && form == BENCH_ADVISORY) rc = lq_table_set_advisory_lock(t, "job-{id}");
    if (rc != LQ_OK) bench_die("table description: %s", lq_errmsg());
    return t;
}

static char *create_sql(bench_db db, bench_form form) {
    lq_table *t = bench_table(form);
    char *sql;
    const char *dialect = db == BENCH_SQLITE ? "sqlite" : db == BENCH_PG ? "postgresql" : "mysql";
    if (lq_table_create_sql(&sql, t, dialect) != LQ_OK) bench_die("create_sql: %s", lq_errmsg());
    lq_table_free(t);
    char *copy = strdup(sql);
    lq_free(sql);
    return copy;
}

/* ---- SQLite ---- */

static void sq_exec(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) bench_die("sqlite: %s: %s", sql, err);
}

static sqlite3 *sq_open(const char *url) {
    sqlite3 *db;
    if (sqlite3_open(bench_sqlite_path(url), &db) != SQLITE_OK)
        bench_die("sqlite: cannot open %s", bench_sqlite_path(url));
    sqlite3_busy_timeout(db, 30000);
    return db;
}

static void sq_setup(const char *url, bench_form form, int64_t rows) {
    const char *path = bench_sqlite_path(url);
    char side[4096];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    sqlite3 *db = sq_open(url);
    sq_exec(db, "PRAGMA journal_mode = WAL");
    sq_exec(db, "PRAGMA synchronous = NORMAL");
    char *ddl = create_sql(BENCH_SQLITE, form);
    sq_exec(db, ddl);
    free(ddl);
    sqlite3_stmt *ins;
    if (sqlite3_prepare_v2(db, "INSERT INTO " BENCH_TABLE " (attempt, payload) VALUES (1, ?1)", -1,
                           &ins, NULL) != SQLITE_OK)
        bench_die("sqlite: prepare: %s", sqlite3_errmsg(db));
    char payload[256];
    for (int64_t i = 0; i < rows; i++) {
        if (i % PRELOAD_BATCH == 0) sq_exec(db, "BEGIN");
        size_t n = bench_payload(payload, sizeof payload, i + 1, 0);
        sqlite3_bind_blob(ins, 1, payload, (int)n, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE) bench_die("sqlite: insert: %s", sqlite3_errmsg(db));
        sqlite3_reset(ins);
        if (i % PRELOAD_BATCH == PRELOAD_BATCH - 1 || i == rows - 1) sq_exec(db, "COMMIT");
    }
    sqlite3_finalize(ins);
    sq_exec(db, "ANALYZE");
    sq_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    sqlite3_close(db);
}

static int64_t sq_count(const char *url) {
    sqlite3 *db = sq_open(url);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM " BENCH_TABLE, -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW)
        bench_die("sqlite: count: %s", sqlite3_errmsg(db));
    int64_t n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* ---- PostgreSQL ---- */

/* The bench's own connection reads the URL with libpq, which knows no
 * pgbouncer parameter (libqueue takes it out of its URLs): it goes without. */
static PGconn *pg_open(const char *url) {
    char plain[4096];
    snprintf(plain, sizeof plain, "%s", url);
    char *param = strstr(plain, "pgbouncer=");
    if (param && param > plain && (param[-1] == '?' || param[-1] == '&')) {
        char *end = param + strcspn(param, "&");
        memmove(param, *end ? end + 1 : end, strlen(*end ? end + 1 : end) + 1);
        size_t n = strlen(plain);
        if (n && (plain[n - 1] == '&' || plain[n - 1] == '?')) plain[n - 1] = '\0';
    }
    PGconn *pg = PQconnectdb(plain);
    if (PQstatus(pg) != CONNECTION_OK) bench_die("postgresql: %s", PQerrorMessage(pg));
    PQclear(PQexec(pg, "SET client_min_messages = warning"));
    return pg;
}

static void pg_exec(PGconn *pg, const char *sql) {
    PGresult *r = PQexec(pg, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        bench_die("postgresql: %s: %s", sql, PQerrorMessage(pg));
    PQclear(r);
}

static void pg_setup(const char *url, bench_form form, int64_t rows) {
    PGconn *pg = pg_open(url);
    pg_exec(pg, "DROP TABLE IF EXISTS " BENCH_TABLE);
    char *ddl = create_sql(BENCH_PG, form);
    pg_exec(pg, ddl);
    free(ddl);
    PGresult *r = PQprepare(pg, "ins", "INSERT INTO " BENCH_TABLE " (attempt, payload) VALUES (1, $1)", 1, NULL);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) bench_die("postgresql: prepare: %s", PQerrorMessage(pg));
    PQclear(r);
    char payload[256];
    for (int64_t i = 0; i < rows; i++) {
        if (i % PRELOAD_BATCH == 0) pg_exec(pg, "BEGIN");
        int n = (int)bench_payload(payload, sizeof payload, i + 1, 0);
        const char *values[1] = {payload};
        int format = 1;
        r = PQexecPrepared(pg, "ins", 1, values, &n, &format, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) bench_die("postgresql: insert: %s", PQerrorMessage(pg));
        PQclear(r);
        if (i % PRELOAD_BATCH == PRELOAD_BATCH - 1 || i == rows - 1) pg_exec(pg, "COMMIT");
    }
    pg_exec(pg, "VACUUM ANALYZE " BENCH_TABLE);
    pg_exec(pg, "CHECKPOINT");
    PQfinish(pg);
}

static int64_t pg_count(const char *url) {
    PGconn *pg = pg_open(url);
    PGresult *r = PQexec(pg, "SELECT count(*) FROM " BENCH_TABLE);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) bench_die("postgresql: count: %s", PQerrorMessage(pg));
    int64_t n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(pg);
    return n;
}

/* ---- MariaDB / MySQL ---- */

typedef struct my_target {
    char user[128], password[128], host[128], database[128];
    unsigned port;
} my_target;

/* mysql://user:password@host:port/database (no percent-encoding). */
static void my_parse(my_target *t, const char *url) {
    memset(t, 0, sizeof *t);
    const char *p = strstr(url, "://");
    if (!p) bench_die("mysql: bad URL %s", url);
    p += 3;
    const char *at = strchr(p, '@'), *slash;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t un = (size_t)((colon ? colon : at) - p);
        snprintf(t->user, sizeof t->user, "%.*s", (int)un, p);
        if (colon) snprintf(t->password, sizeof t->password, "%.*s", (int)(at - colon - 1), colon + 1);
        p = at + 1;
    }
    slash = strchr(p, '/');
    size_t hn = slash ? (size_t)(slash - p) : strlen(p);
    const char *colon = memchr(p, ':', hn);
    snprintf(t->host, sizeof t->host, "%.*s", (int)((colon ? colon : p + hn) - p), p);
    if (colon) t->port = (unsigned)strtoul(colon + 1, NULL, 10);
    if (slash) {
        const char *q = strchr(slash + 1, '?');
        size_t dn = q ? (size_t)(q - slash - 1) : strlen(slash + 1);
        snprintf(t->database, sizeof t->database, "%.*s", (int)dn, slash + 1);
    }
}

static MYSQL *my_open(const char *url) {
    my_target t;
    my_parse(&t, url);
    MYSQL *my = mysql_init(NULL);
    if (!my || !mysql_real_connect(my, t.host, t.user, t.password, t.database, t.port, NULL, 0))
        bench_die("mysql: cannot connect: %s", my ? mysql_error(my) : "out of memory");
    return my;
}

static void my_exec(MYSQL *my, const char *sql) {
    if (mysql_query(my, sql) != 0) bench_die("mysql: %s: %s", sql, mysql_error(my));
    MYSQL_RES *res = mysql_store_result(my);
    if (res) mysql_free_result(res);
}

static void my_setup(const char *url, bench_form form, int64_t rows) {
    MYSQL *my = my_open(url);
    my_exec(my, "DROP TABLE IF EXISTS " BENCH_TABLE);
    char *ddl = create_sql(BENCH_MYSQL, form);
    /* Statements separated by ";\n". */
    for (char *s = ddl, *next; s && *s; s = next) {
        next = strstr(s, ";\n");
        if (next) {
            *next = '\0';
            next += 2;
        }
        my_exec(my, s);
    }
    free(ddl);
    MYSQL_STMT *st = mysql_stmt_init(my);
    const char *sql = "INSERT INTO " BENCH_TABLE " (attempt, payload) VALUES (1, ?)";
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0) bench_die("mysql: prepare: %s", mysql_stmt_error(st));
    char payload[256];
    unsigned long len = 0;
    MYSQL_BIND b;
    memset(&b, 0, sizeof b);
    b.buffer_type = MYSQL_TYPE_BLOB;
    b.buffer = payload;
    b.length = &len;
    for (int64_t i = 0; i < rows; i++) {
        if (i % PRELOAD_BATCH == 0) my_exec(my, "START TRANSACTION");
        len = (unsigned long)bench_payload(payload, sizeof payload, i + 1, 0);
        b.buffer_length = len;
        if (mysql_stmt_bind_param(st, &b) != 0 || mysql_stmt_execute(st) != 0)
            bench_die("mysql: insert: %s", mysql_stmt_error(st));
        if (i % PRELOAD_BATCH == PRELOAD_BATCH - 1 || i == rows - 1) my_exec(my, "COMMIT");
    }
    mysql_stmt_close(st);
    my_exec(my, "ANALYZE TABLE " BENCH_TABLE);
    mysql_close(my);
}

static int64_t my_count(const char *url) {
    MYSQL *my = my_open(url);
    if (mysql_query(my, "SELECT count(*) FROM " BENCH_TABLE) != 0) bench_die("mysql: count: %s", mysql_error(my));
    MYSQL_RES *res = mysql_store_result(my);
    MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
    if (!row) bench_die("mysql: count: no row");
    int64_t n = strtoll(row[0], NULL, 10);
    mysql_free_result(res);
    mysql_close(my);
    return n;
}

void bench_setup(const char *url, bench_form form, int64_t rows) {
    switch (bench_db_of_url(url)) {
    case BENCH_SQLITE: sq_setup(url, form, rows); break;
    case BENCH_PG: pg_setup(url, form, rows); break;
    case BENCH_MYSQL: my_setup(url, form, rows); break;
    default: bench_die("unknown URL scheme: %s", url);
    }
}

int64_t bench_count(const char *url) {
    switch (bench_db_of_url(url)) {
    case BENCH_SQLITE: return sq_count(url);
    case BENCH_PG: return pg_count(url);
    case BENCH_MYSQL: return my_count(url);
    default: bench_die("unknown URL scheme: %s", url);
    }
}

long bench_sqlite_memory_kb(void) { return (long)(sqlite3_memory_used() / 1024); }
