/* Schedules: the broker's part in them (lq_schedule_add) is one thread,
 * started with its first schedule, that sleeps until the earliest tick due
 * and enqueues it through the ticks table (core/ticks.h). */
#ifndef LQ_SCHEDULE_H
#define LQ_SCHEDULE_H

#include "core/broker.h"

/* Stops the broker's scheduler thread, if it has one, and frees its
 * schedules: no tick is enqueued once it returns. Idempotent. */
LQ__HIDDEN void lq__scheduler_stop(lq_broker *b);

#endif
