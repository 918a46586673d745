/* The raw-SQL baseline on MariaDB/MySQL: the statements the mysql dialect
 * runs (bench/raw_sql.h, checked by sql_check), as server-side prepared
 * statements (binary protocol), one connection per thread at READ COMMITTED
 * with time_zone '+00:00' as the dialect sets its sessions; no library.
 *
 *   raw_mysql --url mysql://... --form row_lock|lease|advisory [--n N] [--threads 4] [--batch 1] [--fleet]
 *       W1 drain of a table `lq_bench setup` preloaded. Per thread:
 *       row lock  START TRANSACTION; claim LIMIT b FOR UPDATE SKIP LOCKED; DELETE; COMMIT, which
 *                 at b = 1 is COMMIT AND CHAIN, opening the next claim's transaction
 *       lease     START TRANSACTION; claim (locking read); stamp each row (a batch
 *                 in one UPDATE .. IN (..)); COMMIT;
 *                 then DELETE .. AND locked_until per row (autocommit)
 *       advisory  candidates (IS_USED_LOCK); GET_LOCK; take (UPDATE); read; DELETE; RELEASE_LOCK
 *       With --batch b > 1 the rows of a claim settle in one DELETE .. IN (..).
 *       With --fleet it is one of several processes on the table (raw_common.h).
 *   raw_mysql --url U --workload W2-single|W2-bulk [--n N] */
#include "raw_common.h"
#include "raw_sql.h"

#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct my_worker {
    MYSQL *my;
    MYSQL_STMT *claim, *stamp, *take, *take_read, *ack, *lock, *unlock;
} my_worker;

typedef struct target {
    char user[128], password[128], host[128], database[128];
    unsigned port;
} target;

static void parse_url(target *t, const char *url) {
    memset(t, 0, sizeof *t);
    const char *p = strstr(url, "://");
    if (!p) bench_die("bad URL %s", url);
    p += 3;
    const char *at = strchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        snprintf(t->user, sizeof t->user, "%.*s", (int)((colon ? colon : at) - p), p);
        if (colon) snprintf(t->password, sizeof t->password, "%.*s", (int)(at - colon - 1), colon + 1);
        p = at + 1;
    }
    const char *slash = strchr(p, '/');
    size_t hn = slash ? (size_t)(slash - p) : strlen(p);
    const char *colon = memchr(p, ':', hn);
    snprintf(t->host, sizeof t->host, "%.*s", (int)((colon ? colon : p + hn) - p), p);
    if (colon) t->port = (unsigned)strtoul(colon + 1, NULL, 10);
    if (slash) {
        const char *q = strchr(slash + 1, '?');
        snprintf(t->database, sizeof t->database, "%.*s", (int)(q ? (size_t)(q - slash - 1) : strlen(slash + 1)), slash + 1);
    }
}

/* The server's error number of this thread's last failure. */
static _Thread_local unsigned last_errno;

static bool fail(raw_worker *w, const char *what, const char *msg) {
    snprintf(w->error, sizeof w->error, "%s: %s", what, msg);
    return false;
}

/* A deadlock (1213) or a lock wait timeout (1205): InnoDB rolled the work
 * back, and the loop starts the transaction again, as the library retries
 * a claim after LQ_CONTENTION. */
static bool retry_conflict(raw_worker *w, MYSQL *my) {
    if (last_errno != 1213 && last_errno != 1205) return false;
    last_errno = 0;
    w->error[0] = '\0';
    w->retries++;
    mysql_real_query(my, "ROLLBACK", 8);
    return true;
}

static bool plain(raw_worker *w, MYSQL *my, const char *sql) {
    if (mysql_real_query(my, sql, (unsigned long)strlen(sql)) != 0) {
        last_errno = mysql_errno(my);
        return fail(w, sql, mysql_error(my));
    }
    MYSQL_RES *res = mysql_store_result(my);
    if (res) mysql_free_result(res);
    return true;
}

