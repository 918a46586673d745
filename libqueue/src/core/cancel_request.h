/* The canceller's side of a cancel request (core/cancel_request.c), the way
 * a cancel reaches a row lock run: the run's transaction holds the row, so
 * the cancel asks in the requests table, and the process whose run holds
 * the row takes the request and removes the row in that transaction. */
#ifndef LQ_CANCEL_REQUEST_H
#define LQ_CANCEL_REQUEST_H

#include "core/broker.h"

typedef struct lq__cancel_request {
    lq_broker *b;
    const lq_table *t;
    lq__conn *conn; /* the canceller's, borrowed (set anew for each call): every statement
                     * commits on its own */
    lq__cancel_requests_sql sql;
    lq__value args[LQ__P_COUNT];
} lq__cancel_request;

/* Asks for row `id` to be cancelled in its run (making the requests table
 * at the first request, and deleting the queue's requests left behind),
 * then tells the runs: this broker's subscriptions, and on PostgreSQL every
 * listening broker. A request of another cancel of the row serves both. */
LQ__HIDDEN int lq__cancel_request_open(lq__cancel_request *r, lq_broker *b, lq__conn *conn,
                                       const lq_table *t, int64_t id);
/* Asks again, after the request went (a cancel beside this one ended). */
LQ__HIDDEN int lq__cancel_request_ask(lq__cancel_request *r);
/* The request's state: 0 asked, 1 taken (the run's process removes the
 * row, or did), -1 gone. */
LQ__HIDDEN int lq__cancel_request_state(int *state, lq__cancel_request *r);
/* Withdraws the request if no process took it yet (*withdrawn then). */
LQ__HIDDEN int lq__cancel_request_withdraw(bool *withdrawn, lq__cancel_request *r);
/* Deletes the request, whatever its state (best effort), and frees `r`. */
LQ__HIDDEN void lq__cancel_request_close(lq__cancel_request *r);
/* Tells the runs of row `id` that it was cancelled while in work: this
 * broker's subscriptions, and on PostgreSQL every listening broker (with a
 * notification sent on conn). */
LQ__HIDDEN void lq__cancel_tell(lq_broker *b, lq__conn *conn, const lq_table *t, int64_t id);

#endif
