/* The broker's connection pool: at most `size` connections, opened on demand,
 * handed out one at a time with a deadline. */
#ifndef LQ_POOL_H
#define LQ_POOL_H

#include "dialect.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct lq_pool {
    pthread_mutex_t mu;
    pthread_cond_t freed;
    const lq_dialect *dialect;
    const lq_broker_target *target;
    const lq_options *options;
    lq_conn **idle;
    int idle_count;
    int open; /* idle and lent */
    int size;
    atomic_int lent; /* changed under mu; read without it (lq__pool_spare) */
    int64_t acquire_timeout_ms;
} lq_pool;

LQ_HIDDEN int lq__pool_init(lq_pool *pool, const lq_dialect *d, const lq_broker_target *target,
                            const lq_options *options);
/* The same, `size` connections instead of the pool_size option. */
LQ_HIDDEN int lq__pool_init_sized(lq_pool *pool, const lq_dialect *d,
                                  const lq_broker_target *target, const lq_options *options,
                                  int size);
LQ_HIDDEN void lq__pool_destroy(lq_pool *pool);
/* Lends a connection, opening one while the pool has room, else waiting up
 * to the acquire timeout (LQ_TIMEOUT, with the pool's numbers). */
LQ_HIDDEN int lq__pool_acquire(lq_conn **out, lq_pool *pool);
/* The same, waiting at most `timeout_ms` (0: only what is free now). */
LQ_HIDDEN int lq__pool_acquire_within(lq_conn **out, lq_pool *pool, int64_t timeout_ms);
/* Takes a connection back; a broken one is closed instead. */
LQ_HIDDEN void lq__pool_release(lq_pool *pool, lq_conn *conn, bool broken);
/* Idle connections plus room for new ones: a glance without the lock,
 * which the flow takes often and acquiring settles for certain. */
LQ_HIDDEN int lq__pool_spare(lq_pool *pool);

#endif
