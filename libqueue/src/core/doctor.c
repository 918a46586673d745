/* lq_doctor: a queue table's health as the database's own statistics tell
 * it, each finding judged against a documented limit (lq_doctor_limit) and
 * saying what to do. It reads catalogs only, one statement at a time
 * outside any transaction, so that it holds back no vacuum or purge of its
 * own. */
#include "core/broker.h"
#include "core/schema.h"

#include "base/json_out.h"
#include "sql/doctor.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum { OK, WARNING, PROBLEM };
static const char *const level_names[] = {"ok", "warning", "problem"};
static const char *const nothing_to_do = "nothing to do";

typedef struct doctor {
    lq_broker *b;
    const lq_table *t;
    lq__conn *conn;
    lq__doctor_sql sql;
    lq__value args[LQ__P_COUNT];
    lq__strbuf out;
    int findings;
    char label[256];
    bool leases_indexed; /* the claims write an indexed column (lq_table.leases_swept) */
} doctor;

/* ---- findings -------------------------------------------------------------- */

typedef struct fvalue {
    bool text;
    int64_t n;
    const char *s;
} fvalue;

static fvalue num(int64_t n) { return (fvalue){false, n, NULL}; }
static fvalue str(const char *s) { return (fvalue){true, 0, s}; }

static void json_text(lq__strbuf *sb, const char *s) { lq__json_string(sb, s, strlen(s)); }

/* One finding; its message formatted from `fmt`. */
static void finding(doctor *d, const char *check, int level, fvalue value, const char *advice,
                    const char *fmt, ...) LQ__PRINTF(6, 7);
static void finding(doctor *d, const char *check, int level, fvalue value, const char *advice,
                    const char *fmt, ...) {
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    lq__strbuf *sb = &d->out;
    lq__sb_add(sb, d->findings++ ? ",{\"check\":" : "{\"check\":");
    json_text(sb, check);
    lq__sb_addf(sb, ",\"level\":\"%s\",\"value\":", level_names[level]);
    if (value.text) json_text(sb, value.s ? value.s : "");
    else lq__sb_addf(sb, "%lld", (long long)value.n);
    lq__sb_add(sb, ",\"message\":");
    json_text(sb, message);
    lq__sb_add(sb, ",\"advice\":");
    json_text(sb, level == OK && !advice ? nothing_to_do : advice);
    lq__sb_addc(sb, '}');
}

/* ---- reading rows ---------------------------------------------------------- */

enum { CELLS = 8, CELL_TEXT = 256 };

typedef struct cell {
    bool null;
    int64_t i;
    char s[CELL_TEXT];
} cell;

typedef struct first_row {
    bool found;
    cell c[CELLS];
} first_row;

static void text_of(char *out, size_t size, const lq__value *v) {
    if (v->type == LQ__V_INT) {
        snprintf(out, size, "%lld", (long long)v->i);
    } else if (v->type == LQ__V_TEXT || v->type == LQ__V_BLOB) {
        size_t n = v->n < size - 1 ? v->n : size - 1;
        memcpy(out, v->p, n);
        out[n] = '\0';
    } else {
        out[0] = '\0';
    }
}

static int on_first(void *ctx, const lq__value *cols, int count) {
    first_row *r = ctx;
    if (r->found) return LQ_OK;
    r->found = true;
    for (int i = 0; i < count && i < CELLS; i++) {
        r->c[i].null = cols[i].type == LQ__V_NULL;
        r->c[i].i = lq__value_int(&cols[i]);
        text_of(r->c[i].s, sizeof r->c[i].s, &cols[i]);
    }
    return LQ_OK;
}

/* Up to HOLDERS rows, as first_row keeps one. */
enum { HOLDERS = 5 };

typedef struct some_rows {
    int count;
    cell c[HOLDERS][CELLS];
} some_rows;

static int on_some(void *ctx, const lq__value *cols, int count) {
    some_rows *r = ctx;
    if (r->count >= HOLDERS) return LQ_OK;
    first_row one = {0};
    on_first(&one, cols, count);
    memcpy(r->c[r->count++], one.c, sizeof one.c);
    return LQ_OK;
}

