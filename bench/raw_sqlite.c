/* The raw-SQL baseline on SQLite: the statements the sqlite dialect runs
 * (bench/raw_sql.h, checked by sql_check), prepared once per connection, one
 * connection per thread in WAL mode with synchronous=NORMAL and a busy
 * timeout, as the library opens them; no library.
 *
 *   raw_sqlite --url sqlite:///path --form lease|advisory [--n N] [--threads 4] [--batch 1]
 *       W1 drain of a table `lq_bench setup` preloaded. Per thread:
 *       lease     claim (UPDATE .. RETURNING, LIMIT b); DELETE .. AND locked_until per row
 *       advisory  candidates; the row's key in an in-process set (as the library
 *                 keeps SQLite keys); take (UPDATE .. RETURNING); DELETE; unlock
 *       With --batch b > 1 (lease) the rows of a claim settle in one DELETE.
 *       A statement that meets SQLITE_BUSY is reset and run again (counted
 *       as a retry), as the library backs off and claims again.
 *   raw_sqlite --url U --workload W2-single|W2-bulk [--n N] */
#include "raw_common.h"
#include "raw_sql.h"

#include <sched.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sq_worker {
    sqlite3 *db;
    sqlite3_stmt *claim, *take, *ack;
} sq_worker;

static bool fail(raw_worker *w, const char *what, sqlite3 *db) {
    snprintf(w->error, sizeof w->error, "%s: %s", what, sqlite3_errmsg(db));
    return false;
}

static bool exec_plain(raw_worker *w, sqlite3 *db, const char *sql) {
    for (;;) {
        int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK) return true;
        if ((rc & 0xff) != SQLITE_BUSY) return fail(w, sql, db);
        w->retries++;
    }
}

static bool open_db(raw_worker *w, sqlite3 **db) {
    if (sqlite3_open_v2(bench_sqlite_path(w->cfg->url), db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        return fail(w, "open", *db);
    sqlite3_extended_result_codes(*db, 1);
    sqlite3_busy_timeout(*db, 30000);
    return exec_plain(w, *db, "PRAGMA journal_mode = WAL") && exec_plain(w, *db, "PRAGMA synchronous = NORMAL");
}

static bool prepare(raw_worker *w, sqlite3 *db, sqlite3_stmt **st, const char *sql) {
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
        return fail(w, "prepare", db);
    return true;
}

static bool sq_open(raw_worker *w) {
    sq_worker *c = calloc(1, sizeof *c);
    w->conn = c;
    if (!open_db(w, &c->db)) return false;
    if (w->cfg->form == BENCH_LEASE)
        return prepare(w, c->db, &c->claim, SQ_LEASE_CLAIM) &&
               prepare(w, c->db, &c->ack, w->cfg->batch > 1 ? SQ_LEASE_BATCH_ACK : SQ_LEASE_ACK);
    return prepare(w, c->db, &c->claim, SQ_ADVISORY_CLAIM) && prepare(w, c->db, &c->take, SQ_ADVISORY_TAKE) &&
           prepare(w, c->db, &c->ack, SQ_ADVISORY_ACK);
}

static void sq_close(raw_worker *w) {
    sq_worker *c = w->conn;
    sqlite3_finalize(c->claim);
    sqlite3_finalize(c->take);
    sqlite3_finalize(c->ack);
    sqlite3_close_v2(c->db);
    free(c);
}

/* Steps a bound statement to its end, collecting column 0 of each row into
 * ids (up to cap); on SQLITE_BUSY resets and runs it again. Returns the rows
 * read, or -1 on failure. */
static int run(raw_worker *w, sqlite3_stmt *st, int64_t *ids, int cap, int64_t *changes) {
    sq_worker *c = w->conn;
    unsigned touch = 0;
    for (;;) {
        int rows = 0, rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (rows < cap) ids[rows] = sqlite3_column_int64(st, 0);
            if (sqlite3_column_count(st) > 1 && sqlite3_column_bytes(st, 1) > 0)
                touch += ((const unsigned char *)sqlite3_column_blob(st, 1))[0];
            rows++;
        }
        sqlite3_reset(st);
        if (rc == SQLITE_DONE) {
            if (changes) *changes = sqlite3_changes64(c->db);
            return rows < cap ? rows : cap;
        }
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) {
            fail(w, sqlite3_sql(st), c->db);
            return -1;
        }
        w->retries++;
        sched_yield();
    }
}

