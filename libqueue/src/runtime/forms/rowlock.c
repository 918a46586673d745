/* The row lock form: the claim opens a transaction and locks its row with
 * FOR UPDATE SKIP LOCKED; the transaction, and its connection, stay with the
 * delivery until the settlement commits (or a rollback returns the row). */
#include "base/clock.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

typedef struct claim_ctx {
    lq__claimed *out;
    lq_subscription *s;
} claim_ctx;

static int on_claimed_row(void *arg, const lq__value *cols, int count) {
    claim_ctx *ctx = arg;
    lq_delivery *d;
    int rc = lq__delivery_from_row(&d, ctx->s, cols, count);
    if (rc == LQ_OK) lq__claimed_add(ctx->out, d);
    return rc;
}

/* The rows of a batch claim share the claim's transaction. */
static int share_transaction(lq__claimed *out, lq__conn *conn) {
    lq__shared_tx *tx = calloc(1, sizeof *tx);
    if (!tx) return lq__error(LQ_NOMEM, "out of memory");
    pthread_mutex_init(&tx->mu, NULL);
    tx->conn = conn;
    tx->open = out->count;
    for (lq_delivery *d = out->head; d; d = d->queue_next) d->shared = tx;
    return LQ_OK;
}

/* Queue-wide concurrency: the claim's transaction takes a slot for each row
 * it asks for, and asks for no more rows than it got slots. A slot is held
 * until the transaction ends (the row's settlement, or the session's end),
 * so the rows in work never outnumber the slots. Slots a claim took beyond
 * its rows (a batch that found fewer) stay held until its batch settles.
 * A claim that got fewer rests until a settlement here frees one
 * (rest_at_limit, subscription.c). */
static int take_slots(lq__claimed *out, lq__value *args, lq_subscription *s, lq__conn *conn) {
    int taken = 0;
    int rc = s->broker->dialect->take_slots(&taken, conn, s->limit_key, s->concurrency,
                                            (int)args[LQ__P_LIMIT].i);
    if (rc != LQ_OK) return rc;
    out->cut = taken < args[LQ__P_LIMIT].i;
    args[LQ__P_LIMIT].i = taken;
    return LQ_OK;
}

/* partition_concurrency where the claim's query cannot take a key's slot
 * (MySQL): it passed over the keys with every slot held, and now, with its
 * row locked, takes one of the row's key. When a claim beside it took the
 * last one first, the row is given back (the caller rolls back); the next
 * settlement wakes a claim. */
static int take_key_slot(lq_subscription *s, lq__conn *conn, lq__claimed *out) {
    lq_delivery *row = out->head;
    if (!s->table->partition_limit || s->broker->dialect->row_lock_key_slots || !row->partition_key)
        return LQ_OK;
    bool taken = false;
    int rc = s->broker->dialect->take_key_slot(&taken, conn, &s->sql.key_slot, row->id,
                                               s->partition_concurrency);
    if (rc != LQ_OK || !taken) lq__claimed_free(out);
    return rc;
}

/* partition_rate_limit: the claim passed over the keys at their window as
 * it read, but may race another claim to a key's last start. Its own
 * transaction lasts the run, where a start would count for no one else, so
 * the start is recorded on a second connection, in a transaction of its own
 * under the queue's lock (forms/key_limits.c), before the row is handed
 * out. A row past its key's window, or whose start could not be recorded,
 * does not run: the caller rolls its transaction back. */
static int drop(lq_subscription *s, lq__conn *conn, lq_delivery *d, void *ctx) {
    (void)s;
    (void)conn;
    (void)ctx;
    lq_delivery_free(d);
    return LQ_OK;
}

static int record_key_start(lq__claimed *out, lq_subscription *s, const lq__value *args) {
    lq__conn *conn;
    bool broken = false;
    int rc = lq__pool_acquire(&conn, &s->broker->pool);
    if (rc == LQ_OK) {
        rc = lq__key_rates_counted(out, &broken, s, conn, args, drop, NULL);
        lq__pool_release(&s->broker->pool, conn, broken || rc == LQ_CONNECT);
    }
    if (rc != LQ_OK) lq__claimed_free(out);
    return rc;
}

/* One row per claim, each settling in its own transaction; or a batch
 * subscription's batch, sharing one. */
int lq__row_lock_claim(lq__claimed *out, lq_subscription *s, int limit) {
    const lq__dialect *d = s->broker->dialect;
    /* A worker's settlement may have opened the transaction already. */
    lq__conn *conn = lq__subscription_take_chained(s);
    bool begun = conn != NULL;
    int rc = begun ? LQ_OK : lq__pool_acquire(&conn, &s->broker->pool);
    if (rc != LQ_OK) return rc;
    lq__value args[LQ__P_COUNT] = {0};
    if (s->group) args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = s->group, .n = strlen(s->group)};
    args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = lq__now_ms()};
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = s->batch ? limit : 1};
    if (s->starts_key) /* the claim passes over keys at partition_rate_limit */
        args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = s->starts_key, .n = strlen(s->starts_key)};
    lq__claim_limits(s, args);
    claim_ctx ctx = {out, s};
    bool guarded = true, broken = false;
    /* A rate limit's starts are reserved first, in a transaction of their
     * own (forms/starts.c); a worker with a rate limit never chains. */
    lq__reserved reserved = {0};
    if (s->rate_limit && !begun) {
        rc = lq__starts_reserve(&reserved, &broken, s, conn, (int)args[LQ__P_LIMIT].i);
        args[LQ__P_LIMIT].i = broken ? 0 : reserved.count; /* broken: its session ends */
    }
    bool open = begun; /* a transaction to roll back if no row comes */
    if (rc == LQ_OK && !begun && args[LQ__P_LIMIT].i > 0) {
        rc = d->begin(conn, s->table->isolation);
        open = true;
    }
    if (rc == LQ_OK && s->concurrency && args[LQ__P_LIMIT].i > 0) rc = take_slots(out, args, s, conn);
    if (rc == LQ_OK && args[LQ__P_LIMIT].i > 0) rc = lq__fifo_guard(&guarded, s, conn);
    if (rc == LQ_OK && guarded && args[LQ__P_LIMIT].i > 0)
        rc = d->exec(NULL, conn, &s->sql.claim, args, on_claimed_row, &ctx);
    if (rc == LQ_OK && out->count > 0) rc = take_key_slot(s, conn, out);
    if (rc == LQ_OK && out->count > 0 && s->key_rate_limit) rc = record_key_start(out, s, args);
    if (rc == LQ_OK && out->count > 0 && s->batch) rc = share_transaction(out, conn);
    if (rc == LQ_OK && out->count > 0) {
        /* A batch short of its reserved starts keeps them: a delete in its
         * transaction would hold their rows locked (and, failing, abort the
         * batch) for as long as the batch runs. They count until they leave
         * the window, erring low. */
        /* The open transaction now belongs to the delivery, or the batch. */
        if (!s->batch) out->head->conn = conn;
        return LQ_OK;
    }
    if (open) d->rollback(conn);
    if (reserved.count && !broken && rc != LQ_CONNECT) rc = lq__starts_unreserve(s, conn, &reserved, 0, rc);
    lq__pool_release(&s->broker->pool, conn, broken || rc == LQ_CONNECT);
    return rc;
}
