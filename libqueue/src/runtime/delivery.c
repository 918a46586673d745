/* Deliveries: one claimed row, its getters, and its lifetime. A delivery
 * holds a reference on its subscription, so a subscription closed while the
 * caller still holds pulled deliveries lives until they are freed. */
#include "runtime/runtime.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Blocks of deliveries let go wait for the next claims of their
 * subscription, rather than go back to the allocator (a claim's deliveries
 * may be made on one thread and freed on others, and blocks going back and
 * forth fragment the heap): as many as its deliveries were at their most
 * at once, up to SPARES_MAX, so the blocks never outnumber that peak. */
enum { SPARES_MAX = 4096 };

/* A block for a delivery with `payload_size` bytes of payload: a spare one
 * where it is large enough, else a new one. Zeroed, its mutex initialised. */
static lq_delivery *delivery_block(lq_subscription *s, size_t payload_size) {
    pthread_mutex_lock(&s->spares_mu);
    lq_delivery *d = s->spares;
    if (d) {
        s->spares = d->queue_next;
        s->spare_count--;
    }
    if (++s->live > s->live_peak) s->live_peak = s->live;
    pthread_mutex_unlock(&s->spares_mu);
    size_t room = d ? d->payload_room : 0;
    if (d && room < payload_size + 1) {
        free(d);
        d = NULL;
    }
    if (!d) {
        room = payload_size + 1;
        if (!(d = malloc(sizeof *d + room))) {
            pthread_mutex_lock(&s->spares_mu);
            s->live--;
            pthread_mutex_unlock(&s->spares_mu);
            return NULL;
        }
    }
    memset(d, 0, sizeof *d);
    /* Process-wide, so a block malloc gives again at a freed one's address
     * does not take its generation either; 0 is never used. */
    static atomic_uint generations = 1;
    unsigned g;
    while (!(g = atomic_fetch_add(&generations, 1) & 0xFFFF)) continue;
    d->generation = (uint16_t)g;
    d->sub = s; /* counted in its live deliveries; a reference once made */
    d->payload_room = room;
    pthread_mutex_init(&d->mu, NULL);
    return d;
}

#define HANDLE_SHIFT 48

lq_delivery *lq__handle_of(lq_delivery *d) {
    uintptr_t p = (uintptr_t)d;
    if (!d || p >> HANDLE_SHIFT) return d;
    return (lq_delivery *)(p | (uintptr_t)d->generation << HANDLE_SHIFT);
}

lq_delivery *lq__delivery_of(const lq_delivery *handle) {
    uintptr_t h = (uintptr_t)handle;
    lq_delivery *d = (lq_delivery *)(h & (((uintptr_t)1 << HANDLE_SHIFT) - 1));
    unsigned tag = (unsigned)(h >> HANDLE_SHIFT);
    if (!tag) return (lq_delivery *)handle; /* not tagged: addresses past 48 bits */
    return d->generation == tag ? d : NULL;
}

/* A handle whose delivery is gone: settled and let go, its block serving
 * another row now. */
static int stale(void) {
    return lq__error(LQ_MISUSE, "a delivery handle kept past its delivery's life (a pushed "
                                "delivery lives until its handler returns, a pulled one until "
                                "lq_delivery_free): nothing was done");
}

/* Frees what a delivery owns, and keeps its block for the next claim
 * while the subscription keeps fewer than its peak of deliveries. */
static void delivery_free(lq_delivery *d) {
    lq_subscription *s = d->sub;
    lq__holds_let_go(d);
    free(d->group);
    free(d->partition_key);
    lq__headers_clear(&d->headers);
    free(d->key);
    free(d->slot);
    free(d->key_slot);
    free(d->due);
    pthread_mutex_destroy(&d->mu);
    if (s) {
        pthread_mutex_lock(&s->spares_mu);
        s->live--;
        bool kept = s->spare_count < s->live_peak && s->spare_count < SPARES_MAX;
        if (kept) {
            d->queue_next = s->spares;
            s->spares = d;
            s->spare_count++;
        }
        pthread_mutex_unlock(&s->spares_mu);
        if (kept) return;
    }
    free(d);
}

