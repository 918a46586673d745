/* Time: the host's wall clock for leases and due times (every settlement
 * compares the lease the host wrote), a monotonic clock for deadlines, and
 * the text form SQLite keeps times in. */
#ifndef LQ_CLOCK_H
#define LQ_CLOCK_H

#include "base/internal.h"

#include <pthread.h>
#include <time.h>

/* Milliseconds since the epoch, UTC. */
LQ__HIDDEN int64_t lq__now_ms(void);
/* Milliseconds of a monotonic clock, for deadlines and waits. */
LQ__HIDDEN int64_t lq__mono_ms(void);
/* Microseconds of the same clock, for timings. */
LQ__HIDDEN int64_t lq__mono_us(void);
/* An absolute CLOCK_MONOTONIC time `ms` from now, for pthread_cond_timedwait
 * on a condition created by lq__cond_init. */
LQ__HIDDEN struct timespec lq__deadline_in(int64_t ms);
/* Initialises a condition whose timed waits count on CLOCK_MONOTONIC. */
LQ__HIDDEN void lq__cond_init(pthread_cond_t *cond);
LQ__HIDDEN struct timespec lq__deadline_in_us(int64_t us);
/* Sleeps `us` microseconds (none when below 1). */
LQ__HIDDEN void lq__sleep_us(int64_t us);
/* The pause after try `attempt` (0 the first) to take what another holds for
 * an instant (a lock, a file's write): 50 us, growing to 10 ms, so a short
 * hold costs little and a long one few wake-ups. */
LQ__HIDDEN int64_t lq__retry_pause_us(int attempt);

/* The latest time the library writes, 9999-12-31T23:59:59.999Z: MySQL's
 * DATETIME and SQLite's four-digit text end there. A delay that would pass it
 * is refused, so no due time wraps into the past. */
#define LQ__TIME_MAX_MS INT64_C(253402300799999)
/* `now` plus `delay_ms` (>= 0), never past LQ__TIME_MAX_MS. */
LQ__HIDDEN int64_t lq__time_after(int64_t now, int64_t delay_ms);
/* LQ_MISUSE, naming the longest delay that fits now, for a delay that puts a
 * due time past LQ__TIME_MAX_MS; `what` names the call. */
LQ__HIDDEN int lq__check_delay(int64_t delay_ms, const char *what);

/* "YYYY-MM-DDTHH:MM:SS.fff+00:00": 29 characters and a NUL. Text in this form
 * sorts as the times do. */
#define LQ__TIME_TEXT_SIZE 30
LQ__HIDDEN void lq__time_text(char out[LQ__TIME_TEXT_SIZE], int64_t epoch_ms);
/* Parses the text form (also without fractions, with a space instead of
 * the T, and with any UTC offset or none). Returns false when it is not one. */
LQ__HIDDEN bool lq__time_parse(int64_t *epoch_ms, const char *text);

#endif
