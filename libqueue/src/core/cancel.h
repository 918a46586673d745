/* Cancels (core/cancel.c): how a run hears that its row was cancelled. */
#ifndef LQ_CANCEL_H
#define LQ_CANCEL_H

#include "core/broker.h"

/* The channel cancels of rows in work are told on (PostgreSQL), with the
 * payload "<table label>\n<row id>". */
#define LQ__CANCEL_CHANNEL "lq_cancel"

/* A cancel notification's payload heard: the broker's subscriptions of that
 * table are told of the row. */
LQ__HIDDEN void lq__cancel_heard(lq_broker *b, const char *note);

#endif