void lq__delivery_spares_free(lq_subscription *s) {
    while (s->spares) {
        lq_delivery *d = s->spares;
        s->spares = d->queue_next;
        free(d);
    }
    s->spare_count = 0;
}

/* A time column as epoch ms; 0 when NULL or not a time's text. */
static int64_t time_of(const lq__value *v) {
    int64_t ms = 0;
    return lq__value_time_ms(&ms, v) ? ms : 0;
}

/* When a row became due to start: the later of its due time and its
 * publish (a retry is due at its retry_after, a delayed row at its delay). */
static int64_t ready_time(const lq__value *due, const lq__value *created) {
    int64_t a = time_of(due), b = time_of(created);
    return a > b ? a : b;
}

int lq__delivery_from_row(lq_delivery **out, lq_subscription *s, const lq__value *got, int count) {
    /* The row in LQ_COL_* order, NULL where the table lacks the column. */
    static const lq__value null_value = {.type = LQ__V_NULL};
    const lq__value *col[LQ__COL_COUNT];
    for (int i = 0; i < LQ__COL_COUNT; i++) {
        int at = s->row_at[i];
        if (at >= count) return lq__error(LQ_BACKEND, "a claim returned %d columns", count);
        col[i] = at >= 0 ? &got[at] : &null_value;
    }
    /* The payload lives in the delivery's own block, after it. */
    const lq__value *p = col[LQ__COL_PAYLOAD];
    size_t payload_size = p->type == LQ__V_NULL ? 0 : p->n;
    lq_delivery *d = delivery_block(s, payload_size);
    if (!d) return lq__error(LQ_NOMEM, "out of memory");
    atomic_init(&d->refs, 1);
    atomic_init(&d->run_ended, false);
    d->id = col[LQ__COL_ID]->i;
    d->payload = (unsigned char *)(d + 1);
    d->payload_size = payload_size;
    if (payload_size) memcpy(d->payload, p->p, payload_size);
    d->payload[payload_size] = '\0';
    d->attempt = col[LQ__COL_ATTEMPT]->type == LQ__V_INT ? (int)col[LQ__COL_ATTEMPT]->i : 0;
    d->group = lq__value_text(col[LQ__COL_GROUP]);
    d->partition_key = lq__value_text(col[LQ__COL_PKEY]);
    d->priority = col[LQ__COL_PRIORITY]->i;
    d->due = lq__value_text(col[LQ__COL_DUE]);
    const lq_table *t = s->table;
    const lq__value *payload_bytes = col[LQ__COL_PAYLOAD_SIZE], *headers_bytes = col[LQ__COL_HEADERS_SIZE];
    if (t->max_payload && payload_bytes->type == LQ__V_INT && payload_bytes->i > t->max_payload)
        d->oversize_payload = payload_bytes->i;
    if (t->max_headers && headers_bytes->type == LQ__V_INT && headers_bytes->i > t->max_headers)
        d->oversize_headers = headers_bytes->i;
    d->past_expiry = col[LQ__COL_EXPIRED]->type == LQ__V_INT && col[LQ__COL_EXPIRED]->i == 1;
    d->ready_ms = ready_time(col[LQ__COL_DUE], col[LQ__COL_CREATED]);
    bool missing = (col[LQ__COL_GROUP]->type != LQ__V_NULL && !d->group) ||
                   (col[LQ__COL_PKEY]->type != LQ__V_NULL && !d->partition_key) ||
                   (col[LQ__COL_DUE]->type != LQ__V_NULL && !d->due);
    int rc = missing ? lq__error(LQ_NOMEM, "out of memory") : LQ_OK;
    const lq__value *h = col[LQ__COL_HEADERS];
    if (rc == LQ_OK && h->type != LQ__V_NULL && h->n) {
        rc = lq__headers_from_json(&d->headers, h->p, h->n);
        if (rc != LQ_OK) {
            /* A malformed headers column must not lose the row: deliver it
             * with no headers and say so. */
            lq__log(LQ_LOG_WARNING, "row %lld: %s; delivered without headers", (long long)d->id,
                    lq_errmsg());
            rc = LQ_OK;
        }
    }
    if (rc != LQ_OK) {
        delivery_free(d);
        return rc;
    }
    atomic_fetch_add(&s->refs, 1);
    *out = d;
    return LQ_OK;
}

