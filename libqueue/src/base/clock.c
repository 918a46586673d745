#include "base/clock.h"

#include <string.h>

int64_t lq__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t lq__mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t lq__mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void lq__sleep_us(int64_t us) {
    if (us < 1) return;
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

int64_t lq__retry_pause_us(int attempt) {
    static const int64_t steps_us[] = {50, 100, 200, 500, 1000, 2000, 5000};
    enum { STEPS = sizeof steps_us / sizeof steps_us[0] };
    return attempt >= 0 && attempt < STEPS ? steps_us[attempt] : 10000;
}

struct timespec lq__deadline_in(int64_t ms) { return lq__deadline_in_us(ms * 1000); }

struct timespec lq__deadline_in_us(int64_t us) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (us < 0) us = 0;
    ts.tv_sec += (time_t)(us / 1000000);
    ts.tv_nsec += (long)(us % 1000000) * 1000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Days from 1970-01-01 to a civil date (proleptic Gregorian). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* The civil date of a day counted from 1970-01-01: the inverse of
 * days_from_civil. */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

/* `width` digits of v, zero-padded, at p; returns the end. */
static char *put_digits(char *p, unsigned v, int width) {
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + width;
}

/* Written by hand, not with gmtime_r and snprintf: every claimed row and
 * every settled lease passes through here, and gmtime_r takes a lock. */
int64_t lq__time_after(int64_t now, int64_t delay_ms) {
    return delay_ms > LQ__TIME_MAX_MS - now ? LQ__TIME_MAX_MS : now + delay_ms;
}

int lq__check_delay(int64_t delay_ms, const char *what) {
    int64_t longest = LQ__TIME_MAX_MS - lq__now_ms();
    if (delay_ms < 0) return lq__error(LQ_MISUSE, "%s: the delay is negative", what);
    if (delay_ms <= longest) return LQ_OK;
    return lq__error(LQ_MISUSE,
                     "%s: a delay of %lld ms passes 9999-12-31T23:59:59.999Z, the latest time "
                     "every database holds; the longest delay now is %lld ms",
                     what, (long long)delay_ms, (long long)longest);
}

void lq__time_text(char out[LQ__TIME_TEXT_SIZE], int64_t epoch_ms) {
    int64_t day = epoch_ms / 86400000, in_day = epoch_ms % 86400000;
    if (in_day < 0) {
        in_day += 86400000;
        day -= 1;
    }
    int64_t year;
    unsigned month, mday;
    civil_from_days(day, &year, &month, &mday);
    unsigned ms = (unsigned)in_day;
    char *p = put_digits(out, (unsigned)(((year % 10000) + 10000) % 10000), 4);
    *p++ = '-';
    p = put_digits(p, month, 2);
    *p++ = '-';
    p = put_digits(p, mday, 2);
    *p++ = 'T';
    p = put_digits(p, ms / 3600000, 2);
    *p++ = ':';
    p = put_digits(p, ms / 60000 % 60, 2);
    *p++ = ':';
    p = put_digits(p, ms / 1000 % 60, 2);
    *p++ = '.';
    p = put_digits(p, ms % 1000, 3);
    memcpy(p, "+00:00", 7);
}

/* Up to `most` decimal digits at *p, moving past them; false when none. */
static bool read_digits(const char **p, int most, int *out) {
    int v = 0, n = 0;
    for (; n < most && **p >= '0' && **p <= '9'; n++, (*p)++) v = v * 10 + (**p - '0');
    *out = v;
    return n > 0;
}

static bool read_char(const char **p, const char *any) {
    if (!**p || !strchr(any, **p)) return false;
    (*p)++;
    return true;
}

bool lq__time_parse(int64_t *epoch_ms, const char *text) {
    int y, mo, d, h, mi, sec;
    const char *p = text;
    if (!read_digits(&p, 4, &y) || !read_char(&p, "-") || !read_digits(&p, 2, &mo) ||
        !read_char(&p, "-") || !read_digits(&p, 2, &d) || !read_char(&p, "T ") ||
        !read_digits(&p, 2, &h) || !read_char(&p, ":") || !read_digits(&p, 2, &mi) ||
        !read_char(&p, ":") || !read_digits(&p, 2, &sec))
        return false;
    int ms = 0;
    if (*p == '.') {
        int scale = 100;
        for (p++; *p >= '0' && *p <= '9'; p++) {
            ms += (*p - '0') * scale;
            scale /= 10;
        }
    }
    /* A UTC offset, as PostgreSQL writes one in a session of another time
     * zone: "+01", "-05:30", "+0530"; "Z" or none is UTC. */
    int64_t offset_ms = 0;
    if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh = 0, om = 0;
        if (!read_digits(&p, 2, &oh)) return false;
        if (*p == ':') p++;
        read_digits(&p, 2, &om);
        offset_ms = sign * ((int64_t)oh * 60 + om) * 60000;
    }
    *epoch_ms = ((days_from_civil(y, (unsigned)mo, (unsigned)d) * 24 + h) * 60 + mi) * 60000 +
                (int64_t)sec * 1000 + ms - offset_ms;
    return true;
}

void lq__cond_init(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}
