#include "core/pool.h"

#include "base/clock.h"
#include "base/redact.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

int lq__pool_init(lq__pool *pool, const lq__dialect *d, const lq__broker_target *target,
                  const lq_options *options) {
    return lq__pool_init_sized(pool, d, target, options, (int)lq__opt_int(options, LQ_OPT_POOL_SIZE));
}

int lq__pool_init_sized(lq__pool *pool, const lq__dialect *d, const lq__broker_target *target,
                        const lq_options *options, int size) {
    pool->dialect = d;
    pool->target = target;
    pool->options = options;
    pool->size = size;
    pool->acquire_timeout_ms = lq__opt_int(options, LQ_OPT_ACQUIRE_TIMEOUT_MS);
    pool->idle_count = pool->open = 0;
    atomic_init(&pool->lent, 0);
    pool->idle = calloc((size_t)pool->size, sizeof *pool->idle);
    if (!pool->idle) return lq__error(LQ_NOMEM, "out of memory");
    pthread_mutex_init(&pool->mu, NULL);
    lq__cond_init(&pool->freed);
    return LQ_OK;
}

void lq__pool_destroy(lq__pool *pool) {
    for (int i = 0; i < pool->idle_count; i++) pool->dialect->disconnect(pool->idle[i]);
    free(pool->idle);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->freed);
}

int lq__pool_acquire(lq__conn **out, lq__pool *pool) {
    return lq__pool_acquire_within(out, pool, pool->acquire_timeout_ms);
}

/* A connection counted as open and lent that did not open: its count goes. */
static void opening_failed(lq__pool *pool) {
    lq__error_redact(pool->target->password);
    pthread_mutex_lock(&pool->mu);
    pool->open--;
    atomic_fetch_sub(&pool->lent, 1);
    pthread_cond_signal(&pool->freed);
    pthread_mutex_unlock(&pool->mu);
}

int lq__pool_acquire_within(lq__conn **out, lq__pool *pool, int64_t timeout_ms) {
    struct timespec deadline = lq__deadline_in(timeout_ms);
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        if (pool->idle_count > 0) {
            lq__conn *conn = pool->idle[--pool->idle_count];
            atomic_fetch_add(&pool->lent, 1);
            pthread_mutex_unlock(&pool->mu);
            /* Out of the lock: the look at the socket is a system call. */
            if (!pool->dialect->closed_while_idle || !pool->dialect->closed_while_idle(conn)) {
                *out = conn;
                return LQ_OK;
            }
            pool->dialect->disconnect(conn);
            pthread_mutex_lock(&pool->mu);
            pool->open--; /* gone: another idle one, or a new one */
            atomic_fetch_sub(&pool->lent, 1);
            continue;
        }
        if (pool->open < pool->size) {
            pool->open++;
            atomic_fetch_add(&pool->lent, 1);
            pthread_mutex_unlock(&pool->mu);
            int rc = pool->dialect->connect(out, pool->target, pool->options);
            if (rc != LQ_OK) opening_failed(pool);
            return rc;
        }
        if (pthread_cond_timedwait(&pool->freed, &pool->mu, &deadline) == ETIMEDOUT) {
            int size = pool->size;
            pthread_mutex_unlock(&pool->mu);
            return lq__error(LQ_TIMEOUT,
                             "no pool connection came free in %lld ms: all %d are in use "
                             "(raise pool_size or lower the workers)",
                             (long long)timeout_ms, size);
        }
    }
}

void lq__pool_release(lq__pool *pool, lq__conn *conn, bool broken) {
    if (!conn) return;
    if (!broken && pool->dialect->reusable) broken = !pool->dialect->reusable(conn);
    if (broken) pool->dialect->disconnect(conn);
    pthread_mutex_lock(&pool->mu);
    if (broken) pool->open--;
    else pool->idle[pool->idle_count++] = conn;
    atomic_fetch_sub(&pool->lent, 1);
    pthread_cond_signal(&pool->freed);
    pthread_mutex_unlock(&pool->mu);
}

int lq__pool_spare(lq__pool *pool) { return pool->size - atomic_load(&pool->lent); }

void lq__pool_counts(lq__pool *pool, int *lent, int *idle) {
    pthread_mutex_lock(&pool->mu);
    *lent = atomic_load(&pool->lent);
    *idle = pool->idle_count;
    pthread_mutex_unlock(&pool->mu);
}

/* Warming: each thread opens its share of the connections and gives them
 * back idle. They count as lent while they open, as an acquire's would. */
typedef struct warm_share {
    lq__pool *pool;
    lq__conn_fn ready;
    void *ctx;
    int count;
    pthread_t thread;
} warm_share;

static void *open_share(void *arg) {
    warm_share *w = arg;
    lq__pool *pool = w->pool;
    for (int i = 0; i < w->count; i++) {
        lq__conn *conn = NULL;
        int rc = pool->dialect->connect(&conn, pool->target, pool->options);
        if (rc != LQ_OK) opening_failed(pool);
        else if (w->ready && (rc = w->ready(conn, w->ctx)) != LQ_OK) lq__pool_release(pool, conn, true);
        else lq__pool_release(pool, conn, false);
        if (rc != LQ_OK) {
            lq__log_error(LQ_LOG_DEBUG, "a connection opened ahead");
            lq__error_clear();
        }
    }
    return NULL;
}

#define WARM_THREADS 8

void lq__pool_warm(lq__pool *pool, int n, lq__conn_fn ready, void *ctx) {
    pthread_mutex_lock(&pool->mu);
    int want = (n < pool->size ? n : pool->size) - pool->open;
    if (want > 0) {
        pool->open += want;
        atomic_fetch_add(&pool->lent, want);
    }
    pthread_mutex_unlock(&pool->mu);
    if (want <= 0) return;
    warm_share shares[WARM_THREADS];
    int threads = want < WARM_THREADS ? want : WARM_THREADS;
    for (int i = 0; i < threads; i++)
        shares[i] = (warm_share){.pool = pool, .ready = ready, .ctx = ctx, .count = want / threads + (i < want % threads)};
    /* The first share is opened here; a thread that cannot start leaves
     * its share to this one. */
    int started = 0;
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&shares[i].thread, NULL, open_share, &shares[i]) == 0) started |= 1 << i;
        else shares[0].count += shares[i].count;
    }
    open_share(&shares[0]);
    for (int i = 1; i < threads; i++)
        if (started & 1 << i) pthread_join(shares[i].thread, NULL);
}