/* Frees deliveries that lost their last reference, the keeper's book
 * forgetting them under one hold of the subscription's lock. */
static void free_unreferenced(lq_subscription *s, lq_delivery **gone, size_t n) {
    if (n == 0) return;
    if (s->has_keeper) {
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < n; i++) lq__book_remove(&s->book, &gone[i]->entry);
        pthread_mutex_unlock(&s->mu);
    }
    for (size_t i = 0; i < n; i++) {
        delivery_free(gone[i]);
        lq__subscription_unref(s);
    }
}

void lq__deliveries_unref(lq_delivery *const *dvs, size_t n) {
    if (n == 0) return;
    lq_subscription *s = dvs[0]->sub;
    lq_delivery *gone[64];
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (atomic_fetch_sub(&dvs[i]->refs, 1) != 1) continue;
        gone[count++] = dvs[i];
        if (count == sizeof gone / sizeof gone[0]) {
            free_unreferenced(s, gone, count);
            count = 0;
        }
    }
    free_unreferenced(s, gone, count);
}

void lq__delivery_unref(lq_delivery *d) {
    if (d) lq__deliveries_unref(&d, 1);
}

void lq__delivery_end_run(lq_delivery *d) {
    pthread_mutex_lock(&d->mu); /* takes its turn with an expiry (lq__settle_expired) */
    atomic_store(&d->run_ended, true);
    pthread_mutex_unlock(&d->mu);
    lq__holds_let_go(d); /* no longer in work: its room may be claimed */
}

void lq_delivery_free(lq_delivery *handle) {
    lq__error_clear();
    lq_delivery *d = lq__delivery_of(handle);
    if (!d) return;
    if (!d->behind && !d->settled && !d->in_set && lq__settle(d, LQ__RELEASE, 0) != LQ_OK)
        lq__log_error(LQ_LOG_WARNING, "releasing an unsettled delivery");
    lq__delivery_unref(d);
}

/* The getters read NULL or 0 from a NULL or stale handle. */
#define LIVE(h) lq_delivery *d = (h) ? lq__delivery_of(h) : NULL

int64_t lq_delivery_id(const lq_delivery *h) { LIVE(h); return d ? d->id : 0; }
const void *lq_delivery_payload(const lq_delivery *h) { LIVE(h); return d ? d->payload : NULL; }
size_t lq_delivery_payload_size(const lq_delivery *h) { LIVE(h); return d ? d->payload_size : 0; }
int lq_delivery_attempt(const lq_delivery *h) { LIVE(h); return d ? d->attempt : 0; }
const char *lq_delivery_group(const lq_delivery *h) { LIVE(h); return d ? d->group : NULL; }
const char *lq_delivery_partition_key(const lq_delivery *h) { LIVE(h); return d ? d->partition_key : NULL; }
size_t lq_delivery_header_count(const lq_delivery *h) { LIVE(h); return d ? d->headers.count : 0; }

int lq_delivery_header_at(const char **name_out, const char **value_out, const lq_delivery *h,
                          size_t index) {
    lq__error_clear();
    LQ__CHECK_ARG(h, "delivery is NULL");
    LIVE(h);
    if (!d) return stale();
    if (index >= d->headers.count)
        return lq__error(LQ_MISUSE, "header %zu of %zu", index, d->headers.count);
    if (name_out) *name_out = d->headers.names[index];
    if (value_out) *value_out = d->headers.values[index];
    return LQ_OK;
}

const char *lq_delivery_header(const lq_delivery *h, const char *name) {
    LIVE(h);
    return d && name ? lq__headers_get(&d->headers, name) : NULL;
}

int64_t lq_delivery_lease_expiry_ms(const lq_delivery *h) {
    LIVE(h);
    if (!d) return 0;
    pthread_mutex_lock(&d->mu);
    int64_t token = d->token;
    pthread_mutex_unlock(&d->mu);
    return token;
}

