/* Time zones: the TZif reader, the POSIX TZ rule of a file's footer, and the
 * lookups both ways between instants and wall times. A zone is a sorted list
 * of steps (an instant and the offset in force from it) and, past the last
 * step, the rule. */
#include "base/tzfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A date of a POSIX rule: "Jn" (kind 'J': day 1-365, February 29th never
 * counted), "n" (kind 'D': day 0-365) or "Mm.w.d" (kind 'M': weekday d of
 * week w of month m, week 5 being the last), at `secs` past local midnight
 * (RFC 8536 allows -167 to 167 hours). */
typedef struct tz_date {
    char kind;
    int day, month, week, weekday;
    int32_t secs;
} tz_date;

typedef struct tz_rule {
    int32_t std_off, dst_off; /* seconds east of UTC */
    bool has_dst;
    tz_date start, end; /* start in standard time, end in DST, as POSIX has it */
} tz_rule;

typedef struct tz_step {
    int64_t at;
    int32_t offset; /* in force from `at` on */
} tz_step;

struct lq__tz {
    char *name;
    tz_step *steps;
    int count;
    int32_t first_offset; /* before the first step */
    bool has_rule;        /* the rule governs from the last step on (always, without steps) */
    tz_rule rule;
};

/* Beyond this the calendar's arithmetic could overflow: +-35 million years. */
#define TZ_LIMIT (INT64_C(1) << 50)
#define DAY 86400

