#include "clock.h"

#include <stdio.h>
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

void lq__time_text(char out[LQ_TIME_TEXT_SIZE], int64_t epoch_ms) {
    time_t secs = (time_t)(epoch_ms / 1000);
    int ms = (int)(epoch_ms % 1000);
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    struct tm tm;
    gmtime_r(&secs, &tm);
    char wide[64]; /* room for any int the compiler cannot bound */
    snprintf(wide, sizeof wide, "%04d-%02d-%02dT%02d:%02d:%02d.%03d+00:00",
             (tm.tm_year + 1900) % 10000, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
             tm.tm_sec, ms);
    memcpy(out, wide, LQ_TIME_TEXT_SIZE - 1);
    out[LQ_TIME_TEXT_SIZE - 1] = '\0';
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

bool lq__time_parse(int64_t *epoch_ms, const char *text) {
    int y, mo, d, h, mi, s, used = 0;
    if (sscanf(text, "%4d-%2d-%2d%*1[T ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &used) != 6)
        return false;
    const char *rest = text + used;
    int ms = 0;
    if (*rest == '.') {
        int scale = 100;
        for (rest++; *rest >= '0' && *rest <= '9'; rest++) {
            ms += (*rest - '0') * scale;
            scale /= 10;
        }
    }
    *epoch_ms = ((days_from_civil(y, (unsigned)mo, (unsigned)d) * 24 + h) * 60 + mi) * 60000 +
                (int64_t)s * 1000 + ms;
    return true;
}