int lq_delivery_cancelled(const lq_delivery *h) {
    LIVE(h);
    if (!d) return 0;
    pthread_mutex_lock(&d->mu);
    int cancelled = d->cancelled;
    pthread_mutex_unlock(&d->mu);
    return cancelled;
}

int lq_delivery_expired(const lq_delivery *h) {
    LIVE(h);
    if (!d) return 0;
    pthread_mutex_lock(&d->mu);
    int expired = d->expired;
    pthread_mutex_unlock(&d->mu);
    return expired;
}

/* A delivery whose ack went behind: the caller settles it no more. */
static int gone_behind(const lq_delivery *d) {
    return lq__error(LQ_MISUSE, "row %lld is already settled (its ack went behind)",
                     (long long)d->id);
}

/* Settles the delivery of a handle, or says it is stale. */
static int settle_handle(lq_delivery *h, lq__outcome outcome, int64_t delay_ms) {
    LQ__CHECK_ARG(h, "delivery is NULL");
    LIVE(h);
    if (!d) return stale();
    return d->behind ? gone_behind(d) : lq__settle(d, outcome, delay_ms);
}

int lq_delivery_ack(lq_delivery *h) {
    lq__error_clear();
    return settle_handle(h, LQ__ACK, 0);
}

int lq_delivery_retry(lq_delivery *h) {
    lq__error_clear();
    return settle_handle(h, LQ__RETRY, 0);
}

int lq_delivery_retry_after(lq_delivery *h, int64_t delay_ms) {
    lq__error_clear();
    int rc = lq__check_delay(delay_ms, "retry_after");
    return rc == LQ_OK ? settle_handle(h, LQ__RETRY_AFTER, delay_ms) : rc;
}

int lq_delivery_dead_letter(lq_delivery *h) {
    lq__error_clear();
    return settle_handle(h, LQ__DEAD_LETTER, 0);
}

/* Queues the acks of unsettled deliveries of one subscription for its
 * acker; false where they do not go behind (the caller acks them, which
 * ends their runs as well). */
static bool ack_behind(lq_delivery *const *dvs, size_t n) {
    lq_subscription *s = dvs[0]->sub;
    if (s->mode != LQ__MODE_PULL || !lq__acker_wanted(s)) return false;
    for (size_t i = 0; i < n; i++) {
        lq__delivery_end_run(dvs[i]); /* their acks are asked for: the runs are over */
        atomic_fetch_add(&dvs[i]->refs, 1); /* the acker's, let go when its ack is done */
        dvs[i]->behind = true;
    }
    if (lq__acker_take(&s->acker, dvs, n, true)) return true;
    for (size_t i = 0; i < n; i++) { /* stopped: acked by the caller */
        dvs[i]->behind = false;
        lq__delivery_unref(dvs[i]);
    }
    return false;
}

int lq_delivery_ack_behind(lq_delivery *h) {
    lq__error_clear();
    LQ__CHECK_ARG(h, "delivery is NULL");
    LIVE(h);
    if (!d) return stale();
    if (d->behind) return gone_behind(d);
    pthread_mutex_lock(&d->mu);
    bool settled = d->settled || d->in_set;
    pthread_mutex_unlock(&d->mu);
    if (!settled && ack_behind(&d, 1)) return LQ_OK;
    return lq__settle(d, LQ__ACK, 0);
}

int lq_subscription_acks_behind(const lq_subscription *s) {
    return s && lq__acker_wanted(s) ? 1 : 0;
}

void lq_delivery_handled(lq_delivery *h) {
    LIVE(h);
    if (!d || !d->sub) return;
    lq__delivery_end_run(d);
    lq__subscription_settling(d->sub, &d, 1);
}

/* The deliveries of `count` handles into dvs: LQ_MISUSE, naming why, when
 * one is NULL, stale or settled, or they are of several subscriptions. */
