/* Coalesced settlements: settlements of concurrent deliveries that run one
 * statement each on a pool connection (the lease form, and SQLite's advisory
 * form) are gathered and committed together, one transaction for all those
 * waiting at that moment. The first caller leads: it runs what has gathered
 * while the others wait for their results; nothing waits for a timer. */
#ifndef LQ_COALESCE_H
#define LQ_COALESCE_H

#include "pool.h"

#include <pthread.h>

typedef struct lq_pending lq_pending;

typedef struct lq_coalescer {
    pthread_mutex_t mu;
    pthread_cond_t done;
    lq_pending *head, *tail;
    bool leading;
} lq_coalescer;

LQ_HIDDEN void lq__coalescer_init(lq_coalescer *c);
LQ_HIDDEN void lq__coalescer_destroy(lq_coalescer *c);
/* Runs `stmt` with `args` in the next shared commit; as the dialect's exec,
 * with the error (if any) set on the calling thread. */
LQ_HIDDEN int lq__coalesced_exec(int64_t *changes, lq_coalescer *c, lq_pool *pool,
                                 const lq_stmt *stmt, const lq_value *args);

#endif
