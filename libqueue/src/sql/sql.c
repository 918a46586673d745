/* The statement builder, and the statements every dialect shares: the
 * settlements, the lease extension and the insert. */
#include "sql/sql.h"

#include "sql/dialect.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int next_stmt_id = 1;

void lq__sql_start(lq__sql *b, lq__stmt *stmt, const lq__dialect *d, const lq_table *t) {
    memset(&b->sb, 0, sizeof b->sb);
    memset(stmt, 0, sizeof *stmt);
    b->stmt = stmt;
    b->dialect = d;
    b->table = t;
    b->too_long[0] = '\0';
}

int lq__sql_finish(lq__sql *b) {
    if (b->stmt->nparams > LQ__MAX_PARAMS) {
        lq__sb_free(&b->sb);
        return lq__error(LQ_MISUSE, "a statement has more than %d parameters", LQ__MAX_PARAMS);
    }
    if (b->too_long[0]) {
        lq__sb_free(&b->sb);
        return lq__error(LQ_DIALECT, "%s: the name \"%s\" is over %zu bytes, which the server would "
                                     "cut short: choose a shorter table or column name",
                         b->dialect->name, b->too_long, b->dialect->max_name);
    }
    b->stmt->sql = lq__sb_take(&b->sb);
    if (!b->stmt->sql) return lq__error(LQ_NOMEM, "out of memory");
    b->stmt->id = atomic_fetch_add(&next_stmt_id, 1);
    return LQ_OK;
}

void lq__sql_add(lq__sql *b, const char *text) { lq__sb_add(&b->sb, text); }

void lq__sql_ident(lq__sql *b, const char *name) {
    size_t max = b->dialect->max_name;
    if (max && strlen(name) > max && !b->too_long[0]) {
        size_t keep = sizeof b->too_long - 4;
        snprintf(b->too_long, sizeof b->too_long, "%.*s%s", (int)keep, name, strlen(name) > keep ? "..." : "");
    }
    lq__sb_add_quoted(&b->sb, name, b->dialect->quote);
}

void lq__sql_qualified(lq__sql *b, const char *schema, const char *name) {
    if (schema) {
        lq__sql_ident(b, schema);
        lq__sql_add(b, ".");
    }
    lq__sql_ident(b, name);
}

void lq__sql_table(lq__sql *b) { lq__sql_qualified(b, b->table->schema, b->table->name); }

void lq__sql_col(lq__sql *b, int role) { lq__sql_ident(b, b->table->columns[role]); }

void lq__sql_id(lq__sql *b) { lq__sql_ident(b, b->table->id); }

void lq__sql_param(lq__sql *b, lq__param p) {
    lq__stmt *s = b->stmt;
    if (s->nparams < LQ__MAX_PARAMS) s->params[s->nparams] = (unsigned char)p;
    s->nparams++;
    b->dialect->placeholder(&b->sb, s->nparams);
}

void lq__sql_and_unprocessed(lq__sql *b) {
    if (!lq__has(b->table, LQ_ROLE_PROCESSED_AT)) return;
    lq__sql_add(b, " AND ");
    lq__sql_col(b, LQ_ROLE_PROCESSED_AT);
    lq__sql_add(b, " IS NULL");
}

void lq__sql_literal(lq__sql *b, const char *text) { lq__sb_add_quoted(&b->sb, text, '\''); }

/* "<and><column><op><param>", and what joins the next condition. */
static void compare(lq__sql *b, const char **and, int role, const char *op, lq__param p) {
    lq__sql_add(b, *and);
    lq__sql_col(b, role);
    lq__sql_add(b, op);
    lq__sql_param(b, p);
    *and = " AND ";
}

/* " AND <the rows of the row's partition key leased now> < limit": a key at
 * its partition_concurrency is passed over (rows without a key are not
 * limited). */
static void partition_has_room(lq__sql *b) {
    const lq_table *t = b->table;
    char limit[LQ__INT_TEXT_SIZE];
    lq__int_text(limit, t->partition_limit);
    lq__sql_add(b, " AND (SELECT COUNT(*) FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " AS ");
    lq__sql_ident(b, "lq_k");
    lq__sql_add(b, " WHERE ");
    lq__sql_qualified(b, "lq_k", t->columns[LQ_ROLE_PARTITION_KEY]);
    lq__sql_add(b, " = ");
    lq__sql_table(b);
    lq__sql_add(b, ".");
    lq__sql_col(b, LQ_ROLE_PARTITION_KEY);
    lq__sql_add(b, " AND ");
    lq__sql_qualified(b, "lq_k", t->columns[LQ_ROLE_LOCKED_UNTIL]);
    lq__sql_add(b, " > ");
    lq__sql_param(b, LQ__P_LEASE_NOW);
    lq__sql_add(b, ") < ");
    lq__sql_add(b, limit);
}

/* " AND <the starts of the row's partition key within its period> <
 * limit": a key at its partition_rate_limit is passed over (rows without a
 * key are not limited). The limit and period are the subscription's own,
 * written in; the queue's name is bound. */
static void key_rate_has_room(lq__sql *b) {
    const lq_table *t = b->table;
    char limit[LQ__INT_TEXT_SIZE], period[LQ__INT_TEXT_SIZE];
    lq__int_text(limit, t->key_rate_limit);
    lq__int_text(period, t->key_rate_period_ms);
    lq__sql_add(b, " AND (SELECT COUNT(*) FROM ");
    lq__sql_qualified(b, t->schema, LQ__KEY_STARTS_TABLE);
    lq__sql_add(b, " AS ");
    lq__sql_ident(b, "lq_s");
    lq__sql_add(b, " WHERE ");
    lq__sql_qualified(b, "lq_s", "queue");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_QUEUE);
    lq__sql_add(b, " AND ");
    lq__sql_qualified(b, "lq_s", "pkey");
    lq__sql_add(b, " = ");
    lq__sql_table(b);
    lq__sql_add(b, ".");
    lq__sql_col(b, LQ_ROLE_PARTITION_KEY);
    lq__sql_add(b, " AND ");
    lq__sql_qualified(b, "lq_s", "started_at");
    lq__sql_add(b, " > ");
    b->dialect->now_ms_sql(b);
    lq__sql_add(b, " - ");
    lq__sql_add(b, period);
    lq__sql_add(b, ") < ");
    lq__sql_add(b, limit);
}

void lq__sql_lease_free(lq__sql *b) {
    lq__sql_add(b, "(");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " IS NULL OR ");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " <= ");
    lq__sql_param(b, LQ__P_LEASE_NOW);
    lq__sql_add(b, ")");
}