/* ------------------------------------------------------------------------ */
/* The calendar. */

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static bool leap_year(int64_t y) {
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

/* Counted in 400-year eras from 0000-03-01, so that February's leap day
 * ends each year (the method of H. Hinnant's chrono algorithms). */
int64_t lq__tz_days_from_civil(int64_t year, unsigned month, unsigned day) {
    int64_t y = month <= 2 ? year - 1 : year;
    int64_t era = floor_div(y, 400);
    int64_t year_of_era = y - era * 400;
    unsigned march_month = month > 2 ? month - 3 : month + 9;
    int64_t day_of_year = (153 * march_month + 2) / 5 + day - 1;
    int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

void lq__tz_civil_from_days(int64_t days, int64_t *year, unsigned *month, unsigned *day) {
    int64_t z = days + 719468;
    int64_t era = floor_div(z, 146097);
    int64_t day_of_era = z - era * 146097;
    int64_t year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
    int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    int64_t march_month = (5 * day_of_year + 2) / 153;
    *day = (unsigned)(day_of_year - (153 * march_month + 2) / 5 + 1);
    *month = (unsigned)(march_month < 10 ? march_month + 3 : march_month - 9);
    *year = year_of_era + era * 400 + (*month <= 2);
}

int lq__tz_weekday(int64_t days) {
    return (int)((days % 7 + 11) % 7); /* 1970-01-01 was a Thursday */
}

unsigned lq__tz_month_days(int64_t year, unsigned month) {
    static const unsigned char days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return month == 2 && leap_year(year) ? 29 : days[(month - 1) % 12];
}

static int64_t year_of(int64_t local) {
    int64_t year;
    unsigned month, day;
    lq__tz_civil_from_days(floor_div(local, DAY), &year, &month, &day);
    return year;
}

/* ------------------------------------------------------------------------ */
/* The POSIX TZ rule: its text, and the offsets it gives. */

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* "CET", or quoted "<+1030>"; three characters at least. */
static bool parse_abbr(const char **p) {
    const char *s = *p, *start;
    if (*s == '<') {
        for (start = ++s; is_alpha(*s) || is_digit(*s) || *s == '+' || *s == '-';) s++;
        if (*s != '>' || s - start < 3) return false;
        *p = s + 1;
        return true;
    }
    for (start = s; is_alpha(*s);) s++;
    if (s - start < 3) return false;
    *p = s;
    return true;
}

static bool parse_int(const char **p, int digits, int lo, int hi, int *out) {
    const char *s = *p;
    int v = 0, n = 0;
    for (; n < digits && is_digit(*s); n++) v = v * 10 + (*s++ - '0');
    if (n == 0 || v < lo || v > hi) return false;
    *out = v;
    *p = s;
    return true;
}

/* [+-]h[:mm[:ss]], hours up to `max_hours`, as signed seconds. */
static bool parse_hms(const char **p, int max_hours, int32_t *out) {
    const char *s = *p;
    int sign = *s == '-' ? -1 : 1, h, m = 0, sec = 0;
    if (*s == '-' || *s == '+') s++;
    if (!parse_int(&s, 3, 0, max_hours, &h)) return false;
    if (*s == ':') {
        s++;
        if (!parse_int(&s, 2, 0, 59, &m)) return false;
        if (*s == ':') {
            s++;
            if (!parse_int(&s, 2, 0, 59, &sec)) return false;
        }
    }
    *out = sign * (h * 3600 + m * 60 + sec);
    *p = s;
    return true;
}

static bool parse_date(const char **p, tz_date *d) {
    const char *s = *p;
    memset(d, 0, sizeof *d);
    d->kind = *s == 'M' || *s == 'J' ? *s++ : 'D';
    bool ok;
    if (d->kind == 'M')
        ok = parse_int(&s, 2, 1, 12, &d->month) && *s++ == '.' &&
             parse_int(&s, 1, 1, 5, &d->week) && *s++ == '.' && parse_int(&s, 1, 0, 6, &d->weekday);
    else ok = parse_int(&s, 3, d->kind == 'J' ? 1 : 0, 365, &d->day);
    if (!ok) return false;
    d->secs = 2 * 3600;
    if (*s == '/') {
        s++;
        if (!parse_hms(&s, 167, &d->secs)) return false;
    }
    *p = s;
    return true;
}

static bool parse_rule(const char *text, tz_rule *r) {
    const char *s = text;
    int32_t west;
    memset(r, 0, sizeof *r);
    if (!parse_abbr(&s) || !parse_hms(&s, 24, &west)) return false;
    r->std_off = -west; /* POSIX counts hours west */
    if (!*s) return true;
    if (!parse_abbr(&s)) return false;
    r->has_dst = true;
    r->dst_off = r->std_off + 3600;
    if (*s && *s != ',') {
        if (!parse_hms(&s, 24, &west)) return false;
        r->dst_off = -west;
    }
    if (!*s) {
        const char *start = "M3.2.0", *end = "M11.1.0";
        return parse_date(&start, &r->start) && parse_date(&end, &r->end);
    }
    if (*s++ != ',' || !parse_date(&s, &r->start) || *s++ != ',' || !parse_date(&s, &r->end))
        return false;
    return *s == '\0';
}

/* The wall time of a rule's date in `year`. */
static int64_t date_local(const tz_date *d, int64_t year) {
    int64_t jan1 = lq__tz_days_from_civil(year, 1, 1), day;
    if (d->kind == 'J') {
        day = jan1 + d->day - 1 + (d->day >= 60 && leap_year(year));
    } else if (d->kind == 'D') {
        day = jan1 + d->day;
    } else {
        int64_t first = lq__tz_days_from_civil(year, (unsigned)d->month, 1);
        int shift = (d->weekday - lq__tz_weekday(first) + 7) % 7 + (d->week - 1) * 7;
        if (shift >= (int)lq__tz_month_days(year, (unsigned)d->month)) shift -= 7;
        day = first + shift;
    }
    return day * DAY + d->secs;
}

static int64_t dst_start(const tz_rule *r, int64_t year) {
    return date_local(&r->start, year) - r->std_off;
}

static int64_t dst_end(const tz_rule *r, int64_t year) {
    return date_local(&r->end, year) - r->dst_off;
}

/* The offset the rule's latest change at or before `u` set. A start wins a
 * tie with an end, so a rule that starts DST where it ends it (all year DST,
 * "EST5EDT,0/0,J365/25") stays in DST. Two years back: a date may lie up to
 * a week past its year's end. */
static int32_t rule_offset(const tz_rule *r, int64_t u) {
    if (!r->has_dst) return r->std_off;
    int64_t year = year_of(u + r->std_off), best = INT64_MIN;
    bool dst = false;
    for (int64_t y = year - 2; y <= year + 1; y++) {
        int64_t end = dst_end(r, y), start = dst_start(r, y);
        if (end <= u && end > best) best = end, dst = false;
        if (start <= u && start >= best) best = start, dst = true;
    }
    return dst ? r->dst_off : r->std_off;
}

/* The rule's first change of offset after `u`, if it has one. */
static bool rule_next_change(const tz_rule *r, int64_t u, int64_t *at) {
    if (!r->has_dst) return false;
    int64_t year = year_of(u + r->std_off), best = INT64_MAX;
    for (int64_t y = year - 1; y <= year + 2; y++) {
        int64_t both[2] = {dst_start(r, y), dst_end(r, y)};
        for (int i = 0; i < 2; i++)
            if (both[i] > u && both[i] < best &&
                rule_offset(r, both[i]) != rule_offset(r, both[i] - 1))
                best = both[i];
    }
    if (best == INT64_MAX) return false;
    *at = best;
    return true;
}

/* ------------------------------------------------------------------------ */
/* The lookups. */

static int64_t clamp(int64_t u) {
    return u < -TZ_LIMIT ? -TZ_LIMIT : u > TZ_LIMIT ? TZ_LIMIT : u;
}

/* The index of the last step at or before `u`, or -1. */
static int step_at(const lq__tz *z, int64_t u) {
    int lo = 0, hi = z->count; /* the answer is in [lo - 1, hi - 1] */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (z->steps[mid].at <= u) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

int32_t lq__tz_offset(const lq__tz *z, int64_t utc) {
    int64_t u = clamp(utc);
    int i = step_at(z, u);
    if (z->has_rule && i == z->count - 1) return rule_offset(&z->rule, u);
    return i < 0 ? z->first_offset : z->steps[i].offset;
}

/* Steps that keep the offset (a new abbreviation only) are passed over. */
bool lq__tz_next_change(const lq__tz *z, int64_t u, int64_t *at) {
    u = clamp(u);
    for (int i = step_at(z, u) + 1; i < z->count; i++) {
        int64_t t = z->steps[i].at;
        if (lq__tz_offset(z, t) != lq__tz_offset(z, t - 1)) {
            *at = t;
            return true;
        }
    }
    if (!z->has_rule) return false;
    int64_t from = z->count && z->steps[z->count - 1].at > u ? z->steps[z->count - 1].at : u;
    return rule_next_change(&z->rule, from, at) && *at < TZ_LIMIT;
}

/* Walks the periods of constant offset over two days either side of
 * `local` (more than any offset), keeping each whose offset puts `local`
 * inside it, and the first jump of the wall clock over `local`. */
int lq__tz_local_to_utc(const lq__tz *z, int64_t local, int64_t out[2]) {
    const int64_t window = 2 * DAY;
    local = clamp(local);
    int64_t u = local - window, limit = local + window, gap_end = 0;
    int32_t offset = lq__tz_offset(z, u);
    int n = 0;
    bool gap = false;
    for (int guard = 0; guard < 1000; guard++) {
        int64_t t = INT64_MAX;
        bool more = lq__tz_next_change(z, u, &t) && t <= limit;
        int64_t candidate = local - offset;
        if (candidate >= u && (!more || candidate < t)) {
            if (n < 2) n++;
            out[n - 1] = candidate; /* a third (no zone has one) replaces the second */
        }
        if (!more) break;
        int32_t after = lq__tz_offset(z, t);
        if (!gap && t + offset <= local && local < t + after) gap = true, gap_end = t;
        u = t;
        offset = after;
    }
    if (n == 0) out[0] = gap ? gap_end : local - offset;
    return n;
}

/* ------------------------------------------------------------------------ */
/* The TZif reader (RFC 8536). */

typedef struct tzif_counts {
    uint32_t isut, isstd, leap, time, type, chars;
} tzif_counts;

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* Reads a header at `p` (44 bytes of `left`); returns its version (1-9) or
 * 0 when it is none. */
static int read_header(const unsigned char *p, size_t left, tzif_counts *c) {
    if (left < 44 || memcmp(p, "TZif", 4) != 0) return 0;
    if (p[4] != 0 && (p[4] < '2' || p[4] > '9')) return 0;
    uint32_t v[6];
    for (int i = 0; i < 6; i++) v[i] = be32(p + 20 + 4 * i);
    *c = (tzif_counts){v[0], v[1], v[2], v[3], v[4], v[5]};
    if (c->type == 0 || c->type > 256 || (c->isut && c->isut != c->type) ||
        (c->isstd && c->isstd != c->type) || c->time > 1000000 || c->chars > 65536 ||
        c->leap > 100000)
        return 0;
    return p[4] ? p[4] - '0' : 1;
}

static size_t block_size(const tzif_counts *c, size_t time_size) {
    return c->time * time_size + c->time + c->type * 6u + c->chars + c->leap * (time_size + 4) +
           c->isstd + c->isut;
}

/* The 64-bit data block at `p`: its steps, each with its type's offset. */
static const char *read_block(lq__tz *z, const unsigned char *p, const tzif_counts *c) {
    const unsigned char *times = p, *types = p + 8 * c->time, *infos = types + c->time;
    int32_t offsets[256];
    for (uint32_t i = 0; i < c->type; i++) {
        offsets[i] = (int32_t)be32(infos + 6 * i);
        if (offsets[i] < -89999 || offsets[i] > 93599) return "an offset out of range";
    }
    if (c->leap) return "it counts leap seconds (a right/ zone), which schedules do not";
    z->first_offset = offsets[0];
    z->steps = c->time ? malloc(c->time * sizeof *z->steps) : NULL;
    if (c->time && !z->steps) return NULL;
    for (uint32_t i = 0; i < c->time; i++) {
        int64_t at = be64(times + 8 * i);
        if ((i && at <= z->steps[i - 1].at) || at < -TZ_LIMIT || at > TZ_LIMIT)
            return "its transitions are out of order";
        if (types[i] >= c->type) return "a transition names no type";
        z->steps[i] = (tz_step){at, offsets[types[i]]};
        z->count = (int)i + 1;
    }
    return "";
}

/* Reads a whole TZif file into `z`; "" when it went well, NULL when out of
 * memory, or what is wrong with it. */
static const char *read_tzif(lq__tz *z, const unsigned char *data, size_t len) {
    tzif_counts c;
    int version = read_header(data, len, &c);
    if (!version) return "not a TZif file";
    if (version < 2) return "TZif version 1 (32-bit data only) is not read";
    size_t skip = 44 + block_size(&c, 4);
    if (skip > len || read_header(data + skip, len - skip, &c) != version)
        return "its 64-bit header is missing";
    const unsigned char *block = data + skip + 44, *end = data + len;
    size_t size = block_size(&c, 8);
    if (size > (size_t)(end - block)) return "it is cut short";
    const char *problem = read_block(z, block, &c);
    if (!problem || *problem) return problem;
    /* The footer: "\n" rule "\n"; an empty rule leaves the last step's offset. */
    const unsigned char *footer = block + size;
    const unsigned char *close =
        footer < end ? memchr(footer + 1, '\n', (size_t)(end - footer - 1)) : NULL;
    if (footer >= end || *footer != '\n' || !close) return "its footer is missing";
    size_t rule_len = (size_t)(close - footer - 1);
    if (rule_len == 0) return "";
    char rule[256];
    if (rule_len >= sizeof rule || memchr(footer + 1, '\0', rule_len))
        return "its footer is not a rule";
    memcpy(rule, footer + 1, rule_len);
    rule[rule_len] = '\0';
    if (!parse_rule(rule, &z->rule)) return "its footer is not a POSIX TZ rule";
    z->has_rule = true;
    return "";
}

/* ------------------------------------------------------------------------ */
/* Loading by name. */

static lq__tz *new_zone(const char *name) {
    lq__tz *z = calloc(1, sizeof *z);
    if (z && !(z->name = lq__strdup(name))) {
        free(z);
        return NULL;
    }
    return z;
}

void lq__tz_free(lq__tz *zone) {
    if (!zone) return;
    free(zone->steps);
    free(zone->name);
    free(zone);
}

const char *lq__tz_name(const lq__tz *zone) {
    return zone->name;
}

/* A name is relative path components of letters, digits and "_+-", none
 * empty or starting with a dot: it cannot leave the zone directory. */
static int check_name(const char *name) {
    size_t len = strlen(name);
    bool ok = len > 0 && len < 256 && name[0] != '/' && name[len - 1] != '/';
    for (size_t i = 0; ok && i < len; i++) {
        char c = name[i];
        bool starts = i == 0 || name[i - 1] == '/';
        ok = is_alpha(c) || is_digit(c) || c == '_' || c == '+' || c == '-' ||
             (c == '/' && !starts) || (c == '.' && !starts);
    }
    if (ok) return LQ_OK;
    return lq__error(LQ_MISUSE,
                     "unknown time zone \"%s\": a zone is named like \"Europe/Berlin\", "
                     "not by a path",
                     name);
}

/* The file's bytes (at most 1 MiB: zone files are a few KiB). */
static int read_file(const char *dir, const char *name, unsigned char **data, size_t *len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return lq__error(LQ_MISUSE, "unknown time zone \"%s\"", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
        int err = errno;
        if (fd >= 0) close(fd);
        if (fd < 0 && err != ENOENT && err != ENOTDIR)
            return lq__error(LQ_MISUSE, "time zone \"%s\": %s cannot be opened (errno %d)", name,
                             path, err);
        return lq__error(LQ_MISUSE, "unknown time zone \"%s\" (not a zone of %s)", name, dir);
    }
    *len = (size_t)st.st_size;
    *data = malloc(*len ? *len : 1);
    size_t got = 0;
    while (*data && got < *len) {
        ssize_t n = read(fd, *data + got, *len - got);
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
        if (n > 0) got += (size_t)n;
    }
    close(fd);
    if (!*data) return lq__error(LQ_NOMEM, "out of memory");
    *len = got;
    return LQ_OK;
}

int lq__tz_load_from(lq__tz **out, const char *dir, const char *name) {
    *out = NULL;
    if (!name) return lq__error(LQ_MISUSE, "time zone: the name is NULL");
    int rc = check_name(name);
    if (rc != LQ_OK) return rc;
    lq__tz *z = new_zone(name);
    if (!z) return lq__error(LQ_NOMEM, "out of memory");
    if (strcmp(name, "UTC") == 0 || strcmp(name, "Etc/UTC") == 0) {
        *out = z; /* no steps, no rule: offset 0 for ever */
        return LQ_OK;
    }
    unsigned char *data = NULL;
    size_t len = 0;
    rc = read_file(dir, name, &data, &len);
    const char *problem = rc == LQ_OK ? read_tzif(z, data, len) : "";
    free(data);
    if (rc == LQ_OK && !problem) rc = lq__error(LQ_NOMEM, "out of memory");
    else if (rc == LQ_OK && *problem)
        rc = lq__error(LQ_MISUSE, "time zone \"%s\": %s/%s: %s", name, dir, name, problem);
    if (rc != LQ_OK) {
        lq__tz_free(z);
        return rc;
    }
    *out = z;
    return LQ_OK;
}

int lq__tz_load(lq__tz **out, const char *name) {
    return lq__tz_load_from(out, LQ__TZ_DIR, name);
}

int lq__tz_from_posix(lq__tz **out, const char *rule) {
    *out = NULL;
    tz_rule r;
    if (!rule || !parse_rule(rule, &r))
        return lq__error(LQ_MISUSE, "\"%s\" is not a POSIX TZ rule", rule ? rule : "(null)");
    lq__tz *z = new_zone(rule);
    if (!z) return lq__error(LQ_NOMEM, "out of memory");
    z->has_rule = true;
    z->rule = r;
    *out = z;
    return LQ_OK;
}
