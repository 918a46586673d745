/* A rate limit's starts: the window read under the queue's lock, and in the
 * row lock and advisory forms the starts a claim reserves ahead of it.
 *
 * A lease claim records its starts in its own transaction, which commits
 * with the leases. A row lock claim's transaction lasts its run, and an
 * advisory claim has none, so their starts could not be seen by the next
 * claim in time. Such a claim first reserves: in a transaction of its own,
 * under the queue's lock, it counts the window's starts and records as many
 * as it may take (at most the room), at the time the database gave. It then
 * asks for no more rows than it reserved, and takes back the starts it did
 * not use. A claim that counts after another counts that one's reserved
 * starts, so two claims never share the room; a start taken back gives its
 * room to the next claim. A process that dies between the two steps leaves
 * its reserved starts counted until they leave the window: the limit errs
 * low, never high. */
#include "runtime/runtime.h"

#include <string.h>

int lq__read_window(void *ctx, const lq__value *cols, int count) {
    lq__window *w = ctx;
    if (count < 3 || cols[0].type != LQ__V_INT || cols[2].type != LQ__V_INT)
        return lq__error(LQ_BACKEND, "counting a rate limit's starts returned no numbers");
    w->count = cols[0].i;
    w->oldest = cols[1].type == LQ__V_INT ? cols[1].i : 0;
    w->now = cols[2].i;
    return LQ_OK;
}

int lq__rate_room(lq_subscription *s, const lq__window *w, int want) {
    int64_t room = s->rate_limit - w->count;
    if (room >= want) {
        atomic_store(&s->rate_wait_ms, 0);
        return want;
    }
    /* Cut short: the next claim may go when the oldest start leaves. */
    int64_t wait = w->oldest + s->rate_period_ms - w->now + 1;
    atomic_store(&s->rate_wait_ms, wait > 1 ? wait : 1);
    return room > 0 ? (int)room : 0;
}

static void bind_queue(lq__value *args, const lq_subscription *s) {
    args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = s->starts_key, .n = strlen(s->starts_key)};
    args[LQ__P_PERIOD] = (lq__value){.type = LQ__V_INT, .i = s->rate_period_ms};
}

int lq__starts_reserve(lq__reserved *r, bool *broken, lq_subscription *s, lq__conn *conn, int want) {
    const lq__dialect *d = s->broker->dialect;
    lq__value args[LQ__P_COUNT] = {0};
    bind_queue(args, s);
    *r = (lq__reserved){0};
    lq__window w = {0};
    lq__step window = {.stmt = &s->sql.starts, .args = args, .on_row = lq__read_window,
                       .ctx = &w};
    bool locked = false;
    int rc = lq__begin_locked(&locked, s, conn, 0, &window, 1, NULL);
    int granted = rc == LQ_OK ? lq__rate_room(s, &w, want) : 0;
    args[LQ__P_STARTED_AT] = (lq__value){.type = LQ__V_INT, .i = w.now};
    if (rc == LQ_OK && granted) rc = d->exec(NULL, conn, &s->sql.start_prune, args, NULL, NULL);
    for (int i = 0; rc == LQ_OK && i < granted; i++)
        rc = d->exec(NULL, conn, &s->sql.start_at, args, NULL, NULL);
    if (rc == LQ_OK) rc = d->commit(conn);
    if (rc != LQ_OK) d->rollback(conn);
    /* A lock not given back would keep every other claim out: the caller
     * ends its session instead. */
    if (locked && d->unlock_queue && !d->unlock_queue(conn, s->limit_key)) *broken = true;
    if (rc == LQ_OK) *r = (lq__reserved){.count = granted, .at = w.now};
    return rc;
}

int lq__starts_unreserve(lq_subscription *s, lq__conn *conn, const lq__reserved *r, int used,
                         int rc) {
    if (used >= r->count) return rc;
    lq__value args[LQ__P_COUNT] = {0};
    bind_queue(args, s);
    args[LQ__P_STARTED_AT] = (lq__value){.type = LQ__V_INT, .i = r->at};
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = r->count - used};
    lq__error_copy failure;
    lq__error_save(&failure);
    if (s->broker->dialect->exec(NULL, conn, &s->sql.start_unused, args, NULL, NULL) == LQ_OK)
        atomic_store(&s->rate_wait_ms, 0); /* room came back */
    else
        lq__log_error(LQ_LOG_WARNING, "taking back a rate limit's unused starts (they count "
                                      "until they leave the window)");
    lq__error_restore(&failure);
    return rc;
}
