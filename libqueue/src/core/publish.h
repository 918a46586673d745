/* Publishing as the core's other parts use it: the checks lq_publish makes,
 * and the writes it runs, on a connection whose transaction the caller owns
 * (the scheduler's ticks). */
#ifndef LQ_PUBLISH_H
#define LQ_PUBLISH_H

#include "core/broker.h"

/* LQ_SCHEMA, naming message `index`, for a field the table has no column
 * for (or an id where the table generates them, or none where it does not). */
LQ__HIDDEN int lq__check_message(const lq_table *t, const lq_message *m, size_t index);

/* Writes checked messages on `conn` and sends their notifications, as
 * lq_publish_on does; the caller wakes this process's subscriptions after
 * its commit (lq__broker_wake). */
LQ__HIDDEN int lq__publish_in(int64_t *ids_out, lq_broker *b, lq__conn *conn, const lq_table *t,
                              lq_message *const *messages, size_t count);

#endif
