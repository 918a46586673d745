// Cron expressions: the parser, and the next tick of one in a time zone.
// (Line comments here, as the text quotes steps like */15.)
//
// The text: five fields, "minute hour day-of-month month day-of-week", or
// six with a second first. A field is a list ("1,5,10-20") of "*", values
// and ranges "a-b", each with an optional step ("*/15", "1-10/2", and "5/15"
// for 5-59/15). Months and weekdays take names (JAN-DEC, SUN-SAT, any case);
// day-of-week 7 is Sunday as 0 is ("MON-SUN" is 1-7). The shorthands:
// @yearly and @annually (0 0 1 1 *), @monthly (0 0 1 * *), @weekly
// (0 0 * * 0), @daily and @midnight (0 0 * * *), @hourly (0 * * * *).
// When day-of-month and day-of-week are both restricted, a day that either
// names matches (Vixie cron); when one takes every value, the other decides.
// Not taken: L, W, #, ?, H and @reboot.
//
// The ticks: the expression matches wall times of the zone, to the second.
// A wall time that comes once ticks then. Where clocks turn back and a wall
// time comes twice, it ticks at both when the hour field has a "*" or a
// step or names every hour ("0 * * * *", "*/15 * * * *", "0 */2 * * *",
// "0 0-23 * * *" tick as the real hours come), and at the first alone
// otherwise ("30 2 * * *" and "0 1-3 * * *" tick once). Where
// clocks turn forward and a wall time never comes, a fixed hour ticks once,
// at the instant the gap ends ("30 2 * * *" on the day Europe/Berlin
// springs from 02:00 to 03:00 ticks at 03:00), while a "*" or stepped hour
// ticks at none of the missing times. So the ticks are one set of instants,
// whatever instant one starts to look from.
//
// Against croniter (python3-croniter 1.3.5 with pytz), which the oracle test
// compares with: the same ticks wherever no change of offset is near, but
// for croniter's own slips (it passes the 1st of a month after a
// day-of-month the month before lacks). Near a change croniter follows no
// one rule: a fixed time in a gap ticks an hour early and again an hour
// late (Berlin's 02:30 at 01:30 CET and 03:30 CEST), a fixed time repeats
// when it starts to look inside the repeated hour, and a tick a day or more
// away may move by the change; the rules above hold instead. What matches:
// a day field counts as restricted when it leaves out a value, as in
// croniter ("*/2" in day-of-month restricts it; Vixie cron looks for a
// leading "*" instead), and "5/15" means 5-59/15 as there.
#ifndef LQ_CRON_H
#define LQ_CRON_H

#include "base/internal.h"
#include "base/tzfile.h"

/* A parsed expression: a value, with nothing to free. */
typedef struct lq__cron {
    uint64_t seconds, minutes; /* bit n: second / minute n */
    uint32_t hours;            /* bit n: hour n */
    uint32_t mdays;            /* bit n: day n of the month, 1-31 */
    uint16_t months;           /* bit n: month n, 1-12 */
    uint8_t wdays;             /* bit n: weekday n, 0 = Sunday */
    bool mdays_all, wdays_all; /* the field takes every value */
    bool hours_interval;       /* the hour field has a "*" or a step, or every hour */
} lq__cron;

/* Parses `expr`. LQ_MISUSE with a message naming the field and the value
 * ("cron field hour: 24 is out of range 0-23", "cron field minute: bad
 * step ...", "unknown shorthand @fortnightly"), also for an expression
 * that can never fire ("0 0 30 2 *"). */
LQ__HIDDEN int lq__cron_parse(lq__cron *out, const char *expr);

/* The first tick strictly after `after_ms` (ms since the epoch, UTC) in
 * `zone` (NULL: UTC), as ms since the epoch (a whole second). LQ_MISUSE
 * when `after_ms` lies outside the years 1-9999 or no tick comes before
 * the year 10000. Thread safety: reads its arguments only. */
LQ__HIDDEN int lq__cron_next(int64_t *out_ms, const lq__cron *cron, const lq__tz *zone,
                             int64_t after_ms);

#endif