/* Runs one statement once (a doctor is rare: no connection keeps it
 * prepared). A statement the server refuses (a privilege; a view or column
 * this version lacks: the probe has found the table already) is not the
 * caller's failure: *refused receives its message and the call goes on;
 * anything else (a connection lost, a timeout) ends the call. */
static int run(doctor *d, lq__stmt *st, lq__row_fn fn, void *ctx, char refused[512]) {
    refused[0] = '\0';
    st->id = 0;
    int rc = d->b->dialect->exec(NULL, d->conn, st, d->args, fn, ctx);
    if (rc != LQ_BACKEND && rc != LQ_SCHEMA) return rc;
    snprintf(refused, 512, "%s", lq_errmsg());
    lq__error_clear();
    return LQ_OK;
}

static void refused_finding(doctor *d, const char *check, const char *refused, const char *advice) {
    finding(d, check, WARNING, str("unknown"), advice, "could not be read: %s", refused);
}

/* "N s ago" or "never". */
static const char *ago(char out[48], const cell *c) {
    if (c->null) snprintf(out, 48, "never");
    else snprintf(out, 48, "%lld s ago", (long long)c->i);
    return out;
}

/* The level of a snapshot (an open transaction) held `seconds`, `idle`
 * when its session does nothing but hold it. */
static int snapshot_level(int64_t seconds, bool idle) {
    if (seconds >= LQ_DOCTOR_SNAPSHOT_PROBLEM_S || (idle && seconds >= LQ_DOCTOR_IDLE_SNAPSHOT_S))
        return PROBLEM;
    return seconds >= LQ_DOCTOR_SNAPSHOT_WARNING_S ? WARNING : OK;
}

/* ---- the claim-order index -------------------------------------------------- */

/* The claim order's columns: group, priority, retry_after (those the table
 * has), then the id. */
typedef struct claim_columns {
    const char *names[4];
    int count;
} claim_columns;

static void claim_columns_of(claim_columns *c, const lq_table *t) {
    const int order[] = {LQ_ROLE_GROUP, LQ_ROLE_PRIORITY, LQ_ROLE_RETRY_AFTER};
    c->count = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (lq__has(t, order[i])) c->names[c->count++] = t->columns[order[i]];
    c->names[c->count++] = t->id;
}

/* Reads (index, column) rows in each index's order: an index serves the
 * claims when its first columns are the claim order's (the id, which the
 * primary key carries along, may be left out). */
typedef struct index_scan {
    claim_columns want;
    bool fold_case;
    char current[CELL_TEXT];
    int at;        /* its first columns that are the claim order's */
    bool matching; /* every column so far is the claim order's */
    char found[CELL_TEXT];
    int found_columns;
} index_scan;

static void index_end(index_scan *s) {
    int need = s->want.count > 1 ? s->want.count - 1 : 1;
    int matched = s->at < s->want.count ? s->at : s->want.count;
    if (s->current[0] && matched >= need && matched > s->found_columns) {
        snprintf(s->found, sizeof s->found, "%s", s->current);
        s->found_columns = matched;
    }
}

static int on_index_column(void *ctx, const lq__value *cols, int count) {
    index_scan *s = ctx;
    if (count < 2) return LQ_OK;
    char name[CELL_TEXT], column[CELL_TEXT];
    text_of(name, sizeof name, &cols[0]);
    text_of(column, sizeof column, &cols[1]);
    if (strcmp(name, s->current) != 0) {
        index_end(s);
        snprintf(s->current, sizeof s->current, "%s", name);
        s->at = 0;
        s->matching = true;
    }
    if (s->at < s->want.count && s->matching) {
        const char *w = s->want.names[s->at];
        s->matching = s->fold_case ? strcasecmp(w, column) == 0 : strcmp(w, column) == 0;
    }
    if (s->matching) s->at++;
    return LQ_OK;
}

