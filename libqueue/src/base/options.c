/* The option table: names, types, ranges and defaults in one place, so the
 * bindings can map keyword arguments without option-specific code. */
#include "base/options.h"

#include <stdlib.h>
#include <string.h>

typedef struct option_spec {
    int id;
    const char *name;
    int type;
    int64_t min, max, fallback;
} option_spec;

static const option_spec specs[] = {
    {LQ_OPT_POOL_SIZE, "pool_size", LQ_OPTION_INT, 1, 10000, 8},
    {LQ_OPT_CONNECT_TIMEOUT_MS, "connect_timeout_ms", LQ_OPTION_INT, 1, INT32_MAX, 10000},
    {LQ_OPT_STATEMENT_TIMEOUT_MS, "statement_timeout_ms", LQ_OPTION_INT, 1, INT32_MAX, 30000},
    {LQ_OPT_ACQUIRE_TIMEOUT_MS, "acquire_timeout_ms", LQ_OPTION_INT, 0, INT32_MAX, 30000},
    {LQ_OPT_CONNECTION_LIMIT, "connection_limit", LQ_OPTION_INT, 0, 100000, 0},
    {LQ_OPT_LISTEN_NOTIFY, "listen_notify", LQ_OPTION_INT, 0, 1, 0},
    {LQ_OPT_PGBOUNCER, "pgbouncer", LQ_OPTION_STRING, 0, 0, 0},
    {LQ_OPT_LISTEN_URL, "listen_url", LQ_OPTION_STRING, 0, 0, 0},
    {LQ_OPT_WORKERS, "workers", LQ_OPTION_INT, 1, 4096, 1},
    {LQ_OPT_WORKERS_BY_KEY, "workers_by_key", LQ_OPTION_INT, 0, 4096, 0},
    {LQ_OPT_BATCH, "batch", LQ_OPTION_INT, 0, 100000, 0},
    {LQ_OPT_POLL_INTERVAL_MS, "poll_interval_ms", LQ_OPTION_INT, 1, INT32_MAX, 1000},
    {LQ_OPT_LEASE_MS, "lease_ms", LQ_OPTION_INT, 1, INT32_MAX, 30000},
    {LQ_OPT_MAX_ATTEMPTS, "max_attempts", LQ_OPTION_INT, 0, INT32_MAX, 0},
    {LQ_OPT_TRANSACTIONAL, "transactional", LQ_OPTION_INT, 0, 1, 0},
    {LQ_OPT_GROUP, "group", LQ_OPTION_STRING, 0, 0, 0},
    {LQ_OPT_ON_THREADS, "on_threads", LQ_OPTION_INT, 0, 4096, 0},
    {LQ_OPT_THREAD_CONNECTIONS, "thread_connections", LQ_OPTION_INT, 1, 64, 1},
    {LQ_OPT_COALESCE, "coalesce", LQ_OPTION_INT, -1, 1, -1},
    {LQ_OPT_COALESCE_WAIT_US, "coalesce_wait_us", LQ_OPTION_INT, 0, 1000000, 1000},
    {LQ_OPT_MAX_PAYLOAD_BYTES, "max_payload_bytes", LQ_OPTION_INT, 0, INT32_MAX, 0},
    {LQ_OPT_MAX_HEADERS_BYTES, "max_headers_bytes", LQ_OPTION_INT, 0, INT32_MAX, 0},
    {LQ_OPT_CONCURRENCY, "concurrency", LQ_OPTION_INT, 1, 1000000, 0},
    {LQ_OPT_WORKER_CONCURRENCY, "worker_concurrency", LQ_OPTION_INT, 1, 1000000, 0},
    {LQ_OPT_POLL_CEILING_MS, "poll_ceiling_ms", LQ_OPTION_INT, 1, INT32_MAX, 10000},
    {LQ_OPT_RATE_LIMIT, "rate_limit", LQ_OPTION_INT, 1, 1000000, 0},
    {LQ_OPT_RATE_PERIOD_MS, "rate_period_ms", LQ_OPTION_INT, 1, INT32_MAX, 1000},
    {LQ_OPT_PARTITION_CONCURRENCY, "partition_concurrency", LQ_OPTION_INT, 1, 1000000, 0},
    {LQ_OPT_TIMEOUT_MS, "timeout_ms", LQ_OPTION_INT, 1, INT32_MAX, 0},
    {LQ_OPT_RETAIN_MS, "retain_ms", LQ_OPTION_INT, 0, INT64_C(1) << 40, 0},
    {LQ_OPT_DEAD_LETTER_RETAIN_MS, "dead_letter_retain_ms", LQ_OPTION_INT, 0, INT64_C(1) << 40, 0},
    {LQ_OPT_PARTITION_WORKER_CONCURRENCY, "partition_worker_concurrency", LQ_OPTION_INT, 1, 1000000, 0},
    {LQ_OPT_PARTITION_RATE_LIMIT, "partition_rate_limit", LQ_OPTION_INT, 1, 1000000, 0},
    {LQ_OPT_PARTITION_RATE_PERIOD_MS, "partition_rate_period_ms", LQ_OPTION_INT, 1, INT32_MAX, 1000},
    {LQ_OPT_CRON, "cron", LQ_OPTION_STRING, 0, 0, 0},
    {LQ_OPT_EVERY_MS, "every_ms", LQ_OPTION_INT, 1, INT64_C(1) << 40, 0},
    {LQ_OPT_TZ, "tz", LQ_OPTION_STRING, 0, 0, 0},
    {LQ_OPT_CATCH_UP, "catch_up", LQ_OPTION_STRING, 0, 0, 0},
    {LQ_OPT_CATCH_UP_MS, "catch_up_ms", LQ_OPTION_INT, 1, INT64_C(1) << 40, 86400000},
};

