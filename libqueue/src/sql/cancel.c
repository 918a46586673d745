/* The statements of lq_cancel: find the row while it is queued or in work,
 * locked against claims for the cancel's transaction, then take it out of
 * the queue as a dead letter takes it (into the dead-letter table or group),
 * or delete it where the table declares no destination. */
#include "sql/dialect.h"

#include <stdlib.h>
#include <string.h>

static void where_id(lq__sql *b) {
    lq__sql_add(b, " WHERE ");
    lq__sql_id(b);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_ID);
}

static int build_find(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    int form = lq_table_form(t);
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    if (form == LQ_FORM_LEASE) {
        lq__sql_add(&b, "CASE WHEN ");
        lq__sql_col(&b, LQ_ROLE_LOCKED_UNTIL);
        lq__sql_add(&b, " > ");
        lq__sql_param(&b, LQ__P_NOW);
        lq__sql_add(&b, " THEN 1 ELSE 0 END");
    } else {
        lq__sql_add(&b, "0");
    }
    if (form == LQ_FORM_ADVISORY) {
        lq__sql_add(&b, ", ");
        d->advisory_key(&b);
    }
    lq__sql_add(&b, " FROM ");
    lq__sql_table(&b);
    where_id(&b);
    lq__sql_and_unprocessed(&b);
    /* SQLite's write transaction is the lock already. A row lock is the run
     * of the row: the cancel does not wait for it. */
    if (!d->single_writer) lq__sql_add(&b, form == LQ_FORM_ROW_LOCK ? " FOR UPDATE NOWAIT" : " FOR UPDATE");
    return lq__sql_finish(&b);
}

static int build_to_table(lq__cancel_sql *out, const lq__dialect *d, const lq_table *t) {
    char *schema, *name;
    int rc = lq__dead_letter_split(&schema, &name, t);
    if (rc != LQ_OK) return rc;
    lq__sql b;
    lq__sql_start(&b, &out->copy, d, t);
    lq__sql_add(&b, "INSERT INTO ");
    lq__sql_qualified(&b, schema, name);
    lq__sql_add(&b, " SELECT * FROM ");
    lq__sql_table(&b);
    where_id(&b);
    rc = lq__sql_finish(&b);
    if (rc == LQ_OK) rc = lq__sql_build_dead_clear(&out->clear, d, t, schema, name);
    free(schema);
    free(name);
    return rc;
}

static int build_remove(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    if (t->dead_letter && lq__has(t, LQ_ROLE_GROUP)) {
        lq__sql_add(&b, "UPDATE ");
        lq__sql_table(&b);
        lq__sql_add(&b, " SET ");
        lq__sql_col(&b, LQ_ROLE_GROUP);
        lq__sql_add(&b, " = ");
        lq__sql_param(&b, LQ__P_DEST);
        if (lq_table_form(t) == LQ_FORM_LEASE) {
            lq__sql_add(&b, ", ");
            lq__sql_col(&b, LQ_ROLE_LOCKED_UNTIL);
            lq__sql_add(&b, " = NULL");
        }
        lq__sql_dead_stamp(&b, ", ");
        lq__sql_free_dedup_key(&b, NULL);
    } else {
        lq__sql_add(&b, "DELETE FROM ");
        lq__sql_table(&b);
    }
    where_id(&b);
    return lq__sql_finish(&b);
}

void lq__cancel_sql_free(lq__cancel_sql *c) {
    free(c->find.sql);
    free(c->copy.sql);
    free(c->clear.sql);
    free(c->remove.sql);
    memset(c, 0, sizeof *c);
}

int lq__sql_build_cancel(lq__cancel_sql *out, const lq__dialect *d, const lq_table *t) {
    memset(out, 0, sizeof *out);
    int rc = build_find(&out->find, d, t);
    if (rc == LQ_OK && t->dead_letter && !lq__has(t, LQ_ROLE_GROUP)) rc = build_to_table(out, d, t);
    if (rc == LQ_OK) rc = build_remove(&out->remove, d, t);
    if (rc != LQ_OK) lq__cancel_sql_free(out);
    return rc;
}
