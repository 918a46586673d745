/* The statements of lq_queue_stats: each counts rows of one state, reading
 * at most LQ__P_LIMIT of them, so that a deep queue costs a bounded read of
 * its claim-order index and never a scan of the table. */
#include "sql/dialect.h"

#include <stdlib.h>
#include <string.h>

/* "SELECT COUNT(*) FROM (SELECT 1 FROM ": the bounded count opened. */
static void count_open(lq__sql *b) { lq__sql_add(b, "SELECT COUNT(*) FROM (SELECT 1 FROM "); }

/* " LIMIT <cap>) AS lq_s": and closed. */
static void count_close(lq__sql *b) {
    lq__sql_add(b, " LIMIT ");
    lq__sql_param(b, LQ__P_LIMIT);
    lq__sql_add(b, ") AS ");
    lq__sql_ident(b, "lq_s");
}

/* "<column> = <group> AND " where the table has groups. */
static void group_and(lq__sql *b, lq__param group) {
    if (!lq__has(b->table, LQ_ROLE_GROUP)) return;
    lq__sql_col(b, LQ_ROLE_GROUP);
    lq__sql_add(b, " = ");
    lq__sql_param(b, group);
    lq__sql_add(b, " AND ");
}

/* Rows due now and free to claim (the claim's own condition). */
static int build_due(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    count_open(&b);
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    lq__sql_claim_where(&b, lq_table_form(t) == LQ_FORM_LEASE);
    count_close(&b);
    return lq__sql_finish(&b);
}

/* Rows of the queue whose `role` time is later than now: due later
 * (retry_after), or leased (locked_until). */
static int build_later(lq__stmt *out, const lq__dialect *d, const lq_table *t, int role,
                       lq__param now) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    count_open(&b);
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    group_and(&b, LQ__P_GROUP);
    lq__sql_col(&b, role);
    lq__sql_add(&b, " > ");
    lq__sql_param(&b, now);
    if (role == LQ_ROLE_RETRY_AFTER && lq_table_form(t) == LQ_FORM_LEASE) {
        lq__sql_add(&b, " AND ");
        lq__sql_lease_free(&b);
    }
    lq__sql_and_unprocessed(&b);
    count_close(&b);
    return lq__sql_finish(&b);
}

/* The dead letters: the rows of the dead-letter table, or of the dead-letter
 * group not yet processed. */
static int build_dead(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    bool in_group = lq__has(t, LQ_ROLE_GROUP);
    char *schema = NULL, *name = NULL;
    int rc = in_group ? LQ_OK : lq__dead_letter_split(&schema, &name, t);
    if (rc != LQ_OK) return rc;
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    count_open(&b);
    if (in_group) {
        lq__sql_table(&b);
        lq__sql_add(&b, " WHERE ");
        group_and(&b, LQ__P_DEST);
        lq__sql_add(&b, "1 = 1");
        lq__sql_and_unprocessed(&b);
    } else {
        lq__sql_qualified(&b, schema, name);
    }
    free(schema);
    free(name);
    count_close(&b);
    return lq__sql_finish(&b);
}

/* The due time of the next row in claim order, and its attempt. */
static int build_head(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_col(&b, LQ_ROLE_RETRY_AFTER);
    lq__sql_add(&b, " FROM ");
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    lq__sql_claim_where(&b, lq_table_form(t) == LQ_FORM_LEASE);
    lq__sql_add(&b, " ORDER BY ");
    lq__sql_claim_order(&b);
    lq__sql_add(&b, " LIMIT 1");
    return lq__sql_finish(&b);
}

/* Attempts of the queue's first LQ__P_LIMIT rows in claim order, counted by
 * value: (attempt, rows) in attempt order. */
static int build_attempts(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_ident(&b, "lq_a");
    lq__sql_add(&b, ", COUNT(*) FROM (SELECT ");
    lq__sql_col(&b, LQ_ROLE_ATTEMPT);
    lq__sql_add(&b, " AS ");
    lq__sql_ident(&b, "lq_a");
    lq__sql_add(&b, " FROM ");
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    group_and(&b, LQ__P_GROUP);
    lq__sql_add(&b, "1 = 1");
    lq__sql_and_unprocessed(&b);
    lq__sql_add(&b, " ORDER BY ");
    lq__sql_claim_order(&b);
    count_close(&b);
    lq__sql_add(&b, " GROUP BY ");
    lq__sql_ident(&b, "lq_a");
    lq__sql_add(&b, " ORDER BY ");
    lq__sql_ident(&b, "lq_a");
    return lq__sql_finish(&b);
}

void lq__queue_stats_sql_free(lq__queue_stats_sql *s) {
    lq__stmt *all[] = {&s->due, &s->delayed, &s->in_work, &s->dead, &s->head, &s->attempts};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->sql);
    memset(s, 0, sizeof *s);
}

int lq__sql_build_queue_stats(lq__queue_stats_sql *out, const lq__dialect *d, const lq_table *t) {
    memset(out, 0, sizeof *out);
    bool retry_after = lq__has(t, LQ_ROLE_RETRY_AFTER);
    int rc = build_due(&out->due, d, t);
    if (rc == LQ_OK && retry_after)
        rc = build_later(&out->delayed, d, t, LQ_ROLE_RETRY_AFTER, LQ__P_NOW);
    if (rc == LQ_OK && lq_table_form(t) == LQ_FORM_LEASE)
        rc = build_later(&out->in_work, d, t, LQ_ROLE_LOCKED_UNTIL, LQ__P_LEASE_NOW);
    if (rc == LQ_OK && t->dead_letter) rc = build_dead(&out->dead, d, t);
    if (rc == LQ_OK && retry_after) rc = build_head(&out->head, d, t);
    if (rc == LQ_OK && lq__has(t, LQ_ROLE_ATTEMPT)) rc = build_attempts(&out->attempts, d, t);
    if (rc != LQ_OK) lq__queue_stats_sql_free(out);
    return rc;
}