#define SPEC_COUNT (sizeof specs / sizeof specs[0])

struct lq_options {
    bool set[SPEC_COUNT];
    int64_t ints[SPEC_COUNT];
    char *strs[SPEC_COUNT];
};

static int spec_index(int option) {
    for (size_t i = 0; i < SPEC_COUNT; i++)
        if (specs[i].id == option) return (int)i;
    return -1;
}

int lq_options_new(lq_options **out) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL; /* a failure leaves no dangling handle behind */
    *out = calloc(1, sizeof **out);
    return *out ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}

void lq_options_free(lq_options *options) {
    if (!options) return;
    for (size_t i = 0; i < SPEC_COUNT; i++) free(options->strs[i]);
    free(options);
}

int lq_options_set_int(lq_options *options, int option, int64_t value) {
    lq__error_clear();
    LQ__CHECK_ARG(options, "options is NULL");
    int i = spec_index(option);
    if (i < 0) return lq__error(LQ_MISUSE, "unknown option %d", option);
    const option_spec *s = &specs[i];
    if (s->type != LQ_OPTION_INT) return lq__error(LQ_MISUSE, "option %s takes a string", s->name);
    if (value < s->min || value > s->max)
        return lq__error(LQ_MISUSE, "option %s must be between %lld and %lld, not %lld", s->name,
                         (long long)s->min, (long long)s->max, (long long)value);
    options->ints[i] = value;
    options->set[i] = true;
    return LQ_OK;
}

int lq_options_set_str(lq_options *options, int option, const char *value) {
    lq__error_clear();
    LQ__CHECK_ARG(options, "options is NULL");
    int i = spec_index(option);
    if (i < 0) return lq__error(LQ_MISUSE, "unknown option %d", option);
    if (specs[i].type != LQ_OPTION_STRING)
        return lq__error(LQ_MISUSE, "option %s takes an integer", specs[i].name);
    char *copy = NULL;
    if (value && !(copy = lq__strdup(value)))
        return lq__error(LQ_NOMEM, "option %s: out of memory", specs[i].name);
    free(options->strs[i]);
    options->strs[i] = copy;
    options->set[i] = value != NULL;
    return LQ_OK;
}

int lq_option_find(int *option_out, int *type_out, const char *name) {
    lq__error_clear();
    LQ__CHECK_ARG(name, "name is NULL");
    for (size_t i = 0; i < SPEC_COUNT; i++) {
        if (strcmp(specs[i].name, name) == 0) {
            if (option_out) *option_out = specs[i].id;
            if (type_out) *type_out = specs[i].type;
            return LQ_OK;
        }
    }
    return lq__error(LQ_MISUSE, "unknown option \"%s\"", name);
}

/* The header's groups: broker options below 20, subscription options below
 * 60, schedule options from 60. */
int lq_option_scope_of(int *scope_out, int option) {
    lq__error_clear();
    LQ__CHECK_ARG(scope_out, "scope_out is NULL");
    if (spec_index(option) < 0) return lq__error(LQ_MISUSE, "unknown option %d", option);
    *scope_out = option < LQ_OPT_WORKERS ? LQ_SCOPE_BROKER
                 : option < LQ_OPT_CRON  ? LQ_SCOPE_SUBSCRIPTION
                                         : LQ_SCOPE_SCHEDULE;
    return LQ_OK;
}

int64_t lq__opt_int(const lq_options *options, int option) {
    int i = spec_index(option);
    if (i < 0) return 0;
    return options && options->set[i] ? options->ints[i] : specs[i].fallback;
}

const char *lq__opt_str(const lq_options *options, int option) {
    int i = spec_index(option);
    return i >= 0 && options ? options->strs[i] : NULL;
}

bool lq__opt_is_set(const lq_options *options, int option) {
    int i = spec_index(option);
    return i >= 0 && options && options->set[i];
}

int lq__options_copy(lq_options **out, const lq_options *options) {
    lq_options *copy = calloc(1, sizeof *copy);
    if (!copy) return lq__error(LQ_NOMEM, "out of memory");
    for (size_t i = 0; options && i < SPEC_COUNT; i++) {
        copy->set[i] = options->set[i];
        copy->ints[i] = options->ints[i];
        if (options->strs[i] && !(copy->strs[i] = lq__strdup(options->strs[i]))) {
            lq_options_free(copy);
            return lq__error(LQ_NOMEM, "out of memory");
        }
    }
    *out = copy;
    return LQ_OK;
}
