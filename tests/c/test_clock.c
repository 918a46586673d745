/* The text form of times: exact, sortable, parsed back. */
#include "check.h"
#include "base/clock.h"

#include <stdio.h>
#include <time.h>

/* The text the C library's calendar gives for a time. */
static void reference_text(char out[64], int64_t epoch_ms) {
    int64_t secs = epoch_ms / 1000, ms = epoch_ms % 1000;
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    time_t t = (time_t)secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03d+00:00", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
}

int main(void) {
    char text[LQ__TIME_TEXT_SIZE];
    lq__time_text(text, 0);
    CHECK_STR(text, "1970-01-01T00:00:00.000+00:00");
    lq__time_text(text, 1795000000123);
    CHECK_STR(text, "2026-11-18T11:06:40.123+00:00");
    int64_t back;
    CHECK(lq__time_parse(&back, text) && back == 1795000000123);
    CHECK(lq__time_parse(&back, "2026-11-18 11:06:40") && back == 1795000000000);
    CHECK(!lq__time_parse(&back, "yesterday"));
    /* An offset counts: PostgreSQL writes one in a session of another zone. */
    CHECK(lq__time_parse(&back, "2026-11-18 12:06:40.5+01") && back == 1795000000500);
    CHECK(lq__time_parse(&back, "2026-11-18 05:36:40-05:30") && back == 1795000000000);
    CHECK(lq__time_parse(&back, "2026-11-18T11:06:40Z") && back == 1795000000000);

    /* The hand-written calendar agrees with the C library's across leap
     * days, centuries and times before 1970, and parses back. */
    const int64_t day = 86400000;
    const int64_t points[] = {-1, -day, -86399999, 951782400000 /* 2000-02-29 */,
                              4107542400000 /* 2100-03-01 */, 253402300799999 /* 9999-12-31 */};
    int agree = 0, total = 0;
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++, total++) {
        char want[64];
        reference_text(want, points[i]);
        lq__time_text(text, points[i]);
        agree += strcmp(text, want) == 0;
    }
    uint64_t x = 88172645463325252ull; /* xorshift: times spread over 1900..2200 */
    for (int i = 0; i < 200000; i++, total++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t ms = (int64_t)(x % 9467280000000ull) - 2208988800000;
        char want[64];
        reference_text(want, ms);
        lq__time_text(text, ms);
        agree += strcmp(text, want) == 0 && lq__time_parse(&back, text) && back == ms;
    }
    CHECK(agree == total);

    char earlier[LQ__TIME_TEXT_SIZE], later[LQ__TIME_TEXT_SIZE];
    lq__time_text(earlier, 1795000000999);
    lq__time_text(later, 1795000001000);
    CHECK(strcmp(earlier, later) < 0);
    CHECK(lq__now_ms() > 1700000000000);
    CHECK_DONE();
}