void lq__sql_claim_where(lq__sql *b, bool lease_free) {
    const lq_table *t = b->table;
    const char *and = "";
    if (lq__has(t, LQ_ROLE_GROUP)) compare(b, &and, LQ_ROLE_GROUP, " = ", LQ__P_GROUP);
    if (lq__has(t, LQ_ROLE_RETRY_AFTER)) compare(b, &and, LQ_ROLE_RETRY_AFTER, " <= ", LQ__P_NOW);
    if (lq__has(t, LQ_ROLE_PROCESSED_AT)) {
        lq__sql_add(b, and);
        lq__sql_col(b, LQ_ROLE_PROCESSED_AT);
        lq__sql_add(b, " IS NULL");
        and = " AND ";
    }
    if (lease_free) {
        lq__sql_add(b, and);
        if (t->leases_swept) { /* an expired lease waits for its sweep */
            lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
            lq__sql_add(b, " IS NULL");
        } else {
            lq__sql_lease_free(b);
        }
        and = " AND ";
    }
    if (lease_free && t->partition_limit) partition_has_room(b);
    if (!*and) lq__sql_add(b, "1 = 1");
    /* The row lock form's claim passes over keys at their window as the
     * lease form's does (the advisory form's candidates filter them). */
    bool row_lock = lq_table_form(t) == LQ_FORM_ROW_LOCK;
    if ((lease_free || row_lock) && t->key_rate_limit) key_rate_has_room(b);
}

void lq__sql_from_claimable(lq__sql *b, bool lease_free) {
    lq__sql_add(b, " FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " WHERE ");
    lq__sql_claim_where(b, lease_free);
}

void lq__sql_fifo_head(lq__sql *b, bool lease) {
    lq__sql_add(b, " AND ");
    lq__sql_id(b);
    lq__sql_add(b, " = (SELECT ");
    lq__sql_id(b);
    lq__sql_add(b, " FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " WHERE ");
    lq__sql_col(b, LQ_ROLE_GROUP);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_GROUP);
    lq__sql_and_unprocessed(b);
    lq__sql_add(b, " ORDER BY ");
    lq__sql_claim_order(b);
    lq__sql_add(b, " LIMIT 1)");
    if (!lease) return;
    /* A row that entered ahead of the head in work waits too. */
    lq__sql_add(b, " AND NOT EXISTS (SELECT 1 FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " AS ");
    lq__sql_ident(b, "lq_work");
    lq__sql_add(b, " WHERE ");
    lq__sql_ident(b, "lq_work");
    lq__sql_add(b, ".");
    lq__sql_col(b, LQ_ROLE_GROUP);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_GROUP);
    lq__sql_add(b, " AND ");
    lq__sql_ident(b, "lq_work");
    lq__sql_add(b, ".");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " > ");
    lq__sql_param(b, LQ__P_LEASE_NOW);
    lq__sql_add(b, ")");
}

void lq__sql_claim_order(lq__sql *b) {
    if (lq__has(b->table, LQ_ROLE_PRIORITY)) {
        lq__sql_col(b, LQ_ROLE_PRIORITY);
        lq__sql_add(b, ", ");
    }
    if (lq__has(b->table, LQ_ROLE_RETRY_AFTER)) {
        lq__sql_col(b, LQ_ROLE_RETRY_AFTER);
        lq__sql_add(b, ", ");
    }
    lq__sql_id(b);
}

void lq__sql_candidate_pkey(lq__sql *b, bool named) {
    const lq_table *t = b->table;
    if ((!t->partition_limit && !t->key_rate_limit) || lq_table_form(t) != LQ_FORM_ADVISORY) return;
    lq__sql_add(b, ", ");
    if (named) {
        lq__sql_col(b, LQ_ROLE_PARTITION_KEY);
        lq__sql_add(b, " AS ");
    }
    lq__sql_ident(b, "lq_pkey");
}

void lq__sql_candidate_filter(lq__sql *b) {
    const lq_table *t = b->table;
    if (t->key_rate_limit && lq_table_form(t) == LQ_FORM_ADVISORY) key_rate_has_room(b);
}

/* " ORDER BY <claim order> LIMIT <LQ__P_LIMIT>", or with `bound` LIMIT
 * LEAST(<LQ__P_LIMIT>, <what bound renders>). */
static void claim_limit(lq__sql *b, void (*bound)(lq__sql *b)) {
    lq__sql_add(b, " ORDER BY ");
    lq__sql_claim_order(b);
    lq__sql_add(b, bound ? " LIMIT LEAST(" : " LIMIT ");
    lq__sql_param(b, LQ__P_LIMIT);
    if (bound) {
        lq__sql_add(b, ", ");
        bound(b);
        lq__sql_add(b, ")");
    }
}

void lq__sql_claim_limit(lq__sql *b) { claim_limit(b, NULL); }

void lq__sql_locking_read(lq__sql *b, bool lease, void (*bound)(lq__sql *b)) {
    lq__sql_add(b, "SELECT ");
    lq__sql_row_columns(b, NULL);
    lq__sql_from_claimable(b, lease);
    if (b->table->fifo) lq__sql_fifo_head(b, lease);
    claim_limit(b, bound);
    lq__sql_add(b, " FOR UPDATE SKIP LOCKED");
}

/* "UPDATE t SET attempt = attempt + 1". */
static void count_attempt(lq__sql *b) {
    lq__sql_add(b, "UPDATE ");
    lq__sql_table(b);
    lq__sql_add(b, " SET ");
    lq__sql_col(b, LQ_ROLE_ATTEMPT);
    lq__sql_add(b, " = ");
    lq__sql_col(b, LQ_ROLE_ATTEMPT);
    lq__sql_add(b, " + 1");
}

/* " IN (SELECT lq_id[, lq_held] FROM <the rows of LQ__P_HELD_SET> AS lq_s)". */
static void in_held_set(lq__sql *b, bool with_held) {
    lq__sql_add(b, " IN (SELECT ");
    lq__sql_ident(b, "lq_id");
    if (with_held) {
        lq__sql_add(b, ", ");
        lq__sql_ident(b, "lq_held");
    }
    lq__sql_add(b, " FROM ");
    b->dialect->held_set_source(b, with_held);
    lq__sql_add(b, " AS ");
    lq__sql_ident(b, "lq_s");
    lq__sql_add(b, ")");
}

static void in_held_ids(lq__sql *b) { in_held_set(b, false); }

static void is_the_id(lq__sql *b) {
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_ID);
}

void lq__sql_take(lq__sql *b, bool counts, void (*ids)(lq__sql *b)) {
    if (counts) {
        count_attempt(b);
        lq__sql_add(b, " WHERE ");
    } else {
        lq__sql_add(b, "SELECT ");
        lq__sql_row_columns(b, NULL);
        lq__sql_add(b, " FROM ");
        lq__sql_table(b);
        lq__sql_add(b, " WHERE ");
    }
    lq__sql_id(b);
    (ids ? ids : is_the_id)(b);
    lq__sql_add(b, " AND ");
    lq__sql_claim_where(b, false);
}

