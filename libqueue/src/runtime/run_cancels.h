/* How a run learns that its row was cancelled while in work (lq_cancel),
 * looked after by the subscription's keeper thread. Lease form: a cancel
 * heard of (a notification, or lq_cancel in this broker) marks the run
 * cancelled at once, rather than at its lease's next extension. Row lock
 * form: the run's transaction holds the row, so a cancel asks in the
 * requests table; while runs are in work the keeper looks there twice a
 * second (and at once when a cancel is heard of), takes a request for a row
 * it holds, and removes the row in the run's own transaction. */
#ifndef LQ_RUN_CANCELS_H
#define LQ_RUN_CANCELS_H

#include "sql/sql.h"

#include <stdbool.h>
#include <stdint.h>

#define LQ__HEARD_MAX 16

typedef struct lq__run_cancels {
    bool watches; /* row lock form: the keeper looks at the requests */
    lq__cancel_requests_sql requests;
    lq__cancel_sql take_out; /* the row removed in its run's transaction */
    /* Under the subscription's mu: rows heard of, to look at; beyond
     * LQ__HEARD_MAX, `heard_lost` (every run is looked at). */
    int64_t heard[LQ__HEARD_MAX];
    int heard_count;
    bool heard_lost;
    bool due;           /* look at the requests now */
    int64_t looked_at;  /* the keeper's last look at the requests (monotonic ms) */
    bool table_missing; /* the last look found no requests table */
} lq__run_cancels;

struct lq_subscription;

/* Builds the statements a row lock subscription needs (watches then). */
LQ__HIDDEN int lq__run_cancels_init(lq__run_cancels *c, struct lq_subscription *s);
LQ__HIDDEN void lq__run_cancels_free(lq__run_cancels *c);
/* Row `id` was cancelled while in work somewhere; the subscription's mu held.
 * True when the keeper has something to look at now. */
LQ__HIDDEN bool lq__run_cancels_heard(lq__run_cancels *c, int64_t id);
/* The keeper's turn, the subscription's mu not held: marks the runs of rows
 * heard of (lease form) and takes the requests for rows this subscription's
 * runs hold (row lock form). Returns when to look next (monotonic ms), or 0
 * for no timed look. */
LQ__HIDDEN int64_t lq__run_cancels_look(struct lq_subscription *s);

#endif
