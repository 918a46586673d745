/* Coalesced settlements: settlements of concurrent deliveries that run one
 * statement each on a pool connection (the lease form, and SQLite's advisory
 * form) are gathered and committed together, one transaction for all those
 * waiting at that moment, the acks among them as one statement over their
 * set of rows (sqlset.ack_set). The first caller leads: it waits, a
 * bounded time, for the other deliveries in work to join, then runs what has
 * gathered while the others wait for their results. */
#ifndef LQ_COALESCE_H
#define LQ_COALESCE_H

#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>

/* One statement to run, and its outcome. */
typedef struct lq_pending {
    const lq_stmt *stmt;
    lq_value args[LQ_P_COUNT];
    int64_t changes;
    int rc;
    bool done;
    char message[256];
    char sqlstate[6];
    int native;
    struct lq_pending *next;
} lq_pending;

typedef struct lq_coalescer {
    pthread_mutex_t mu;
    pthread_cond_t done;    /* a leader finished */
    pthread_cond_t arrived; /* a settlement joined the list */
    lq_pending *head, *tail;
    int gathered;           /* on the list */
    bool leading;
    /* The deliveries in work (kept by the subscription): a leader waits up
     * to wait_us while some of them have not joined yet. */
    atomic_int in_work;
    int64_t wait_us;
    const lq_stmt *ack, *ack_set; /* acks of one row, and of a set (NULL sql: none) */
    bool tokens;                  /* the set carries each row's lease token */
    const lq_stmt *ack_set_held;  /* with tokens: of a set whose rows share one (or NULL) */
} lq_coalescer;

LQ_HIDDEN void lq__coalescer_init(lq_coalescer *c);
LQ_HIDDEN void lq__coalescer_destroy(lq_coalescer *c);
/* Runs `stmt` with `args` in the next shared commit; as the dialect's exec,
 * with the error (if any) set on the calling thread. */
LQ_HIDDEN int lq__coalesced_exec(int64_t *changes, lq_coalescer *c, lq_pool *pool,
                                 const lq_stmt *stmt, const lq_value *args);
/* Runs a list of statements (linked by next) in the next shared commit, or,
 * with `gather` false, in one commit of their own at once. Each item's rc,
 * changes and error message say how it went. */
LQ_HIDDEN void lq__coalesced_run(lq_coalescer *c, lq_pool *pool, lq_pending *list, bool gather);
/* Sets the calling thread's error from an item that failed. */
LQ_HIDDEN int lq__pending_error(const lq_pending *p);

#endif
