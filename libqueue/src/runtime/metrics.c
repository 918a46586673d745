/* lq_subscription_metrics: every stat and both histograms copied from
 * memory into a snapshot the caller owns. Nothing here runs a statement, so
 * an exporter may poll it at any rate. */
#include "runtime/metrics.h"

#include "runtime/runtime.h"

#include <math.h>
#include <stdlib.h>

/* Upper bounds in microseconds: a millisecond to five minutes, then none. */
static const int64_t bounds_us[LQ_HISTOGRAM_BUCKETS] = {
    1000,    2500,     5000,     10000,     25000,     50000,     100000,     250000,
    500000,  1000000,  2500000,  5000000,  10000000,  60000000,  300000000, INT64_MAX,
};

enum { HISTOGRAMS = LQ_HISTOGRAM_WAIT };

struct lq_metrics {
    int64_t stats[LQ_STAT_POOL_IDLE + 1];
    int64_t counts[HISTOGRAMS][LQ_HISTOGRAM_BUCKETS];
    int64_t sum_us[HISTOGRAMS];
};

void lq__histogram_add(lq__histogram *h, int64_t us) {
    if (us < 0) us = 0;
    int i = 0;
    while (us > bounds_us[i]) i++; /* the last bound holds every value */
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

double lq_histogram_bound(int bucket) {
    if (bucket < 0 || bucket >= LQ_HISTOGRAM_BUCKETS) return NAN;
    if (bucket == LQ_HISTOGRAM_BUCKETS - 1) return INFINITY;
    return (double)bounds_us[bucket] / 1e6;
}

static const lq__histogram *histogram_of(const lq_subscription *s, int which) {
    return which == LQ_HISTOGRAM_CLAIM ? &s->claim_seconds : &s->wait_seconds;
}

int lq_subscription_metrics(lq_metrics **out, const lq_subscription *s) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "the out pointer is NULL");
    *out = NULL;
    LQ__CHECK_ARG(s, "the subscription is NULL");
    lq_metrics *m = calloc(1, sizeof *m);
    if (!m) return lq__error(LQ_NOMEM, "out of memory");
    for (int stat = LQ_STAT_CLAIMS; stat <= LQ_STAT_POOL_IDLE; stat++)
        m->stats[stat] = lq_subscription_stat(s, stat);
    for (int which = 1; which <= HISTOGRAMS; which++) {
        const lq__histogram *h = histogram_of(s, which);
        for (int i = 0; i < LQ_HISTOGRAM_BUCKETS; i++)
            m->counts[which - 1][i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        m->sum_us[which - 1] = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
    }
    *out = m;
    return LQ_OK;
}

int64_t lq_metrics_stat(const lq_metrics *m, int stat) {
    return m && stat >= LQ_STAT_CLAIMS && stat <= LQ_STAT_POOL_IDLE ? m->stats[stat] : 0;
}

int64_t lq_metrics_count(const lq_metrics *m, int histogram, int bucket) {
    if (!m || histogram < 1 || histogram > HISTOGRAMS || bucket < -1 || bucket >= LQ_HISTOGRAM_BUCKETS)
        return 0;
    const int64_t *counts = m->counts[histogram - 1];
    if (bucket >= 0) return counts[bucket];
    int64_t all = 0;
    for (int i = 0; i < LQ_HISTOGRAM_BUCKETS; i++) all += counts[i];
    return all;
}

double lq_metrics_sum(const lq_metrics *m, int histogram) {
    if (!m || histogram < 1 || histogram > HISTOGRAMS) return 0;
    return (double)m->sum_us[histogram - 1] / 1e6;
}

void lq_metrics_free(lq_metrics *m) { free(m); }
