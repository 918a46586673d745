/* A queue's tables in the database: the recommended CREATE TABLE for a
 * description (lq_table_create_sql), and lq_table_create, which creates what
 * is missing or checks that what exists fits the description. */
#include "core/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the statements that create a table -------------------------------- */

/* A column added once: a template column may also have a role. */
typedef struct column_list {
    const char *names[LQ__ROLE_COUNT + 16];
    int count;
} column_list;

static bool listed(column_list *l, const char *name) {
    for (int i = 0; i < l->count; i++)
        if (strcmp(l->names[i], name) == 0) return true;
    if (l->count < (int)(sizeof l->names / sizeof l->names[0])) l->names[l->count++] = name;
    return false;
}

static void add_column(lq__sql *b, column_list *l, const char *column, const char *type,
                       const char *suffix) {
    if (!column || listed(l, column)) return;
    lq__sql_add(b, ",\n  ");
    lq__sql_ident(b, column);
    lq__sql_add(b, " ");
    lq__sql_add(b, type);
    lq__sql_add(b, suffix);
}

/* The claim order, (group, priority, retry_after, id), for the columns the
 * table has: claims read it instead of sorting the table. */
static void add_index_columns(lq__sql *b) {
    const int order[] = {LQ_ROLE_GROUP, LQ_ROLE_PRIORITY, LQ_ROLE_RETRY_AFTER};
    lq__sql_add(b, "(");
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        if (!lq__has(b->table, order[i])) continue;
        lq__sql_col(b, order[i]);
        lq__sql_add(b, ", ");
    }
    lq__sql_id(b);
    lq__sql_add(b, ")");
}

static void add_index_name(lq__sql *b, const char *what) {
    lq__strbuf name = {0};
    lq__sb_addf(&name, "%s_%s", b->table->name, what);
    char *text = lq__sb_take(&name);
    if (text) lq__sql_ident(b, text);
    else b->sb.failed = true;
    free(text);
}

static int build_create_table(lq__stmt *out, const lq__dialect *d, const lq_table *t,
                              bool unique_keys) {
    const lq__ddl_types *ty = d->ddl;
    char *const *c = t->columns;
    column_list added = {0};
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE TABLE IF NOT EXISTS ");
    lq__sql_table(&b);
    lq__sql_add(&b, " (\n  ");
    listed(&added, t->id);
    lq__sql_id(&b);
    lq__sql_add(&b, " ");
    lq__sql_add(&b, t->id_generated ? ty->id_generated : ty->id_plain);
    add_column(&b, &added, c[LQ_ROLE_PAYLOAD], ty->bytes, "");
    add_column(&b, &added, c[LQ_ROLE_ATTEMPT], ty->integer, " 1");
    add_column(&b, &added, c[LQ_ROLE_GROUP], ty->text, "");
    add_column(&b, &added, c[LQ_ROLE_PARTITION_KEY], ty->text, "");
    add_column(&b, &added, c[LQ_ROLE_PRIORITY], ty->integer, " 0");
    add_column(&b, &added, c[LQ_ROLE_RETRY_AFTER], ty->time_due, "");
    add_column(&b, &added, c[LQ_ROLE_LOCKED_UNTIL], ty->time, "");
    add_column(&b, &added, c[LQ_ROLE_PROCESSED_AT], ty->time, "");
    add_column(&b, &added, c[LQ_ROLE_HEADERS], ty->json, "");
    add_column(&b, &added, c[LQ_ROLE_DEDUP_KEY], ty->text, "");
    add_column(&b, &added, c[LQ_ROLE_EXPIRES_AT], ty->time, "");
    add_column(&b, &added, c[LQ_ROLE_CREATED_AT], ty->time, "");
    add_column(&b, &added, c[LQ_ROLE_DEAD_REASON], ty->text, "");
    for (size_t i = 0; i < t->key.count; i++)
        if (t->key.parts[i].is_column) add_column(&b, &added, t->key.parts[i].text, ty->text, "");
    if (ty->index_in_table) {
        lq__sql_add(&b, ",\n  INDEX ");
        add_index_name(&b, "claim_order");
        lq__sql_add(&b, " ");
        add_index_columns(&b);
        if (unique_keys && lq__has(t, LQ_ROLE_DEDUP_KEY)) {
            lq__sql_add(&b, ",\n  UNIQUE INDEX ");
            add_index_name(&b, "dedup_key");
            lq__sql_add(&b, " (");
            lq__sql_col(&b, LQ_ROLE_DEDUP_KEY);
            lq__sql_add(&b, ")");
        }
        if (unique_keys && lq__has(t, LQ_ROLE_PROCESSED_AT)) {
            lq__sql_add(&b, ",\n  INDEX ");
            add_index_name(&b, "processed");
            lq__sql_add(&b, " (");
            lq__sql_col(&b, LQ_ROLE_PROCESSED_AT);
            lq__sql_add(&b, ")");
        }
    }
    lq__sql_add(&b, "\n)");
    return lq__sql_finish(&b);
}

