/* Settlements: what an outcome writes, on every form. The delivery's mutex
 * keeps a settlement and a lease extension of the same row apart, so the
 * token a settlement names is the one the row holds. */
#include "clock.h"
#include "runtime.h"

#include <string.h>

static const char *outcome_name(lq_outcome o) {
    switch (o) {
    case LQ_ACK: return "ack";
    case LQ_RETRY: return "retry";
    case LQ_RETRY_AFTER: return "retry_after";
    case LQ_DEAD_LETTER: return "dead letter";
    default: return "release";
    }
}

/* Copy, clear the lease of the copy, delete: one transaction, all or none. */
static int dead_letter_to_table(int64_t *changes, lq_subscription *s, lq_conn *c,
                                const lq_value *args) {
    const lq_dialect *d = s->broker->dialect;
    int rc = d->begin(c, LQ_ISOLATION_DEFAULT);
    if (rc != LQ_OK) return rc;
    rc = d->exec(NULL, c, &s->sql.dead_copy, args, NULL, NULL);
    if (rc == LQ_OK && s->sql.dead_clear.sql) rc = d->exec(NULL, c, &s->sql.dead_clear, args, NULL, NULL);
    if (rc == LQ_OK) rc = d->exec(changes, c, &s->sql.dead_delete, args, NULL, NULL);
    if (rc == LQ_OK && *changes == 0 && s->form == LQ_FORM_LEASE) {
        d->rollback(c);
        return LQ_OK; /* the caller reports the lost lease */
    }
    if (rc == LQ_OK) rc = d->commit(c);
    if (rc != LQ_OK) d->rollback(c);
    return rc;
}

static int run_outcome(lq_delivery *dv, lq_outcome outcome, int64_t delay_ms) {
    lq_subscription *s = dv->sub;
    const lq_dialect *d = s->broker->dialect;
    const lq_stmt *stmt = NULL;
    switch (outcome) {
    case LQ_ACK: stmt = &s->sql.ack; break;
    case LQ_RETRY: stmt = &s->sql.retry; break;
    case LQ_RELEASE: stmt = &s->sql.release; break;
    case LQ_RETRY_AFTER: stmt = &s->sql.retry_after; break;
    case LQ_DEAD_LETTER: stmt = s->sql.dead_group.sql ? &s->sql.dead_group : NULL; break;
    }
    if (stmt && !stmt->sql) return LQ_OK; /* this form settles by letting go */

    int64_t now = lq__now_ms();
    lq_value args[LQ_P_COUNT] = {0};
    args[LQ_P_ID] = (lq_value){.type = LQ_V_INT, .i = dv->id};
    args[LQ_P_HELD] = (lq_value){.type = LQ_V_TIME, .i = dv->token};
    args[LQ_P_NOW] = (lq_value){.type = LQ_V_TIME, .i = now};
    args[LQ_P_RETRY_AFTER] = (lq_value){.type = LQ_V_TIME, .i = now + delay_ms};
    const char *dest = s->table->dead_letter;
    if (dest) args[LQ_P_DEST] = (lq_value){.type = LQ_V_TEXT, .p = dest, .n = strlen(dest)};

    lq_conn *conn = dv->conn;
    int rc = conn ? LQ_OK : lq__pool_acquire(&conn, &s->broker->pool);
    if (rc != LQ_OK) return rc;
    int64_t changes = 1;
    if (stmt) rc = d->exec(&changes, conn, stmt, args, NULL, NULL);
    else rc = dead_letter_to_table(&changes, s, conn, args);
    if (!dv->conn) lq__pool_release(&s->broker->pool, conn, rc == LQ_CONNECT);
    if (rc == LQ_OK && changes == 0 && s->form == LQ_FORM_LEASE)
        rc = lq__error(LQ_LEASE_LOST,
                       "row %lld: its lease ran out and another claim holds it; the %s changed "
                       "nothing",
                       (long long)dv->id, outcome_name(outcome));
    return rc;
}

int lq__settle(lq_delivery *dv, lq_outcome outcome, int64_t delay_ms) {
    lq_subscription *s = dv->sub;
    pthread_mutex_lock(&dv->mu);
    if (dv->settled) {
        pthread_mutex_unlock(&dv->mu);
        return lq__error(LQ_MISUSE, "row %lld is already settled", (long long)dv->id);
    }
    bool fails = outcome == LQ_RETRY || outcome == LQ_RETRY_AFTER;
    if (fails && s->max_attempts > 0 && dv->attempt >= s->max_attempts) outcome = LQ_DEAD_LETTER;
    if (outcome == LQ_RETRY_AFTER && !s->sql.retry_after.sql) {
        lq__log(LQ_LOG_WARNING,
                "row %lld: retry after %lld ms needs a retry_after column; retrying now",
                (long long)dv->id, (long long)delay_ms);
        outcome = LQ_RETRY;
    }
    if (outcome == LQ_DEAD_LETTER && !s->table->dead_letter) {
        pthread_mutex_unlock(&dv->mu);
        return lq__error(LQ_MISUSE, "row %lld: the table has no dead-letter destination",
                         (long long)dv->id);
    }
    int rc = run_outcome(dv, outcome, delay_ms);
    dv->settled = true;
    pthread_mutex_unlock(&dv->mu);

    if (s->form == LQ_FORM_ADVISORY) lq__advisory_release(dv);
    pthread_mutex_lock(&s->mu);
    if (dv->handed) s->in_work--;
    if (s->form == LQ_FORM_ADVISORY) s->woken = true; /* a key came free */
    pthread_cond_signal(&s->claim_cv);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->stats[LQ_STAT_SETTLED], 1);
    return rc;
}
