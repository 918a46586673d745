/* The statements on a table's dead letters: read them, put them back in
 * the queue (replay) or delete them (purge). Each takes a range of ids, so
 * that a few named rows and a whole table of them, in batches, run the same
 * statements. The dead letters are a table of the same columns, or a group
 * of the queue's own table. */
#include "sql/dialect.h"

#include <stdlib.h>
#include <string.h>

typedef struct dead_place {
    bool in_group;
    char *schema, *name; /* the dead-letter table's */
} dead_place;

/* " WHERE <the dead letters with ids `op` LQ__P_FROM_ID>" (`op` NULL: all
 * of them), on the dead-letter table or the queue's table. Ids are bound
 * as they are (the id column's own type takes them): a read starts after
 * an id, a move at the first id of its range, both ids the table holds. */
static void dead_where(lq__sql *b, const dead_place *p, const char *op) {
    lq__sql_add(b, " WHERE ");
    if (p->in_group) {
        lq__sql_col(b, LQ_ROLE_GROUP);
        lq__sql_add(b, " = ");
        lq__sql_param(b, LQ__P_DEST);
        lq__sql_and_unprocessed(b);
        lq__sql_add(b, " AND ");
    }
    if (!op) {
        lq__sql_add(b, "1 = 1");
        return;
    }
    lq__sql_id(b);
    lq__sql_add(b, op);
    lq__sql_param(b, LQ__P_FROM_ID);
}

/* " <the dead letters> WHERE ..." */
static void dead_source(lq__sql *b, const dead_place *p) {
    if (p->in_group) lq__sql_table(b);
    else lq__sql_qualified(b, p->schema, p->name);
}

/* " FROM <the dead letters> WHERE <those of ids `op` the start>". */
static void from_dead(lq__sql *b, const dead_place *p, const char *op) {
    lq__sql_add(b, " FROM ");
    dead_source(b, p);
    dead_where(b, p, op);
}

/* " AND id <= <the range's end>". */
static void to_id(lq__sql *b) {
    lq__sql_add(b, " AND ");
    lq__sql_id(b);
    lq__sql_add(b, " <= ");
    lq__sql_param(b, LQ__P_TO_ID);
}

/* " ORDER BY id LIMIT <limit>". */
static void first_ids(lq__sql *b) {
    lq__sql_add(b, " ORDER BY ");
    lq__sql_id(b);
    lq__sql_add(b, " LIMIT ");
    lq__sql_param(b, LQ__P_LIMIT);
}

/* "SELECT <what> FROM <the dead letters> WHERE .. ORDER BY id LIMIT ..". */
static int build_read(lq__stmt *out, const lq__dialect *d, const lq_table *t, const dead_place *p,
                      bool row, const char *op) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    if (row) lq__sql_row_columns(&b, NULL);
    else lq__sql_id(&b);
    from_dead(&b, p, op);
    first_ids(&b);
    return lq__sql_finish(&b);
}

static int build_reads(lq__dead_letters_sql *out, const lq__dialect *d, const lq_table *t,
                       const dead_place *p) {
    int rc = build_read(&out->ids_first, d, t, p, false, NULL);
    if (rc == LQ_OK) rc = build_read(&out->ids, d, t, p, false, " > ");
    if (rc == LQ_OK) rc = build_read(&out->list, d, t, p, true, " > ");
    return rc;
}

/* ", <column> = <value>" in a SET list, or its first item. */
static void set_item(lq__sql *b, const char **sep, int role, const char *value, lq__param p) {
    lq__sql_add(b, *sep);
    lq__sql_col(b, role);
    lq__sql_add(b, " = ");
    if (value) lq__sql_add(b, value);
    else lq__sql_param(b, p);
    *sep = ", ";
}

/* Replay: due now, counted from the first attempt again, without a lease
 * nor a dead-letter reason; in a group, moved into the queue's group. Dead letters in a table are
 * reset there, before they are copied back. */
static int build_requeue(lq__dead_letters_sql *out, const lq__dialect *d, const lq_table *t,
                         const dead_place *p) {
    lq__sql b;
    const char *sep = " SET ";
    lq__sql_start(&b, &out->requeue, d, t);
    lq__sql_add(&b, "UPDATE ");
    dead_source(&b, p);
    if (p->in_group) set_item(&b, &sep, LQ_ROLE_GROUP, NULL, LQ__P_GROUP);
    if (lq__has(t, LQ_ROLE_ATTEMPT)) set_item(&b, &sep, LQ_ROLE_ATTEMPT, "1", 0);
    if (lq__has(t, LQ_ROLE_RETRY_AFTER)) set_item(&b, &sep, LQ_ROLE_RETRY_AFTER, NULL, LQ__P_NOW);
    if (lq_table_form(t) == LQ_FORM_LEASE) set_item(&b, &sep, LQ_ROLE_LOCKED_UNTIL, "NULL", 0);
    if (lq__has(t, LQ_ROLE_DEAD_REASON)) set_item(&b, &sep, LQ_ROLE_DEAD_REASON, "NULL", 0);
    if (!strcmp(sep, " SET ")) { /* nothing to reset: the copy back is the whole replay */
        lq__sb_free(&b.sb);
        return LQ_OK;
    }
    dead_where(&b, p, " >= ");
    to_id(&b);
    return lq__sql_finish(&b);
}

static int build_moves(lq__dead_letters_sql *out, const lq__dialect *d, const lq_table *t,
                       const dead_place *p) {
    lq__sql b;
    int rc;
    if (!p->in_group) {
        lq__sql_start(&b, &out->copy, d, t);
        lq__sql_add(&b, "INSERT INTO ");
        lq__sql_table(&b);
        lq__sql_add(&b, " SELECT *");
        from_dead(&b, p, " >= ");
        to_id(&b);
        if ((rc = lq__sql_finish(&b)) != LQ_OK) return rc;
    }
    if ((rc = build_requeue(out, d, t, p)) != LQ_OK) return rc;
    lq__sql_start(&b, &out->remove, d, t);
    lq__sql_add(&b, "DELETE");
    from_dead(&b, p, " >= ");
    to_id(&b);
    return lq__sql_finish(&b);
}

void lq__dead_letters_sql_free(lq__dead_letters_sql *s) {
    free(s->ids_first.sql);
    free(s->ids.sql);
    free(s->list.sql);
    free(s->copy.sql);
    free(s->requeue.sql);
    free(s->remove.sql);
    memset(s, 0, sizeof *s);
}

int lq__sql_build_dead_letters(lq__dead_letters_sql *out, const lq__dialect *d, const lq_table *t) {
    memset(out, 0, sizeof *out);
    dead_place p = {.in_group = lq__has(t, LQ_ROLE_GROUP)};
    int rc = p.in_group ? LQ_OK : lq__dead_letter_split(&p.schema, &p.name, t);
    if (rc == LQ_OK) rc = build_reads(out, d, t, &p);
    if (rc == LQ_OK) rc = build_moves(out, d, t, &p);
    free(p.schema);
    free(p.name);
    if (rc != LQ_OK) lq__dead_letters_sql_free(out);
    return rc;
}