/* The dedup keys' unique index (NULLs, the rows without a key or past
 * their queue, are distinct on every database). */
static int build_dedup_index(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE UNIQUE INDEX IF NOT EXISTS ");
    add_index_name(&b, "dedup_key");
    lq__sql_add(&b, " ON ");
    lq__sql_table(&b);
    lq__sql_add(&b, " (");
    lq__sql_col(&b, LQ_ROLE_DEDUP_KEY);
    lq__sql_add(&b, ")");
    return lq__sql_finish(&b);
}

/* " WHERE <a> IS NULL[ AND <b> IS NULL]" of the roles given (0: none). */
static void where_null(lq__sql *b, int first, int second) {
    const char *sep = " WHERE ";
    for (int i = 0; i < 2; i++) {
        int role = i ? second : first;
        if (!role) continue;
        lq__sql_add(b, sep);
        lq__sql_col(b, role);
        lq__sql_add(b, " IS NULL");
        sep = " AND ";
    }
}

/* The claim-order index; with `free_rows`, where leases are swept
 * (lq_table.leases_swept), the claim order of the rows whose lease is NULL
 * alone, <table>_claim_free, which the claims walk past no row in work (the
 * claim-order index keeps every row, as the other readers of the queue's
 * order need). */
static int build_create_index(lq__stmt *out, const lq__dialect *d, const lq_table *t, bool free_rows) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE INDEX IF NOT EXISTS ");
    add_index_name(&b, free_rows ? "claim_free" : "claim_order");
    lq__sql_add(&b, " ON ");
    lq__sql_table(&b);
    lq__sql_add(&b, " ");
    add_index_columns(&b);
    int processed = lq__has(t, LQ_ROLE_PROCESSED_AT) && d->ddl->partial_index ? LQ_ROLE_PROCESSED_AT : 0;
    where_null(&b, free_rows ? LQ_ROLE_LOCKED_UNTIL : processed, free_rows ? processed : 0);
    return lq__sql_finish(&b);
}

static int build_limit_index(lq__stmt *out, const lq__dialect *d, const lq_table *t, bool by_key);

/* The index retention finds finished rows by (lq_queue_prune), on
 * processed_at; partial where the database has them, so that it holds the
 * finished rows only. Where indexes are part of CREATE TABLE (MySQL), this
 * statement is for a table made before, and fails on a name taken. */
static int build_processed_index(lq__stmt *out, const lq__dialect *d, const lq_table *t,
                                 bool concurrently) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, d->ddl->index_in_table ? "CREATE INDEX "
                    : concurrently         ? "CREATE INDEX CONCURRENTLY IF NOT EXISTS "
                                           : "CREATE INDEX IF NOT EXISTS ");
    add_index_name(&b, "processed");
    lq__sql_add(&b, " ON ");
    lq__sql_table(&b);
    lq__sql_add(&b, " (");
    lq__sql_col(&b, LQ_ROLE_PROCESSED_AT);
    lq__sql_add(&b, ")");
    if (d->ddl->partial_index) {
        lq__sql_add(&b, " WHERE ");
        lq__sql_col(&b, LQ_ROLE_PROCESSED_AT);
        lq__sql_add(&b, " IS NOT NULL");
    }
    return lq__sql_finish(&b);
}

/* The statements creating one table: CREATE TABLE, and CREATE INDEX where
 * the indexes are not part of it. A dead-letter table takes no unique keys
 * and no index of finished rows: its rows have left the queue. */
typedef struct table_ddl {
    lq__stmt stmts[6];
    int count;
} table_ddl;

static void ddl_free(table_ddl *ddl) {
    for (int i = 0; i < ddl->count; i++) free(ddl->stmts[i].sql);
    ddl->count = 0;
}

static int ddl_build(table_ddl *ddl, const lq__dialect *d, const lq_table *t, bool unique_keys) {
    ddl->count = 0;
    int rc = build_create_table(&ddl->stmts[0], d, t, unique_keys);
    if (rc == LQ_OK) ddl->count = 1;
    if (rc == LQ_OK && !d->ddl->index_in_table) {
        rc = build_create_index(&ddl->stmts[1], d, t, false);
        if (rc == LQ_OK) ddl->count = 2;
    }
    if (rc == LQ_OK && !d->ddl->index_in_table && unique_keys && lq__has(t, LQ_ROLE_DEDUP_KEY)) {
        rc = build_dedup_index(&ddl->stmts[ddl->count], d, t);
        if (rc == LQ_OK) ddl->count++;
    }
    if (rc == LQ_OK && !d->ddl->index_in_table && unique_keys && lq__has(t, LQ_ROLE_PROCESSED_AT)) {
        rc = build_processed_index(&ddl->stmts[ddl->count], d, t, false);
        if (rc == LQ_OK) ddl->count++;
    }
    /* Where leases are swept: the free rows' order, and the leases, which
     * the sweep reads from their earliest. */
    if (rc == LQ_OK && unique_keys && lq__leases_sweepable(d, t)) {
        rc = build_create_index(&ddl->stmts[ddl->count], d, t, true);
        if (rc == LQ_OK) ddl->count++;
        if (rc == LQ_OK) rc = build_limit_index(&ddl->stmts[ddl->count], d, t, false);
        if (rc == LQ_OK) ddl->count++;
    }
    if (rc != LQ_OK) ddl_free(ddl);
    return rc;
}

