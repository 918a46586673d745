/* The raw-SQL baseline on PostgreSQL: the statements the postgresql dialect
 * runs (bench/raw_sql.h, checked by sql_check), prepared once per
 * connection, binary results, one connection per thread, no library.
 *
 *   raw_pg --url U --form row_lock|lease|advisory [--n N] [--threads 4] [--batch 1] [--fleet]
 *       W1 drain of a table `lq_bench setup` preloaded. Per thread:
 *       row lock  BEGIN; claim LIMIT b FOR UPDATE SKIP LOCKED; DELETE; COMMIT, which
 *                 at b = 1 is COMMIT AND CHAIN, opening the next claim's transaction
 *       lease     claim (WITH .. UPDATE, autocommit); DELETE .. AND locked_until (autocommit)
 *       advisory  one statement: the first free key in claim order, and its take
 *                 (UPDATE .. RETURNING); DELETE; pg_advisory_unlock
 *       With --batch b > 1 the rows of a claim settle in one DELETE .. = ANY($1).
 *       With --fleet it is one of several processes on the table (raw_common.h).
 *   raw_pg --url U --workload W2-single|W2-bulk [--n N]
 *       N prepared INSERTs, each its own transaction, or multi-row INSERTs of 1000
 *       rows (the library's bulk publish), each its own transaction. */
#include "raw_common.h"
#include "raw_sql.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pg_worker {
    PGconn *pg;
} pg_worker;

static bool fail(raw_worker *w, const char *what, PGconn *pg) {
    snprintf(w->error, sizeof w->error, "%s: %s", what, PQerrorMessage(pg));
    return false;
}

static bool prepare(raw_worker *w, PGconn *pg, const char *name, const char *sql) {
    PGresult *r = PQprepare(pg, name, sql, 0, NULL);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok || fail(w, name, pg);
}

static bool pg_open(raw_worker *w) {
    pg_worker *c = calloc(1, sizeof *c);
    w->conn = c;
    c->pg = PQconnectdb(w->cfg->url);
    if (PQstatus(c->pg) != CONNECTION_OK) return fail(w, "connect", c->pg);
    bool batch = w->cfg->batch > 1;
    switch (w->cfg->form) {
    case BENCH_ROW_LOCK:
        return prepare(w, c->pg, "claim", PG_ROW_LOCK_CLAIM) &&
               prepare(w, c->pg, "ack", batch ? PG_ROW_LOCK_BATCH_ACK : PG_ROW_LOCK_ACK);
    case BENCH_LEASE:
        return prepare(w, c->pg, "claim", PG_LEASE_CLAIM) &&
               prepare(w, c->pg, "ack", batch ? PG_LEASE_BATCH_ACK : PG_LEASE_ACK);
    case BENCH_ADVISORY:
        return prepare(w, c->pg, "claim_one", PG_ADVISORY_CLAIM_ONE) &&
               prepare(w, c->pg, "ack", PG_ADVISORY_ACK) && prepare(w, c->pg, "unlock", PG_UNLOCK_KEY);
    default: return false;
    }
}

static void pg_close(raw_worker *w) {
    pg_worker *c = w->conn;
    PQfinish(c->pg);
    free(c);
}

/* Runs a prepared statement with text parameters; binary results when
 * `binary`. Returns the result, or NULL (with w->error). */
static PGresult *run(raw_worker *w, const char *name, int n, const char *const *values, int binary) {
    pg_worker *c = w->conn;
    PGresult *r = PQexecPrepared(c->pg, name, n, values, NULL, NULL, binary);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        snprintf(w->error, sizeof w->error, "%s: %s", name, PQresultErrorMessage(r));
        PQclear(r);
        return NULL;
    }
    return r;
}

/* BEGIN / COMMIT / ROLLBACK as the dialect sends them (simple protocol). */
static bool plain(raw_worker *w, const char *sql) {
    pg_worker *c = w->conn;
    PGresult *r = PQexec(c->pg, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) snprintf(w->error, sizeof w->error, "%s: %s", sql, PQresultErrorMessage(r));
    PQclear(r);
    return ok;
}

static int64_t be64(const char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | (unsigned char)p[i];
    return (int64_t)v;
}

/* The ids of a claim's rows (binary int8 in column 0), touching the payload
 * as a handler would see it; returns the count. */
static int read_ids(PGresult *r, int64_t *ids, int cap, unsigned *touch) {
    int rows = PQntuples(r);
    if (rows > cap) rows = cap;
    for (int i = 0; i < rows; i++) {
        ids[i] = be64(PQgetvalue(r, i, 0));
        if (PQnfields(r) > 1 && PQgetlength(r, i, 1) > 0) *touch += (unsigned char)PQgetvalue(r, i, 1)[0];
    }
    return rows;
}

