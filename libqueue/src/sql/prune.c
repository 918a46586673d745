/* The statements of retention: a bounded batch of rows past their time
 * deleted, in a shape that reads an index of the rows past it and locks
 * none but those it deletes:
 *   PostgreSQL  DELETE FROM t WHERE id IN (SELECT id FROM t WHERE .. ORDER BY
 *               <time> LIMIT n FOR UPDATE SKIP LOCKED): pruners running at
 *               once take disjoint rows instead of waiting on each other;
 *   SQLite      the same without the lock (its one writer is the lock);
 *   MySQL       SELECT id FROM t WHERE .. ORDER BY <time>, id LIMIT n, then
 *               DELETE lq_t FROM <those ids> JOIN t AS lq_t .. WHERE <still
 *               past the cut>. It takes no LIMIT in an IN subquery, and its
 *               DELETE .. LIMIT locks every row it reads: on a small table,
 *               read whole, that includes the row lock form's rows in work,
 *               and it would wait for their runs. The SELECT locks nothing. */
#include "sql/dialect.h"

#include <stdlib.h>
#include <string.h>

/* "<column> < <the cut>". */
static void before_cut(lq__sql *b, int role) {
    lq__sql_col(b, role);
    lq__sql_add(b, " < ");
    lq__sql_param(b, LQ__P_NOW);
}

/* The rows to delete, after " WHERE ". */
static void pruned_rows(lq__sql *b, bool dead, bool in_group, bool by_group) {
    const lq_table *t = b->table;
    if (!dead) {
        /* Said outright, so the partial index on finished rows applies. */
        lq__sql_col(b, LQ_ROLE_PROCESSED_AT);
        lq__sql_add(b, " IS NOT NULL AND ");
        before_cut(b, LQ_ROLE_PROCESSED_AT);
        if (by_group) {
            lq__sql_add(b, " AND ");
            lq__sql_col(b, LQ_ROLE_GROUP);
            lq__sql_add(b, " = ");
            lq__sql_param(b, LQ__P_GROUP);
        }
        return;
    }
    if (in_group) {
        lq__sql_col(b, LQ_ROLE_GROUP);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_DEST);
        lq__sql_add(b, " AND ");
    }
    before_cut(b, LQ_ROLE_RETRY_AFTER);
    /* Dead letters are unprocessed, as the list reads them; said outright,
     * the claim-order index (partial on it) applies. */
    lq__sql_and_unprocessed(b);
    if (in_group && lq_table_form(t) == LQ_FORM_LEASE) {
        /* A dead-letter group a subscription reads: its rows in work stay. */
        lq__sql_add(b, " AND ");
        lq__sql_lease_free(b);
    }
}

typedef struct prune_place {
    bool dead, in_group, by_group;
    char *schema, *name; /* the dead-letter table's, or NULL: the queue's */
} prune_place;

static void place_table(lq__sql *b, const prune_place *p) {
    if (p->name) lq__sql_qualified(b, p->schema, p->name);
    else lq__sql_table(b);
}

/* "SELECT id FROM <place> WHERE <pruned> ORDER BY <time>[, id] LIMIT <n>". */
static void pick_ids(lq__sql *b, const prune_place *p, bool by_id) {
    lq__sql_add(b, "SELECT ");
    lq__sql_id(b);
    lq__sql_add(b, " FROM ");
    place_table(b, p);
    lq__sql_add(b, " WHERE ");
    pruned_rows(b, p->dead, p->in_group, p->by_group);
    lq__sql_add(b, " ORDER BY ");
    lq__sql_col(b, p->dead ? LQ_ROLE_RETRY_AFTER : LQ_ROLE_PROCESSED_AT);
    if (by_id) {
        lq__sql_add(b, ", ");
        lq__sql_id(b);
    }
    lq__sql_add(b, " LIMIT ");
    lq__sql_param(b, LQ__P_LIMIT);
}

static int build_in_subquery(lq__prune_sql *out, const lq__dialect *d, const lq_table *t,
                             const prune_place *p) {
    lq__sql b;
    lq__sql_start(&b, &out->remove, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    place_table(&b, p);
    lq__sql_add(&b, " WHERE ");
    lq__sql_id(&b);
    lq__sql_add(&b, " IN (");
    pick_ids(&b, p, false);
    lq__sql_add(&b, d->single_writer ? ")" : " FOR UPDATE SKIP LOCKED)");
    return lq__sql_finish(&b);
}

static int build_joined(lq__prune_sql *out, const lq__dialect *d, const lq_table *t,
                        const prune_place *p) {
    lq__sql b;
    lq__sql_start(&b, &out->pick, d, t);
    pick_ids(&b, p, true);
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;
    lq__sql_start(&b, &out->remove, d, t);
    lq__sql_add(&b, "DELETE ");
    lq__sql_ident(&b, "lq_t");
    lq__sql_add(&b, " FROM ");
    d->held_set_source(&b, false);
    lq__sql_add(&b, " AS ");
    lq__sql_ident(&b, "lq_s");
    lq__sql_add(&b, " JOIN ");
    place_table(&b, p);
    lq__sql_add(&b, " AS ");
    lq__sql_ident(&b, "lq_t");
    lq__sql_add(&b, " ON ");
    lq__sql_qualified(&b, "lq_t", t->id);
    lq__sql_add(&b, " = ");
    lq__sql_qualified(&b, "lq_s", "lq_id");
    /* Still past the cut: a dead letter replayed meanwhile stays. */
    lq__sql_add(&b, " WHERE ");
    pruned_rows(&b, p->dead, p->in_group, p->by_group);
    return lq__sql_finish(&b);
}

void lq__prune_sql_free(lq__prune_sql *s) {
    free(s->pick.sql);
    free(s->remove.sql);
    memset(s, 0, sizeof *s);
}

int lq__sql_build_prune(lq__prune_sql *out, const lq__dialect *d, const lq_table *t, bool dead,
                        bool by_group) {
    memset(out, 0, sizeof *out);
    prune_place p = {.dead = dead, .in_group = dead && lq__has(t, LQ_ROLE_GROUP), .by_group = by_group};
    int rc = LQ_OK;
    /* Named as the dead letters' other statements name it. */
    if (dead && !p.in_group) rc = lq__dead_letter_split(&p.schema, &p.name, t);
    if (rc == LQ_OK) rc = d->held_set_joins ? build_joined(out, d, t, &p) : build_in_subquery(out, d, t, &p);
    free(p.schema);
    free(p.name);
    if (rc != LQ_OK) lq__prune_sql_free(out);
    return rc;
}
