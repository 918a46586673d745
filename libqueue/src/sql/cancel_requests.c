/* The statements of cancel requests: how a cancel reaches a row lock run.
 * The run's transaction holds the row, so the cancel writes a request row
 * (queue, row_id) into a table beside the queue's, and the process holding
 * the row takes it (state 0 -> 1) before it removes the row in the run's
 * own transaction. The request's state is the handshake: a canceller whose
 * wait ends withdraws only a request still at 0, so a cancel either happens
 * or is withdrawn, never both. */
#include "sql/dialect.h"

#include <stdlib.h>
#include <string.h>

static void requests_table(lq__sql *b) { lq__sql_qualified(b, b->table->schema, LQ__CANCEL_REQUESTS_TABLE); }

/* " WHERE queue = <queue> AND ": the queue's requests; the caller adds the rest. */
static void where_queue(lq__sql *b) {
    lq__sql_add(b, " WHERE ");
    lq__sql_ident(b, "queue");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_QUEUE);
    lq__sql_add(b, " AND ");
}

/* "row_id = <id>", then " AND state = <state>" unless state < 0. */
static void row_in_state(lq__sql *b, int state) {
    lq__sql_ident(b, "row_id");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_ID);
    if (state < 0) return;
    lq__sql_add(b, " AND ");
    lq__sql_ident(b, "state");
    lq__sql_add(b, state ? " = 1" : " = 0");
}

static int build_create(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "CREATE TABLE IF NOT EXISTS ");
    requests_table(&b);
    lq__sql_add(&b, " (\n  ");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, " ");
    lq__sql_add(&b, d->ddl->key_text);
    lq__sql_add(&b, " NOT NULL,\n  ");
    lq__sql_ident(&b, "row_id");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  ");
    lq__sql_ident(&b, "state");
    lq__sql_add(&b, " INTEGER NOT NULL,\n  ");
    lq__sql_ident(&b, "requested_at");
    lq__sql_add(&b, " BIGINT NOT NULL,\n  PRIMARY KEY (");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "row_id");
    lq__sql_add(&b, ")\n)");
    return lq__sql_finish(&b);
}

static int build_request(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "INSERT INTO ");
    requests_table(&b);
    lq__sql_add(&b, " (");
    lq__sql_ident(&b, "queue");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "row_id");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "state");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "requested_at");
    lq__sql_add(&b, ") VALUES (");
    lq__sql_param(&b, LQ__P_QUEUE);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_ID);
    lq__sql_add(&b, ", 0, ");
    lq__sql_param(&b, LQ__P_NOW);
    lq__sql_add(&b, ")");
    return lq__sql_finish(&b);
}

/* The live requests: at 0, made since LQ__P_NOW (older ones were left by a
 * canceller that went away, whose wait is over). */
static int build_pending(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_ident(&b, "row_id");
    lq__sql_add(&b, " FROM ");
    requests_table(&b);
    where_queue(&b);
    lq__sql_ident(&b, "state");
    lq__sql_add(&b, " = 0 AND ");
    lq__sql_ident(&b, "requested_at");
    lq__sql_add(&b, " >= ");
    lq__sql_param(&b, LQ__P_NOW);
    return lq__sql_finish(&b);
}

/* The queue's requests made before LQ__P_NOW, deleted: left behind. */
static int build_prune(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    requests_table(&b);
    where_queue(&b);
    lq__sql_ident(&b, "requested_at");
    lq__sql_add(&b, " < ");
    lq__sql_param(&b, LQ__P_NOW);
    return lq__sql_finish(&b);
}

/* UPDATE .. SET state = <to> WHERE .. row_id = <id> AND state = <from>. */
static int build_move(lq__stmt *out, const lq__dialect *d, const lq_table *t, int from, int to) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "UPDATE ");
    requests_table(&b);
    lq__sql_add(&b, " SET ");
    lq__sql_ident(&b, "state");
    lq__sql_add(&b, to ? " = 1" : " = 0");
    where_queue(&b);
    row_in_state(&b, from);
    return lq__sql_finish(&b);
}

static int build_state(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_ident(&b, "state");
    lq__sql_add(&b, " FROM ");
    requests_table(&b);
    where_queue(&b);
    row_in_state(&b, -1);
    return lq__sql_finish(&b);
}

/* DELETE .. WHERE .. row_id = <id> [AND state = <state>]. */
static int build_delete(lq__stmt *out, const lq__dialect *d, const lq_table *t, int state) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    requests_table(&b);
    where_queue(&b);
    row_in_state(&b, state);
    return lq__sql_finish(&b);
}

void lq__cancel_requests_sql_free(lq__cancel_requests_sql *r) {
    lq__stmt *all[] = {&r->create, &r->request,  &r->pending,  &r->take, &r->give_back,
                       &r->state,  &r->withdraw, &r->forget, &r->prune};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->sql);
    memset(r, 0, sizeof *r);
}

int lq__sql_build_cancel_requests(lq__cancel_requests_sql *out, const lq__dialect *d,
                                  const lq_table *t) {
    memset(out, 0, sizeof *out);
    int rc = build_create(&out->create, d, t);
    if (rc == LQ_OK) rc = build_request(&out->request, d, t);
    if (rc == LQ_OK) rc = build_pending(&out->pending, d, t);
    if (rc == LQ_OK) rc = build_move(&out->take, d, t, 0, 1);
    if (rc == LQ_OK) rc = build_move(&out->give_back, d, t, 1, 0);
    if (rc == LQ_OK) rc = build_state(&out->state, d, t);
    if (rc == LQ_OK) rc = build_delete(&out->withdraw, d, t, 0);
    if (rc == LQ_OK) rc = build_delete(&out->forget, d, t, -1);
    if (rc == LQ_OK) rc = build_prune(&out->prune, d, t);
    if (rc != LQ_OK) lq__cancel_requests_sql_free(out);
    return rc;
}