/* The index lq_table_create makes, as a statement to run. */
static char *create_index_text(const lq__dialect *dl, const lq_table *t, const claim_columns *c) {
    lq__stmt st;
    lq__sql b;
    lq__sql_start(&b, &st, dl, t);
    char name[CELL_TEXT];
    snprintf(name, sizeof name, "%s_claim_order", t->name);
    lq__sql_add(&b, "CREATE INDEX ");
    lq__sql_ident(&b, name);
    lq__sql_add(&b, " ON ");
    lq__sql_table(&b);
    lq__sql_add(&b, " (");
    for (int i = 0; i < c->count; i++) {
        if (i) lq__sql_add(&b, ", ");
        lq__sql_ident(&b, c->names[i]);
    }
    lq__sql_add(&b, ")");
    if (lq__has(t, LQ_ROLE_PROCESSED_AT) && dl->ddl->partial_index) {
        lq__sql_add(&b, " WHERE ");
        lq__sql_col(&b, LQ_ROLE_PROCESSED_AT);
        lq__sql_add(&b, " IS NULL");
    }
    return lq__sql_finish(&b) == LQ_OK ? st.sql : NULL;
}

static int check_index(doctor *d, char found[CELL_TEXT]) {
    index_scan s = {.fold_case = d->b->dialect->columns_fold_case};
    claim_columns_of(&s.want, d->t);
    char refused[512];
    int rc = run(d, &d->sql.indexes, on_index_column, &s, refused);
    if (rc != LQ_OK) return rc;
    index_end(&s);
    snprintf(found, CELL_TEXT, "%s", s.found);
    if (refused[0]) {
        refused_finding(d, "claim_order_index", refused, "grant this user the right to read the catalog");
        return LQ_OK;
    }
    char order[512] = "";
    for (int i = 0; i < s.want.count; i++) {
        size_t n = strlen(order);
        snprintf(order + n, sizeof order - n, "%s%s", i ? ", " : "", s.want.names[i]);
    }
    if (s.found[0]) {
        finding(d, "claim_order_index", OK, str(s.found), NULL,
                "index %s serves the claim order (%s)", s.found, order);
        return LQ_OK;
    }
    char *create = create_index_text(d->b->dialect, d->t, &s.want);
    if (!create) return lq__error(LQ_NOMEM, "out of memory");
    char advice[1024];
    snprintf(advice, sizeof advice,
             "create it: %s (lq_table_create makes it only with the table)", create);
    free(create);
    finding(d, "claim_order_index", PROBLEM, str(""), advice,
            "no index of %s begins with the claim order (%s): every claim reads and sorts the "
            "whole queue",
            d->label, order);
    return LQ_OK;
}

/* ---- PostgreSQL ------------------------------------------------------------ */