static MYSQL *connect_db(raw_worker *w) {
    target t;
    parse_url(&t, w->cfg->url);
    MYSQL *my = mysql_init(NULL);
    mysql_optionsv(my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(my, t.host, t.user, t.password, t.database, t.port, NULL, CLIENT_FOUND_ROWS)) {
        fail(w, "connect", mysql_error(my));
        mysql_close(my);
        return NULL;
    }
    if (!plain(w, my, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED") ||
        !plain(w, my, "SET SESSION time_zone = '+00:00'")) {
        mysql_close(my);
        return NULL;
    }
    return my;
}

static bool prepare(raw_worker *w, MYSQL *my, MYSQL_STMT **st, const char *sql) {
    *st = mysql_stmt_init(my);
    if (!*st || mysql_stmt_prepare(*st, sql, (unsigned long)strlen(sql)) != 0)
        return fail(w, "prepare", *st ? mysql_stmt_error(*st) : mysql_error(my));
    return true;
}

/* `head` "(?, .., ?)" `tail`, with b placeholders: a statement over a batch. */
static char *in_list_sql(const char *head, int b, const char *tail) {
    size_t cap = strlen(head) + strlen(tail) + 8 + (size_t)b * 3;
    char *sql = malloc(cap);
    size_t k = (size_t)snprintf(sql, cap, "%s(", head);
    for (int i = 0; i < b; i++) k += (size_t)snprintf(sql + k, cap - k, i ? ", ?" : "?");
    snprintf(sql + k, cap - k, ")%s", tail);
    return sql;
}

/* "DELETE .. WHERE id IN (?, .., ?)", plus the token in the lease form. */
static char *batch_ack_sql(bench_form form, int b) {
    return in_list_sql("DELETE FROM `lq_bench_jobs` WHERE `id` IN ", b,
                       form == BENCH_LEASE ? " AND `locked_until` = ?" : "");
}

/* The lease stamps of a batch in one statement, as the dialect stamps a
 * claim of several rows (it names them by JSON_TABLE, this by an IN list). */
static char *batch_stamp_sql(int b) {
    return in_list_sql("UPDATE `lq_bench_jobs` SET `locked_until` = ?, `attempt` = `attempt` + 1 "
                       "WHERE `id` IN ", b, " AND (`locked_until` IS NULL OR `locked_until` <= ?)");
}

static bool my_open(raw_worker *w) {
    my_worker *c = calloc(1, sizeof *c);
    w->conn = c;
    mysql_thread_init();
    if (!(c->my = connect_db(w))) return false;
    bool batch = w->cfg->batch > 1, ok;
    char *batch_sql = batch ? batch_ack_sql(w->cfg->form, w->cfg->batch) : NULL;
    char *stamp_sql = batch ? batch_stamp_sql(w->cfg->batch) : NULL;
    switch (w->cfg->form) {
    case BENCH_ROW_LOCK:
        ok = prepare(w, c->my, &c->claim, MY_ROW_LOCK_CLAIM) &&
             prepare(w, c->my, &c->ack, batch ? batch_sql : MY_ROW_LOCK_ACK);
        break;
    case BENCH_LEASE:
        ok = prepare(w, c->my, &c->claim, MY_LEASE_CLAIM) &&
             prepare(w, c->my, &c->stamp, batch ? stamp_sql : MY_LEASE_STAMP) &&
             prepare(w, c->my, &c->ack, batch ? batch_sql : MY_LEASE_ACK);
        break;
    default:
        ok = prepare(w, c->my, &c->claim, MY_ADVISORY_CLAIM) && prepare(w, c->my, &c->take, MY_ADVISORY_TAKE) &&
             prepare(w, c->my, &c->take_read, MY_ADVISORY_TAKE_READ) &&
             prepare(w, c->my, &c->ack, MY_ADVISORY_ACK) && prepare(w, c->my, &c->lock, MY_LOCK_KEY) &&
             prepare(w, c->my, &c->unlock, MY_UNLOCK_KEY);
    }
    free(batch_sql);
    free(stamp_sql);
    return ok;
}

static void my_close(raw_worker *w) {
    my_worker *c = w->conn;
    MYSQL_STMT *all[] = {c->claim, c->stamp, c->take, c->take_read, c->ack, c->lock, c->unlock};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) mysql_stmt_close(all[i]);
    if (c->my) mysql_close(c->my);
    free(c);
}

/* Parameter binding helpers. */
static void bind_int(MYSQL_BIND *b, const int64_t *v) {
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = (void *)v;
}