/* The dead-letter table of a description, when it names one (rather than a
 * group): the same columns, under the destination's name. NULL otherwise. */
static int dead_letter_table(lq_table **out, const lq_table *t) {
    *out = NULL;
    if (!t->dead_letter || lq__has(t, LQ_ROLE_GROUP)) return LQ_OK;
    char *schema, *name;
    int rc = lq__dead_letter_split(&schema, &name, t);
    if (rc != LQ_OK) return rc;
    lq_table *dead = NULL;
    rc = lq__table_copy(&dead, t);
    if (rc == LQ_OK) {
        free(dead->name);
        free(dead->schema);
        free(dead->dead_letter);
        dead->name = name;
        dead->schema = schema ? schema : (t->schema ? lq__strdup(t->schema) : NULL);
        dead->dead_letter = NULL;
        name = schema = NULL;
        if (t->schema && !dead->schema) rc = lq__error(LQ_NOMEM, "out of memory");
    }
    free(schema);
    free(name);
    if (rc != LQ_OK) {
        lq_table_free(dead);
        return rc;
    }
    *out = dead;
    return LQ_OK;
}

int lq_table_create_sql(char **sql_out, const lq_table *t, const char *dialect) {
    lq__error_clear();
    LQ__CHECK_ARG(sql_out && t && dialect, "an argument is NULL");
    const lq__dialect *d = lq__dialect_named(dialect);
    if (!d)
        return lq__error(LQ_DIALECT, "unknown dialect \"%s\": sqlite, postgresql or mysql",
                         dialect);
    lq_table *dead;
    int rc = dead_letter_table(&dead, t);
    const lq_table *tables[] = {t, dead};
    lq__strbuf sb = {0};
    for (size_t i = 0; rc == LQ_OK && i < 2 && tables[i]; i++) {
        table_ddl ddl;
        rc = ddl_build(&ddl, d, tables[i], i == 0);
        for (int k = 0; rc == LQ_OK && k < ddl.count; k++) {
            if (sb.len) lq__sb_add(&sb, ";\n");
            lq__sb_add(&sb, ddl.stmts[k].sql);
        }
        ddl_free(&ddl);
    }
    lq_table_free(dead);
    if (rc != LQ_OK) {
        lq__sb_free(&sb);
        return rc;
    }
    *sql_out = lq__sb_take(&sb);
    return *sql_out ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}

int lq_table_check_form(const lq_table *t, const char *dialect) {
    lq__error_clear();
    LQ__CHECK_ARG(t && dialect, "an argument is NULL");
    const lq__dialect *d = lq__dialect_named(dialect);
    if (!d)
        return lq__error(LQ_DIALECT, "unknown dialect \"%s\": sqlite, postgresql or mysql",
                         dialect);
    return lq__table_check_form(t, d);
}

/* ---- reading what exists ----------------------------------------------- */

typedef struct found_column {
    char *name, *type;
    unsigned kinds;
} found_column;

typedef struct found_table {
    const lq__dialect *dialect;
    found_column *columns;
    int count, cap;
} found_table;

static void found_free(found_table *f) {
    for (int i = 0; i < f->count; i++) {
        free(f->columns[i].name);
        free(f->columns[i].type);
    }
    free(f->columns);
    f->columns = NULL;
    f->count = f->cap = 0;
}

static char *value_text(const lq__value *v) {
    if (v->type != LQ__V_TEXT && v->type != LQ__V_BLOB) return lq__strdup("");
    char *s = malloc(v->n + 1);
    if (s) {
        if (v->n) memcpy(s, v->p, v->n);
        s[v->n] = '\0';
    }
    return s;
}