/* The value of option `name` in "a=1,b=2" (NULL when not set). */
static const char *reloption(const char *options, const char *name, char out[64]) {
    size_t n = strlen(name);
    for (const char *p = options; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > n && strncmp(p, name, n) == 0 && p[n] == '=') {
            size_t v = len - n - 1 < 63 ? len - n - 1 : 63;
            memcpy(out, p + n + 1, v);
            out[v] = '\0';
            return out;
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

static bool option_false(const char *v) {
    return v && (strcasecmp(v, "false") == 0 || strcasecmp(v, "off") == 0 ||
                 strcasecmp(v, "no") == 0 || strcmp(v, "0") == 0);
}

static void check_dead(doctor *d, const first_row *r) {
    int64_t live = r->c[2].i, dead = r->c[3].i;
    char vac[48], auto_vac[48], advice[1200];
    if (r->c[2].null) {
        finding(d, "dead_tuples", OK, num(0), NULL, "no statistics of %s yet", d->label);
        return;
    }
    int64_t all = live + dead;
    int64_t percent = all > 0 ? dead * 100 / all : 0;
    int level = dead < LQ_DOCTOR_DEAD_ROWS                   ? OK
                : percent >= LQ_DOCTOR_DEAD_PERCENT_PROBLEM ? PROBLEM
                : percent >= LQ_DOCTOR_DEAD_PERCENT_WARNING ? WARNING
                                                            : OK;
    snprintf(advice, sizeof advice,
             "VACUUM %s; if dead rows keep coming back, end what holds back xmin (oldest_xmin, "
             "prepared_xacts, replication_slots) and lower autovacuum_vacuum_scale_factor for "
             "the table",
             d->label);
    finding(d, "dead_tuples", level, num(dead), level == OK ? NULL : advice,
            "%lld dead and %lld live row versions (%lld%% dead); last vacuum %s, last "
            "autovacuum %s",
            (long long)dead, (long long)live, (long long)percent, ago(vac, &r->c[4]),
            ago(auto_vac, &r->c[5]));
}

static void check_autovacuum(doctor *d, const char *options) {
    char v[64], advice[1200];
    bool off = option_false(reloption(options, "autovacuum_enabled", v));
    snprintf(advice, sizeof advice, "ALTER TABLE %s RESET (autovacuum_enabled)", d->label);
    if (off)
        finding(d, "autovacuum", WARNING, str("off"), advice,
                "autovacuum is off for %s (autovacuum_enabled=false): its dead rows stay until a "
                "manual VACUUM",
                d->label);
    else
        finding(d, "autovacuum", OK, str("on"), NULL, "autovacuum is on for %s", d->label);
}

static void check_fillfactor(doctor *d, const first_row *r) {
    char v[64], advice[1200];
    const char *set = reloption(r->c[1].s, "fillfactor", v);
    int64_t fillfactor = set ? strtoll(set, NULL, 10) : 100;
    int64_t updates = r->c[6].i, hot = r->c[7].i;
    int64_t percent = updates > 0 ? hot * 100 / updates : 100;
    bool judged = updates >= LQ_DOCTOR_HOT_UPDATES;
    /* Where the claims write an indexed column, no room in the page makes
     * their updates HOT: the advice would cost room for nothing. */
    int level = judged && fillfactor >= 100 && percent < LQ_DOCTOR_HOT_PERCENT && !d->leases_indexed
                    ? WARNING
                    : OK;
    snprintf(advice, sizeof advice,
             "ALTER TABLE %s SET (fillfactor = 80): claims and settlements update rows in place, "
             "and free room in each page keeps those updates off the indexes (pages written "
             "from then on get the room)",
             d->label);
    finding(d, "fillfactor", level, num(fillfactor), level == OK ? NULL : advice,
            "fillfactor %lld; %lld of %lld updates were HOT (%lld%%)%s", (long long)fillfactor,
            (long long)hot, (long long)updates, (long long)percent,
            d->leases_indexed ? ": the claims write the lease column, which the table's leases' "
                                "index holds, so no fillfactor makes their updates HOT"
            : judged          ? ""
                              : ", too few updates to judge");
}

/* The oldest holders of snapshots and of transactions that wrote, oldest
 * first: the level is the worst of theirs, and the advice names the
 * session it comes from. */
static int check_xmin(doctor *d) {
    some_rows r = {0};
    char refused[512], advice[1200];
    int rc = run(d, &d->sql.xmin, on_some, &r, refused);
    if (rc != LQ_OK) return rc;
    if (refused[0]) {
        refused_finding(d, "oldest_xmin", refused, "grant this user pg_read_all_stats");
        return LQ_OK;
    }
    if (r.count == 0) {
        finding(d, "oldest_xmin", OK, num(0), NULL,
                "no other session of this database holds a snapshot or a transaction that wrote");
        return LQ_OK;
    }
    lq__strbuf list = {0};
    int level = OK, worst = 0;
    for (int i = 0; i < r.count; i++) {
        const cell *c = r.c[i];
        bool idle = strncmp(c[2].s, "idle in transaction", 19) == 0;
        int l = snapshot_level(c[3].i, idle);
        if (l > level) {
            level = l;
            worst = i;
        }
        lq__sb_addf(&list, "%spid %lld (application \"%s\", %s) for %lld s, holding back %lld transactions",
                    i ? "; " : "", (long long)c[0].i, c[1].s, c[2].s[0] ? c[2].s : "state not shown",
                    (long long)c[3].i, (long long)c[4].i);
    }
    const cell *w = r.c[worst];
    snprintf(advice, sizeof advice,
             "end the transaction of pid %lld: commit or roll back in application \"%s\", or "
             "SELECT pg_terminate_backend(%lld); idle_in_transaction_session_timeout ends idle "
             "sessions by itself",
             (long long)w[0].i, w[1].s, (long long)w[0].i);
    finding(d, "oldest_xmin", level, num(w[3].i), level == OK ? NULL : advice,
            "snapshots and writing transactions held, oldest first: %s; vacuum keeps every row "
            "version deleted since the oldest",
            list.failed || !list.data ? "?" : list.data);
    lq__sb_free(&list);
    return LQ_OK;
}

static int check_prepared(doctor *d) {
    first_row r = {0};
    char refused[512], advice[1200];
    int rc = run(d, &d->sql.prepared, on_first, &r, refused);
    if (rc != LQ_OK) return rc;
    if (refused[0]) {
        refused_finding(d, "prepared_xacts", refused, "grant this user the right to read pg_prepared_xacts");
        return LQ_OK;
    }
    if (!r.found) {
        finding(d, "prepared_xacts", OK, num(0), NULL, "no prepared transaction in this database");
        return LQ_OK;
    }
    const char *gid = r.c[0].s;
    int64_t seconds = r.c[1].i, count = r.c[2].i;
    int level = seconds >= LQ_DOCTOR_PREPARED_S ? PROBLEM : OK;
    snprintf(advice, sizeof advice,
             "finish it: COMMIT PREPARED '%s' or ROLLBACK PREPARED '%s', as its transaction "
             "manager decides",
             gid, gid);
    finding(d, "prepared_xacts", level, num(count), level == OK ? NULL : advice,
            "%lld prepared transaction(s); the oldest, '%s', prepared %lld s ago, holds back "
            "xmin until it is finished",
            (long long)count, gid, (long long)seconds);
    return LQ_OK;
}

static int check_slots(doctor *d) {
    first_row r = {0};
    char refused[512], advice[1200];
    int rc = run(d, &d->sql.slots, on_first, &r, refused);
    if (rc != LQ_OK) return rc;
    if (refused[0]) {
        refused_finding(d, "replication_slots", refused, "grant this user the right to read pg_replication_slots");
        return LQ_OK;
    }
    if (!r.found) {
        finding(d, "replication_slots", OK, num(0), NULL, "no replication slot holds back xmin");
        return LQ_OK;
    }
    const char *name = r.c[0].s;
    bool active = r.c[1].i != 0;
    int64_t age = r.c[2].i, count = r.c[3].i;
    snprintf(advice, sizeof advice,
             "bring its consumer back, or drop the slot if nothing uses it: "
             "SELECT pg_drop_replication_slot('%s')",
             name);
    finding(d, "replication_slots", active ? OK : PROBLEM, num(count), active ? NULL : advice,
            "%lld slot(s) hold back xmin; the oldest, %s (%s), by %lld transactions",
            (long long)count, name, active ? "active" : "inactive", (long long)age);
    return LQ_OK;
}

/* The plan's lines: the first that reads the table. */
typedef struct plan_lines {
    char scan[CELL_TEXT];
} plan_lines;

static int on_plan_line(void *ctx, const lq__value *cols, int count) {
    plan_lines *p = ctx;
    if (count < 1 || p->scan[0]) return LQ_OK;
    char line[CELL_TEXT];
    text_of(line, sizeof line, &cols[0]);
    if (!strstr(line, "Scan")) return LQ_OK;
    const char *s = line;
    while (*s == ' ' || *s == '-' || *s == '>') s++;
    snprintf(p->scan, sizeof p->scan, "%s", s);
    char *cost = strstr(p->scan, "  (cost=");
    if (cost) *cost = '\0';
    return LQ_OK;
}

static int check_plan(doctor *d, int64_t rows, const char *index) {
    plan_lines p = {{0}};
    char refused[512], advice[1200];
    int64_t now = lq__now_ms();
    d->args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = now};
    d->args[LQ__P_LEASE_NOW] = d->args[LQ__P_NOW];
    d->args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = 1};
    d->args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = "", .n = 0};
    int rc = run(d, &d->sql.plan, on_plan_line, &p, refused);
    if (rc != LQ_OK) return rc;
    if (refused[0]) {
        refused_finding(d, "claim_plan", refused, "run EXPLAIN of the claim by hand");
        return LQ_OK;
    }
    bool uses_index = strstr(p.scan, "Index") != NULL;
    bool uses_claim_index = uses_index && index[0] && strstr(p.scan, index);
    int level = rows < LQ_DOCTOR_PLAN_ROWS || uses_claim_index ? OK : uses_index ? WARNING : PROBLEM;
    snprintf(advice, sizeof advice,
             "ANALYZE %s so that the planner knows its size, and make sure the claim-order index "
             "exists (claim_order_index)",
             d->label);
    char why[128];
    if (rows < LQ_DOCTOR_PLAN_ROWS)
        snprintf(why, sizeof why, "a sequential scan is as good (judged from %d rows)", LQ_DOCTOR_PLAN_ROWS);
    else
        snprintf(why, sizeof why, "%s", uses_claim_index ? "the claim-order index serves them"
                                                         : "each claim reads the whole queue");
    finding(d, "claim_plan", level, str(p.scan), level == OK ? NULL : advice,
            "the claim's candidates are read by: %s; at %lld rows %s", p.scan[0] ? p.scan : "?",
            (long long)rows, why);
    return LQ_OK;
}