static void bind_time(MYSQL_BIND *b, MYSQL_TIME *t, int64_t epoch_ms) {
    time_t secs = (time_t)(epoch_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    memset(t, 0, sizeof *t);
    t->year = (unsigned)tm.tm_year + 1900;
    t->month = (unsigned)tm.tm_mon + 1;
    t->day = (unsigned)tm.tm_mday;
    t->hour = (unsigned)tm.tm_hour;
    t->minute = (unsigned)tm.tm_min;
    t->second = (unsigned)tm.tm_sec;
    t->second_part = (unsigned long)(epoch_ms % 1000) * 1000;
    t->time_type = MYSQL_TIMESTAMP_DATETIME;
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = t;
}

static void bind_text(MYSQL_BIND *b, const char *s, unsigned long *len) {
    memset(b, 0, sizeof *b);
    *len = (unsigned long)strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

typedef struct rows_out {
    int64_t ids[1000];
    char keys[128][72]; /* column 1 as text, for candidates */
    int count, cap;
} rows_out;

/* Executes a prepared statement; reads every row (column 0 as an integer,
 * column 1 as bytes) into out when it returns rows. *affected receives the
 * rows written (or read). */
static bool run(raw_worker *w, MYSQL_STMT *st, MYSQL_BIND *params, rows_out *out, int64_t *affected) {
    if (params && mysql_stmt_bind_param(st, params) != 0) return fail(w, "bind", mysql_stmt_error(st));
    if (mysql_stmt_execute(st) != 0) {
        last_errno = mysql_stmt_errno(st);
        return fail(w, "execute", mysql_stmt_error(st));
    }
    MYSQL_RES *meta = mysql_stmt_result_metadata(st);
    if (!meta) {
        if (affected) *affected = (int64_t)mysql_stmt_affected_rows(st);
        return true;
    }
    unsigned n = mysql_num_fields(meta);
    MYSQL_BIND res[16];
    int64_t id = 0;
    char col1[1024], scratch[16][64];
    unsigned long len1 = 0, lens[16];
    my_bool nulls[16];
    memset(res, 0, sizeof res);
    for (unsigned i = 0; i < n && i < 16; i++) {
        res[i].is_null = &nulls[i];
        res[i].length = &lens[i];
        if (i == 0) {
            res[i].buffer_type = MYSQL_TYPE_LONGLONG;
            res[i].buffer = &id;
        } else if (i == 1) {
            res[i].buffer_type = MYSQL_TYPE_BLOB;
            res[i].buffer = col1;
            res[i].buffer_length = sizeof col1 - 1;
            res[i].length = &len1;
        } else {
            res[i].buffer_type = MYSQL_TYPE_STRING;
            res[i].buffer = scratch[i];
            res[i].buffer_length = sizeof scratch[i];
        }
    }
    bool ok = mysql_stmt_store_result(st) == 0 && mysql_stmt_bind_result(st, res) == 0;
    int rows = 0;
    while (ok) {
        int f = mysql_stmt_fetch(st);
        if (f == MYSQL_NO_DATA) break;
        if (f == 1) {
            ok = false;
            break;
        }
        if (out && rows < out->cap) {
            out->ids[rows] = id;
            if (rows < 128) {
                size_t k = len1 < sizeof out->keys[0] - 1 ? len1 : sizeof out->keys[0] - 1;
                memcpy(out->keys[rows], col1, k);
                out->keys[rows][k] = '\0';
            }
        }
        rows++;
    }
    if (!ok) fail(w, "fetch", mysql_stmt_error(st));
    mysql_free_result(meta);
    mysql_stmt_free_result(st);
    if (out) out->count = rows < out->cap ? rows : out->cap;
    if (affected) *affected = rows;
    return ok;
}

static bool batch_ack(raw_worker *w, const rows_out *got, MYSQL_TIME *lease_time, int64_t lease_ms) {
    my_worker *c = w->conn;
    int b = w->cfg->batch;
    MYSQL_BIND *p = calloc((size_t)b + 1, sizeof *p);
    for (int i = 0; i < b; i++) bind_int(&p[i], &got->ids[i < got->count ? i : 0]); /* padded with the first id */
    if (w->cfg->form == BENCH_LEASE) bind_time(&p[b], lease_time, lease_ms);
    int64_t affected = 0;
    bool ok = run(w, c->ack, p, NULL, &affected);
    free(p);
    if (ok && affected != got->count) snprintf(w->error, sizeof w->error, "a batch ack lost rows");
    return ok;
}

static bool batch_stamp(raw_worker *w, const rows_out *got, MYSQL_TIME *lease_time, int64_t lease_ms,
                        MYSQL_TIME *now_time, int64_t now_ms) {
    my_worker *c = w->conn;
    int b = w->cfg->batch;
    MYSQL_BIND *p = calloc((size_t)b + 2, sizeof *p);
    bind_time(&p[0], lease_time, lease_ms);
    for (int i = 0; i < b; i++) bind_int(&p[i + 1], &got->ids[i < got->count ? i : 0]); /* padded with the first id */
    bind_time(&p[b + 1], now_time, now_ms);
    int64_t affected = 0;
    bool ok = run(w, c->stamp, p, NULL, &affected);
    free(p);
    if (ok && affected != got->count) snprintf(w->error, sizeof w->error, "a batch stamp missed rows");
    return ok;
}

typedef enum { CLAIM_ROWS, CLAIM_EMPTY, CLAIM_AGAIN, CLAIM_FAILED } claim_step;

/* START TRANSACTION (unless `begun`, chained) and the claim's locking read:
 * rows in `got` and the transaction open; or nothing left (rolled back); or
 * a conflict to retry; or a failure (w->error says it). */
static claim_step begin_claim(raw_worker *w, MYSQL_BIND *params, rows_out *got, bool begun) {
    my_worker *c = w->conn;
    if ((!begun && !plain(w, c->my, "START TRANSACTION")) || !run(w, c->claim, params, got, NULL))
        return retry_conflict(w, c->my) ? CLAIM_AGAIN : CLAIM_FAILED;
    if (got->count > 0) return CLAIM_ROWS;
    return plain(w, c->my, "ROLLBACK") ? CLAIM_EMPTY : CLAIM_FAILED;
}

static bool drain_row_lock(raw_worker *w) {
    my_worker *c = w->conn;
    rows_out *got = calloc(1, sizeof *got);
    got->cap = 1000;
    int64_t limit = w->cfg->batch;
    /* One row a claim: the dialect's worker chains its next claim's
     * transaction to the commit, as here. */
    bool chain = w->cfg->batch == 1, begun = false, ok = true;
    while (ok) {
        MYSQL_BIND p[1];
        bind_int(&p[0], &limit);
        claim_step step = begin_claim(w, p, got, begun);
        begun = false;
        if (step == CLAIM_AGAIN) continue;
        if (step != CLAIM_ROWS) {
            ok = step == CLAIM_EMPTY;
            break;
        }
        if (w->cfg->batch > 1) {
            ok = batch_ack(w, got, NULL, 0);
        } else {
            MYSQL_BIND a[1];
            bind_int(&a[0], &got->ids[0]);
            ok = run(w, c->ack, a, NULL, NULL);
        }
        ok = ok && plain(w, c->my, chain ? "COMMIT AND CHAIN" : "COMMIT");
        begun = ok && chain;
        if (ok) w->jobs += got->count;
        else if (retry_conflict(w, c->my)) ok = true;
    }
    free(got);
    return ok;
}

static bool drain_lease(raw_worker *w) {
    my_worker *c = w->conn;
    rows_out *got = calloc(1, sizeof *got);
    got->cap = 1000;
    int64_t limit = w->cfg->batch;
    bool ok = true;
    while (ok) {
        int64_t now = bench_wall_ms();
        int64_t lease = (now + 999) / 1000 * 1000 + BENCH_LEASE_MS; /* whole seconds, as the dialect */
        MYSQL_TIME now_t, lease_t, now_t2;
        MYSQL_BIND p[2];
        bind_time(&p[0], &now_t, now);
        bind_int(&p[1], &limit);
        claim_step step = begin_claim(w, p, got, false);
        if (step == CLAIM_AGAIN) continue;
        if (step != CLAIM_ROWS) {
            ok = step == CLAIM_EMPTY;
            break;
        }
        if (w->cfg->batch > 1) ok = batch_stamp(w, got, &lease_t, lease, &now_t2, now);
        for (int i = 0; ok && w->cfg->batch == 1 && i < got->count; i++) {
            MYSQL_BIND s[3];
            int64_t affected = 0;
            bind_time(&s[0], &lease_t, lease);
            bind_int(&s[1], &got->ids[i]);
            bind_time(&s[2], &now_t2, now);
            ok = run(w, c->stamp, s, NULL, &affected);
            if (ok && affected != 1) snprintf(w->error, sizeof w->error, "a stamp missed its row");
        }
        ok = ok && plain(w, c->my, "COMMIT");
        if (!ok && retry_conflict(w, c->my)) {
            ok = true;
            continue;
        }
        if (!ok) break;
        if (w->cfg->batch > 1) {
            ok = batch_ack(w, got, &lease_t, lease);
        } else {
            for (int i = 0; ok && i < got->count; i++) {
                MYSQL_BIND a[2];
                int64_t affected = 0;
                bind_int(&a[0], &got->ids[i]);
                bind_time(&a[1], &lease_t, lease);
                ok = run(w, c->ack, a, NULL, &affected);
                if (ok && affected != 1) snprintf(w->error, sizeof w->error, "an ack lost its row");
            }
        }
        if (ok) w->jobs += got->count;
    }
    free(got);
    return ok;
}

static bool drain_advisory(raw_worker *w) {
    my_worker *c = w->conn;
    rows_out *cands = calloc(1, sizeof *cands), *one = calloc(1, sizeof *one);
    cands->cap = 128;
    one->cap = 1;
    int64_t limit = w->cfg->threads;
    bool ok = true;
    while (ok) {
        MYSQL_BIND p[1];
        bind_int(&p[0], &limit);
        if (!(ok = run(w, c->claim, p, cands, NULL)) || cands->count == 0) break;
        for (int i = 0; ok && i < cands->count; i++) {
            unsigned long l1, l2;
            MYSQL_BIND k[2];
            bind_text(&k[0], cands->keys[i], &l1);
            bind_text(&k[1], cands->keys[i], &l2);
            if (!(ok = run(w, c->lock, k, one, NULL))) break;
            if (one->count != 1 || one->ids[0] != 1) {
                w->retries++;
                continue;
            }
            MYSQL_BIND a[1];
            int64_t affected = 0;
            bind_int(&a[0], &cands->ids[i]);
            ok = run(w, c->take, a, NULL, &affected);
            bool taken = ok && affected == 1;
            if (taken) ok = run(w, c->take_read, a, one, NULL) && run(w, c->ack, a, NULL, NULL);
            if (ok && taken) w->jobs++;
            bind_text(&k[0], cands->keys[i], &l1);
            bind_text(&k[1], cands->keys[i], &l2);
            ok = ok && run(w, c->unlock, k, one, NULL);
            if (taken) break;
        }
    }
    free(cands);
    free(one);
    return ok;
}

static bool my_drain(raw_worker *w) {
    switch (w->cfg->form) {
    case BENCH_ROW_LOCK: return drain_row_lock(w);
    case BENCH_LEASE: return drain_lease(w);
    default: return drain_advisory(w);
    }
}

static int64_t my_count(const raw_config *cfg) {
    raw_worker w = {.cfg = cfg};
    MYSQL *my = connect_db(&w);
    if (!my) return -1;
    int64_t n = -1;
    if (mysql_query(my, "SELECT count(*) FROM " BENCH_TABLE) == 0) {
        MYSQL_RES *res = mysql_store_result(my);
        MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
        if (row) n = strtoll(row[0], NULL, 10);
        if (res) mysql_free_result(res);
    }
    mysql_close(my);
    return n;
}

/* W2-bulk on MariaDB: the library's multi-row INSERT .. RETURNING of
 * RAW_INSERT_ROWS rows, one transaction a statement, its ids read as the
 * library reads a stored result; a shorter last batch is prepared for its
 * one run, as the library runs a remainder. */
static int w2_bulk(const raw_config *cfg) {
    raw_worker w = {.cfg = cfg};
    MYSQL *my = connect_db(&w);
    MYSQL_STMT *full, *ins;
    char *sql = raw_insert_rows(MY_INSERT_ROWS_HEAD, MY_INSERT_ROWS_TUPLE, MY_INSERT_ROWS_TAIL, RAW_INSERT_ROWS);
    if (!my || !prepare(&w, my, &full, sql)) bench_die("%s", w.error);
    static char payloads[RAW_INSERT_ROWS][256];
    static unsigned long lengths[RAW_INSERT_ROWS];
    static MYSQL_BIND binds[RAW_INSERT_ROWS];
    int64_t id = 0;
    MYSQL_BIND out;
    memset(&out, 0, sizeof out);
    out.buffer_type = MYSQL_TYPE_LONGLONG;
    out.buffer = &id;
    double t0 = bench_now();
    for (int64_t done = 0, k; done < cfg->n; done += k) {
        k = cfg->n - done < RAW_INSERT_ROWS ? cfg->n - done : RAW_INSERT_ROWS;
        ins = full;
        if (k < RAW_INSERT_ROWS) {
            char *once = raw_insert_rows(MY_INSERT_ROWS_HEAD, MY_INSERT_ROWS_TUPLE, MY_INSERT_ROWS_TAIL, (int)k);
            if (!prepare(&w, my, &ins, once)) bench_die("%s", w.error);
            free(once);
        }
        for (int i = 0; i < k; i++) {
            lengths[i] = (unsigned long)bench_payload(payloads[i], sizeof payloads[i], done + i + 1, 0);
            memset(&binds[i], 0, sizeof binds[i]);
            binds[i].buffer_type = MYSQL_TYPE_BLOB;
            binds[i].buffer = payloads[i];
            binds[i].buffer_length = lengths[i];
            binds[i].length = &lengths[i];
        }
        if (!plain(&w, my, "START TRANSACTION")) bench_die("%s", w.error);
        if (mysql_stmt_bind_param(ins, binds) != 0 || mysql_stmt_execute(ins) != 0 ||
            mysql_stmt_store_result(ins) != 0 || mysql_stmt_bind_result(ins, &out) != 0)
            bench_die("insert: %s", mysql_stmt_error(ins));
        int64_t rows = 0;
        while (mysql_stmt_fetch(ins) == 0) rows++;
        if (rows != k) bench_die("insert: %lld ids for %lld rows", (long long)rows, (long long)k);
        mysql_stmt_free_result(ins);
        if (ins != full) mysql_stmt_close(ins);
        if (!plain(&w, my, "COMMIT")) bench_die("%s", w.error);
    }
    double seconds = bench_now() - t0;
    mysql_stmt_close(full);
    mysql_close(my);
    free(sql);
    raw_w2_record("mariadb", "W2-bulk", cfg->n, seconds, BENCH_NULL, BENCH_NULL, my_count(cfg));
    return 0;
}

/* W2-single: one insert a transaction. */
static int w2_single(const raw_config *cfg) {
    raw_worker w = {.cfg = cfg};
    MYSQL *my = connect_db(&w);
    MYSQL_STMT *ins;
    if (!my || !prepare(&w, my, &ins, MY_INSERT)) bench_die("%s", w.error);
    double *lat = calloc((size_t)cfg->n, sizeof *lat);
    char payload[256];
    unsigned long len = 0;
    MYSQL_BIND b;
    memset(&b, 0, sizeof b);
    b.buffer_type = MYSQL_TYPE_BLOB;
    b.buffer = payload;
    b.length = &len;
    double t0 = bench_now();
    for (int64_t i = 0; i < cfg->n; i++) {
        len = (unsigned long)bench_payload(payload, sizeof payload, i + 1, 0);
        b.buffer_length = len;
        double s = bench_now();
        if (mysql_stmt_bind_param(ins, &b) != 0 || mysql_stmt_execute(ins) != 0)
            bench_die("insert: %s", mysql_stmt_error(ins));
        (void)mysql_stmt_insert_id(ins);
        lat[i] = (bench_now() - s) * 1000.0;
    }
    double seconds = bench_now() - t0;
    mysql_stmt_close(ins);
    mysql_close(my);
    double p50 = bench_percentile(lat, (size_t)cfg->n, 50);
    double p99 = bench_percentile(lat, (size_t)cfg->n, 99);
    raw_w2_record("mariadb", "W2-single", cfg->n, seconds, p50, p99, my_count(cfg));
    free(lat);
    return 0;
}

int main(int argc, char **argv) {
    raw_config cfg = {.open = my_open, .drain = my_drain, .close = my_close, .count = my_count};
    raw_config_args(&cfg, argc, argv);
    if (mysql_library_init(0, NULL, NULL) != 0) bench_die("mysql_library_init failed");
    int rc;
    if (strcmp(cfg.workload, "W2-single") == 0) rc = w2_single(&cfg);
    else if (strcmp(cfg.workload, "W2-bulk") == 0) rc = w2_bulk(&cfg);
    else if (cfg.form == BENCH_NO_FORM) bench_die("unknown form");
    else rc = raw_w1(&cfg);
    mysql_library_end();
    return rc;
}
