/* The broker's connection pool: at most `size` connections, opened on demand,
 * handed out one at a time with a deadline. */
#ifndef LQ_POOL_H
#define LQ_POOL_H

#include "sql/dialect.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct lq__pool {
    pthread_mutex_t mu;
    pthread_cond_t freed;
    const lq__dialect *dialect;
    const lq__broker_target *target;
    const lq_options *options;
    lq__conn **idle;
    int idle_count;
    int open; /* idle and lent */
    int size;
    atomic_int lent; /* changed under mu; read without it (lq__pool_spare) */
    int64_t acquire_timeout_ms;
} lq__pool;

LQ__HIDDEN int lq__pool_init(lq__pool *pool, const lq__dialect *d, const lq__broker_target *target,
                            const lq_options *options);
/* The same, `size` connections instead of the pool_size option. */
LQ__HIDDEN int lq__pool_init_sized(lq__pool *pool, const lq__dialect *d,
                                  const lq__broker_target *target, const lq_options *options,
                                  int size);
LQ__HIDDEN void lq__pool_destroy(lq__pool *pool);
/* Lends a connection, opening one while the pool has room, else waiting up
 * to the acquire timeout (LQ_TIMEOUT, with the pool's numbers). */
LQ__HIDDEN int lq__pool_acquire(lq__conn **out, lq__pool *pool);
/* The same, waiting at most `timeout_ms` (0: only what is free now). */
LQ__HIDDEN int lq__pool_acquire_within(lq__conn **out, lq__pool *pool, int64_t timeout_ms);
/* Opens connections, side by side, until `n` are open (at most the pool's
 * size), passes each to `ready` (may be NULL) and leaves them idle: for a
 * subscription whose rows each hold a connection, so that its first claims
 * find theirs open and ready rather than each waiting for a connect of its
 * own. One that fails to open or to get ready is closed, and left to the
 * acquire that needs it to report. */
typedef int (*lq__conn_fn)(lq__conn *conn, void *ctx);
LQ__HIDDEN void lq__pool_warm(lq__pool *pool, int n, lq__conn_fn ready, void *ctx);
/* Takes a connection back; a broken one is closed instead. */
LQ__HIDDEN void lq__pool_release(lq__pool *pool, lq__conn *conn, bool broken);
/* Idle connections plus room for new ones: a glance without the lock,
 * which the flow takes often and acquiring settles for certain. */
LQ__HIDDEN int lq__pool_spare(lq__pool *pool);
/* The connections lent out and those open and idle, now. */
LQ__HIDDEN void lq__pool_counts(lq__pool *pool, int *lent, int *idle);

#endif