/* The role of each LQ_COL_* column (the id column has none). */
static const int row_roles[LQ__COL_COUNT] = {
    [LQ__COL_ID] = 0,
    [LQ__COL_PAYLOAD] = LQ_ROLE_PAYLOAD,   [LQ__COL_ATTEMPT] = LQ_ROLE_ATTEMPT,
    [LQ__COL_GROUP] = LQ_ROLE_GROUP,       [LQ__COL_PKEY] = LQ_ROLE_PARTITION_KEY,
    [LQ__COL_HEADERS] = LQ_ROLE_HEADERS,   [LQ__COL_PRIORITY] = LQ_ROLE_PRIORITY,
    [LQ__COL_DUE] = LQ_ROLE_RETRY_AFTER,
    [LQ__COL_PAYLOAD_SIZE] = LQ_ROLE_PAYLOAD, [LQ__COL_HEADERS_SIZE] = LQ_ROLE_HEADERS,
    [LQ__COL_EXPIRED] = LQ_ROLE_EXPIRES_AT, [LQ__COL_CREATED] = LQ_ROLE_CREATED_AT,
};

/* The limit on a column's size the table's copy sets, or 0. */
static int64_t size_limit(const lq_table *t, int col) {
    if (col == LQ__COL_PAYLOAD || col == LQ__COL_PAYLOAD_SIZE) return t->max_payload;
    if (col == LQ__COL_HEADERS || col == LQ__COL_HEADERS_SIZE) return t->max_headers;
    return 0;
}

static bool is_size(int col) { return col == LQ__COL_PAYLOAD_SIZE || col == LQ__COL_HEADERS_SIZE; }

void lq__row_layout(const lq_table *t, int at[LQ__COL_COUNT]) {
    int next = 0;
    for (int i = 0; i < LQ__COL_COUNT; i++) {
        bool has = i == LQ__COL_ID || lq__has(t, row_roles[i]);
        at[i] = has && (!is_size(i) || size_limit(t, i)) ? next++ : -1;
    }
}

/* A column within its limit: CASE WHEN <its size> <= <the limit> THEN <it>
 * END, so a row past it is claimed without its value ever being read. */
static void limited_col(lq__sql *b, int col) {
    lq__sql_add(b, "CASE WHEN ");
    b->dialect->byte_length(b, row_roles[col]);
    lq__sql_add(b, " <= ");
    lq__sql_param(b, col == LQ__COL_PAYLOAD ? LQ__P_MAX_PAYLOAD : LQ__P_MAX_HEADERS);
    lq__sql_add(b, " THEN ");
    lq__sql_col(b, row_roles[col]);
    lq__sql_add(b, " END");
}

/* CASE WHEN expires_at <= now THEN 1 ELSE 0 END: the claim reads whether
 * the row may start, on the host's clock as its due time. */
static void expired_col(lq__sql *b) {
    lq__sql_add(b, "CASE WHEN ");
    lq__sql_col(b, LQ_ROLE_EXPIRES_AT);
    lq__sql_add(b, " <= ");
    lq__sql_param(b, LQ__P_NOW);
    lq__sql_add(b, " THEN 1 ELSE 0 END");
}

void lq__sql_row_columns(lq__sql *b, const char *attempt_expr) {
    int at[LQ__COL_COUNT];
    lq__row_layout(b->table, at);
    for (int i = 0; i < LQ__COL_COUNT; i++) {
        if (at[i] < 0) continue; /* a column the table lacks is left out, not a NULL */
        const char *cast = b->dialect->row_casts[i];
        if (i) lq__sql_add(b, ", ");
        if (cast) lq__sql_add(b, "(");
        if (i == LQ__COL_ID) lq__sql_id(b);
        else if (is_size(i)) b->dialect->byte_length(b, row_roles[i]);
        else if (size_limit(b->table, i)) limited_col(b, i);
        else if (i == LQ__COL_EXPIRED) expired_col(b);
        else lq__sql_col(b, row_roles[i]);
        if (i == LQ__COL_ATTEMPT && attempt_expr) lq__sql_add(b, attempt_expr);
        if (cast) {
            lq__sql_add(b, ")");
            lq__sql_add(b, cast);
        }
        /* Named by their LQ_COL_*, so a statement can select them again. */
        lq__sb_addf(&b->sb, " AS \"lq_c%d\"", i);
    }
}

/* "WHERE id = ?" and, in the lease form, the token. */
/* " AND <group> = <the run's group>": in the advisory form, where a run
 * holds its key and not its row, a cancel may move the row to the
 * dead-letter group while it runs; its settlement must then find nothing.
 * (A subscription of a table with groups always names its group.) */
static void and_in_its_group(lq__sql *b, const char *qualifier) {
    const lq_table *t = b->table;
    if (lq_table_form(t) != LQ_FORM_ADVISORY || !t->dead_letter || !lq__has(t, LQ_ROLE_GROUP)) return;
    lq__sql_add(b, " AND ");
    if (qualifier) lq__sql_qualified(b, qualifier, t->columns[LQ_ROLE_GROUP]);
    else lq__sql_col(b, LQ_ROLE_GROUP);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_GROUP);
}

static void where_held(lq__sql *b) {
    lq__sql_add(b, " WHERE ");
    lq__sql_id(b);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_ID);
    if (lq_table_form(b->table) == LQ_FORM_LEASE) {
        lq__sql_add(b, " AND ");
        lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_HELD);
    }
    and_in_its_group(b, NULL);
}

/* The SET list's tail every update of a settled row shares: the lease is
 * cleared, and in the row lock form a retry counts its attempt. */
static void settle_tail(lq__sql *b, bool counts) {
    int form = lq_table_form(b->table);
    if (form == LQ_FORM_LEASE) {
        lq__sql_add(b, ", ");
        lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(b, " = NULL");
    }
    if (counts && form == LQ_FORM_ROW_LOCK && lq__has(b->table, LQ_ROLE_ATTEMPT)) {
        lq__sql_add(b, ", ");
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " = ");
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " + 1");
    }
}

void lq__sql_dead_stamp(lq__sql *b, const char *sep) {
    if (lq__has(b->table, LQ_ROLE_RETRY_AFTER)) {
        lq__sql_add(b, sep);
        lq__sql_col(b, LQ_ROLE_RETRY_AFTER);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_NOW);
        sep = ", ";
    }
    if (lq__has(b->table, LQ_ROLE_DEAD_REASON)) {
        lq__sql_add(b, sep);
        lq__sql_col(b, LQ_ROLE_DEAD_REASON);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_REASON);
    }
}

void lq__sql_free_dedup_key(lq__sql *b, const char *qualifier) {
    if (!lq__has(b->table, LQ_ROLE_DEDUP_KEY)) return;
    lq__sql_add(b, ", ");
    if (qualifier) lq__sql_qualified(b, qualifier, b->table->columns[LQ_ROLE_DEDUP_KEY]);
    else lq__sql_col(b, LQ_ROLE_DEDUP_KEY);
    lq__sql_add(b, " = NULL");
}

/* What an ack does to its rows, up to the WHERE: delete them, or mark them
 * processed (and clear their leases and dedup keys). */