static bool drain_lease(raw_worker *w) {
    sq_worker *c = w->conn;
    int64_t ids[1000];
    char now_text[32], lease_text[32], json[24 * 1024];
    for (;;) {
        int64_t now = bench_wall_ms(), changes = 0;
        bench_time_text(now_text, now);
        bench_time_text(lease_text, now + BENCH_LEASE_MS);
        sqlite3_bind_text(c->claim, 1, lease_text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(c->claim, 2, now_text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(c->claim, 3, w->cfg->batch);
        int rows = run(w, c->claim, ids, 1000, NULL);
        if (rows < 0) return false;
        if (rows == 0) return true;
        if (w->cfg->batch > 1) {
            size_t k = 0;
            json[k++] = '[';
            for (int i = 0; i < rows; i++) k += (size_t)snprintf(json + k, sizeof json - k, "%s%lld", i ? "," : "", (long long)ids[i]);
            json[k++] = ']';
            json[k] = '\0';
            sqlite3_bind_text(c->ack, 1, json, (int)k, SQLITE_STATIC);
            sqlite3_bind_text(c->ack, 2, lease_text, -1, SQLITE_TRANSIENT);
            if (run(w, c->ack, NULL, 0, &changes) < 0) return false;
            if (changes != rows) snprintf(w->error, sizeof w->error, "a batch ack lost rows");
        } else {
            for (int i = 0; i < rows; i++) {
                sqlite3_bind_int64(c->ack, 1, ids[i]);
                sqlite3_bind_text(c->ack, 2, lease_text, -1, SQLITE_TRANSIENT);
                if (run(w, c->ack, NULL, 0, &changes) < 0) return false;
                if (changes != 1) snprintf(w->error, sizeof w->error, "an ack lost its row");
            }
        }
        w->jobs += rows;
    }
}

/* Advisory: candidates (past the keys this process holds, as the library
 * reads them), the first key free in the process, take, delete, unlock. */
static bool drain_advisory(raw_worker *w) {
    sq_worker *c = w->conn;
    for (;;) {
        int64_t cand_ids[128];
        char cand_keys[128][64];
        int n = 0, rc;
        sqlite3_bind_int64(c->claim, 1, 1 + raw_keys_held());
        while ((rc = sqlite3_step(c->claim)) == SQLITE_ROW && n < 128) {
            cand_ids[n] = sqlite3_column_int64(c->claim, 0);
            snprintf(cand_keys[n], sizeof cand_keys[n], "%s", (const char *)sqlite3_column_text(c->claim, 1));
            n++;
        }
        sqlite3_reset(c->claim);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
            if ((rc & 0xff) == SQLITE_BUSY) {
                w->retries++;
                continue;
            }
            return fail(w, "candidates", c->db);
        }
        if (n == 0) return true;
        for (int i = 0; i < n; i++) {
            if (!raw_key_try_lock(cand_keys[i])) continue;
            int64_t id, changes;
            sqlite3_bind_int64(c->take, 1, cand_ids[i]);
            int taken = run(w, c->take, &id, 1, NULL);
            if (taken > 0) {
                sqlite3_bind_int64(c->ack, 1, cand_ids[i]);
                if (run(w, c->ack, NULL, 0, &changes) < 0) taken = -1;
                else w->jobs++;
            }
            raw_key_unlock(cand_keys[i]);
            if (taken < 0) return false;
            if (taken > 0) break;
        }
    }
}

static bool sq_drain(raw_worker *w) {
    return w->cfg->form == BENCH_LEASE ? drain_lease(w) : drain_advisory(w);
}

static int64_t sq_count(const raw_config *cfg) {
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t n = -1;
    if (sqlite3_open(bench_sqlite_path(cfg->url), &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM " BENCH_TABLE, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

/* W2-bulk: the library's multi-row insert of RAW_INSERT_ROWS rows, one
 * transaction a statement; a shorter last batch is prepared for its one run,
 * as the library runs a remainder. */
static int w2_bulk(const raw_config *cfg) {
    raw_worker w = {.cfg = cfg};
    sqlite3 *db;
    sqlite3_stmt *full, *ins;
    char *sql = raw_insert_rows(SQ_INSERT_ROWS_HEAD, SQ_INSERT_ROWS_TUPLE, SQ_INSERT_ROWS_TAIL, RAW_INSERT_ROWS);
    if (!open_db(&w, &db) || !prepare(&w, db, &full, sql)) bench_die("%s", w.error);
    sq_worker c = {.db = db};
    w.conn = &c;
    static char payloads[RAW_INSERT_ROWS][256];
    static int64_t ids[RAW_INSERT_ROWS];
    double t0 = bench_now();
    for (int64_t done = 0, k; done < cfg->n; done += k) {
        k = cfg->n - done < RAW_INSERT_ROWS ? cfg->n - done : RAW_INSERT_ROWS;
        ins = full;
        if (k < RAW_INSERT_ROWS) {
            char *once = raw_insert_rows(SQ_INSERT_ROWS_HEAD, SQ_INSERT_ROWS_TUPLE, SQ_INSERT_ROWS_TAIL, (int)k);
            if (sqlite3_prepare_v2(db, once, -1, &ins, NULL) != SQLITE_OK) bench_die("prepare: %s", sqlite3_errmsg(db));
            free(once);
        }
        if (!exec_plain(&w, db, "BEGIN IMMEDIATE")) bench_die("%s", w.error);
        for (int i = 0; i < k; i++) {
            size_t len = bench_payload(payloads[i], sizeof payloads[i], done + i + 1, 0);
            sqlite3_bind_blob(ins, i + 1, payloads[i], (int)len, SQLITE_STATIC);
        }
        if (run(&w, ins, ids, (int)k, NULL) != k) bench_die("insert: %s", w.error);
        sqlite3_clear_bindings(ins);
        if (ins != full) sqlite3_finalize(ins);
        if (!exec_plain(&w, db, "COMMIT")) bench_die("%s", w.error);
    }
    double seconds = bench_now() - t0;
    sqlite3_finalize(full);
    sqlite3_close(db);
    free(sql);
    raw_w2_record("sqlite", "W2-bulk", cfg->n, seconds, BENCH_NULL, BENCH_NULL, sq_count(cfg));
    return 0;
}

/* W2-single: one insert a transaction. */
static int w2_single(const raw_config *cfg) {
    raw_worker w = {.cfg = cfg};
    sqlite3 *db;
    sqlite3_stmt *ins;
    if (!open_db(&w, &db) || !prepare(&w, db, &ins, SQ_INSERT)) bench_die("%s", w.error);
    sq_worker c = {.db = db};
    w.conn = &c;
    double *lat = calloc((size_t)cfg->n, sizeof *lat);
    char payload[256];
    int64_t id;
    double t0 = bench_now();
    for (int64_t i = 0; i < cfg->n; i++) {
        size_t len = bench_payload(payload, sizeof payload, i + 1, 0);
        double s = bench_now();
        sqlite3_bind_blob(ins, 1, payload, (int)len, SQLITE_STATIC);
        if (run(&w, ins, &id, 1, NULL) != 1) bench_die("insert: %s", w.error);
        lat[i] = (bench_now() - s) * 1000.0;
    }
    double seconds = bench_now() - t0;
    sqlite3_finalize(ins);
    sqlite3_close(db);
    double p50 = bench_percentile(lat, (size_t)cfg->n, 50);
    double p99 = bench_percentile(lat, (size_t)cfg->n, 99);
    raw_w2_record("sqlite", "W2-single", cfg->n, seconds, p50, p99, sq_count(cfg));
    free(lat);
    return 0;
}

int main(int argc, char **argv) {
    raw_config cfg = {.open = sq_open, .drain = sq_drain, .close = sq_close, .count = sq_count};
    raw_config_args(&cfg, argc, argv);
    if (strcmp(cfg.workload, "W2-single") == 0) return w2_single(&cfg);
    if (strcmp(cfg.workload, "W2-bulk") == 0) return w2_bulk(&cfg);
    if (cfg.form != BENCH_LEASE && cfg.form != BENCH_ADVISORY) bench_die("sqlite serves lease and advisory");
    return raw_w1(&cfg);
}
