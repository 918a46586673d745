/* Coalesced settlements: settlements of concurrent deliveries that run one
 * statement each on a pool connection (the lease form, and SQLite's advisory
 * form) are gathered and committed together, one transaction for all those
 * waiting at that moment, the acks among them as one statement over their
 * set of rows (sqlset.ack_set). The first caller leads: it waits, a
 * bounded time, for the other deliveries in work to join, then runs what has
 * gathered while the others wait for their results. */
#ifndef LQ_COALESCE_H
#define LQ_COALESCE_H

#include "core/pool.h"

#include <pthread.h>
#include <stdatomic.h>

/* One statement to run, and its outcome. */
typedef struct lq__pending {
    const lq__stmt *stmt;
    lq__value args[LQ__P_COUNT];
    int64_t changes;
    int rc;
    bool done;
    char message[256];
    char sqlstate[6];
    int native;
    struct lq__pending *next;
} lq__pending;

typedef struct lq__coalescer {
    pthread_mutex_t mu;
    pthread_cond_t done;    /* a leader finished */
    pthread_cond_t arrived; /* a settlement joined the list */
    lq__pending *head, *tail;
    int gathered;           /* on the list */
    bool leading;
    /* The deliveries in work (kept by the subscription): a leader waits up
     * to wait_us while some of them have not joined yet. */
    atomic_int in_work;
    int64_t wait_us;
    const lq__stmt *ack, *ack_set; /* acks of one row, and of a set (NULL sql: none) */
    bool tokens;                  /* the set carries each row's lease token */
    const lq__stmt *ack_set_held;  /* with tokens: of a set whose rows share one (or NULL) */
} lq__coalescer;

LQ__HIDDEN void lq__coalescer_init(lq__coalescer *c);
LQ__HIDDEN void lq__coalescer_destroy(lq__coalescer *c);
/* Runs `stmt` with `args` in the next shared commit; as the dialect's exec,
 * with the error (if any) set on the calling thread. */
LQ__HIDDEN int lq__coalesced_exec(int64_t *changes, lq__coalescer *c, lq__pool *pool,
                                 const lq__stmt *stmt, const lq__value *args);
/* Runs a list of statements (linked by next) in the next shared commit, or,
 * with `gather` false, in one commit of their own at once. Each item's rc,
 * changes and error message say how it went. */
LQ__HIDDEN void lq__coalesced_run(lq__coalescer *c, lq__pool *pool, lq__pending *list, bool gather);
/* Sets the calling thread's error from an item that failed. */
LQ__HIDDEN int lq__pending_error(const lq__pending *p);
/* After a settlement statement failed with `rc`: true, after a short wait
 * that grows with *tries, when it met a conflict that rolled it back (a
 * deadlock, a Galera certification failure: LQ_CONTENTION with SQLSTATE
 * class 40) and may run again; false once it has run LQ__SETTLE_TRIES
 * times, or failed otherwise (a lock wait timeout too). */
#define LQ__SETTLE_TRIES 5
LQ__HIDDEN bool lq__settle_again(int rc, int *tries);

#endif
