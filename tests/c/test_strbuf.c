/* The text buffer: appending, quoting, and numbers as text. */
#include "check.h"
#include "base/strbuf.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

/* lq__int_text agrees with printf, length included. */
static void check_int_text(int64_t v) {
    char got[LQ__INT_TEXT_SIZE], want[32];
    size_t len = lq__int_text(got, v);
    int n = snprintf(want, sizeof want, "%" PRId64, v);
    CHECK_STR(got, want);
    CHECK(len == (size_t)n);
}

int main(void) {
    const int64_t values[] = {0,   1,    -1,    9,        10,        -10,      99,
                              100, 12345, -98765, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
                              INT64_MAX / 10, 1000000000000000000};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) check_int_text(values[i]);
    for (int64_t p = 1; p <= INT64_MAX / 10; p *= 10) {
        check_int_text(p - 1);
        check_int_text(p);
        check_int_text(-p);
    }

    lq__strbuf sb = {0};
    lq__sb_add(&sb, "a");
    lq__sb_addc(&sb, '=');
    lq__sb_add_quoted(&sb, "it\"s", '"');
    lq__sb_addf(&sb, " %d", 42);
    char *text = lq__sb_take(&sb);
    CHECK_STR(text, "a=\"it\"\"s\" 42");
    free(text);
    return check_failures;
}