static int doctor_postgres(doctor *d) {
    first_row rel = {0};
    char refused[512];
    int rc = run(d, &d->sql.relation, on_first, &rel, refused);
    if (rc != LQ_OK) return rc;
    if (refused[0] || !rel.found) {
        refused_finding(d, "dead_tuples", refused[0] ? refused : "no statistics",
                        "grant this user the right to read pg_stat_user_tables");
    } else {
        check_dead(d, &rel);
        check_autovacuum(d, rel.c[1].s);
    }
    if ((rc = check_xmin(d)) != LQ_OK) return rc;
    if ((rc = check_prepared(d)) != LQ_OK) return rc;
    if ((rc = check_slots(d)) != LQ_OK) return rc;
    char index[CELL_TEXT];
    if ((rc = check_index(d, index)) != LQ_OK) return rc;
    /* reltuples is -1 before the first vacuum or analyze: the live count then. */
    int64_t rows = rel.c[0].i >= 0 ? rel.c[0].i : rel.c[2].i;
    if ((rc = check_plan(d, rows, index)) != LQ_OK) return rc;
    if (rel.found) check_fillfactor(d, &rel);
    return LQ_OK;
}

/* ---- MySQL and MariaDB ------------------------------------------------------ */

static int doctor_mysql(doctor *d) {
    first_row r = {0};
    char refused[512], advice[1200];
    int rc = run(d, &d->sql.history, on_first, &r, refused);
    if (rc != LQ_OK) return rc;
    if (refused[0] || !r.found) {
        refused_finding(d, "history_length", refused[0] ? refused : "no trx_rseg_history_len metric",
                        "grant this user PROCESS");
    } else {
        int64_t length = r.c[0].i;
        int level = length >= LQ_DOCTOR_HISTORY_PROBLEM   ? PROBLEM
                    : length >= LQ_DOCTOR_HISTORY_WARNING ? WARNING
                                                          : OK;
        finding(d, "history_length", level, num(length),
                level == OK ? NULL
                            : "end the oldest transaction (oldest_transaction): purge catches up "
                              "once no read view needs the old row versions",
                "InnoDB's history list holds %lld undo log(s) not yet purged", (long long)length);
    }
    some_rows o = {0};
    if ((rc = run(d, &d->sql.oldest, on_some, &o, refused)) != LQ_OK) return rc;
    if (refused[0]) {
        refused_finding(d, "oldest_transaction", refused, "grant this user PROCESS");
    } else if (o.count == 0) {
        finding(d, "oldest_transaction", OK, num(0), NULL, "no other transaction is open");
    } else {
        lq__strbuf list = {0};
        int level = OK, worst = 0;
        for (int i = 0; i < o.count; i++) {
            const cell *c = o.c[i];
            bool idle = strcmp(c[2].s, "Sleep") == 0; /* idle inside its transaction */
            int l = snapshot_level(c[1].i, idle);
            if (l > level) {
            level = l;
            worst = i;
        }
            lq__sb_addf(&list, "%sthread %lld (user \"%s\", %s, %s, %s) for %lld s", i ? "; " : "",
                        (long long)c[0].i, c[3].s, idle ? "idle" : c[2].s[0] ? c[2].s : "command not shown",
                        c[4].s, c[5].s, (long long)c[1].i);
        }
        const cell *w = o.c[worst];
        snprintf(advice, sizeof advice,
                 "end the transaction of thread %lld: commit or roll back in the application of "
                 "user \"%s\", or KILL %lld; wait_timeout (and MariaDB's idle_transaction_timeout) "
                 "end idle sessions by themselves",
                 (long long)w[0].i, w[3].s, (long long)w[0].i);
        finding(d, "oldest_transaction", level, num(w[1].i), level == OK ? NULL : advice,
                "transactions open, oldest first: %s; purge keeps every row version their read "
                "views may need",
                list.failed || !list.data ? "?" : list.data);
        lq__sb_free(&list);
    }
    char index[CELL_TEXT];
    return check_index(d, index);
}