static int on_column(void *ctx, const lq__value *v, int count) {
    found_table *f = ctx;
    if (count < 2) return lq__error(LQ_ERROR, "the catalog returned %d columns, not 2", count);
    int rc = lq__room_for_one((void **)&f->columns, &f->cap, f->count, sizeof *f->columns, 16);
    if (rc != LQ_OK) return rc;
    found_column *c = &f->columns[f->count];
    c->name = value_text(&v[0]);
    c->type = value_text(&v[1]);
    if (!c->name || !c->type) {
        free(c->name);
        free(c->type);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    c->kinds = f->dialect->type_kinds(c->type);
    f->count++;
    return LQ_OK;
}

/* Runs a catalog query once (built: rc, its lq__sql_finish), with the
 * table's schema and name bound, and frees its text. */
static int run_built(lq__conn *conn, const lq__dialect *d, const lq_table *t, lq__stmt *stmt, int rc,
                     const char *name, lq__row_fn on_row, void *ctx) {
    if (rc != LQ_OK) return rc;
    stmt->id = 0; /* runs once: the connection keeps no prepared copy */
    lq__value args[LQ__P_COUNT] = {0};
    if (t->schema) args[LQ__P_SCHEMA] = (lq__value){.type = LQ__V_TEXT, .p = t->schema, .n = strlen(t->schema)};
    args[LQ__P_NAME] = (lq__value){.type = LQ__V_TEXT, .p = name, .n = strlen(name)};
    rc = d->exec(NULL, conn, stmt, args, on_row, ctx);
    free(stmt->sql);
    stmt->sql = NULL;
    return rc;
}

static int run_query(lq__conn *conn, const lq__dialect *d, const lq_table *t,
                     void (*build)(lq__sql *b), const char *name, lq__row_fn on_row, void *ctx) {
    lq__stmt stmt;
    lq__sql b;
    lq__sql_start(&b, &stmt, d, t);
    build(&b);
    int rc = lq__sql_finish(&b);
    return run_built(conn, d, t, &stmt, rc, name, on_row, ctx);
}

static int on_any_row(void *ctx, const lq__value *v, int count) {
    (void)v;
    (void)count;
    *(bool *)ctx = true;
    return LQ_OK;
}

static int read_table(found_table *f, lq__conn *conn, const lq__dialect *d, const lq_table *t) {
    *f = (found_table){.dialect = d};
    if (t->schema) {
        bool exists = false;
        int rc = run_query(conn, d, t, d->schema_query, t->name, on_any_row, &exists);
        if (rc != LQ_OK) return rc;
        if (!exists)
            return lq__error(LQ_SCHEMA, "schema \"%s\" does not exist (libqueue creates "
                                        "tables, not schemas)", t->schema);
    }
    int rc = run_query(conn, d, t, d->columns_query, t->name, on_column, f);
    if (rc != LQ_OK) found_free(f);
    return rc;
}

/* ---- checking it against the description ------------------------------- */

static const struct role_need {
    int role;
    const char *label;
    unsigned kinds;
    const char *what;
} role_needs[] = {
    {LQ_ROLE_PAYLOAD, "payload", LQ__KIND_BYTES | LQ__KIND_TEXT, "bytes or text"},
    {LQ_ROLE_ATTEMPT, "attempt", LQ__KIND_INTEGER, "an integer"},
    {LQ_ROLE_LOCKED_UNTIL, "locked_until", LQ__KIND_TIME, "a time"},
    {LQ_ROLE_GROUP, "group", LQ__KIND_TEXT, "text"},
    {LQ_ROLE_PARTITION_KEY, "partition_key", LQ__KIND_TEXT, "text"},
    {LQ_ROLE_PRIORITY, "priority", LQ__KIND_INTEGER, "an integer"},
    {LQ_ROLE_RETRY_AFTER, "retry_after", LQ__KIND_TIME, "a time"},
    {LQ_ROLE_PROCESSED_AT, "processed_at", LQ__KIND_TIME, "a time"},
    {LQ_ROLE_HEADERS, "headers", LQ__KIND_JSON | LQ__KIND_TEXT, "JSON or text"},
    {LQ_ROLE_DEDUP_KEY, "dedup_key", LQ__KIND_TEXT, "text"},
    {LQ_ROLE_EXPIRES_AT, "expires_at", LQ__KIND_TIME, "a time"},
    {LQ_ROLE_CREATED_AT, "created_at", LQ__KIND_TIME, "a time"},
    {LQ_ROLE_DEAD_REASON, "dead_reason", LQ__KIND_TEXT, "text"},
};

static const found_column *find_column(const found_table *f, const char *name) {
    for (int i = 0; i < f->count; i++) {
        const char *have = f->columns[i].name;
        if (f->dialect->columns_fold_case ? strcasecmp(have, name) == 0 : strcmp(have, name) == 0)
            return &f->columns[i];
    }
    return NULL;
}

/* Adds what is wrong with one column, if anything, to the list in `sb`. */
static void check_column(lq__strbuf *sb, const found_table *f, const char *column,
                         const char *label, unsigned kinds, const char *what) {
    const found_column *c = find_column(f, column);
    if (c && (!kinds || (c->kinds & kinds))) return;
    if (sb->len) lq__sb_add(sb, "; ");
    if (!c) lq__sb_addf(sb, "column \"%s\" (%s) is missing", column, label);
    else
        lq__sb_addf(sb, "column \"%s\" (%s) is %s, which does not hold %s", column, label,
                    *c->type ? c->type : "untyped", what);
}

static int verify(const found_table *f, const lq_table *t) {
    char label[512];
    lq__table_label(t, label, sizeof label);
    lq__strbuf sb = {0};
    check_column(&sb, f, t->id, "id", LQ__KIND_INTEGER, "an integer");
    for (size_t i = 0; i < sizeof role_needs / sizeof role_needs[0]; i++) {
        const struct role_need *n = &role_needs[i];
        if (t->columns[n->role]) check_column(&sb, f, t->columns[n->role], n->label, n->kinds, n->what);
    }
    for (size_t i = 0; i < t->key.count; i++)
        if (t->key.parts[i].is_column) check_column(&sb, f, t->key.parts[i].text, "advisory lock key", 0, "");
    if (sb.failed) return lq__error(LQ_NOMEM, "out of memory");
    if (!sb.len) return LQ_OK;
    int rc = lq__error(LQ_SCHEMA, "table %s does not fit its description: %s", label, sb.data);
    lq__sb_free(&sb);
    return rc;
}

/* Columns of the wrong kind are no error of any statement's: an id of
 * text takes no generated id, and its rows would wait unclaimed. A table
 * the catalog does not show is left to the statements, which name it. */
int lq__table_check_columns(bool *found, lq_broker *b, const lq_table *t, bool if_free) {
    lq__conn *conn = NULL;
    found_table f = {0};
    *found = false;
    int rc = if_free ? lq__pool_acquire_within(&conn, &b->pool, 0) : lq__pool_acquire(&conn, &b->pool);
    if (rc != LQ_OK && if_free) {
        lq__error_clear();
        return LQ_OK;
    }
    if (rc == LQ_OK) rc = read_table(&f, conn, b->dialect, t);
    if (conn) lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    *found = rc == LQ_OK && f.count;
    if (*found) rc = verify(&f, t);
    found_free(&f);
    return rc;
}

/* ---- creating ----------------------------------------------------------- */

/* A view of the name is refused by name: a queue's claims, acks and
 * retries write its rows, and the server's own error (a relation that
 * exists, an index on a view) would not say why. Its schema is checked
 * first (SQLite would name a missing one's catalog instead). */
static int refuse_view(lq__conn *conn, const lq__dialect *d, const lq_table *t) {
    found_table f;
    int rc = read_table(&f, conn, d, t);
    found_free(&f);
    bool view = false;
    if (rc == LQ_OK) rc = run_query(conn, d, t, d->view_query, t->name, on_any_row, &view);
    if (rc != LQ_OK || !view) return rc;
    char label[512];
    return lq__error(LQ_SCHEMA, "%s is a view, not a table: a queue's rows are claimed, "
                                "updated and deleted in a table of its own; name a table "
                                "(create_table makes it where none exists)",
                     lq__table_label(t, label, sizeof label));
}

/* Creates the table if it is missing, then checks it. */
static int ensure(lq__conn *conn, const lq__dialect *d, const lq_table *t, int flags,
                  bool unique_keys) {
    found_table f;
    int rc = read_table(&f, conn, d, t);
    if (rc == LQ_OK && f.count == 0) {
        char label[512];
        if (flags & LQ_CREATE_VERIFY_ONLY) {
            found_free(&f);
            return lq__error(LQ_SCHEMA, "table %s does not exist (and verify_only creates none)",
                             lq__table_label(t, label, sizeof label));
        }
        table_ddl ddl;
        rc = ddl_build(&ddl, d, t, unique_keys);
        for (int i = 0; rc == LQ_OK && i < ddl.count; i++)
            rc = d->execute(NULL, conn, ddl.stmts[i].sql, NULL, 0);
        ddl_free(&ddl);
        found_free(&f);
        if (rc == LQ_OK) rc = read_table(&f, conn, d, t);
        if (rc == LQ_OK && f.count == 0)
            rc = lq__error(LQ_SCHEMA, "table %s: created, but the catalog does not show it",
                           lq__table_label(t, label, sizeof label));
    }
    if (rc == LQ_OK) rc = verify(&f, t);
    found_free(&f);
    return rc;
}

static int take_turn(lq__conn *conn, const lq__dialect *d, const lq_table *t) {
    if (!d->ddl_lock_query) return LQ_OK;
    char key[600];
    char label[512];
    snprintf(key, sizeof key, "libqueue create %s", lq__table_label(t, label, sizeof label));
    return run_query(conn, d, t, d->ddl_lock_query, key, NULL, NULL);
}

int lq_table_create(lq_broker *b, const lq_table *t, int flags) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "an argument is NULL");
    LQ__CHECK_ARG((flags & ~LQ_CREATE_VERIFY_ONLY) == 0, "unknown flags");
    char label[512];
    lq__table_label(t, label, sizeof label);
    if (lq__broker_check_open(b) != LQ_OK)
        return lq__error(LQ_CLOSED, "create table %s: the broker is closed", label);
    const lq__dialect *d = b->dialect;
    lq_table *dead;
    int rc = dead_letter_table(&dead, t);
    lq__conn *conn = NULL;
    if (rc == LQ_OK) rc = lq__pool_acquire(&conn, &b->pool);
    bool begun = false;
    if (rc == LQ_OK) rc = d->begin(conn, LQ_ISOLATION_DEFAULT);
    if (rc == LQ_OK) begun = true;
    if (rc == LQ_OK) rc = take_turn(conn, d, t);
    /* Both names before either is made: MySQL commits each CREATE. */
    if (rc == LQ_OK) rc = refuse_view(conn, d, t);
    if (rc == LQ_OK && dead) rc = refuse_view(conn, d, dead);
    if (rc == LQ_OK) rc = ensure(conn, d, t, flags, true);
    if (rc == LQ_OK && dead) rc = ensure(conn, d, dead, flags, false);
    if (rc == LQ_OK) rc = d->commit(conn);
    else if (begun) {
        lq__error_copy failure;
        lq__error_save(&failure);
        d->rollback(conn); /* a connection it leaves in a transaction is closed */
        lq__error_restore(&failure);
    }
    if (conn) lq__pool_release(&b->pool, conn, false);
    lq_table_free(dead);
    if (rc != LQ_OK) lq__error_prefix("create table %s", label);
    return rc;
}

