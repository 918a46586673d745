/* The SQLite dialect: WAL mode, a busy timeout, a statement deadline, and
 * statements prepared once per connection. SQLite has one writer at a time
 * and no row locks, so it serves the lease and advisory forms; its advisory
 * keys live in this process (keys.c), one key space per database file. */
#include "base/clock.h"
#include "sql/dialect.h"
#include "dialects/key_space.h"
#include "dialects/keys.h"
#include "sql/stmt_cache.h"
#include "dialects/write_turns.h"

#include <libgen.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SQLITE_FLOOR 3035000 /* UPDATE .. RETURNING */

struct lq__conn {
    sqlite3 *db;
    bool borrowed; /* the caller's connection: never closed here */
    int64_t statement_timeout_ms;
    int64_t deadline; /* monotonic ms; the progress handler stops a statement past it */
    int64_t lock_wait_since; /* monotonic ms: the current wait for a lock began */
    lq__turns *turns;         /* the file's write turns in this process (NULL: borrowed) */
    uint64_t turns_seen;     /* writes ended when the current wait last looked */
    int64_t lock_wait_ms;    /* the bound of a lock wait: statement_timeout_ms, less for a restart */
    int restart_at;          /* log pages at which this connection next tries a restart */
    lq__stmt_cache cache; /* sqlite3_stmt handles */
};

static int db_error(int status, sqlite3 *db, int rc, const char *what) {
    int native = db ? sqlite3_extended_errcode(db) : rc;
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) status = LQ_CONTENTION;
    if (native == SQLITE_CONSTRAINT_UNIQUE || native == SQLITE_CONSTRAINT_PRIMARYKEY)
        status = LQ_DUPLICATE;
    if (rc == SQLITE_INTERRUPT) {
        status = LQ_TIMEOUT;
        msg = "the statement passed its deadline (statement_timeout_ms)";
    }
    if (rc == SQLITE_NOMEM) status = LQ_NOMEM;
    return lq__error_db(status, NULL, native, "sqlite: %s: %s", what, msg);
}

static int on_progress(void *arg) {
    lq__conn *c = arg;
    return c->deadline && lq__mono_ms() > c->deadline;
}

/* Waits for a lock, up to statement_timeout_ms, and gives up at once when
 * the calling thread's wait is abandoned: a stopping subscription's claim
 * may wait for a lock its own rows' transactions hold, and the stop waits
 * for the claim. A write of this process that ends wakes the wait (a write
 * lasts tens of microseconds, where a sleep's step would add a millisecond);
 * the steps, growing to 10 ms, bound the wait for a writer elsewhere. Only
 * connections of ours have it, so `turns` is set. */
static int on_busy(void *arg, int count) {
    lq__conn *c = arg;
    int64_t now = lq__mono_ms();
    if (count == 0) {
        c->lock_wait_since = now;
        c->turns_seen = lq__turns_ended_count(c->turns);
    }
    if (lq__lock_wait_abandoned() || now - c->lock_wait_since >= c->lock_wait_ms) return 0;
    lq__turns_wait(c->turns, &c->turns_seen, lq__retry_pause_us(count));
    return 1;
}

/* After each commit, the checkpoints: as SQLite's own, a passive one once
 * the log passes CHECKPOINT_PAGES; and past RESTART_PAGES a restart, which
 * waits (at most RESTART_WAIT_MS, the writers held back meanwhile) for the
 * readers of the log to move to the database file, so the next writer
 * starts the log over. Under a load that never pauses some reader always
 * holds a part of the log, and with passive checkpoints alone it grows
 * without bound (220 MB, and its index mapped in memory, after a million
 * jobs). A restart that does not come in time is tried again a
 * CHECKPOINT_PAGES later. */
enum { CHECKPOINT_PAGES = 1000, RESTART_PAGES = 4000, RESTART_WAIT_MS = 100 };

