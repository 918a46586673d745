/* FNV-1a, the one hash of names the library keeps: lock names, lanes,
 * in-process key tables. Stable across processes and builds, since keys
 * hashed in one process are compared with another's. */
#ifndef LQ_HASH_H
#define LQ_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LQ__FNV_OFFSET 1469598103934665603ull

/* `h` carried on over `n` bytes: start with LQ__FNV_OFFSET. */
static inline uint64_t lq__fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The hash of a NUL-terminated string. */
static inline uint64_t lq__fnv1a_str(const char *s) { return lq__fnv1a(LQ__FNV_OFFSET, s, strlen(s)); }

#endif