static void ack_head(lq__sql *b) {
    if (lq__has(b->table, LQ_ROLE_PROCESSED_AT)) {
        lq__sql_add(b, "UPDATE ");
        lq__sql_table(b);
        lq__sql_add(b, " SET ");
        lq__sql_col(b, LQ_ROLE_PROCESSED_AT);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_NOW);
        settle_tail(b, false);
        lq__sql_free_dedup_key(b, NULL);
    } else {
        lq__sql_add(b, "DELETE FROM ");
        lq__sql_table(b);
    }
}

static int build_ack(lq__sql *b) {
    ack_head(b);
    where_held(b);
    return lq__sql_finish(b);
}

/* "<set> AS lq_s JOIN <table> AS lq_t ON lq_t.id = lq_s.lq_id": the rows of
 * LQ__P_HELD_SET, where the dialect's row source joins. */
static void join_held_set(lq__sql *b, bool tokens) {
    b->dialect->held_set_source(b, tokens);
    lq__sql_add(b, " AS ");
    lq__sql_ident(b, "lq_s");
    lq__sql_add(b, " JOIN ");
    lq__sql_table(b);
    lq__sql_add(b, " AS ");
    lq__sql_ident(b, "lq_t");
    lq__sql_add(b, " ON ");
    lq__sql_qualified(b, "lq_t", b->table->id);
    lq__sql_add(b, " = ");
    lq__sql_qualified(b, "lq_s", "lq_id");
}

/* The ack of a set of rows: the ack's DELETE (or UPDATE of processed_at)
 * for every row of LQ__P_HELD_SET, in the lease form each with its token, or
 * with `one_token` all with the one of LQ__P_HELD (the rows of one claim),
 * which spares the database reading a token per row. */
static void ack_set_body(lq__sql *b, bool one_token) {
    bool lease = lq_table_form(b->table) == LQ_FORM_LEASE;
    bool tokens = lease && !one_token;
    bool marks = lq__has(b->table, LQ_ROLE_PROCESSED_AT);
    if (b->dialect->held_set_joins) {
        lq__sql_add(b, marks ? "UPDATE " : "DELETE ");
        if (!marks) {
            lq__sql_ident(b, "lq_t");
            lq__sql_add(b, " FROM ");
        }
        join_held_set(b, tokens);
        and_in_its_group(b, "lq_t");
        if (lease) {
            lq__sql_add(b, " AND ");
            lq__sql_qualified(b, "lq_t", b->table->columns[LQ_ROLE_LOCKED_UNTIL]);
            lq__sql_add(b, " = ");
            if (tokens) lq__sql_qualified(b, "lq_s", "lq_held");
            else lq__sql_param(b, LQ__P_HELD);
        }
        if (marks) {
            lq__sql_add(b, " SET ");
            lq__sql_qualified(b, "lq_t", b->table->columns[LQ_ROLE_PROCESSED_AT]);
            lq__sql_add(b, " = ");
            lq__sql_param(b, LQ__P_NOW);
            if (lease) {
                lq__sql_add(b, ", ");
                lq__sql_qualified(b, "lq_t", b->table->columns[LQ_ROLE_LOCKED_UNTIL]);
                lq__sql_add(b, " = NULL");
            }
            lq__sql_free_dedup_key(b, "lq_t");
        }
        return;
    }
    ack_head(b);
    lq__sql_add(b, tokens ? " WHERE (" : " WHERE ");
    lq__sql_id(b);
    if (tokens) {
        lq__sql_add(b, ", ");
        lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(b, ")");
    }
    in_held_set(b, tokens);
    and_in_its_group(b, NULL);
    if (lease && !tokens) {
        lq__sql_add(b, " AND ");
        lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_HELD);
    }
}

static int build_ack_set(lq__sql *b, bool one_token) {
    ack_set_body(b, one_token);
    return lq__sql_finish(b);
}

/* A set's ack that goes in one round trip with the claim after it and the
 * commit (the claim's transaction under concurrency, PostgreSQL): the
 * commit must not keep the claim where a row's lease was lost (each ack
 * then goes on its own, to tell which), so the statement fails unless it
 * acked all LQ__P_ACKS rows, which aborts the transaction. The failure is
 * a cast only a short count reaches, whose text says why in the server's
 * log. */
static int build_ack_set_whole(lq__sql *b, bool one_token) {
    lq__sql_add(b, "WITH \"lq_acked\" AS (");
    ack_set_body(b, one_token);
    lq__sql_add(b, " RETURNING 1) SELECT CAST(CASE WHEN COUNT(*) = ");
    lq__sql_param(b, LQ__P_ACKS);
    lq__sql_add(b, " THEN '0' ELSE '" LQ__ACKS_NOT_WHOLE "' END AS integer) FROM \"lq_acked\"");
    return lq__sql_finish(b);
}

void lq__held_set_add(lq__strbuf *sb, const lq__dialect *d, bool tokens, int64_t id, int64_t token) {
    char number[LQ__INT_TEXT_SIZE], text[LQ__TIME_TEXT_SIZE];
    size_t n = lq__int_text(number, id);
    if (d->held_set_array) {
        lq__sb_addc(sb, sb->len ? ',' : '{');
        lq__sb_addn(sb, number, n);
        if (tokens) {
            lq__sb_addc(sb, ',');
            lq__sb_addn(sb, number, lq__int_text(number, token));
        }
        return;
    }
    if (!tokens) {
        lq__sb_addc(sb, sb->len ? ',' : '[');
        lq__sb_addn(sb, number, n);
        return;
    }
    d->held_time_text(text, token);
    lq__sb_addn(sb, sb->len ? ",[" : "[[", 2);
    lq__sb_addn(sb, number, n);
    lq__sb_addn(sb, ",\"", 2);
    lq__sb_add(sb, text);
    lq__sb_addn(sb, "\"]", 2);
}

char *lq__held_set_take(lq__strbuf *sb, const lq__dialect *d) {
    if (!sb->len) lq__sb_addc(sb, d->held_set_array ? '{' : '[');
    lq__sb_addc(sb, d->held_set_array ? '}' : ']');
    return lq__sb_take(sb);
}

const lq__stmt *lq__ack_set_text(char **text, const lq__dialect *d, const lq__stmt *per_row,
                                 const lq__stmt *one_token, bool tokens, int64_t (*rows)[2],
                                 size_t n) {
    bool shared = tokens && one_token && one_token->sql;
    for (size_t i = 1; shared && i < n; i++) shared = rows[i][1] == rows[0][1];
    lq__strbuf sb = {0};
    for (size_t i = 0; i < n; i++) lq__held_set_add(&sb, d, tokens && !shared, rows[i][0], rows[i][1]);
    *text = lq__held_set_take(&sb, d);
    if (!*text) return NULL;
    return shared ? one_token : per_row;
}

/* UPDATE t SET <column> = <param or NULL>[, <settle tail>] WHERE <held>.
 * A move to the dead-letter group also gives the row's dedup key back. */