/* "{1,2,3}" */
static const char *id_array(char *buf, size_t cap, const int64_t *ids, int n) {
    size_t k = 0;
    buf[k++] = '{';
    for (int i = 0; i < n && k + 24 < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "," : "", (long long)ids[i]);
    buf[k++] = '}';
    buf[k] = '\0';
    return buf;
}

static bool drain_row_lock(raw_worker *w) {
    char limit[24], id[24], arr[24 * 1024];
    int64_t ids[1000];
    unsigned touch = 0;
    /* One row a claim: the dialect's worker chains its next claim's
     * transaction to the commit, as here. */
    bool chain = w->cfg->batch == 1;
    raw_itoa(limit, w->cfg->batch);
    if (chain && !plain(w, "BEGIN")) return false;
    for (;;) {
        if (!chain && !plain(w, "BEGIN")) return false;
        const char *claim_args[1] = {limit};
        PGresult *r = run(w, "claim", 1, claim_args, 1);
        if (!r) return false;
        int rows = read_ids(r, ids, 1000, &touch);
        PQclear(r);
        if (rows == 0) return plain(w, "ROLLBACK");
        const char *ack_args[1] = {w->cfg->batch > 1 ? id_array(arr, sizeof arr, ids, rows) : raw_itoa(id, ids[0])};
        if (!(r = run(w, "ack", 1, ack_args, 0))) return false;
        PQclear(r);
        if (!plain(w, chain ? "COMMIT AND CHAIN" : "COMMIT")) return false;
        w->jobs += rows;
    }
}

static bool drain_lease(raw_worker *w) {
    char limit[24], id[24], now_text[32], lease_text[32], arr[48 * 1024];
    int64_t ids[1000];
    unsigned touch = 0;
    raw_itoa(limit, w->cfg->batch);
    for (;;) {
        int64_t now = bench_wall_ms();
        bench_time_text(now_text, now);
        bench_time_text(lease_text, now + BENCH_LEASE_MS);
        const char *claim_args[3] = {now_text, limit, lease_text};
        PGresult *r = run(w, "claim", 3, claim_args, 1);
        if (!r) return false;
        int rows = read_ids(r, ids, 1000, &touch);
        PQclear(r);
        if (rows == 0) return true;
        if (w->cfg->batch > 1) {
            const char *ack_args[2] = {id_array(arr, sizeof arr, ids, rows), lease_text};
            if (!(r = run(w, "ack", 2, ack_args, 0))) return false;
            if (atoi(PQcmdTuples(r)) != rows) snprintf(w->error, sizeof w->error, "a batch ack lost rows");
            PQclear(r);
        } else {
            for (int i = 0; i < rows; i++) {
                const char *ack_args[2] = {raw_itoa(id, ids[i]), lease_text};
                if (!(r = run(w, "ack", 2, ack_args, 0))) return false;
                if (atoi(PQcmdTuples(r)) != 1) snprintf(w->error, sizeof w->error, "an ack lost its row");
                PQclear(r);
            }
        }
        w->jobs += rows;
    }
}

/* Advisory: one statement takes the first row in claim order whose key no
 * session holds and counts its attempt (no concurrency: no slot asked for),
 * as the library claims each row; then the row is deleted and its key let
 * go. A key taken whose row was not (settled meanwhile) is let go, and the
 * next statement passes over that row. */
static bool drain_advisory(raw_worker *w) {
    char id[24], passed[24 * 64] = "{}";
    int64_t skipped[64];
    int nskipped = 0;
    unsigned touch = 0;
    for (;;) {
        const char *args[10] = {"0", "0", "0", "", "0", "0", passed, "0", "0", ""};
        PGresult *r = run(w, "claim_one", 10, args, 1);
        if (!r) return false;
        if (PQntuples(r) != 1 || PQgetisnull(r, 0, 1)) { /* no row whose key is free */
            PQclear(r);
            return true;
        }
        bool taken = !PQgetisnull(r, 0, 4);
        const char *key_args[1] = {PQgetvalue(r, 0, 2)};
        PGresult *done = NULL;
        if (taken) {
            const char *id_args[1] = {raw_itoa(id, be64(PQgetvalue(r, 0, 4)))};
            if (PQgetlength(r, 0, 5) > 0) touch += (unsigned char)PQgetvalue(r, 0, 5)[0];
            if (!(done = run(w, "ack", 1, id_args, 0))) {
                PQclear(r);
                return false;
            }
            PQclear(done);
            w->jobs++;
        } else {
            w->retries++;
            if (nskipped < 64) skipped[nskipped++] = be64(PQgetvalue(r, 0, 1));
            id_array(passed, sizeof passed, skipped, nskipped);
        }
        done = run(w, "unlock", 1, key_args, 0);
        PQclear(r);
        if (!done) return false;
        PQclear(done);
    }
}

static bool pg_drain(raw_worker *w) {
    switch (w->cfg->form) {
    case BENCH_ROW_LOCK: return drain_row_lock(w);
    case BENCH_LEASE: return drain_lease(w);
    default: return drain_advisory(w);
    }
}

