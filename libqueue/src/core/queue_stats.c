/* lq_queue_stats and lq_queue_attempts: what an operator asks of a queue
 * (how deep, how late, how many dead letters, how often tried), each answer
 * a bounded read of the claim-order index, so that asking costs the same
 * at a million rows as at ten, and all of them read in one snapshot. */
#include "core/broker.h"

#include <stdlib.h>
#include <string.h>

/* The head's due time, as epoch ms (-1: no row, or a time not understood). */
static int on_time(void *ctx, const lq__value *cols, int count) {
    int64_t *ms = ctx;
    if (count > 0 && !lq__value_time_ms(ms, &cols[0])) *ms = -1;
    return LQ_OK;
}

typedef struct attempt_counts {
    int64_t *counts;
    size_t buckets;
} attempt_counts;

static int on_attempt(void *ctx, const lq__value *cols, int count) {
    attempt_counts *a = ctx;
    if (count < 2) return LQ_OK;
    int64_t attempt = lq__value_int(&cols[0]);
    size_t at = attempt < 0 ? 0 : (uint64_t)attempt >= a->buckets ? a->buckets - 1 : (size_t)attempt;
    a->counts[at] += lq__value_int(&cols[1]);
    return LQ_OK;
}

/* What both calls hold while they look: a connection, the statements, and
 * the values they bind. */
typedef struct look {
    lq__conn *conn;
    bool in_tx;
    bool broken; /* a begin that failed may leave the session's isolation set */
    lq__queue_stats_sql sql;
    lq__value args[LQ__P_COUNT];
} look;

/* The checks both calls share, then the statements and a connection. */
static int begin_look(look *l, lq_broker *b, const lq_table *t, const char *group, int64_t cap) {
    memset(l, 0, sizeof *l);
    if (cap < 1) return lq__error(LQ_MISUSE, "cap is %lld: it counts rows, from 1", (long long)cap);
    if (lq__has(t, LQ_ROLE_GROUP) && !group)
        return lq__error(LQ_MISUSE, "the table has a group column: name the group to look at");
    if (!lq__has(t, LQ_ROLE_GROUP) && group)
        return lq__error(LQ_MISUSE, "the table has no group column, so a group does not apply");
    int rc = lq__broker_check_open(b);
    if (rc == LQ_OK) rc = lq__sql_build_queue_stats(&l->sql, b->dialect, t);
    if (rc == LQ_OK) rc = lq__pool_acquire(&l->conn, &b->pool);
    /* One snapshot for every count, so that rows claimed meanwhile are not
     * counted twice (due, then in work). */
    if (rc == LQ_OK) rc = b->dialect->begin(l->conn, LQ_ISOLATION_REPEATABLE_READ);
    l->in_tx = rc == LQ_OK;
    l->broken = l->conn && !l->in_tx;
    int64_t now = lq__now_ms();
    l->args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = now};
    l->args[LQ__P_LEASE_NOW] = l->args[LQ__P_NOW];
    l->args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = cap};
    if (group) l->args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = group, .n = strlen(group)};
    if (t->dead_letter)
        l->args[LQ__P_DEST] = (lq__value){.type = LQ__V_TEXT, .p = t->dead_letter, .n = strlen(t->dead_letter)};
    return rc;
}

/* Runs one statement once (a look is rare: no connection keeps it
 * prepared); a NULL sql statement, which the table cannot answer, runs
 * nothing and leaves its value as it was. */
static int run_once(lq_broker *b, look *l, lq__stmt *st, lq__row_fn fn, void *ctx) {
    if (!st->sql) return LQ_OK;
    st->id = 0;
    return b->dialect->exec(NULL, l->conn, st, l->args, fn, ctx);
}

static int end_look(int rc, look *l, lq_broker *b, const lq_table *t, const char *what) {
    bool broken = rc == LQ_CONNECT || l->broken;
    if (l->in_tx) {
        lq__error_copy failure;
        lq__error_save(&failure);
        broken |= b->dialect->rollback(l->conn) != LQ_OK; /* it wrote nothing */
        lq__error_restore(&failure);
    }
    if (l->conn) lq__pool_release(&b->pool, l->conn, broken);
    lq__queue_stats_sql_free(&l->sql);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("%s of %s", what, lq__table_label(t, label, sizeof label));
    }
    return rc;
}

int lq_queue_stats(int64_t *values_out, size_t count, lq_broker *b, const lq_table *t,
                   const char *group, int64_t cap) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    LQ__CHECK_ARG(values_out || count == 0, "values_out is NULL");
    look l;
    int rc = begin_look(&l, b, t, group, cap);
    int64_t v[LQ_QUEUE_STAT_COUNT] = {0, 0, -1, -1, -1}, head = -1;
    if (rc == LQ_OK) rc = run_once(b, &l, &l.sql.due, lq__on_count, &v[LQ_QUEUE_DUE]);
    if (rc == LQ_OK) rc = run_once(b, &l, &l.sql.delayed, lq__on_count, &v[LQ_QUEUE_DELAYED]);
    if (rc == LQ_OK) rc = run_once(b, &l, &l.sql.in_work, lq__on_count, &v[LQ_QUEUE_IN_WORK]);
    if (rc == LQ_OK) rc = run_once(b, &l, &l.sql.dead, lq__on_count, &v[LQ_QUEUE_DEAD_LETTERS]);
    if (rc == LQ_OK) rc = run_once(b, &l, &l.sql.head, on_time, &head);
    if (head >= 0) {
        int64_t age = l.args[LQ__P_NOW].i - head;
        v[LQ_QUEUE_HEAD_AGE_MS] = age > 0 ? age : 0;
    }
    if (rc == LQ_OK)
        for (size_t i = 0; i < count; i++) values_out[i] = i < LQ_QUEUE_STAT_COUNT ? v[i] : -1;
    return end_look(rc, &l, b, t, "queue stats");
}

int lq_queue_attempts(int64_t *counts_out, size_t buckets, lq_broker *b, const lq_table *t,
                      const char *group, int64_t cap) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    LQ__CHECK_ARG(counts_out && buckets > 0, "counts_out is NULL or buckets is 0");
    if (!lq__has(t, LQ_ROLE_ATTEMPT)) {
        char label[256];
        return lq__error(LQ_SCHEMA, "queue attempts of %s: the table has no attempt column",
                         lq__table_label(t, label, sizeof label));
    }
    look l;
    int rc = begin_look(&l, b, t, group, cap);
    int64_t *counts = rc == LQ_OK ? calloc(buckets, sizeof *counts) : NULL;
    if (rc == LQ_OK && !counts) rc = lq__error(LQ_NOMEM, "out of memory");
    attempt_counts a = {counts, buckets};
    if (rc == LQ_OK) rc = run_once(b, &l, &l.sql.attempts, on_attempt, &a);
    if (rc == LQ_OK) memcpy(counts_out, counts, buckets * sizeof *counts);
    free(counts);
    return end_look(rc, &l, b, t, "queue attempts");
}