static int on_wal_commit(void *arg, sqlite3 *db, const char *name, int pages) {
    lq__conn *c = arg;
    if (pages < CHECKPOINT_PAGES) return SQLITE_OK;
    bool restart = pages >= RESTART_PAGES && pages >= c->restart_at;
    c->lock_wait_ms = restart ? RESTART_WAIT_MS : c->statement_timeout_ms;
    int rc = sqlite3_wal_checkpoint_v2(db, name, restart ? SQLITE_CHECKPOINT_RESTART : SQLITE_CHECKPOINT_PASSIVE,
                                       NULL, NULL);
    c->lock_wait_ms = c->statement_timeout_ms;
    if (restart) c->restart_at = rc == SQLITE_OK ? 0 : pages + CHECKPOINT_PAGES;
    return SQLITE_OK;
}

/* After a statement: where the connection is out of any transaction and the
 * statement may have written (or ended a transaction), the write lock is
 * free: this process's waits for it retry. */
static void turn_over(lq__conn *c, bool wrote) {
    if (c->turns && wrote && sqlite3_get_autocommit(c->db)) lq__turns_ended(c->turns);
}

static int run_plain(lq__conn *c, const char *sql) {
    c->deadline = lq__mono_ms() + c->statement_timeout_ms;
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    c->deadline = 0;
    turn_over(c, true);
    return rc == SQLITE_OK ? LQ_OK : db_error(LQ_BACKEND, c->db, rc, sql);
}

/* Moving a new file to WAL reads its header and then writes it. When
 * connections do it at once, the ones that find another's write begun are
 * refused at once, without their busy handler (two readers each waiting to
 * write would wait for each other): the change is tried again, with
 * growing pauses, until it is made or the lock wait's bound passes (a
 * refusal means another connection is writing, so the wait is short). */
static int enter_wal(lq__conn *c) {
    int64_t until = lq__mono_ms() + c->lock_wait_ms;
    for (int attempt = 0;; attempt++) {
        int rc = run_plain(c, "PRAGMA journal_mode = WAL");
        if (rc != LQ_CONTENTION || lq__mono_ms() >= until || lq__lock_wait_abandoned()) return rc;
        lq__sleep_us(lq__retry_pause_us(attempt));
    }
}

/* sqlite:///abs/path, sqlite://relative/path, sqlite:path. A query string is
 * refused rather than taken for part of a file name. */
/* The file a URL names: as given, for opening it, and its canonical name,
 * which names its advisory key space and its write turns. */
typedef struct sqlite_target {
    char *path, *realpath;
} sqlite_target;

static const sqlite_target *file_of(const lq__broker_target *t) { return t->own; }