static int build_update(lq__sql *b, int role, lq__param value, bool settles, bool counts) {
    lq__sql_add(b, "UPDATE ");
    lq__sql_table(b);
    lq__sql_add(b, " SET ");
    lq__sql_col(b, role);
    lq__sql_add(b, " = ");
    if (value) lq__sql_param(b, value);
    else lq__sql_add(b, "NULL");
    if (settles) settle_tail(b, counts);
    if (value == LQ__P_DEST) {
        lq__sql_dead_stamp(b, ", ");
        lq__sql_free_dedup_key(b, NULL);
    }
    where_held(b);
    return lq__sql_finish(b);
}

/* SELECT 1 FROM t WHERE id = ? [AND group = ?] [AND processed_at IS NULL] */
static int build_in_queue(lq__sql *b) {
    lq__sql_add(b, "SELECT 1 FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " WHERE ");
    lq__sql_id(b);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_ID);
    if (lq__has(b->table, LQ_ROLE_GROUP)) {
        lq__sql_add(b, " AND ");
        lq__sql_col(b, LQ_ROLE_GROUP);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_GROUP);
    }
    lq__sql_and_unprocessed(b);
    return lq__sql_finish(b);
}

static int build_retry(lq__sql *b) {
    int form = lq_table_form(b->table);
    if (form == LQ_FORM_LEASE) return build_update(b, LQ_ROLE_LOCKED_UNTIL, 0, false, false);
    if (form == LQ_FORM_ROW_LOCK && lq__has(b->table, LQ_ROLE_ATTEMPT)) {
        count_attempt(b);
        where_held(b);
        return lq__sql_finish(b);
    }
    lq__sb_free(&b->sb);
    return LQ_OK; /* no statement: the rollback or the key's release returns the row */
}

/* A row handed back unsettled (a stopping subscription's waiting rows, a
 * delivery freed unsettled) spends no attempt: the lease and advisory forms
 * counted one at the claim, so the release takes it back. In the row lock
 * form the rollback undoes everything. */
static int build_release(lq__sql *b) {
    int form = lq_table_form(b->table);
    bool counted = form != LQ_FORM_ROW_LOCK && lq__has(b->table, LQ_ROLE_ATTEMPT);
    if (form != LQ_FORM_LEASE && !counted) {
        lq__sb_free(&b->sb);
        return LQ_OK;
    }
    lq__sql_add(b, "UPDATE ");
    lq__sql_table(b);
    lq__sql_add(b, " SET ");
    const char *sep = "";
    if (form == LQ_FORM_LEASE) {
        lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(b, " = NULL");
        sep = ", ";
    }
    if (counted) {
        lq__sql_add(b, sep);
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " = ");
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " - 1");
    }
    where_held(b);
    return lq__sql_finish(b);
}

/* Splits "schema.table" or "table"; more parts are refused. */
static int split_destination(char **schema, char **name, const char *dest) {
    const char *dot = strchr(dest, '.');
    *schema = *name = NULL;
    if (dot && strchr(dot + 1, '.'))
        return lq__error(LQ_MISUSE, "dead-letter table \"%s\": give \"table\" or \"schema.table\"",
                         dest);
    if (dot && (dot == dest || !dot[1]))
        return lq__error(LQ_MISUSE, "dead-letter table \"%s\" has an empty part", dest);
    if (dot) {
        *schema = lq__memdup(dest, (size_t)(dot - dest) + 1);
        if (*schema) (*schema)[dot - dest] = '\0';
        *name = lq__strdup(dot + 1);
    } else {
        *name = lq__strdup(dest);
    }
    if ((dot && !*schema) || !*name) {
        free(*schema);
        free(*name);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    return LQ_OK;
}

int lq__dead_letter_split(char **schema, char **name, const lq_table *t) {
    int rc = split_destination(schema, name, t->dead_letter);
    if (rc != LQ_OK) return rc;
    /* Unqualified, it is the table's own schema where the table is made. */
    bool same_schema = !*schema || (t->schema && strcmp(*schema, t->schema) == 0);
    if (!same_schema || strcmp(*name, t->name) != 0) return LQ_OK;
    free(*schema);
    free(*name);
    *schema = *name = NULL;
    char label[256];
    return lq__error(LQ_MISUSE, "table %s: its dead letters cannot go to the table itself",
                     lq__table_label(t, label, sizeof label));
}

int lq__sql_build_dead_clear(lq__stmt *out, const lq__dialect *d, const lq_table *t,
                             const char *schema, const char *name) {
    bool lease = lq_table_form(t) == LQ_FORM_LEASE;
    if (!lease && !lq__has(t, LQ_ROLE_RETRY_AFTER) && !lq__has(t, LQ_ROLE_DEAD_REASON))
        return LQ_OK; /* nothing to write */
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "UPDATE ");
    lq__sql_qualified(&b, schema, name);
    lq__sql_add(&b, " SET ");
    if (lease) {
        lq__sql_col(&b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(&b, " = NULL");
    }
    lq__sql_dead_stamp(&b, lease ? ", " : "");
    lq__sql_add(&b, " WHERE ");
    lq__sql_id(&b);
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_ID);
    return lq__sql_finish(&b);
}

/* Dead letter into a table of the same columns: copy the row as it is, clear
 * its lease and stamp its time in the copy, delete it here; the three run in
 * one transaction. */
static int build_dead_table(lq__sqlset *set, const lq__dialect *d, const lq_table *t) {
    char *schema, *name;
    int rc = lq__dead_letter_split(&schema, &name, t);
    if (rc != LQ_OK) return rc;
    lq__sql b;
    lq__sql_start(&b, &set->dead_copy, d, t);
    lq__sql_add(&b, "INSERT INTO ");
    lq__sql_qualified(&b, schema, name);
    lq__sql_add(&b, " SELECT * FROM ");
    lq__sql_table(&b);
    where_held(&b);
    rc = lq__sql_finish(&b);
    if (rc == LQ_OK) rc = lq__sql_build_dead_clear(&set->dead_clear, d, t, schema, name);
    if (rc == LQ_OK) {
        lq__sql_start(&b, &set->dead_delete, d, t);
        lq__sql_add(&b, "DELETE FROM ");
        lq__sql_table(&b);
        where_held(&b);
        rc = lq__sql_finish(&b);
    }
    free(schema);
    free(name);
    return rc;
}

/* The columns an insert writes, besides the id and the attempt. */
static const struct {
    int role;
    lq__param param;
} insert_fields[] = {
    {LQ_ROLE_PAYLOAD, LQ__P_PAYLOAD},         {LQ_ROLE_GROUP, LQ__P_MSG_GROUP},
    {LQ_ROLE_PARTITION_KEY, LQ__P_PKEY},      {LQ_ROLE_PRIORITY, LQ__P_PRIORITY},
    {LQ_ROLE_RETRY_AFTER, LQ__P_RETRY_AFTER}, {LQ_ROLE_HEADERS, LQ__P_HEADERS},
    {LQ_ROLE_DEDUP_KEY, LQ__P_DEDUP},         {LQ_ROLE_EXPIRES_AT, LQ__P_EXPIRES},
    {LQ_ROLE_CREATED_AT, LQ__P_CREATED},
};
#define INSERT_FIELDS (sizeof insert_fields / sizeof insert_fields[0])