/* ---- the starts of rate limits ------------------------------------------ */

/* The starts of rate limits: (queue, started_at), or with `keyed` (those
 * of partition_rate_limit) (queue, pkey, started_at), indexed in that order. */
static void starts_columns(lq__sql *b, bool keyed) {
    lq__sql_ident(b, "queue");
    if (keyed) {
        lq__sql_add(b, ", ");
        lq__sql_ident(b, "pkey");
    }
    lq__sql_add(b, ", ");
    lq__sql_ident(b, "started_at");
}

static const char *starts_table_of(bool keyed) { return keyed ? LQ__KEY_STARTS_TABLE : LQ__STARTS_TABLE; }

static int build_starts_table(lq__stmt *out, const lq__dialect *d, const lq_table *t, bool keyed) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE TABLE IF NOT EXISTS ");
    lq__sql_qualified(&b, t->schema, starts_table_of(keyed));
    lq__sql_add(&b, " (\n  ");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, " ");
    lq__sql_add(&b, d->ddl->key_text);
    lq__sql_add(&b, " NOT NULL,\n  ");
    if (keyed) {
        lq__sql_ident(&b, "pkey");
        lq__sql_add(&b, " ");
        lq__sql_add(&b, d->ddl->key_text);
        lq__sql_add(&b, " NOT NULL,\n  ");
    }
    lq__sql_ident(&b, "started_at");
    lq__sql_add(&b, " BIGINT NOT NULL");
    if (d->ddl->index_in_table) {
        lq__sql_add(&b, ",\n  INDEX ");
        lq__sql_ident(&b, keyed ? LQ__KEY_STARTS_TABLE "_queue" : LQ__STARTS_TABLE "_queue");
        lq__sql_add(&b, " (");
        starts_columns(&b, keyed);
        lq__sql_add(&b, ")");
    }
    lq__sql_add(&b, "\n)");
    return lq__sql_finish(&b);
}

