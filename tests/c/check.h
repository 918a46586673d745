/* A minimal test harness: CHECK records a failure and goes on; main returns
 * the count, so ctest sees every failing line in one run. */
#ifndef LQ_CHECK_H
#define LQ_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                      \
        }                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                              \
    do {                                                                             \
        const char *a_ = (a), *b_ = (b);                                             \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                     \
            fprintf(stderr, "%s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__,          \
                    a_ ? a_ : "(null)", b_ ? b_ : "(null)");                          \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)

#define CHECK_CONTAINS(haystack, needle)                                              \
    do {                                                                              \
        const char *h_ = (haystack);                                                  \
        if (!h_ || !strstr(h_, needle)) {                                             \
            fprintf(stderr, "%s:%d: \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,        \
                    h_ ? h_ : "(null)", needle);                                       \
            check_failures++;                                                         \
        }                                                                             \
    } while (0)

#define CHECK_DONE()                                                               \
    do {                                                                           \
        if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures); \
        return check_failures ? 1 : 0;                                             \
    } while (0)

#endif
