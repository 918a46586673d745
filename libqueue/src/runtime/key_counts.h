/* How many deliveries of each partition key are in work in this
 * subscription, for partition_worker_concurrency: a small chained hash
 * table of keys, each entry gone when its count is back to 0. Not
 * thread-safe: the subscription's mu guards it. */
#ifndef LQ_RUNTIME_KEY_COUNTS_H
#define LQ_RUNTIME_KEY_COUNTS_H

#include "base/internal.h"

typedef struct lq__key_count lq__key_count;

typedef struct lq__key_counts {
    lq__key_count **buckets;
    size_t bucket_count;
} lq__key_counts;

/* Room for about `expected` keys at once; LQ_NOMEM. */
LQ__HIDDEN int lq__key_counts_init(lq__key_counts *kc, size_t expected);
LQ__HIDDEN void lq__key_counts_free(lq__key_counts *kc);
/* The count of `key` (0 for one not in work). */
LQ__HIDDEN int lq__key_counts_get(const lq__key_counts *kc, const char *key);
/* Adds `delta` (+1 or -1) to the count of `key`; false when out of memory
 * (the count is then unchanged). */
LQ__HIDDEN bool lq__key_counts_add(lq__key_counts *kc, const char *key, int delta);

#endif