bool lq__sql_insert_writes(const lq_table *t) {
    if (!t->id_generated || lq__has(t, LQ_ROLE_ATTEMPT)) return true;
    for (size_t i = 0; i < INSERT_FIELDS; i++)
        if (lq__has(t, insert_fields[i].role)) return true;
    return false;
}

/* "INSERT INTO t (columns)"; false when there is no column to write. */
static bool insert_columns(lq__sql *b) {
    const lq_table *t = b->table;
    lq__sql_add(b, "INSERT INTO ");
    lq__sql_table(b);
    lq__sql_add(b, " (");
    const char *sep = "";
    if (!t->id_generated) {
        lq__sql_id(b);
        sep = ", ";
    }
    if (lq__has(t, LQ_ROLE_ATTEMPT)) {
        lq__sql_add(b, sep);
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        sep = ", ";
    }
    for (size_t i = 0; i < INSERT_FIELDS; i++) {
        if (!lq__has(t, insert_fields[i].role)) continue;
        lq__sql_add(b, sep);
        lq__sql_col(b, insert_fields[i].role);
        sep = ", ";
    }
    if (!*sep) return false;
    lq__sql_add(b, ")");
    return true;
}

/* One row's parameter: the first row names it, later rows repeat the first
 * row's parameters at the next positions. */
static void insert_param(lq__sql *b, lq__param p, int row, int *position) {
    ++*position;
    if (row == 0) lq__sql_param(b, p);
    else b->dialect->placeholder(&b->sb, row * b->stmt->nparams + *position);
}

/* One row's tuple of values: "(?, 1, ?, ..)". */
static void insert_tuple(lq__sql *b, int row) {
    const lq_table *t = b->table;
    const char *sep = "";
    int position = 0;
    lq__sql_add(b, "(");
    if (!t->id_generated) {
        insert_param(b, LQ__P_ID, row, &position);
        sep = ", ";
    }
    if (lq__has(t, LQ_ROLE_ATTEMPT)) {
        lq__sql_add(b, sep);
        lq__sql_add(b, "1");
        sep = ", ";
    }
    for (size_t i = 0; i < INSERT_FIELDS; i++) {
        if (!lq__has(t, insert_fields[i].role)) continue;
        lq__sql_add(b, sep);
        insert_param(b, insert_fields[i].param, row, &position);
        sep = ", ";
    }
    lq__sql_add(b, ")");
}

static int build_insert(lq__sql *b) {
    if (insert_columns(b)) {
        lq__sql_add(b, " VALUES ");
        insert_tuple(b, 0);
    } else {
        /* Every column has a default: rewrite the start as the dialect says. */
        b->sb.len = strlen("INSERT INTO ");
        lq__sql_table(b);
        lq__sql_add(b, b->dialect->insert_defaults ? b->dialect->insert_defaults : " DEFAULT VALUES");
    }
    if (b->dialect->insert_returning) {
        lq__sql_add(b, " RETURNING ");
        lq__sql_id(b);
    }
    int rc = lq__sql_finish(b);
    b->stmt->insert = true;
    return rc;
}

/* The stamp after a locking read: lease one row and count its attempt, while
 * it is still free. */
static int build_stamp(lq__sql *b) {
    lq__sql_add(b, "UPDATE ");
    lq__sql_table(b);
    lq__sql_add(b, " SET ");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_LEASE);
    if (lq__has(b->table, LQ_ROLE_ATTEMPT)) {
        lq__sql_add(b, ", ");
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " = ");
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " + 1");
    }
    lq__sql_add(b, " WHERE ");
    lq__sql_id(b);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_ID);
    lq__sql_add(b, " AND ");
    lq__sql_lease_free(b);
    return lq__sql_finish(b);
}

/* The stamps of a claim's rows in one statement, each row's expiry from
 * LQ__P_HELD_SET, where a row source joins (MySQL's JSON_TABLE). */
static int build_stamp_set(lq__sql *b) {
    lq__sql_add(b, "UPDATE ");
    join_held_set(b, true);
    lq__sql_add(b, " SET ");
    const char *until = b->table->columns[LQ_ROLE_LOCKED_UNTIL];
    lq__sql_qualified(b, "lq_t", until);
    lq__sql_add(b, " = ");
    lq__sql_qualified(b, "lq_s", "lq_held");
    if (lq__has(b->table, LQ_ROLE_ATTEMPT)) {
        const char *attempt = b->table->columns[LQ_ROLE_ATTEMPT];
        lq__sql_add(b, ", ");
        lq__sql_qualified(b, "lq_t", attempt);
        lq__sql_add(b, " = ");
        lq__sql_qualified(b, "lq_t", attempt);
        lq__sql_add(b, " + 1");
    }
    lq__sql_add(b, " WHERE (");
    lq__sql_qualified(b, "lq_t", until);
    lq__sql_add(b, " IS NULL OR ");
    lq__sql_qualified(b, "lq_t", until);
    lq__sql_add(b, " <= ");
    lq__sql_param(b, LQ__P_LEASE_NOW);
    lq__sql_add(b, ")");
    return lq__sql_finish(b);
}

int lq__sqlset_build(lq__sqlset *set, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    int rc;
    memset(set, 0, sizeof *set);
    lq__sql_start(&b, &set->ack, d, t);
    rc = build_ack(&b);
    if (rc == LQ_OK && d->held_set_source) {
        lq__sql_start(&b, &set->ack_set, d, t);
        rc = build_ack_set(&b, false);
    }
    if (rc == LQ_OK && d->held_set_source && lq_table_form(t) == LQ_FORM_LEASE) {
        lq__sql_start(&b, &set->ack_set_held, d, t);
        rc = build_ack_set(&b, true);
    }
    if (rc == LQ_OK) {
        lq__sql_start(&b, &set->retry, d, t);
        rc = build_retry(&b);
    }
    if (rc == LQ_OK) {
        lq__sql_start(&b, &set->release, d, t);
        rc = build_release(&b);
    }
    if (rc == LQ_OK && lq__has(t, LQ_ROLE_RETRY_AFTER)) {
        lq__sql_start(&b, &set->retry_after, d, t);
        rc = build_update(&b, LQ_ROLE_RETRY_AFTER, LQ__P_RETRY_AFTER, true, true);
    }
    if (rc == LQ_OK && t->dead_letter) {
        if (lq__has(t, LQ_ROLE_GROUP)) {
            lq__sql_start(&b, &set->dead_group, d, t);
            rc = build_update(&b, LQ_ROLE_GROUP, LQ__P_DEST, true, false);
        } else {
            rc = build_dead_table(set, d, t);
        }
    }
    if (rc == LQ_OK && lq_table_form(t) == LQ_FORM_LEASE && !d->claim_writes_lease) {
        lq__sql_start(&b, &set->stamp, d, t);
        rc = build_stamp(&b);
        if (rc == LQ_OK && d->held_set_joins) {
            lq__sql_start(&b, &set->stamp_set, d, t);
            rc = build_stamp_set(&b);
        }
    }
    if (rc == LQ_OK && lq_table_form(t) == LQ_FORM_LEASE) {
        lq__sql_start(&b, &set->extend, d, t);
        rc = build_update(&b, LQ_ROLE_LOCKED_UNTIL, LQ__P_LEASE, false, false);
    }
    if (rc == LQ_OK && lq_table_form(t) == LQ_FORM_LEASE) {
        lq__sql_start(&b, &set->in_queue, d, t);
        rc = build_in_queue(&b);
    }
    if (rc == LQ_OK) rc = d->build_claims(set, t);
    if (rc != LQ_OK) lq__sqlset_free(set);
    return rc;
}