static int build_starts_index(lq__stmt *out, const lq__dialect *d, const lq_table *t, bool keyed) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE INDEX IF NOT EXISTS ");
    lq__sql_ident(&b, keyed ? LQ__KEY_STARTS_TABLE "_queue" : LQ__STARTS_TABLE "_queue");
    lq__sql_add(&b, " ON ");
    lq__sql_qualified(&b, t->schema, starts_table_of(keyed));
    lq__sql_add(&b, " (");
    starts_columns(&b, keyed);
    lq__sql_add(&b, ")");
    return lq__sql_finish(&b);
}

/* Creates a table the library keeps beside the queue's (and its index, where
 * that is a statement of its own), under the DDL lock when the dialect has
 * one, so brokers creating it at once take turns as lq_table_create's do. */
static int create_aside(lq_broker *b, const lq_table *t, const char *name, const lq__stmt *table,
                        const lq__stmt *index) {
    const lq__dialect *d = b->dialect;
    lq__conn *conn = NULL;
    bool begun = false;
    char lock[128];
    snprintf(lock, sizeof lock, "libqueue create %s", name);
    int rc = lq__pool_acquire(&conn, &b->pool);
    if (rc == LQ_OK && (rc = d->begin(conn, LQ_ISOLATION_DEFAULT)) == LQ_OK) begun = true;
    if (rc == LQ_OK && d->ddl_lock_query) rc = run_query(conn, d, t, d->ddl_lock_query, lock, NULL, NULL);
    if (rc == LQ_OK) rc = d->execute(NULL, conn, table->sql, NULL, 0);
    if (rc == LQ_OK && index && index->sql) rc = d->execute(NULL, conn, index->sql, NULL, 0);
    if (rc == LQ_OK) {
        rc = d->commit(conn);
    } else if (begun) {
        lq__error_copy failure;
        lq__error_save(&failure);
        d->rollback(conn);
        lq__error_restore(&failure);
    }
    if (conn) lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    return rc;
}

