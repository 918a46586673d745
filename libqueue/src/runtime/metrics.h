/* The histograms of a subscription's metrics (lq_subscription_metrics):
 * fixed buckets of atomic counts, added to by claim threads without a lock
 * and read by a snapshot without one. */
#ifndef LQ_RUNTIME_METRICS_H
#define LQ_RUNTIME_METRICS_H

#include "base/internal.h"

#include <stdatomic.h>

typedef struct lq__histogram {
    atomic_llong counts[LQ_HISTOGRAM_BUCKETS];
    atomic_llong sum_us;
} lq__histogram;

/* Counts one observation of `us` microseconds (negative counts as 0). */
LQ__HIDDEN void lq__histogram_add(lq__histogram *h, int64_t us);

#endif