static int sqlite_parse_url(lq__broker_target *t, const char *url, const char *rest) {
    if (strncmp(rest, "//", 2) == 0) rest += 2;
    if (!*rest || strchr(rest, '?'))
        return lq__error(LQ_MISUSE, "\"%s\": a SQLite URL names a file, as sqlite:///abs/path.db "
                                    "or sqlite:relative.db, with no query string",
                         url);
    if (strcmp(rest, ":memory:") == 0 || strcmp(rest, "/:memory:") == 0)
        return lq__error(LQ_MISUSE, "\"%s\": an in-memory SQLite database is private to one "
                                    "connection; give a file",
                         url);
    sqlite_target *own = calloc(1, sizeof *own);
    if (!own || !(own->path = lq__strdup(rest))) {
        free(own);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    t->own = own;
    /* The canonical name of the file names its advisory key space, so two
     * spellings of one file share their keys: the file's own where it
     * exists (a symbolic link is followed), else its folder's and its name
     * (it may not exist yet). */
    char *dir_copy = lq__strdup(rest), *base_copy = lq__strdup(rest);
    char resolved[PATH_MAX];
    lq__strbuf sb = {0};
    if (realpath(rest, resolved))
        lq__sb_add(&sb, resolved);
    else if (dir_copy && base_copy && realpath(dirname(dir_copy), resolved))
        lq__sb_addf(&sb, "%s/%s", resolved, basename(base_copy));
    else
        lq__sb_add(&sb, rest);
    free(dir_copy);
    free(base_copy);
    own->realpath = lq__sb_take(&sb);
    return own->realpath ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}

static void sqlite_free_target(void *own) {
    sqlite_target *t = own;
    if (!t) return;
    free(t->path);
    free(t->realpath);
    free(t);
}

static void finalize(void *stmt) { sqlite3_finalize(stmt); }

static void sqlite_disconnect(lq__conn *c) {
    if (!c) return;
    lq__cache_clear(&c->cache, finalize);
    if (!c->borrowed) sqlite3_close_v2(c->db);
    lq__turns_close(c->turns);
    free(c);
}

/* A connection left inside a transaction never goes back to the pool. */
static bool sqlite_reusable(lq__conn *c) { return sqlite3_get_autocommit(c->db) != 0; }

static int sqlite_borrow(lq__conn **out, void *native) {
    lq__conn *c = calloc(1, sizeof *c);
    if (!c) return lq__error(LQ_NOMEM, "out of memory");
    c->db = native;
    c->borrowed = true;
    c->statement_timeout_ms = c->lock_wait_ms = 30000;
    *out = c;
    return LQ_OK;
}

static int sqlite_connect(lq__conn **out, const lq__broker_target *target, const lq_options *o) {
    lq__conn *c = calloc(1, sizeof *c);
    if (!c) return lq__error(LQ_NOMEM, "out of memory");
    c->statement_timeout_ms = c->lock_wait_ms = lq__opt_int(o, LQ_OPT_STATEMENT_TIMEOUT_MS);
    if (!(c->turns = lq__turns_open(file_of(target)->realpath))) {
        free(c);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    int rc = sqlite3_open_v2(file_of(target)->path, &c->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        lq__error_db(LQ_CONNECT, NULL, rc, "sqlite: cannot open \"%s\": %s", file_of(target)->path,
                     c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        sqlite_disconnect(c);
        return LQ_CONNECT;
    }
    sqlite3_extended_result_codes(c->db, 1);
    /* A double-quoted name that matches no column must fail, not turn into a
     * string literal: that is how a missing column is caught at open. */
    sqlite3_db_config(c->db, SQLITE_DBCONFIG_DQS_DML, 0, (int *)NULL);
    sqlite3_db_config(c->db, SQLITE_DBCONFIG_DQS_DDL, 0, (int *)NULL);
    /* Lock waits are bounded by the busy handler, statements by the progress
     * handler: nothing waits forever. */
    sqlite3_busy_handler(c->db, on_busy, c);
    sqlite3_wal_hook(c->db, on_wal_commit, c);
    sqlite3_progress_handler(c->db, 1000, on_progress, c);
    rc = enter_wal(c);
    if (rc == LQ_OK) rc = run_plain(c, "PRAGMA synchronous = NORMAL");
    if (rc != LQ_OK) {
        lq__error_prefix("sqlite: \"%s\"", file_of(target)->path);
        sqlite_disconnect(c);
        return rc == LQ_BACKEND ? LQ_CONNECT : rc;
    }
    *out = c;
    return LQ_OK;
}

static int sqlite_check_version(lq__conn *c, const lq_table *table) {
    (void)c;
    (void)table;
    int v = sqlite3_libversion_number();
    if (v < SQLITE_FLOOR)
        return lq__error(LQ_SERVER_TOO_OLD, "sqlite: libqueue needs SQLite 3.35 or later; this is %s",
                         sqlite3_libversion());
    return LQ_OK;
}

static void sqlite_placeholder(lq__strbuf *sb, int position) { lq__sb_addf(sb, "?%d", position); }

/* Rendered SQL takes plain "?", which every SQLite driver binds in order
 * (some take no numbered ones). */
static void sqlite_rendered_placeholder(lq__strbuf *sb, int position) {
    (void)position;
    lq__sb_addc(sb, '?');
}

/* The lease claim: one UPDATE .. RETURNING that leases a row for every
 * worker asked for. SQLite's single writer keeps two claims apart; the rows
 * come back in no order, so they carry their claim-order keys. */
static int build_lease_claim(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__sqlite_dialect, t);
    lq__sql_add(&b, "UPDATE ");
    lq__sql_table(&b);
    lq__sql_add(&b, " SET ");
    lq__sql_col(&b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_LEASE);
    if (lq__has(t, LQ_ROLE_ATTEMPT)) {
        lq__sql_add(&b, ", ");
        lq__sql_col(&b, LQ_ROLE_ATTEMPT);
        lq__sql_add(&b, " = ");
        lq__sql_col(&b, LQ_ROLE_ATTEMPT);
        lq__sql_add(&b, " + 1");
    }
    lq__sql_add(&b, " WHERE ");
    lq__sql_id(&b);
    lq__sql_add(&b, " IN (SELECT ");
    lq__sql_id(&b);
    lq__sql_from_claimable(&b, true);
    if (t->fifo) lq__sql_fifo_head(&b, true); /* SQLite's one writer is the guard */
    lq__sql_add(&b, " ORDER BY ");
    lq__sql_claim_order(&b);
    lq__sql_add(&b, " LIMIT ");
    if (t->fifo) lq__sql_add(&b, "1");
    else lq__sql_param(&b, LQ__P_LIMIT);
    lq__sql_add(&b, ") RETURNING ");
    lq__sql_row_columns(&b, " - 1");
    return lq__sql_finish(&b);
}

/* The advisory key of a row, rendered by the database. */
static void key_expression(lq__sql *b, const lq_table *t) {
    lq__sql_add(b, "CAST(");
    if (t->key.count == 0) lq__sql_add(b, "''");
    for (size_t i = 0; i < t->key.count; i++) {
        if (i) lq__sql_add(b, " || ");
        if (!t->key.parts[i].is_column) {
            lq__sql_literal(b, t->key.parts[i].text);
            continue;
        }
        lq__sql_add(b, "ifnull(");
        lq__sql_ident(b, t->key.parts[i].text);
        lq__sql_add(b, ", '')");
    }
    lq__sql_add(b, " AS TEXT)");
}

/* The advisory claim: candidates with their keys, then a take per row that
 * counts the attempt and reads the row as it was. */
static int build_advisory_claim(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__sqlite_dialect, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_id(&b);
    lq__sql_add(&b, ", ");
    key_expression(&b, t);
    lq__sql_candidate_pkey(&b, true);
    lq__sql_from_claimable(&b, false);
    lq__sql_candidate_filter(&b);
    lq__sql_claim_limit(&b);
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;

    rc = lq__sql_build_take_returning(&set->take, &lq__sqlite_dialect, t);
    /* Keys live in the process: a claim locks its candidates' keys, then
     * takes their rows in one write. */
    if (rc == LQ_OK) rc = lq__sql_build_take_set_returning(&set->take_set, &lq__sqlite_dialect, t);
    return rc;
}

/* The rows of a settled set, from their JSON; tokens compare as the text
 * the lease column keeps. */
static void sqlite_held_set_source(lq__sql *b, bool tokens) {
    lq__sql_add(b, tokens ? "(SELECT json_extract(value, '$[0]') AS \"lq_id\", json_extract(value, "
                            "'$[1]') AS \"lq_held\" FROM json_each("
                          : "(SELECT value AS \"lq_id\" FROM json_each(");
    lq__sql_param(b, LQ__P_HELD_SET);
    lq__sql_add(b, "))");
}

static int sqlite_build_claims(lq__sqlset *set, const lq_table *t) {
    switch (lq_table_form(t)) {
    case LQ_FORM_LEASE: return build_lease_claim(set, t);
    case LQ_FORM_ADVISORY: return build_advisory_claim(set, t);
    default: return lq__table_check_form(t, &lq__sqlite_dialect); /* the row lock form */
    }
}

/* The connection's prepared copy of a statement, prepared on first use. */
static int cached(sqlite3_stmt **out, lq__conn *c, const lq__stmt *st) {
    if ((*out = lq__cache_find(&c->cache, st->id))) return LQ_OK;
    sqlite3_stmt *stmt;
    int rc = sqlite3_prepare_v3(c->db, st->sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL);
    if (rc != SQLITE_OK) return db_error(LQ_SCHEMA, c->db, rc, "cannot prepare a statement");
    if ((rc = lq__cache_add(&c->cache, st->id, stmt)) != LQ_OK) {
        sqlite3_finalize(stmt);
        return rc;
    }
    *out = stmt;
    return LQ_OK;
}

/* A statement prepared for one run, finalized after it. */
static int prepare_once(sqlite3_stmt **out, lq__conn *c, const lq__stmt *st) {
    int rc = sqlite3_prepare_v2(c->db, st->sql, -1, out, NULL);
    return rc == SQLITE_OK ? LQ_OK : db_error(LQ_SCHEMA, c->db, rc, "cannot prepare a statement");
}

static int sqlite_prepare(lq__conn *c, const lq__stmt *st) {
    sqlite3_stmt *stmt;
    return cached(&stmt, c, st);
}

static int bind_value(sqlite3_stmt *stmt, int index, const lq__value *v) {
    char text[LQ__TIME_TEXT_SIZE];
    switch (v->type) {
    case LQ__V_INT: return sqlite3_bind_int64(stmt, index, v->i);
    case LQ__V_TEXT: return sqlite3_bind_text64(stmt, index, v->p, v->n, SQLITE_STATIC, SQLITE_UTF8);
    case LQ__V_BLOB: return sqlite3_bind_blob64(stmt, index, v->p ? v->p : "", v->n, SQLITE_STATIC);
    case LQ__V_TIME:
        lq__time_text(text, v->i);
        return sqlite3_bind_text(stmt, index, text, -1, SQLITE_TRANSIENT);
    default: return sqlite3_bind_null(stmt, index);
    }
}

static void read_column(lq__value *v, sqlite3_stmt *stmt, int i) {
    memset(v, 0, sizeof *v);
    switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER:
        v->type = LQ__V_INT;
        v->i = sqlite3_column_int64(stmt, i);
        break;
    case SQLITE_BLOB:
        v->type = LQ__V_BLOB;
        v->p = sqlite3_column_blob(stmt, i);
        v->n = (size_t)sqlite3_column_bytes(stmt, i);
        break;
    case SQLITE_NULL: v->type = LQ__V_NULL; break;
    default:
        v->type = LQ__V_TEXT;
        v->p = sqlite3_column_text(stmt, i);
        v->n = (size_t)sqlite3_column_bytes(stmt, i);
        if (sqlite3_column_type(stmt, i) == SQLITE_FLOAT) v->i = sqlite3_column_int64(stmt, i);
    }
}

static int sqlite_exec(int64_t *changes, lq__conn *c, const lq__stmt *st, const lq__value *args,
                       lq__row_fn on_row, void *ctx) {
    sqlite3_stmt *stmt;
    /* A statement that runs once (id 0) is prepared for this call only. */
    bool once = st->id == 0;
    int rc = once ? prepare_once(&stmt, c, st) : cached(&stmt, c, st);
    if (rc != LQ_OK) return rc;
    for (int i = 0, count = lq__stmt_values(st); i < count; i++) {
        int src = bind_value(stmt, i + 1, lq__stmt_arg(st, args, i));
        if (src != SQLITE_OK) {
            rc = db_error(LQ_BACKEND, c->db, src, "cannot bind a value");
            if (once) sqlite3_finalize(stmt);
            else sqlite3_reset(stmt);
            return rc;
        }
    }
    c->deadline = lq__mono_ms() + c->statement_timeout_ms;
    int result = LQ_OK;
    lq__value row[LQ__COL_COUNT + 4];
    for (;;) {
        int step = sqlite3_step(stmt);
        if (step == SQLITE_DONE) break;
        if (step != SQLITE_ROW) {
            result = db_error(LQ_BACKEND, c->db, step, "a statement failed");
            break;
        }
        int n = sqlite3_column_count(stmt);
        if (n > (int)(sizeof row / sizeof row[0])) n = (int)(sizeof row / sizeof row[0]);
        for (int i = 0; i < n; i++) read_column(&row[i], stmt, i);
        if (on_row && (result = on_row(ctx, row, n)) != LQ_OK) break;
    }
    c->deadline = 0;
    if (changes) *changes = sqlite3_changes64(c->db);
    turn_over(c, !sqlite3_stmt_readonly(stmt));
    if (once) {
        sqlite3_finalize(stmt);
        return result;
    }
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return result;
}

static int sqlite_execute(int64_t *changes, lq__conn *c, const char *sql, const char *const *params,
                          int count) {
    sqlite3_stmt *stmt;
    int rc = sqlite3_prepare_v2(c->db, sql, -1, &stmt, NULL);
    if (rc != SQLITE_OK) return db_error(LQ_BACKEND, c->db, rc, "cannot prepare the statement");
    for (int i = 0; i < count && rc == SQLITE_OK; i++)
        rc = params[i] ? sqlite3_bind_text(stmt, i + 1, params[i], -1, SQLITE_STATIC)
                       : sqlite3_bind_null(stmt, i + 1);
    c->deadline = lq__mono_ms() + c->statement_timeout_ms;
    while (rc == SQLITE_OK || rc == SQLITE_ROW) rc = sqlite3_step(stmt);
    c->deadline = 0;
    turn_over(c, true);
    int result = rc == SQLITE_DONE ? LQ_OK : db_error(LQ_BACKEND, c->db, rc, "the statement failed");
    if (changes) *changes = sqlite3_changes64(c->db);
    sqlite3_finalize(stmt);
    return result;
}

static int sqlite_begin(lq__conn *c, int isolation) {
    (void)isolation; /* SQLite serialises writers: one level */
    return run_plain(c, "BEGIN IMMEDIATE");
}

static int sqlite_commit(lq__conn *c) { return run_plain(c, "COMMIT"); }

static int sqlite_rollback(lq__conn *c) {
    if (sqlite3_get_autocommit(c->db)) return LQ_OK;
    return run_plain(c, "ROLLBACK");
}

static int sqlite_try_lock_key(bool *taken, lq__conn *c, const lq__broker_target *target,
                               const char *key) {
    (void)c;
    return lq__keys_try_lock(taken, file_of(target)->realpath, key);
}

static bool sqlite_unlock_key(lq__conn *c, const lq__broker_target *target, const char *key) {
    (void)c;
    return lq__keys_unlock(file_of(target)->realpath, key);
}

static size_t sqlite_keys_held(const lq__broker_target *target) {
    return lq__keys_held(file_of(target)->realpath);
}

static int sqlite_hold_key_space(const lq__broker_target *target) {
    return lq__key_space_hold(file_of(target)->realpath);
}

static void sqlite_let_go_key_space(const lq__broker_target *target) {
    lq__key_space_let_go(file_of(target)->realpath);
}

static bool sqlite_key_space_elsewhere(const lq__broker_target *target) {
    return lq__key_space_elsewhere(file_of(target)->realpath);
}

/* ---- tables ---- */

static const lq__ddl_types sqlite_ddl = {
    .id_generated = "INTEGER PRIMARY KEY AUTOINCREMENT", /* ids never reused: dead letters keep theirs */
    .id_plain = "INTEGER PRIMARY KEY",
    .bytes = "BLOB NOT NULL DEFAULT x''",
    .integer = "INTEGER NOT NULL DEFAULT",
    .time = "TEXT",
    .time_due = "TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00','now'))",
    .text = "TEXT",
    .key_text = "TEXT",
    .json = "TEXT",
    .partial_index = true,
};

static void sqlite_schema_query(lq__sql *b) {
    lq__sql_add(b, "SELECT 1 FROM pragma_database_list WHERE name = ");
    lq__sql_param(b, LQ__P_SCHEMA);
}

static void sqlite_columns_query(lq__sql *b) {
    lq__sql_add(b, "SELECT name, type FROM pragma_table_info(");
    lq__sql_param(b, LQ__P_NAME);
    lq__sql_add(b, ", ");
    lq__sql_param(b, LQ__P_SCHEMA);
    lq__sql_add(b, ")");
}

/* A schema's own catalog (its name quoted: no parameter names a schema);
 * an unqualified name is temp's where temp has it, else main's. Names
 * compare without case, as SQLite's identifiers do. */
static void sqlite_view_query(lq__sql *b) {
    const char *schema = b->table->schema;
    if (schema) {
        lq__sql_add(b, "SELECT 1 FROM ");
        lq__sql_ident(b, schema);
        lq__sql_add(b, ".sqlite_master WHERE type = 'view' AND name = ");
        lq__sql_param(b, LQ__P_NAME);
        lq__sql_add(b, " COLLATE NOCASE");
        return;
    }
    static const char *const catalogs[] = {"temp", "main"};
    lq__sql_add(b, "SELECT 1 WHERE COALESCE(");
    for (int i = 0; i < 2; i++) {
        lq__sql_add(b, i ? ", (SELECT type FROM " : "(SELECT type FROM ");
        lq__sql_add(b, catalogs[i]);
        lq__sql_add(b, ".sqlite_master WHERE type IN ('table', 'view') AND name = ");
        lq__sql_param(b, LQ__P_NAME);
        lq__sql_add(b, " COLLATE NOCASE)");
    }
    lq__sql_add(b, ") = 'view'");
}

/* Bytes, also of a text value (length() of text counts characters). */
static void sqlite_byte_length(lq__sql *b, int role) {
    lq__sql_add(b, "length(CAST(");
    lq__sql_col(b, role);
    lq__sql_add(b, " AS BLOB))");
}

static bool type_has(const char *type, const char *word) {
    size_t n = strlen(word);
    for (const char *p = type; *p; p++)
        if (strncasecmp(p, word, n) == 0) return true;
    return false;
}

/* SQLite's type affinity (its manual, "Determination Of Column Affinity"):
 * times and JSON are kept as text, so a text column holds them, and so does
 * a NUMERIC one (DATETIME, JSON), which keeps text that is not a number as
 * text. A column without a type holds anything. */
static unsigned sqlite_type_kinds(const char *type) {
    const unsigned text = LQ__KIND_TEXT | LQ__KIND_BYTES | LQ__KIND_TIME | LQ__KIND_JSON;
    if (!*type) return text | LQ__KIND_INTEGER;
    if (type_has(type, "INT")) return LQ__KIND_INTEGER;
    if (type_has(type, "CHAR") || type_has(type, "CLOB") || type_has(type, "TEXT")) return text;
    if (type_has(type, "BLOB")) return LQ__KIND_BYTES;
    if (type_has(type, "REAL") || type_has(type, "FLOA") || type_has(type, "DOUB")) return 0;
    if (type_has(type, "DATE") || type_has(type, "TIME")) return LQ__KIND_TIME;
    if (type_has(type, "JSON")) return LQ__KIND_JSON;
    return 0;
}

static void sqlite_now_ms_sql(lq__sql *b) {
    lq__sql_add(b, "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)");
}

static void sqlite_advisory_key(lq__sql *b) { key_expression(b, b->table); }

const lq__dialect lq__sqlite_dialect = {
    .name = "sqlite",
    .forms = (1u << LQ_FORM_LEASE) | (1u << LQ_FORM_ADVISORY),
    .single_writer = true,
    .advisory_holds_connection = false,
    .claim_writes_lease = true,
    .insert_returning = true,
    .row_address = "rowid",
    .last_insert_id = true,
    .on_conflict_do_nothing = true,
    .max_params = 32766, /* SQLITE_MAX_VARIABLE_NUMBER's default since 3.32 */
    .parse_url = sqlite_parse_url,
    .free_target = sqlite_free_target,
    .connect = sqlite_connect,
    .disconnect = sqlite_disconnect,
    .reusable = sqlite_reusable,
    .check_version = sqlite_check_version,
    .quote = '"',
    .placeholder = sqlite_placeholder,
    .rendered_placeholder = sqlite_rendered_placeholder,
    .rendered_time_text = lq__time_text,
    .build_claims = sqlite_build_claims,
    .held_set_source = sqlite_held_set_source,
    .held_time_text = lq__time_text,
    .prepare = sqlite_prepare,
    .exec = sqlite_exec,
    .execute = sqlite_execute,
    .borrow = sqlite_borrow,
    .release_borrowed = sqlite_disconnect,
    .begin = sqlite_begin,
    .commit = sqlite_commit,
    .rollback = sqlite_rollback,
    .ddl = &sqlite_ddl,
    .schema_query = sqlite_schema_query,
    .columns_query = sqlite_columns_query,
    .view_query = sqlite_view_query,
    .columns_fold_case = true,
    .type_kinds = sqlite_type_kinds,
    .byte_length = sqlite_byte_length,
    .now_ms_sql = sqlite_now_ms_sql,
    .advisory_key = sqlite_advisory_key,
    .try_lock_key = sqlite_try_lock_key,
    .unlock_key = sqlite_unlock_key,
    .keys_held = sqlite_keys_held,
    .hold_key_space = sqlite_hold_key_space,
    .let_go_key_space = sqlite_let_go_key_space,
    .key_space_elsewhere = sqlite_key_space_elsewhere,
};