/* ---- SQLite ------------------------------------------------------------------ */

static int doctor_sqlite(doctor *d) {
    first_row r = {0};
    char refused[512], advice[1024];
    int rc = run(d, &d->sql.journal, on_first, &r, refused);
    if (rc != LQ_OK) return rc;
    if (refused[0] || !r.found) {
        refused_finding(d, "journal_mode", refused[0] ? refused : "no answer", "run PRAGMA journal_mode by hand");
    } else {
        bool wal = strcasecmp(r.c[0].s, "wal") == 0;
        finding(d, "journal_mode", wal ? OK : WARNING, str(r.c[0].s),
                wal ? NULL
                    : "PRAGMA journal_mode = WAL, with no other connection open (libqueue's "
                      "connections ask for it when they open: something keeps it from holding)",
                "the journal mode is %s%s", r.c[0].s,
                wal ? "" : ": readers and the writer wait for each other");
    }

    memset(&r, 0, sizeof r);
    if ((rc = run(d, &d->sql.file, on_first, &r, refused)) != LQ_OK) return rc;
    if (refused[0] || !r.found || !r.c[0].s[0]) {
        finding(d, "wal_size", OK, num(0), NULL, "the database has no file of its own");
    } else {
        char wal[CELL_TEXT + 8];
        snprintf(wal, sizeof wal, "%s-wal", r.c[0].s);
        struct stat st;
        int64_t size = stat(wal, &st) == 0 ? (int64_t)st.st_size : 0;
        int64_t mb = size / (1024 * 1024);
        int level = mb >= LQ_DOCTOR_WAL_PROBLEM_MB   ? PROBLEM
                    : mb >= LQ_DOCTOR_WAL_WARNING_MB ? WARNING
                                                     : OK;
        snprintf(advice, sizeof advice,
                 "end long read transactions on the file (other programs' too): a checkpoint "
                 "cannot start the log over while a reader needs it; then PRAGMA "
                 "wal_checkpoint(TRUNCATE) gives the space back");
        finding(d, "wal_size", level, num(size), level == OK ? NULL : advice,
                "%s is %lld bytes (%lld MiB)", wal, (long long)size, (long long)mb);
    }

    memset(&r, 0, sizeof r);
    if ((rc = run(d, &d->sql.pages, on_first, &r, refused)) != LQ_OK) return rc;
    if (refused[0] || !r.found) {
        refused_finding(d, "freelist", refused[0] ? refused : "no answer", "run PRAGMA freelist_count by hand");
    } else {
        int64_t free_pages = r.c[0].i, pages = r.c[1].i, page_size = r.c[2].i;
        int64_t percent = pages > 0 ? free_pages * 100 / pages : 0;
        int level = free_pages >= LQ_DOCTOR_FREE_PAGES && percent >= LQ_DOCTOR_FREE_PERCENT ? WARNING : OK;
        finding(d, "freelist", level, num(free_pages),
                level == OK ? NULL
                            : "VACUUM gives the free pages back (it rewrites the file and holds "
                              "the write lock meanwhile)",
                "%lld of %lld pages (%lld%%, %lld bytes each) are free", (long long)free_pages,
                (long long)pages, (long long)percent, (long long)page_size);
    }
    char index[CELL_TEXT];
    return check_index(d, index);
}

