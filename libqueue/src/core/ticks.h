/* A schedule's ticks in the database: the tick a broker enqueues is claimed
 * by its row in the ticks table, whose key (schedule, tick) lets one broker
 * alone write it, in the transaction that writes the tick's message. */
#ifndef LQ_TICKS_H
#define LQ_TICKS_H

#include "core/broker.h"

/* The statements of one schedule's table's ticks. */
typedef struct lq__ticks {
    lq__stmt claim; /* the tick's row, stamped on the database's clock */
    lq__stmt last;  /* the latest tick claimed, as one row (NULL: none) */
    lq__stmt prune; /* the rows of ticks before LQ__P_TICK */
} lq__ticks;

/* Makes the ticks table if missing, and builds the statements. Ownership:
 * the caller frees them with lq__ticks_free. */
LQ__HIDDEN int lq__ticks_open(lq__ticks *out, lq_broker *b, const lq_table *t);
LQ__HIDDEN void lq__ticks_free(lq__ticks *ticks);

/* The latest tick of schedule `name` any broker enqueued; *found false when
 * none did. */
LQ__HIDDEN int lq__ticks_last(int64_t *out, bool *found, lq_broker *b, const lq__ticks *ticks,
                              const char *name);

/* Enqueues `m` (a checked message) into `t` for `tick` of schedule `name`,
 * unless another broker claimed the tick first (*fired false), and forgets
 * the ticks claimed more than `keep_ms` before it. */
LQ__HIDDEN int lq__ticks_fire(bool *fired, lq_broker *b, const lq__ticks *ticks, const lq_table *t,
                              const char *name, int64_t tick, int64_t keep_ms, lq_message *m);

#endif
