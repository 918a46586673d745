/* The statements of the holds table, which the library keeps beside a queue's
 * table where `concurrency` is counted by holds (runtime/forms/holds.c): a
 * row per subscription holding room of a queue (LQ__P_QUEUE), keyed by its
 * holder number (LQ__P_ID), with how many rows it may have in work
 * (LQ__P_LIMIT) and until when that counts (LQ__P_LEASE, epoch ms). Holder 0
 * is the queue's own row, which every growth locks first. */
#include "sql/dialect.h"

#include <stdlib.h>

static void holds_table(lq__sql *b) { lq__sql_qualified(b, b->table->schema, LQ__HOLDS_TABLE); }

static int build_create(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE TABLE IF NOT EXISTS ");
    holds_table(&b);
    lq__sql_add(&b, " (\n  ");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, " ");
    lq__sql_add(&b, d->ddl->key_text);
    lq__sql_add(&b, " NOT NULL,\n  ");
    lq__sql_ident(&b, "holder");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  ");
    lq__sql_ident(&b, "held");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  ");
    lq__sql_ident(&b, "held_until");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  PRIMARY KEY (");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "holder");
    lq__sql_add(&b, ")\n)");
    return lq__sql_finish(&b);
}

/* " WHERE queue = <queue>" */
static void where_queue(lq__sql *b) {
    lq__sql_add(b, " WHERE ");
    lq__sql_ident(b, "queue");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_QUEUE);
}

/* " WHERE queue = <queue> AND holder = <holder>" */
static void where_holder(lq__sql *b) {
    where_queue(b);
    lq__sql_add(b, " AND ");
    lq__sql_ident(b, "holder");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_ID);
}

/* A holder's row, or the queue's own (holder 0, holding nothing). */
static int build_insert(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "INSERT INTO ");
    holds_table(&b);
    lq__sql_add(&b, " (");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "holder");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "held");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "held_until");
    lq__sql_add(&b, ") VALUES (");
    lq__sql_param(&b, LQ__P_QUEUE);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_ID);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_LIMIT);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_LEASE);
    lq__sql_add(&b, ")");
    if (d->on_conflict_do_nothing) lq__sql_add(&b, " ON CONFLICT DO NOTHING");
    return lq__sql_finish(&b);
}

/* Every row of the queue, locked: the queue's own row makes growths take
 * turns, and the others are summed by the caller. */
static int build_read(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_ident(&b, "holder");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "held");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "held_until");
    lq__sql_add(&b, " FROM ");
    holds_table(&b);
    where_queue(&b);
    lq__sql_add(&b, " FOR UPDATE");
    return lq__sql_finish(&b);
}

/* The holder's time made no earlier, and with `count` its count set. */
static int build_update(lq__stmt *out, const lq__dialect *d, const lq_table *t, bool count) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "UPDATE ");
    holds_table(&b);
    lq__sql_add(&b, " SET ");
    if (count) {
        lq__sql_ident(&b, "held");
        lq__sql_add(&b, " = ");
        lq__sql_param(&b, LQ__P_LIMIT);
        lq__sql_add(&b, ", ");
    }
    lq__sql_ident(&b, "held_until");
    lq__sql_add(&b, " = GREATEST(");
    lq__sql_ident(&b, "held_until");
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_LEASE);
    lq__sql_add(&b, ")");
    where_holder(&b);
    return lq__sql_finish(&b);
}

/* A holder's row, gone with its subscription. */
static int build_drop(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    holds_table(&b);
    where_holder(&b);
    return lq__sql_finish(&b);
}

/* The rows of holders gone long ago (never the queue's own). */
static int build_prune(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    holds_table(&b);
    where_queue(&b);
    lq__sql_add(&b, " AND ");
    lq__sql_ident(&b, "holder");
    lq__sql_add(&b, " <> 0 AND ");
    lq__sql_ident(&b, "held_until");
    lq__sql_add(&b, " < ");
    lq__sql_param(&b, LQ__P_LEASE);
    return lq__sql_finish(&b);
}

/* Whether the claim could take a row now, read without a lock. */
static int build_probe(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT 1");
    lq__sql_from_claimable(&b, true);
    if (t->fifo) lq__sql_fifo_head(&b, true);
    lq__sql_add(&b, " LIMIT 1");
    return lq__sql_finish(&b);
}

int lq__sql_build_holds(lq__holds_sql *out, const lq__dialect *d, const lq_table *t) {
    int rc = build_create(&out->create, d, t);
    if (rc == LQ_OK) rc = build_insert(&out->insert, d, t);
    if (rc == LQ_OK) rc = build_read(&out->read, d, t);
    if (rc == LQ_OK) rc = build_update(&out->set, d, t, true);
    if (rc == LQ_OK) rc = build_update(&out->extend, d, t, false);
    if (rc == LQ_OK) rc = build_drop(&out->drop, d, t);
    if (rc == LQ_OK) rc = build_prune(&out->prune, d, t);
    if (rc == LQ_OK) rc = build_probe(&out->probe, d, t);
    if (rc != LQ_OK) lq__holds_sql_free(out);
    return rc;
}

void lq__holds_sql_free(lq__holds_sql *h) {
    lq__stmt *all[] = {&h->create, &h->insert, &h->read, &h->set, &h->extend, &h->drop, &h->prune,
                       &h->probe};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        free(all[i]->sql);
        all[i]->sql = NULL;
    }
}