/* ---- the call ------------------------------------------------------------------ */

int lq_doctor(char **json_out, lq_broker *b, const lq_table *t) {
    lq__error_clear();
    LQ__CHECK_ARG(json_out, "json_out is NULL");
    *json_out = NULL;
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    doctor d = {.b = b, .t = t};
    lq__table_label(t, d.label, sizeof d.label);
    lq_table *claimed = NULL; /* the table as its subscriptions' claims read it */
    int rc = lq__broker_check_open(b);
    if (rc == LQ_OK) rc = lq__table_copy(&claimed, t);
    if (rc == LQ_OK && (rc = lq__leases_swept_find(&claimed->leases_swept, b, claimed)) != LQ_OK &&
        rc != LQ_CONNECT) {
        lq__error_clear(); /* a catalog it may not read: the claims' plan as on a table of before */
        rc = LQ_OK;
    }
    if (rc == LQ_OK) rc = lq__sql_build_doctor(&d.sql, b->dialect, claimed);
    d.leases_indexed = claimed && claimed->leases_swept;
    lq_table_free(claimed);
    if (rc == LQ_OK) rc = lq__pool_acquire(&d.conn, &b->pool);
    d.args[LQ__P_NAME] = (lq__value){.type = LQ__V_TEXT, .p = t->name, .n = strlen(t->name)};
    if (t->schema) d.args[LQ__P_SCHEMA] = (lq__value){.type = LQ__V_TEXT, .p = t->schema, .n = strlen(t->schema)};
    /* The table and every column named, or LQ_SCHEMA naming what is not. */
    if (rc == LQ_OK) {
        d.sql.probe.id = 0;
        rc = b->dialect->exec(NULL, d.conn, &d.sql.probe, d.args, NULL, NULL);
    }
    lq__sb_add(&d.out, "{\"dialect\":");
    json_text(&d.out, b->dialect->name);
    lq__sb_add(&d.out, ",\"table\":");
    json_text(&d.out, d.label);
    lq__sb_add(&d.out, ",\"findings\":[");
    if (rc == LQ_OK) {
        switch (d.sql.db) {
        case LQ__DOCTOR_POSTGRES: rc = doctor_postgres(&d); break;
        case LQ__DOCTOR_MYSQL: rc = doctor_mysql(&d); break;
        default: rc = doctor_sqlite(&d);
        }
    }
    lq__sb_add(&d.out, "]}");
    char *json = lq__sb_take(&d.out);
    if (rc == LQ_OK && !json) rc = lq__error(LQ_NOMEM, "out of memory");
    if (d.conn) lq__pool_release(&b->pool, d.conn, rc == LQ_CONNECT || rc == LQ_TIMEOUT);
    lq__doctor_sql_free(&d.sql);
    if (rc == LQ_OK) {
        *json_out = json;
        return LQ_OK;
    }
    free(json);
    lq__error_prefix("doctor of %s", d.label);
    return rc;
}
