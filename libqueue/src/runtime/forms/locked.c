/* A limited claim's transaction: the queue's lock with the counts taken
 * under it, then the claim with its commit. Where the dialect pipelines
 * statements each pair goes in one round trip (two in all, where one at a
 * time takes five: begin, lock, count, claim, commit); a claim's
 * statements wait on each other's answers only where the client must
 * compute between them (the room from the counts), and where the claim
 * counts its room itself, all go in one. */
#include "runtime/runtime.h"

static int run_steps(const lq__dialect *d, lq__conn *conn, const lq__step *steps, int count) {
    int rc = LQ_OK;
    for (int i = 0; rc == LQ_OK && i < count; i++)
        rc = d->exec(steps[i].changes, conn, steps[i].stmt, steps[i].args, steps[i].on_row,
                     steps[i].ctx);
    return rc;
}

int lq__begin_locked(bool *locked, lq_subscription *s, lq__conn *conn, int64_t wait_ms,
                     const lq__step *steps, int count, bool *committed) {
    const lq__dialect *d = s->broker->dialect;
    *locked = false;
    if (d->begin_locked) /* its lock ends with the transaction */
        return d->begin_locked(conn, s->limit_key, wait_ms, steps, count, committed);
    int rc = d->begin(conn, LQ_ISOLATION_READ_COMMITTED);
    if (rc == LQ_OK && d->lock_queue) {
        rc = d->lock_queue(conn, s->limit_key);
        *locked = rc == LQ_OK;
    }
    if (rc == LQ_OK) rc = run_steps(d, conn, steps, count);
    if (committed) *committed = rc == LQ_OK && (rc = d->commit(conn)) == LQ_OK;
    return rc;
}

int lq__exec_commit(bool *committed, lq_subscription *s, lq__conn *conn, const lq__step *steps,
                    int count) {
    const lq__dialect *d = s->broker->dialect;
    if (d->exec_commit) return d->exec_commit(committed, conn, steps, count);
    int rc = run_steps(d, conn, steps, count);
    if (rc == LQ_OK) rc = d->commit(conn);
    *committed = rc == LQ_OK;
    return rc;
}
