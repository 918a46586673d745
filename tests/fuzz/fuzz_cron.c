/* libFuzzer target for the cron parser and the next tick (base/cron.c), and
 * the POSIX TZ rules they may run in (base/tzfile.c). The input is up to
 * three lines: the expression; optionally the instant to start from (unix
 * seconds); optionally a zone, by name ("Europe/Berlin") or as a rule
 * ("posix:CET-1CEST,M3.5.0,M10.5.0/3"). Besides crashes, sanitizer reports
 * and timeouts it aborts on a wrong reading:
 *  - the parser gives LQ_OK, or LQ_MISUSE with a message, and the same
 *    expression the same way twice;
 *  - a tick lies after the instant, on a whole second, before the year
 *    10000; its wall time matches the expression, unless the tick ends a
 *    gap (where a fixed hour's missing times tick);
 *  - looking from just before the tick finds the tick again, and from the
 *    tick itself a later one;
 *  - in UTC, no second between the instant and a tick within an hour of it
 *    matches. */
#include "base/clock.h"
#include "base/cron.h"
#include "base/tzfile.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_cron: %s\n", what);
    abort();
}

/* The expression's reading of a wall time, apart from cron.c's search. */
static bool matches(const lq__cron *c, int64_t local) {
    int64_t days = local / 86400 - (local % 86400 < 0), secs = local - days * 86400, year;
    unsigned month, day;
    lq__tz_civil_from_days(days, &year, &month, &day);
    bool mday = c->mdays >> day & 1, wday = c->wdays >> lq__tz_weekday(days) & 1;
    bool day_ok = c->mdays_all || c->wdays_all ? mday && wday : mday || wday;
    return day_ok && (c->months >> month & 1) && (c->hours >> (secs / 3600) & 1) &&
           (c->minutes >> (secs / 60 % 60) & 1) && (c->seconds >> (secs % 60) & 1);
}

static int32_t offset_at(const lq__tz *zone, int64_t u) {
    return zone ? lq__tz_offset(zone, u) : 0;
}

static void check_tick(const lq__cron *c, const lq__tz *zone, int64_t after_ms, int64_t tick) {
    if (tick <= after_ms || tick % 1000 != 0 || tick > LQ__TIME_MAX_MS) fail("a tick out of place");
    int64_t u = tick / 1000;
    bool gap_end = offset_at(zone, u - 1) < offset_at(zone, u) && !c->hours_interval;
    if (!matches(c, u + offset_at(zone, u)) && !gap_end)
        fail("a tick whose wall time does not match");
    int64_t again = 0;
    if (lq__cron_next(&again, c, zone, tick - 1) != LQ_OK || again != tick)
        fail("from just before a tick, another tick");
    int rc = lq__cron_next(&again, c, zone, tick);
    if ((rc == LQ_OK && again <= tick) || (rc != LQ_OK && rc != LQ_MISUSE))
        fail("from a tick, no later tick");
    if (!zone && tick - after_ms <= 3600000) {
        for (int64_t s = after_ms / 1000 - (after_ms % 1000 < 0) + 1; s < u; s++)
            if (matches(c, s)) fail("a second skipped in UTC");
    }
}

/* Splits `text` at its newlines into up to three lines. */
static int split(char *text, char *lines[3]) {
    int n = 0;
    for (char *p = text; n < 3;) {
        lines[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    return n;
}

static lq__tz *zone_of(const char *line) {
    lq__tz *zone = NULL;
    int rc = strncmp(line, "posix:", 6) == 0 ? lq__tz_from_posix(&zone, line + 6)
                                             : lq__tz_load(&zone, line);
    if (rc != LQ_OK && (rc != LQ_MISUSE || !*lq_errmsg() || zone)) fail("a zone refused oddly");
    return zone;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) fail("out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    char *lines[3] = {NULL, NULL, NULL};
    int n = split(text, lines);
    lq__cron c, again;
    int rc = lq__cron_parse(&c, lines[0]);
    if (rc != LQ_OK && (rc != LQ_MISUSE || !*lq_errmsg())) fail("a parse failed oddly");
    if (rc == LQ_OK &&
        (lq__cron_parse(&again, lines[0]) != LQ_OK || memcmp(&c, &again, sizeof c) != 0))
        fail("the same expression read otherwise");
    if (rc == LQ_OK) {
        long long secs = n > 1 ? strtoll(lines[1], NULL, 10) : 1806062400; /* 2027-03-26 */
        secs = secs < -INT64_C(100000000000)   ? -INT64_C(100000000000)
               : secs > INT64_C(1000000000000) ? INT64_C(1000000000000)
                                               : secs;
        int64_t after_ms = (int64_t)secs * 1000;
        lq__tz *zone = n > 2 ? zone_of(lines[2]) : NULL;
        int64_t tick = 0;
        rc = lq__cron_next(&tick, &c, n > 2 && !zone ? NULL : zone, after_ms);
        if (rc == LQ_OK) check_tick(&c, zone, after_ms, tick);
        else if (rc != LQ_MISUSE) fail("a next tick failed oddly");
        lq__tz_free(zone);
    }
    free(text);
    return 0;
}