static int64_t pg_count(const raw_config *cfg) {
    PGconn *pg = PQconnectdb(cfg->url);
    PGresult *r = PQexec(pg, "SELECT count(*) FROM " BENCH_TABLE);
    int64_t n = PQresultStatus(r) == PGRES_TUPLES_OK ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    PQclear(r);
    PQfinish(pg);
    return n;
}

/* W2-bulk: the library's multi-row insert of RAW_INSERT_ROWS rows, one
 * transaction a statement; a shorter last batch runs its own text unnamed,
 * as the library runs a remainder. */
static int w2_bulk(const raw_config *cfg) {
    raw_worker w = {.cfg = cfg};
    pg_worker c;
    w.conn = &c;
    c.pg = PQconnectdb(cfg->url);
    if (PQstatus(c.pg) != CONNECTION_OK) bench_die("connect: %s", PQerrorMessage(c.pg));
    char *sql = raw_insert_rows(PG_INSERT_ROWS_HEAD, PG_INSERT_ROWS_TUPLE, PG_INSERT_ROWS_TAIL, RAW_INSERT_ROWS);
    if (!prepare(&w, c.pg, "insert_rows", sql)) bench_die("%s", w.error);
    static char payloads[RAW_INSERT_ROWS][256];
    const char *values[RAW_INSERT_ROWS];
    int lengths[RAW_INSERT_ROWS], formats[RAW_INSERT_ROWS];
    double t0 = bench_now();
    for (int64_t done = 0, k; done < cfg->n; done += k) {
        k = cfg->n - done < RAW_INSERT_ROWS ? cfg->n - done : RAW_INSERT_ROWS;
        for (int i = 0; i < k; i++) {
            lengths[i] = (int)bench_payload(payloads[i], sizeof payloads[i], done + i + 1, 0);
            values[i] = payloads[i];
            formats[i] = 1;
        }
        if (!plain(&w, "BEGIN")) bench_die("%s", w.error);
        PGresult *r;
        if (k == RAW_INSERT_ROWS) {
            r = PQexecPrepared(c.pg, "insert_rows", (int)k, values, lengths, formats, 1);
        } else {
            char *once = raw_insert_rows(PG_INSERT_ROWS_HEAD, PG_INSERT_ROWS_TUPLE, PG_INSERT_ROWS_TAIL, (int)k);
            r = PQexecParams(c.pg, once, (int)k, NULL, values, lengths, formats, 1);
            free(once);
        }
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != k)
            bench_die("insert: %s", PQerrorMessage(c.pg));
        PQclear(r);
        if (!plain(&w, "COMMIT")) bench_die("%s", w.error);
    }
    double seconds = bench_now() - t0;
    PQfinish(c.pg);
    free(sql);
    raw_w2_record("postgresql", "W2-bulk", cfg->n, seconds, BENCH_NULL, BENCH_NULL, pg_count(cfg));
    return 0;
}

/* W2-single: one insert a transaction. */
static int w2_single(const raw_config *cfg) {
    raw_worker w = {.cfg = cfg};
    pg_worker c;
    w.conn = &c;
    c.pg = PQconnectdb(cfg->url);
    if (PQstatus(c.pg) != CONNECTION_OK) bench_die("connect: %s", PQerrorMessage(c.pg));
    if (!prepare(&w, c.pg, "insert", PG_INSERT)) bench_die("%s", w.error);
    double *lat = calloc((size_t)cfg->n, sizeof *lat);
    char payload[256];
    double t0 = bench_now();
    for (int64_t i = 0; i < cfg->n; i++) {
        int len = (int)bench_payload(payload, sizeof payload, i + 1, 0);
        const char *values[1] = {payload};
        int format = 1;
        double s = bench_now();
        PGresult *r = PQexecPrepared(c.pg, "insert", 1, values, &len, &format, 1);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) bench_die("insert: %s", PQerrorMessage(c.pg));
        PQclear(r);
        lat[i] = (bench_now() - s) * 1000.0;
    }
    double seconds = bench_now() - t0;
    PQfinish(c.pg);
    double p50 = bench_percentile(lat, (size_t)cfg->n, 50);
    double p99 = bench_percentile(lat, (size_t)cfg->n, 99);
    raw_w2_record("postgresql", "W2-single", cfg->n, seconds, p50, p99, pg_count(cfg));
    free(lat);
    return 0;
}

int main(int argc, char **argv) {
    raw_config cfg = {.open = pg_open, .drain = pg_drain, .close = pg_close, .count = pg_count};
    raw_config_args(&cfg, argc, argv);
    if (strcmp(cfg.workload, "W2-single") == 0) return w2_single(&cfg);
    if (strcmp(cfg.workload, "W2-bulk") == 0) return w2_bulk(&cfg);
    if (cfg.form == BENCH_NO_FORM) bench_die("unknown form");
    return raw_w1(&cfg);
}