int lq__sqlset_build_insert(lq__stmt *insert, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, insert, d, t);
    return build_insert(&b);
}

int lq__sql_build_insert_notify(lq__stmt *insert, const lq__dialect *d, const lq_table *t) {
    lq__stmt plain;
    int rc = lq__sqlset_build_insert(&plain, d, t);
    if (rc != LQ_OK) return rc;
    /* The insert's text and parameters first, then the notification's. */
    lq__sql b;
    lq__sql_start(&b, insert, d, t);
    lq__sql_add(&b, "WITH ");
    lq__sql_ident(&b, "lq_ins");
    lq__sql_add(&b, " AS (");
    lq__sql_add(&b, plain.sql);
    lq__sql_add(&b, ") SELECT ");
    lq__sql_qualified(&b, "lq_ins", t->id);
    lq__sql_add(&b, ", ");
    memcpy(insert->params, plain.params, sizeof plain.params);
    insert->nparams = plain.nparams;
    free(plain.sql);
    d->notify_call(&b);
    lq__sql_add(&b, " FROM ");
    lq__sql_ident(&b, "lq_ins");
    return lq__sql_finish(&b);
}

int lq__sql_build_insert_rows(lq__stmt *insert, const lq__dialect *d, const lq_table *t, int rows) {
    lq__sql b;
    lq__sql_start(&b, insert, d, t);
    if (!insert_columns(&b)) {
        lq__sb_free(&b.sb);
        return lq__error(LQ_MISUSE, "a multi-row insert with no column to write");
    }
    lq__sql_add(&b, " VALUES ");
    for (int row = 0; row < rows; row++) {
        if (row) lq__sql_add(&b, ", ");
        insert_tuple(&b, row);
    }
    /* Only a generated id needs reading back: a given one is the message's. */
    if (t->id_generated) {
        lq__sql_add(&b, " RETURNING ");
        lq__sql_id(&b);
    }
    int rc = lq__sql_finish(&b);
    if (rc == LQ_OK) insert->rows = rows;
    insert->insert = true;
    return rc;
}

void lq__sql_take_returning(lq__sql *b, void (*ids)(lq__sql *b)) {
    bool counts = lq__has(b->table, LQ_ROLE_ATTEMPT);
    lq__sql_take(b, counts, ids);
    if (counts) {
        lq__sql_add(b, " RETURNING ");
        lq__sql_row_columns(b, " - 1");
    }
}

static int build_take_returning(lq__stmt *take, const lq__dialect *d, const lq_table *t,
                                void (*ids)(lq__sql *b)) {
    lq__sql b;
    lq__sql_start(&b, take, d, t);
    lq__sql_take_returning(&b, ids);
    return lq__sql_finish(&b);
}

int lq__sql_build_take_returning(lq__stmt *take, const lq__dialect *d, const lq_table *t) {
    return build_take_returning(take, d, t, NULL);
}

int lq__sql_build_take_set_returning(lq__stmt *take, const lq__dialect *d, const lq_table *t) {
    return build_take_returning(take, d, t, in_held_ids);
}

int lq__sql_build_dedup_lookup(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_id(&b);
    lq__sql_add(&b, " FROM ");
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    lq__sql_col(&b, LQ_ROLE_DEDUP_KEY);
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_DEDUP);
    return lq__sql_finish(&b);
}

/* "SELECT COUNT(*) FROM t WHERE locked_until > <now>[ AND <role> = <param>]":
 * the rows leased now, of one group or one partition key where the table
 * has that column (an ack clears the lease of a row it keeps as processed). */
static void count_leased(lq__sql *b, int role, lq__param param) {
    lq__sql_add(b, "SELECT COUNT(*) FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " WHERE ");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " > ");
    lq__sql_param(b, LQ__P_LEASE_NOW);
    if (role && lq__has(b->table, role)) {
        lq__sql_add(b, " AND ");
        lq__sql_col(b, role);
        lq__sql_add(b, " = ");
        lq__sql_param(b, param);
    }
}

static int build_count_leased(lq__stmt *out, const lq__dialect *d, const lq_table *t, int role,
                              lq__param param) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    count_leased(&b, role, param);
    return lq__sql_finish(&b);
}

void lq__sql_room_left(lq__sql *b) {
    lq__sql_add(b, "GREATEST(0, ");
    lq__sql_param(b, LQ__P_CONCURRENCY);
    lq__sql_add(b, " - (");
    count_leased(b, LQ_ROLE_GROUP, LQ__P_GROUP);
    lq__sql_add(b, "))");
}

/* " WHERE queue = ? [AND pkey = ?] AND started_at", for a comparison to
 * follow. */
static void starts_of(lq__sql *b, bool keyed) {
    lq__sql_add(b, " WHERE ");
    lq__sql_ident(b, "queue");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_QUEUE);
    if (keyed) {
        lq__sql_add(b, " AND ");
        lq__sql_ident(b, "pkey");
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_PKEY);
    }
    lq__sql_add(b, " AND ");
    lq__sql_ident(b, "started_at");
}

/* " WHERE queue = ? [AND pkey = ?] AND started_at <op> <now> - period". */
static void starts_where(lq__sql *b, const char *op, bool keyed) {
    starts_of(b, keyed);
    lq__sql_add(b, op);
    b->dialect->now_ms_sql(b);
    lq__sql_add(b, " - ");
    lq__sql_param(b, LQ__P_PERIOD);
}

/* One start of the queue (and with `keyed` of its partition key): at the
 * database's now, or with `reserved` at LQ__P_STARTED_AT. */
static int build_start_insert(lq__stmt *out, const lq__dialect *d, const lq_table *t, bool keyed,
                              bool reserved) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "INSERT INTO ");
    lq__sql_qualified(&b, t->schema, keyed ? LQ__KEY_STARTS_TABLE : LQ__STARTS_TABLE);
    lq__sql_add(&b, " (");
    lq__sql_ident(&b, "queue");
    if (keyed) {
        lq__sql_add(&b, ", ");
        lq__sql_ident(&b, "pkey");
    }
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "started_at");
    lq__sql_add(&b, ") VALUES (");
    lq__sql_param(&b, LQ__P_QUEUE);
    if (keyed) {
        lq__sql_add(&b, ", ");
        lq__sql_param(&b, LQ__P_PKEY);
    }
    lq__sql_add(&b, ", ");
    if (reserved) lq__sql_param(&b, LQ__P_STARTED_AT);
    else d->now_ms_sql(&b);
    lq__sql_add(&b, ")");
    return lq__sql_finish(&b);
}

