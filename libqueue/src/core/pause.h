/* Pauses (core/pause.c): what a subscription asks of the control table. */
#ifndef LQ_PAUSE_H
#define LQ_PAUSE_H

#include "core/broker.h"

/* The channel control notifications go on (PostgreSQL), with the payload
 * "<table label>\n<group>" (an empty group: the whole table). */
#define LQ__CONTROL_CHANNEL "lq_queue_control"

/* Whether the queue (table, and group or NULL) is paused now: by a row of
 * its own or its table's in the control table, read with `check` (the
 * statement lq__sql_build_paused builds) on a connection of the pool. No
 * control table reads as not paused. */
LQ__HIDDEN int lq__pause_read(bool *paused, lq_broker *b, const lq__stmt *check, const lq_table *t,
                              const char *group);
/* lq__pause_read's statement as a step of the caller's (a pipeline's): a
 * count of the pauses in *rows; a missing control table (LQ_SCHEMA) means
 * none. */
LQ__HIDDEN void lq__pause_step(lq__step *step, lq__value *args, int64_t *rows, const lq__stmt *check,
                               const lq_table *t, const char *group);
/* A control notification's payload heard: the broker's subscriptions of
 * that queue look at the control table before their next claim. */
LQ__HIDDEN void lq__pause_heard(lq_broker *b, const char *note);

#endif
