/* Acks behind the handlers. In the lease form a delivery whose handler
 * returned holds nothing but its lease (in the advisory form, where keys
 * live in the process, as on SQLite, nothing but its key, let go when the
 * ack commits), so its worker need not wait for the ack's commit: the ack goes to the subscription's acker thread, and the
 * worker takes its next row at once. The acker runs all the acks gathered
 * while it was busy as one statement and one commit, so the more the
 * handlers outpace the commits, the more rows each commit settles. A
 * delivery stays in work until its ack commits (lanes, FIFO groups and the
 * subscription's counts see it there); the claims treat it as settling. */
#ifndef LQ_ACKER_H
#define LQ_ACKER_H

#include "base/internal.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct lq_delivery lq_delivery;
typedef struct lq_subscription lq_subscription;

typedef struct lq__acker {
    pthread_mutex_t mu;
    pthread_cond_t arrived; /* an ack joined the queue, or stop */
    pthread_cond_t room;    /* the queue has room again */
    lq_delivery *head, *tail;
    int queued;
    int arriving; /* takes let in and not yet queued */
    bool stopping;
    bool running;
    pthread_t thread;
    /* While it is true (the subscription's last claim was cut short by the
     * queue's concurrency), the next claim carries the queued acks in its
     * own transaction (lq__acker_hand_over): the acker leaves them to it
     * for a moment. NULL: never. */
    const atomic_bool *carried;
} lq__acker;

/* Whether a subscription's acks go behind its handlers (push mode, or
 * lq_delivery_ack_behind): the lease form or advisory keys kept in the
 * process, option coalesce not 0, not transactional, not a batch (whose
 * handler's return acks its batch as one set already). */
LQ__HIDDEN bool lq__acker_wanted(const lq_subscription *s);
LQ__HIDDEN void lq__acker_init(lq__acker *a);
LQ__HIDDEN int lq__acker_start(lq__acker *a);
/* Hands the acks of `n` deliveries of the acker's subscription whose
 * handlers returned to the acker, with the caller's references; false when
 * the acker is not running, or stopped (the caller acks them itself).
 * `start`: starts it first if need be (a pulled subscription's, started at
 * its first ack behind). Waits while the queue is full. Thread-safe. */
LQ__HIDDEN bool lq__acker_take(lq__acker *a, lq_delivery *const *dvs, size_t n, bool start);
/* Takes up to `max` of the acks queued, with their references, for a claim
 * to run in its transaction; returns how many. */
LQ__HIDDEN size_t lq__acker_hand_over(lq__acker *a, lq_delivery **out, size_t max);
/* Runs every ack queued, then ends the thread; for good: later takes are
 * refused. */
LQ__HIDDEN void lq__acker_stop(lq__acker *a);
LQ__HIDDEN void lq__acker_destroy(lq__acker *a);

#endif
