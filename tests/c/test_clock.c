/* The text form of times: exact, sortable, parsed back. */
#include "check.h"
#include "clock.h"

int main(void) {
    char text[LQ_TIME_TEXT_SIZE];
    lq__time_text(text, 0);
    CHECK_STR(text, "1970-01-01T00:00:00.000+00:00");
    lq__time_text(text, 1795000000123);
    CHECK_STR(text, "2026-11-18T11:06:40.123+00:00");
    int64_t back;
    CHECK(lq__time_parse(&back, text) && back == 1795000000123);
    CHECK(lq__time_parse(&back, "2026-11-18 11:06:40") && back == 1795000000000);
    CHECK(!lq__time_parse(&back, "yesterday"));

    char earlier[LQ_TIME_TEXT_SIZE], later[LQ_TIME_TEXT_SIZE];
    lq__time_text(earlier, 1795000000999);
    lq__time_text(later, 1795000001000);
    CHECK(strcmp(earlier, later) < 0);
    CHECK(lq__now_ms() > 1700000000000);
    CHECK_DONE();
}