/* The starts of the queue's rate limit, or with `keyed` of one partition
 * key's (partition_rate_limit): count, add, prune. */
static int build_starts(lq__stmt *count, lq__stmt *add, lq__stmt *prune, const lq__dialect *d,
                        const lq_table *t, bool keyed) {
    const char *table = keyed ? LQ__KEY_STARTS_TABLE : LQ__STARTS_TABLE;
    lq__sql b;
    lq__sql_start(&b, count, d, t);
    lq__sql_add(&b, "SELECT COUNT(*), MIN(");
    lq__sql_ident(&b, "started_at");
    lq__sql_add(&b, "), ");
    d->now_ms_sql(&b);
    lq__sql_add(&b, " FROM ");
    lq__sql_qualified(&b, t->schema, table);
    starts_where(&b, " > ", keyed);
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;
    if ((rc = build_start_insert(add, d, t, keyed, false)) != LQ_OK) return rc;
    lq__sql_start(&b, prune, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    lq__sql_qualified(&b, t->schema, table);
    starts_where(&b, " <= ", keyed);
    return lq__sql_finish(&b);
}

/* " WHERE queue = ? AND started_at = ?": the starts one reservation made. */
static void reserved_where(lq__sql *b) {
    starts_of(b, false);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_STARTED_AT);
}

/* The starts a row lock or advisory claim reserves ahead of it: one
 * recorded at the time the reservation read, and up to LQ__P_LIMIT of those
 * taken back. Starts of one queue at one time are alike, so any of them
 * stands for another. */
static int build_reserved_starts(lq__stmt *at, lq__stmt *unused, const lq__dialect *d,
                                 const lq_table *t) {
    const char *table = LQ__STARTS_TABLE;
    int rc = build_start_insert(at, d, t, false, true);
    if (rc != LQ_OK) return rc;
    lq__sql b;
    lq__sql_start(&b, unused, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    lq__sql_qualified(&b, t->schema, table);
    if (d->row_address) { /* no DELETE .. LIMIT: the rows by their address */
        lq__sql_add(&b, " WHERE ");
        lq__sql_add(&b, d->row_address);
        lq__sql_add(&b, " IN (SELECT ");
        lq__sql_add(&b, d->row_address);
        lq__sql_add(&b, " FROM ");
        lq__sql_qualified(&b, t->schema, table);
        reserved_where(&b);
        lq__sql_add(&b, " LIMIT ");
        lq__sql_param(&b, LQ__P_LIMIT);
        lq__sql_add(&b, ")");
    } else {
        reserved_where(&b);
        lq__sql_add(&b, " LIMIT ");
        lq__sql_param(&b, LQ__P_LIMIT);
    }
    return lq__sql_finish(&b);
}

int lq__sqlset_build_limits(lq__sqlset *set, const lq__dialect *d, const lq_table *t,
                            bool concurrency, bool rate) {
    int rc = concurrency ? build_count_leased(&set->in_work, d, t, LQ_ROLE_GROUP, LQ__P_GROUP)
                         : LQ_OK;
    if (rc == LQ_OK && rate)
        rc = build_starts(&set->starts, &set->start_add, &set->start_prune, d, t, false);
    bool reserves = lq_table_form(t) != LQ_FORM_LEASE; /* forms/starts.c */
    if (rc == LQ_OK && rate && reserves)
        rc = build_reserved_starts(&set->start_at, &set->start_unused, d, t);
    if (rc == LQ_OK && t->key_rate_limit)
        rc = build_starts(&set->key_starts, &set->key_start_add, &set->key_start_prune, d, t, true);
    if (rc == LQ_OK && t->partition_limit && lq_table_form(t) == LQ_FORM_LEASE)
        rc = build_count_leased(&set->key_in_work, d, t, LQ_ROLE_PARTITION_KEY, LQ__P_PKEY);
    if (rc == LQ_OK && concurrency && d->build_claim_in_room && lq_table_form(t) == LQ_FORM_LEASE)
        rc = d->build_claim_in_room(&set->claim_in_room, t);
    if (rc == LQ_OK && set->claim_in_room.sql) rc = lq__sqlset_build_acks_whole(set, d, t);
    return rc;
}

int lq__sqlset_build_acks_whole(lq__sqlset *set, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    int rc = LQ_OK;
    if (set->ack_set.sql) {
        lq__sql_start(&b, &set->ack_set_whole, d, t);
        rc = build_ack_set_whole(&b, false);
    }
    if (rc == LQ_OK && set->ack_set_held.sql) {
        lq__sql_start(&b, &set->ack_set_held_whole, d, t);
        rc = build_ack_set_whole(&b, true);
    }
    return rc;
}

size_t lq__sqlset_each(lq__sqlset *set, lq__stmt *all[LQ__SQLSET_STATEMENTS]) {
    lq__stmt *each[] = {&set->claim,       &set->claim_one,  &set->take,       &set->take_read,    &set->take_set,
                       &set->stamp,       &set->stamp_set,  &set->guard,        &set->ack,
                       &set->ack_set,     &set->ack_set_held, &set->retry,      &set->release,
                       &set->retry_after, &set->dead_group, &set->dead_copy,    &set->dead_clear,
                       &set->dead_delete, &set->extend,    &set->in_work,    &set->starts,
                       &set->start_add,   &set->start_prune, &set->key_in_work, &set->in_queue,
                       &set->key_starts,  &set->key_start_add, &set->key_start_prune,
                       &set->start_at,    &set->start_unused, &set->key_slot,  &set->claim_in_room,
                       &set->ack_set_whole, &set->ack_set_held_whole, &set->pick,
                       &set->take_picked, &set->sweep, &set->claim_swept};
    _Static_assert(sizeof each / sizeof each[0] == LQ__SQLSET_STATEMENTS, "every statement, once");
    memcpy(all, each, sizeof each);
    return LQ__SQLSET_STATEMENTS;
}

void lq__sqlset_free(lq__sqlset *set) {
    lq__stmt *all[LQ__SQLSET_STATEMENTS];
    for (size_t i = 0, n = lq__sqlset_each(set, all); i < n; i++) {
        free(all[i]->sql);
        all[i]->sql = NULL;
    }
}

int lq__sql_probe(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_id(&b);
    for (int role = LQ_ROLE_PAYLOAD; role < LQ__ROLE_COUNT; role++) {
        if (!t->columns[role]) continue;
        lq__sql_add(&b, ", ");
        lq__sql_col(&b, role);
    }
    for (size_t i = 0; i < t->key.count; i++) {
        if (!t->key.parts[i].is_column) continue;
        lq__sql_add(&b, ", ");
        lq__sql_ident(&b, t->key.parts[i].text);
    }
    lq__sql_add(&b, " FROM ");
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE 1 = 0");
    return lq__sql_finish(&b);
}