static int unsettled_set(lq_delivery **dvs, lq_delivery *const *handles, size_t count) {
    for (size_t i = 0; i < count; i++) {
        if (!handles[i]) return lq__error(LQ_MISUSE, "a delivery is NULL; none was acked");
        if (!(dvs[i] = lq__delivery_of(handles[i]))) return stale();
        if (dvs[i]->sub != dvs[0]->sub)
            return lq__error(LQ_MISUSE, "deliveries of several subscriptions; none was acked");
        pthread_mutex_lock(&dvs[i]->mu);
        bool settled = dvs[i]->behind || dvs[i]->settled || dvs[i]->in_set;
        pthread_mutex_unlock(&dvs[i]->mu);
        if (settled)
            return lq__error(LQ_MISUSE, "row %lld is already settled; none was acked",
                             (long long)dvs[i]->id);
    }
    return LQ_OK;
}

/* lq_deliveries_ack, and with `behind` lq_deliveries_ack_behind. */
static int ack_set(int *statuses, lq_delivery *const *handles, size_t count, bool behind) {
    lq__error_clear();
    LQ__CHECK_ARG(handles || count == 0, "deliveries is NULL");
    if (count == 0) return LQ_OK;
    lq_delivery **dvs = calloc(count, sizeof *dvs);
    if (!dvs) return lq__error(LQ_NOMEM, "out of memory");
    int rc = unsettled_set(dvs, handles, count);
    if (rc == LQ_OK && behind && ack_behind(dvs, count)) {
        for (size_t i = 0; statuses && i < count; i++) statuses[i] = LQ_OK;
    } else if (rc == LQ_OK) {
        rc = lq__settle_acks(statuses, dvs, count, false);
    }
    free(dvs);
    return rc;
}

int lq_deliveries_ack(int *statuses, lq_delivery *const *handles, size_t count) {
    return ack_set(statuses, handles, count, false);
}

int lq_deliveries_ack_behind(int *statuses, lq_delivery *const *handles, size_t count) {
    return ack_set(statuses, handles, count, true);
}

int lq__delivery_begin(lq_delivery *d) {
    lq_subscription *s = d->sub;
    const lq__dialect *dialect = s->broker->dialect;
    int rc = LQ_OK;
    if (s->form == LQ_FORM_ROW_LOCK) {
        /* The claim's transaction goes on; a failure outcome rolls back to here. */
        rc = dialect->execute(NULL, d->conn, "SAVEPOINT lq_claim", NULL, 0);
    } else {
        if (!d->conn && (rc = lq__pool_acquire(&d->conn, &s->broker->pool)) == LQ_OK) {
            /* Reserved at its claim: the connection was counted as held then. */
            if (!d->reserved) lq__subscription_hold(s);
            d->reserved = false;
        }
        if (rc == LQ_OK) rc = dialect->begin(d->conn, s->table->isolation);
    }
    if (rc == LQ_OK) d->tx = true;
    return rc;
}

int lq_delivery_exec(int64_t *changes_out, lq_delivery *h, const char *sql,
                     const char *const *params, size_t count) {
    lq__error_clear();
    LQ__CHECK_ARG(h && sql, "an argument is NULL");
    if (changes_out) *changes_out = 0;
    LIVE(h);
    if (!d) return stale();
    const lq__dialect *dialect = d->sub->broker->dialect;
    pthread_mutex_lock(&d->mu);
    int rc = LQ_OK;
    if (d->behind || d->settled || d->in_set) {
        rc = lq__error(LQ_MISUSE, "row %lld is already settled", (long long)d->id);
    } else if (d->tx) {
        rc = dialect->execute(changes_out, d->conn, sql, params, (int)count);
    } else {
        /* Not transactional: a statement of its own, on the handler thread's
         * pool (on_threads) or the broker's. */
        lq__pool *pool = lq__thread_pool(d->sub) ? lq__thread_pool(d->sub) : &d->sub->broker->pool;
        lq__conn *conn;
        if ((rc = lq__pool_acquire(&conn, pool)) == LQ_OK) {
            rc = dialect->execute(changes_out, conn, sql, params, (int)count);
            lq__pool_release(pool, conn, rc == LQ_CONNECT);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}