int lq__starts_table_create(lq_broker *b, const lq_table *t, bool keyed) {
    const lq__dialect *d = b->dialect;
    lq__stmt table = {0}, index = {0};
    int rc = build_starts_table(&table, d, t, keyed);
    if (rc == LQ_OK && !d->ddl->index_in_table) rc = build_starts_index(&index, d, t, keyed);
    if (rc == LQ_OK) rc = create_aside(b, t, starts_table_of(keyed), &table, &index);
    if (rc != LQ_OK)
        lq__error_prefix("rate limits keep their starts in table %s, which could not be made",
                         starts_table_of(keyed));
    free(table.sql);
    free(index.sql);
    return rc;
}

/* ---- the ticks of schedules ---------------------------------------------- */

static int build_ticks_table(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE TABLE IF NOT EXISTS ");
    lq__sql_qualified(&b, t->schema, LQ__TICKS_TABLE);
    lq__sql_add(&b, " (\n  ");
    lq__sql_ident(&b, "schedule");
    lq__sql_add(&b, " ");
    lq__sql_add(&b, d->ddl->key_text);
    lq__sql_add(&b, " NOT NULL,\n  ");
    lq__sql_ident(&b, "tick");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  ");
    lq__sql_ident(&b, "enqueued_at");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  PRIMARY KEY (");
    lq__sql_ident(&b, "schedule");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "tick");
    lq__sql_add(&b, ")\n)");
    return lq__sql_finish(&b);
}

int lq__ticks_table_create(lq_broker *b, const lq_table *t) {
    lq__stmt table = {0};
    int rc = build_ticks_table(&table, b->dialect, t);
    if (rc == LQ_OK) rc = create_aside(b, t, LQ__TICKS_TABLE, &table, NULL);
    if (rc != LQ_OK)
        lq__error_prefix("schedules keep their ticks in table %s, which could not be made",
                         LQ__TICKS_TABLE);
    free(table.sql);
    return rc;
}

int lq__holds_table_create(lq_broker *b, const lq_table *t, const lq__stmt *create) {
    int rc = create_aside(b, t, LQ__HOLDS_TABLE, create, NULL);
    if (rc != LQ_OK)
        lq__error_prefix("concurrency keeps its holds in table %s, which could not be made",
                         LQ__HOLDS_TABLE);
    return rc;
}

int lq__control_table_create(lq_broker *b, const lq_table *t, const lq__stmt *create) {
    int rc = create_aside(b, t, LQ__CONTROL_TABLE, create, NULL);
    if (rc != LQ_OK)
        lq__error_prefix("pauses are kept in table %s, which could not be made", LQ__CONTROL_TABLE);
    return rc;
}

/* ---- the indexes of the queue-wide limits -------------------------------- */

