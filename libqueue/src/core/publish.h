/* Publishing as the core's other parts use it: the checks lq_publish makes,
 * and the writes it runs, on a connection whose transaction the caller owns
 * (the scheduler's ticks). */
#ifndef LQ_PUBLISH_H
#define LQ_PUBLISH_H

#include "core/broker.h"

/* LQ_SCHEMA, naming message `index`, for a field the table has no column
 * for (or an id where the table generates them, or none where it does not). */
LQ__HIDDEN int lq__check_message(const lq_table *t, const lq_message *m, size_t index);

/* The values of one message's row, in args[LQ__P_COUNT], its times counted
 * from `now` (the host's clock); the headers' JSON goes to `json`, which the
 * caller frees after the statement ran. */
LQ__HIDDEN int lq__publish_row_args(lq__value *args, lq__strbuf *json, const lq_message *m,
                                    int64_t now);

/* Writes checked messages on `conn` and sends their notifications, as
 * lq_publish_on does; the caller wakes this process's subscriptions after
 * its commit (lq__broker_wake). */
LQ__HIDDEN int lq__publish_in(int64_t *ids_out, lq_broker *b, lq__conn *conn, const lq_table *t,
                              lq_message *const *messages, size_t count);

#endif
