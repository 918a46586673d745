/* Time zones by name, read from the system's tzdata: TZif files (RFC 8536,
 * version 2 or later, 64-bit data) under /usr/share/zoneinfo, with the POSIX
 * TZ rule of the file's footer for instants after its last transition.
 * Nothing here reads or sets the TZ variable or the C library's zone state:
 * a loaded zone is immutable and owned by its caller, so any number of
 * threads may read it at once. */
#ifndef LQ_TZFILE_H
#define LQ_TZFILE_H

#include "base/internal.h"

typedef struct lq__tz lq__tz;

#define LQ__TZ_DIR "/usr/share/zoneinfo"

/* Loads the zone `name` ("Europe/Berlin") from LQ__TZ_DIR; "UTC" and
 * "Etc/UTC" need no file. LQ_MISUSE, naming the zone, for a name that is no
 * zone: unknown, a path that could leave the directory ("../x", "/etc/x"),
 * a file that is not TZif or counts leap seconds (the right/ zones); LQ_NOMEM.
 * Ownership: *out is the caller's, freed by lq__tz_free. */
LQ__HIDDEN int lq__tz_load(lq__tz **out, const char *name);
/* The same, from the directory `dir` (tests keep zones of their own). */
LQ__HIDDEN int lq__tz_load_from(lq__tz **out, const char *dir, const char *name);
/* A zone made of a POSIX TZ rule alone ("CET-1CEST,M3.5.0,M10.5.0/3"),
 * named by the rule; LQ_MISUSE when it is not one. A rule with DST but no
 * dates takes the US dates (M3.2.0,M11.1.0), as the reference tzcode does. */
LQ__HIDDEN int lq__tz_from_posix(lq__tz **out, const char *rule);
/* NULL is ignored. */
LQ__HIDDEN void lq__tz_free(lq__tz *zone);
/* The name the zone was loaded by; valid while the zone lives. */
LQ__HIDDEN const char *lq__tz_name(const lq__tz *zone);

/* The offset from UTC, in seconds east, at the instant `utc` (seconds since
 * the epoch). Instants beyond +-2^50 s are read as the nearest of those. */
LQ__HIDDEN int32_t lq__tz_offset(const lq__tz *zone, int64_t utc);
/* The first instant after `utc` at which the offset changes, in *at; false
 * when it never changes again. */
LQ__HIDDEN bool lq__tz_next_change(const lq__tz *zone, int64_t utc, int64_t *at);
/* The instants whose wall time is `local` (the wall clock's seconds since
 * 1970-01-01 00:00:00), earliest first. Returns 1; or 2 when the wall time
 * comes twice (clocks turned back); or 0 when it never comes (clocks
 * turned forward), and out[0] is then the instant the gap ends, whose wall
 * time is the first after the gap. */
LQ__HIDDEN int lq__tz_local_to_utc(const lq__tz *zone, int64_t local, int64_t out[2]);

/* The proleptic Gregorian calendar, days counted from 1970-01-01. */
LQ__HIDDEN int64_t lq__tz_days_from_civil(int64_t year, unsigned month, unsigned day);
LQ__HIDDEN void lq__tz_civil_from_days(int64_t days, int64_t *year, unsigned *month, unsigned *day);
/* 0 = Sunday. */
LQ__HIDDEN int lq__tz_weekday(int64_t days);
LQ__HIDDEN unsigned lq__tz_month_days(int64_t year, unsigned month);

#endif
