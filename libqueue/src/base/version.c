/* The version of the linked library. */
#include "base/internal.h"

#define STR2(x) #x
#define STR(x) STR2(x)

int lq_version_number(void) { return LQ_VERSION_NUMBER; }

const char *lq_version_string(void) {
    return STR(LQ_VERSION_MAJOR) "." STR(LQ_VERSION_MINOR) "." STR(LQ_VERSION_PATCH);
}