static int build_limit_index(lq__stmt *out, const lq__dialect *d, const lq_table *t, bool by_key) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, d->ddl->index_in_table ? "CREATE INDEX " : "CREATE INDEX IF NOT EXISTS ");
    add_index_name(&b, by_key ? "key_leased" : "leased");
    lq__sql_add(&b, " ON ");
    lq__sql_table(&b);
    lq__sql_add(&b, " (");
    if (by_key) {
        lq__sql_col(&b, LQ_ROLE_PARTITION_KEY);
        lq__sql_add(&b, ", ");
    }
    lq__sql_col(&b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(&b, ")");
    if (d->ddl->partial_index) {
        lq__sql_add(&b, " WHERE ");
        lq__sql_col(&b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(&b, " IS NOT NULL");
    }
    return lq__sql_finish(&b);
}

/* Whether an index's creation failed only because it exists: made before
 * (MySQL, which has no IF NOT EXISTS for an index) or meanwhile by another
 * broker (PostgreSQL's IF NOT EXISTS then trips on its catalog's unique
 * index of names). */
static bool index_made_already(int rc, const lq__dialect *d) {
    if (rc == LQ_OK) return false;
    if (rc == LQ_DUPLICATE) return true;
    return d->ddl->duplicate_index && lq_errcode_native() == d->ddl->duplicate_index;
}

/* Whether the table has the index <table>_<suffix>, where the dialect can
 * tell (index_query); elsewhere false. */
static int index_found(bool *found, lq__conn *conn, const lq__dialect *d, const lq_table *t,
                       const char *suffix) {
    *found = false;
    if (!d->index_query) return LQ_OK;
    lq__strbuf index = {0};
    lq__sb_addf(&index, "%s_%s", t->name, suffix);
    char *name = lq__sb_take(&index);
    if (!name) return lq__error(LQ_NOMEM, "out of memory");
    lq__stmt stmt;
    lq__sql sql;
    lq__sql_start(&sql, &stmt, d, t);
    d->index_query(&sql, name);
    int rc = run_built(conn, d, t, &stmt, lq__sql_finish(&sql), t->name, on_any_row, found);
    free(name);
    return rc;
}

void lq__limit_indexes_create(lq_broker *b, const lq_table *t, bool by_key) {
    const lq__dialect *d = b->dialect;
    lq__conn *conn = NULL;
    int rc = lq__pool_acquire(&conn, &b->pool);
    for (int i = 0; rc == LQ_OK && i < (by_key ? 2 : 1); i++) {
        /* Looked up first: on PostgreSQL a CREATE INDEX, even of one that
         * exists, waits for the table's open transactions and holds every
         * writer behind it meanwhile. */
        bool found = false;
        rc = index_found(&found, conn, d, t, i == 1 ? "key_leased" : "leased");
        if (rc != LQ_OK || found) continue;
        lq__stmt index = {0};
        rc = build_limit_index(&index, d, t, i == 1);
        if (rc == LQ_OK) rc = d->execute(NULL, conn, index.sql, NULL, 0);
        if (index_made_already(rc, d)) rc = LQ_OK;
        free(index.sql);
    }
    if (conn) lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    if (rc != LQ_OK) {
        char label[512];
        lq__error_prefix("table %s: the limits count its leased rows without an index on %s",
                         lq__table_label(t, label, sizeof label), t->columns[LQ_ROLE_LOCKED_UNTIL]);
        lq__log_error(LQ_LOG_WARNING, "a subscription's limits");
    }
}

/* ---- swept leases -------------------------------------------------------- */

bool lq__leases_sweepable(const lq__dialect *d, const lq_table *t) {
    return lq_table_form(t) == LQ_FORM_LEASE && d->index_query && d->ddl->partial_index &&
           !d->ddl->index_in_table;
}

int lq__leases_swept_find(bool *swept, lq_broker *b, const lq_table *t) {
    *swept = false;
    if (!lq__leases_sweepable(b->dialect, t)) return LQ_OK;
    lq__conn *conn = NULL;
    int rc = lq__pool_acquire(&conn, &b->pool);
    if (rc == LQ_OK) {
        rc = index_found(swept, conn, b->dialect, t, "leased");
        lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    }
    if (rc != LQ_OK) lq__error_prefix("looking for the index of its leases");
    return rc;
}

/* ---- the index of finished rows ------------------------------------------ */

void lq__processed_index_create(lq_broker *b, lq__conn *conn, const lq_table *t) {
    const lq__dialect *d = b->dialect;
    lq__conn *own = NULL;
    lq__stmt index = {0};
    /* On PostgreSQL a plain CREATE INDEX, even of one that exists, waits
     * for the table's writers and holds the next ones; CONCURRENTLY does
     * neither (and needs no transaction, which autocommit is). */
    int rc = build_processed_index(&index, d, t, d->ddl->concurrent_index);
    if (rc == LQ_OK && !conn && (rc = lq__pool_acquire(&own, &b->pool)) == LQ_OK) conn = own;
    if (rc == LQ_OK) rc = d->execute(NULL, conn, index.sql, NULL, 0);
    if (index_made_already(rc, d)) rc = LQ_OK;
    free(index.sql);
    if (own) lq__pool_release(&b->pool, own, rc == LQ_CONNECT);
    if (rc != LQ_OK) {
        char label[512];
        lq__error_prefix("table %s: retention reads its finished rows without an index on %s",
                         lq__table_label(t, label, sizeof label), t->columns[LQ_ROLE_PROCESSED_AT]);
        lq__log_error(LQ_LOG_WARNING, "retention");
    }
}

int lq__cancel_requests_table_create(lq_broker *b, const lq_table *t, const lq__stmt *create) {
    int rc = create_aside(b, t, LQ__CANCEL_REQUESTS_TABLE, create, NULL);
    if (rc != LQ_OK)
        lq__error_prefix("cancels of rows in work are asked for in table %s, which could not be made",
                         LQ__CANCEL_REQUESTS_TABLE);
    return rc;
}
