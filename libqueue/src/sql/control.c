/* The statements of the control table, which the library keeps beside a
 * queue's table: a row there pauses a queue (a table, or one group of it:
 * queue_group is "" for the whole table). A pause is a row, not a flag, so
 * that pausing twice is a duplicate key, and resuming deletes it. */
#include "sql/dialect.h"

#include <stdlib.h>

static void control_table(lq__sql *b) { lq__sql_qualified(b, b->table->schema, LQ__CONTROL_TABLE); }

static int build_create(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE TABLE IF NOT EXISTS ");
    control_table(&b);
    lq__sql_add(&b, " (\n  ");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, " ");
    lq__sql_add(&b, d->ddl->key_text);
    lq__sql_add(&b, " NOT NULL,\n  ");
    lq__sql_ident(&b, "queue_group");
    lq__sql_add(&b, " ");
    lq__sql_add(&b, d->ddl->key_text);
    lq__sql_add(&b, " NOT NULL,\n  ");
    lq__sql_ident(&b, "paused_at");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  PRIMARY KEY (");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "queue_group");
    lq__sql_add(&b, ")\n)");
    return lq__sql_finish(&b);
}

/* " WHERE queue = <queue> AND queue_group": the queue's rows, and the
 * caller says which groups. */
static void where_queue(lq__sql *b) {
    lq__sql_add(b, " WHERE ");
    lq__sql_ident(b, "queue");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_QUEUE);
    lq__sql_add(b, " AND ");
}

static int build_pause(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "INSERT INTO ");
    control_table(&b);
    lq__sql_add(&b, " (");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "queue_group");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "paused_at");
    lq__sql_add(&b, ") VALUES (");
    lq__sql_param(&b, LQ__P_QUEUE);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_GROUP);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_NOW);
    lq__sql_add(&b, ")");
    return lq__sql_finish(&b);
}

static int build_resume(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    control_table(&b);
    where_queue(&b);
    lq__sql_ident(&b, "queue_group");
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_GROUP);
    return lq__sql_finish(&b);
}

/* The rows that pause a group's claims: the group's own, and the whole
 * table's. */
static int build_paused(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT COUNT(*) FROM ");
    control_table(&b);
    where_queue(&b);
    lq__sql_add(&b, "(");
    lq__sql_ident(&b, "queue_group");
    lq__sql_add(&b, " = '' OR ");
    lq__sql_ident(&b, "queue_group");
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_GROUP);
    lq__sql_add(&b, ")");
    return lq__sql_finish(&b);
}

int lq__sql_build_control(lq__control_sql *out, const lq__dialect *d, const lq_table *t) {
    *out = (lq__control_sql){0};
    int rc = build_create(&out->create, d, t);
    if (rc == LQ_OK) rc = build_pause(&out->pause, d, t);
    if (rc == LQ_OK) rc = build_resume(&out->resume, d, t);
    if (rc == LQ_OK) rc = build_paused(&out->paused, d, t);
    if (rc == LQ_OK) rc = lq__sql_probe(&out->probe, d, t);
    if (rc != LQ_OK) lq__control_sql_free(out);
    return rc;
}

int lq__sql_build_paused(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    return build_paused(out, d, t);
}

void lq__control_sql_free(lq__control_sql *c) {
    lq__stmt *all[] = {&c->create, &c->pause, &c->resume, &c->paused, &c->probe};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        free(all[i]->sql);
        all[i]->sql = NULL;
    }
}
