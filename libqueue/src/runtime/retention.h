/* Retention in a subscription's idle time (retain_ms, dead_letter_retain_ms):
 * a claimer that rests after a short claim deletes one batch of finished
 * rows, and one of dead letters, older than the option says, then rests
 * on. A full batch leaves more for the next rest; a short one means nothing
 * older was left, and the next look comes after a tenth of the age (at least
 * the poll interval, at most a minute). The deletes are core/prune.h's
 * batches: a thousand rows, each its own short transaction. They read
 * through the index on processed_at that lq_table_create and lq_queue_prune
 * make; this does not make it, as DDL in the claim path would wait for (and
 * on MySQL hold up behind it) every transaction open on the table. */
#ifndef LQ_RETENTION_H
#define LQ_RETENTION_H

#include "core/broker.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct lq__retention {
    int64_t retain_ms;      /* finished rows older than this go, or 0 */
    int64_t dead_retain_ms; /* dead letters older than this go, or 0 */
    int64_t due_ms;         /* monotonic ms: the next look */
    bool running;           /* a claimer is pruning now */
} lq__retention;

/* Whether a resting claimer should prune now; if so it is marked running.
 * The subscription's lock held. */
LQ__HIDDEN bool lq__retention_take_turn(lq__retention *r, int64_t now_ms);

/* One batch of each kind that is on, without the subscription's lock;
 * returns when to look next (monotonic ms). A failure is logged as a
 * warning and looked at again later: retention never stops claims. */
LQ__HIDDEN int64_t lq__retention_run(lq__retention *r, lq_broker *b, const lq_table *t,
                                     const char *group, int64_t poll_ms);

/* The turn is over: the subscription's lock held again. */
LQ__HIDDEN void lq__retention_end_turn(lq__retention *r, int64_t due_ms);

#endif
