/* Cron expressions: the parser (fields to bit sets), the search for the next
 * matching wall time, and the walk over a zone's periods of constant offset
 * that turns wall times into ticks (the rules are in cron.h). */
#include "base/cron.h"

#include "base/clock.h"

#include <string.h>

typedef struct field_spec {
    const char *name;
    int lo, hi;
    const char *const *names; /* three letters each, for lo, lo + 1, ... */
} field_spec;

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                          "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL};

enum { F_SECOND, F_MINUTE, F_HOUR, F_MDAY, F_MONTH, F_WDAY, F_COUNT };

static const field_spec specs[F_COUNT] = {
    {"second", 0, 59, NULL},       {"minute", 0, 59, NULL},       {"hour", 0, 23, NULL},
    {"day-of-month", 1, 31, NULL}, {"month", 1, 12, month_names}, {"day-of-week", 0, 7, day_names},
};

static const struct {
    const char *name, *expr;
} shorthands[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

/* Quoted text in messages is cut here: an expression may be long. */
#define SHOWN 40

static bool is_space(char c) {
    return c == ' ' || c == '\t';
}

static char lower(char c) {
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* ------------------------------------------------------------------------ */
/* The parser. */

/* One value of a field, a number or a name, in [s, end). */
static int parse_value(const field_spec *f, const char *s, const char *end, int *out) {
    int len = (int)(end - s);
    bool digits = len > 0;
    for (const char *p = s; digits && p < end; p++) digits = *p >= '0' && *p <= '9';
    if (digits) {
        int64_t v = 0;
        for (const char *p = s; p < end && v < 1000000; p++) v = v * 10 + (*p - '0');
        if (v < f->lo || v > f->hi)
            return lq__error(LQ_MISUSE, "cron field %s: %.*s is out of range %d-%d", f->name,
                             len > SHOWN ? SHOWN : len, s, f->lo, f->hi);
        *out = (int)v;
        return LQ_OK;
    }
    for (int i = 0; f->names && len == 3 && f->names[i]; i++) {
        if (lower(s[0]) == f->names[i][0] && lower(s[1]) == f->names[i][1] &&
            lower(s[2]) == f->names[i][2]) {
            *out = f->lo + i;
            return LQ_OK;
        }
    }
    return lq__error(LQ_MISUSE, "cron field %s: bad value \"%.*s\"", f->name,
                     len > SHOWN ? SHOWN : len, s);
}

/* A step "/n" in [s, end): 1 to the count of the field's values. */
static int parse_step(const field_spec *f, const char *item, int item_len, const char *s,
                      const char *end, int *out) {
    int v = 0, span = f->hi - f->lo + 1;
    bool ok = s < end;
    for (const char *p = s; ok && p < end; p++) {
        ok = *p >= '0' && *p <= '9';
        if (v <= span) v = v * 10 + (*p - '0');
    }
    if (!ok || v < 1 || v > span)
        return lq__error(LQ_MISUSE, "cron field %s: bad step in \"%.*s\" (a step is 1-%d)", f->name,
                         item_len > SHOWN ? SHOWN : item_len, item, span);
    *out = v;
    return LQ_OK;
}

/* One item of a list: "*", "a", "a-b", each with an optional "/step". */
static int parse_item(const field_spec *f, const char *s, const char *end, uint64_t *bits,
                      bool *stepped) {
    int len = (int)(end - s), lo = f->lo, hi = f->hi, step = 1, rc;
    if (len == 0) return lq__error(LQ_MISUSE, "cron field %s: an empty list item", f->name);
    const char *slash = memchr(s, '/', (size_t)len), *base_end = slash ? slash : end;
    if (slash && (rc = parse_step(f, s, len, slash + 1, end, &step)) != LQ_OK) return rc;
    *stepped = *stepped || slash || (base_end - s == 1 && *s == '*');
    if (!(base_end - s == 1 && *s == '*')) {
        const char *dash = memchr(s, '-', (size_t)(base_end - s));
        if ((rc = parse_value(f, s, dash ? dash : base_end, &lo)) != LQ_OK) return rc;
        if (dash && (rc = parse_value(f, dash + 1, base_end, &hi)) != LQ_OK) return rc;
        if (!dash && !slash) hi = lo;
        if (f == &specs[F_WDAY] && dash && hi == 0 && lo > 0) hi = 7; /* "FRI-SUN" */
        if (hi < lo)
            return lq__error(LQ_MISUSE, "cron field %s: range \"%.*s\" runs backwards", f->name,
                             len > SHOWN ? SHOWN : len, s);
    }
    for (int v = lo; v <= hi; v += step) *bits |= UINT64_C(1) << v;
    return LQ_OK;
}

/* A field's list in [s, end); *stepped: an item has a "*" or a step. */
static int parse_field(const field_spec *f, const char *s, const char *end, uint64_t *bits,
                       bool *stepped) {
    *bits = 0;
    *stepped = false;
    for (;;) {
        const char *comma = memchr(s, ',', (size_t)(end - s)), *item_end = comma ? comma : end;
        int rc = parse_item(f, s, item_end, bits, stepped);
        if (rc != LQ_OK) return rc;
        if (!comma) return LQ_OK;
        s = comma + 1;
    }
}

static bool all_of(uint64_t bits, const field_spec *f) {
    uint64_t all = ((UINT64_C(1) << (f->hi - f->lo + 1)) - 1) << f->lo;
    return (bits & all) == all;
}

/* Whether some day the day-of-month names comes in some month named. */
static bool days_meet(const lq__cron *c) {
    if (c->mdays_all || !c->wdays_all) return true; /* every day, or weekdays or-ed in */
    for (unsigned m = 1; m <= 12; m++) {
        unsigned longest = lq__tz_month_days(2000, m); /* a leap year: February 29th */
        if ((c->months >> m & 1) && (c->mdays & ((UINT32_C(2) << longest) - 2))) return true;
    }
    return false;
}

static void fill(lq__cron *c, const uint64_t bits[F_COUNT], bool hours_stepped) {
    memset(c, 0, sizeof *c);
    c->seconds = bits[F_SECOND];
    c->minutes = bits[F_MINUTE];
    c->hours = (uint32_t)bits[F_HOUR];
    c->mdays = (uint32_t)bits[F_MDAY];
    c->months = (uint16_t)bits[F_MONTH];
    c->wdays = (uint8_t)((bits[F_WDAY] | bits[F_WDAY] >> 7) & 0x7F); /* 7 is Sunday */
    c->mdays_all = all_of(bits[F_MDAY], &specs[F_MDAY]);
    c->wdays_all = c->wdays == 0x7F;
    c->hours_interval = hours_stepped || c->hours == 0xFFFFFF; /* "0-23" is "*" */
}

static int parse_shorthand(lq__cron *out, const char *s) {
    const char *end = s;
    while (*end && !is_space(*end)) end++;
    int len = (int)(end - s);
    const char *rest = end;
    while (is_space(*rest)) rest++;
    for (size_t i = 0; i < sizeof shorthands / sizeof shorthands[0]; i++) {
        const char *name = shorthands[i].name;
        bool same = strlen(name) == (size_t)len;
        for (int k = 0; same && k < len; k++) same = lower(s[k]) == name[k];
        if (!same) continue;
        if (*rest) return lq__error(LQ_MISUSE, "cron shorthand %s stands alone", name);
        return lq__cron_parse(out, shorthands[i].expr);
    }
    return lq__error(LQ_MISUSE,
                     "unknown shorthand %.*s (cron takes @yearly, @annually, @monthly, @weekly, "
                     "@daily, @midnight and @hourly)",
                     len > SHOWN ? SHOWN : len, s);
}

int lq__cron_parse(lq__cron *out, const char *expr) {
    if (!expr) return lq__error(LQ_MISUSE, "cron: the expression is NULL");
    const char *s = expr, *starts[7], *ends[7];
    while (is_space(*s)) s++;
    if (*s == '@') return parse_shorthand(out, s);
    int n = 0;
    while (*s) {
        if (n < 7) starts[n] = s;
        while (*s && !is_space(*s)) s++;
        if (n < 7) ends[n] = s;
        n++;
        while (is_space(*s)) s++;
    }
    if (n != 5 && n != 6)
        return lq__error(LQ_MISUSE,
                         "cron expression \"%.*s\" has %d field%s: it takes 5 (minute "
                         "hour day-of-month month day-of-week) or 6 (a second first)",
                         SHOWN, expr, n, n == 1 ? "" : "s");
    uint64_t bits[F_COUNT] = {1}; /* five fields: second 0 */
    bool stepped[F_COUNT] = {false};
    for (int i = 0; i < n; i++) {
        int field = i + (n == 5);
        int rc = parse_field(&specs[field], starts[i], ends[i], &bits[field], &stepped[field]);
        if (rc != LQ_OK) return rc;
    }
    lq__cron c;
    fill(&c, bits, stepped[F_HOUR]);
    if (!days_meet(&c))
        return lq__error(LQ_MISUSE,
                         "cron expression \"%.*s\" never fires: no month it names "
                         "has a day of the month it names",
                         SHOWN, expr);
    *out = c;
    return LQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Wall times that match. */

typedef struct wall {
    int64_t year;
    unsigned month, day;
    int hour, minute, second;
} wall;

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static wall wall_of(int64_t local) {
    wall w;
    int64_t days = floor_div(local, 86400), secs = local - days * 86400;
    lq__tz_civil_from_days(days, &w.year, &w.month, &w.day);
    w.hour = (int)(secs / 3600);
    w.minute = (int)(secs / 60 % 60);
    w.second = (int)(secs % 60);
    return w;
}

static int64_t local_of(const wall *w) {
    return lq__tz_days_from_civil(w->year, w->month, w->day) * 86400 + w->hour * 3600 +
           w->minute * 60 + w->second;
}

/* The first set bit at or above `from`, or -1. */
static int next_bit(uint64_t bits, int from) {
    uint64_t above = from < 64 ? bits >> from : 0;
    return above ? from + __builtin_ctzll(above) : -1;
}

static void start_month(wall *w, int month) {
    w->month = (unsigned)month;
    w->day = 1;
    w->hour = w->minute = w->second = 0;
}

static void next_day(wall *w) {
    if (++w->day > lq__tz_month_days(w->year, w->month)) {
        if (w->month == 12) w->year++, w->month = 0;
        w->month++;
        w->day = 1;
    }
    w->hour = w->minute = w->second = 0;
}

static void next_hour(wall *w) {
    if (++w->hour == 24) next_day(w);
    else w->minute = w->second = 0;
}

static void next_minute(wall *w) {
    if (++w->minute == 60) next_hour(w);
    else w->second = 0;
}

static bool day_matches(const lq__cron *c, const wall *w) {
    bool mday = c->mdays >> w->day & 1;
    int weekday = lq__tz_weekday(lq__tz_days_from_civil(w->year, w->month, w->day));
    bool wday = c->wdays >> weekday & 1;
    return c->mdays_all || c->wdays_all ? mday && wday : mday || wday;
}

#define NONE INT64_MAX

/* The first wall time at or after `from` that matches, or NONE when there
 * is none up to `limit` (nor before the year 10000). Each step moves to the
 * start of the next unit that may match, and looks again from the month. */
static int64_t next_local(const lq__cron *c, int64_t from, int64_t limit) {
    wall w = wall_of(from);
    for (;;) {
        if (w.year > 9999 || local_of(&w) > limit) return NONE;
        int v;
        if (!(c->months >> w.month & 1)) {
            v = next_bit(c->months, (int)w.month + 1);
            if (v < 0) w.year++, v = next_bit(c->months, 1);
            start_month(&w, v);
        } else if (!day_matches(c, &w) || (v = next_bit(c->hours, w.hour)) < 0) {
            next_day(&w);
        } else if (v != w.hour) {
            w.hour = v, w.minute = w.second = 0;
        } else if ((v = next_bit(c->minutes, w.minute)) < 0) {
            next_hour(&w);
        } else if (v != w.minute) {
            w.minute = v, w.second = 0;
        } else if ((v = next_bit(c->seconds, w.second)) < 0) {
            next_minute(&w);
        } else {
            w.second = v;
            return local_of(&w);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Ticks. */

static int32_t offset_at(const lq__tz *zone, int64_t u) {
    return zone ? lq__tz_offset(zone, u) : 0;
}

static int instants_of(const lq__tz *zone, int64_t local, int64_t out[2]) {
    if (zone) return lq__tz_local_to_utc(zone, local, out);
    out[0] = local;
    return 1;
}

/* The first tick in [u, end), a period of the offset `offset` that the
 * offset `before` precedes (they differ when `u` is a change). */
static bool tick_in(const lq__cron *c, const lq__tz *zone, int64_t u, int64_t end, int32_t offset,
                    int32_t before, int64_t *tick) {
    int64_t got[2];
    if (!c->hours_interval && before < offset) {
        /* Wall times [u + before, u + offset) never come: a fixed hour
         * there ticks as the gap ends. */
        int64_t w = next_local(c, u + before, u + offset - 1);
        if (w != NONE && instants_of(zone, w, got) == 0 && got[0] == u) {
            *tick = u;
            return true;
        }
    }
    int64_t limit = end == NONE ? NONE : end - 1 + offset;
    for (int64_t from = u + offset;;) {
        int64_t w = next_local(c, from, limit);
        if (w == NONE) return false;
        int n = instants_of(zone, w, got);
        if (c->hours_interval || (n > 0 && got[0] == w - offset)) {
            *tick = w - offset;
            return true;
        }
        from = w + 1; /* the repeat of a wall time a fixed hour had */
    }
}

/* 0001-01-01T00:00:00Z */
#define CRON_MIN_MS INT64_C(-62135596800000)

int lq__cron_next(int64_t *out_ms, const lq__cron *c, const lq__tz *zone, int64_t after_ms) {
    if (after_ms < CRON_MIN_MS || after_ms > LQ__TIME_MAX_MS)
        return lq__error(LQ_MISUSE, "cron: %lld ms since the epoch is outside the years 1-9999",
                         (long long)after_ms);
    int64_t u = floor_div(after_ms, 1000) + 1; /* ticks are whole seconds */
    const int64_t last = LQ__TIME_MAX_MS / 1000;
    while (u <= last) {
        int64_t end = NONE, tick;
        bool more = zone && lq__tz_next_change(zone, u, &end);
        if (tick_in(c, zone, u, more ? end : NONE, offset_at(zone, u), offset_at(zone, u - 1),
                    &tick)) {
            if (tick > last) break;
            *out_ms = tick * 1000;
            return LQ_OK;
        }
        if (!more) break;
        u = end;
    }
    return lq__error(LQ_MISUSE, "cron: no tick comes before the year 10000");
}
