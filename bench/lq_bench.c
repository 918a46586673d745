/* The library side of the benchmarks (bench/run drives it). Each command
 * prints one JSON record per figure on stdout:
 *
 *   lq_bench setup --url U --form F [--n N]     fresh bench table, N rows preloaded
 *   lq_bench count --url U                      rows left, as {"remaining": n}
 *   lq_bench w1 --url U --form F --n N [--workers 4] [--batch B] [--pool P]
 *               [--poll-ms 50] [--coalesce 0|1] [--rss-at 100000,1000000] [--no-setup] [--callgrind]
 *               [--warm W] [--concurrency C]
 *       W1 drain: preload N rows (untimed), start a push subscription with a
 *       no-op C handler, and time until the subscription has settled N
 *       deliveries; then check the table is empty. With --warm, W rows more
 *       are preloaded and the timing (and callgrind's count) starts once W
 *       have settled, every connection open and its statements prepared, as
 *       the raw loops start theirs; "counted" is the jobs timed.
 *   lq_bench w2 --url U --n N
 *       W2 enqueue: N single-row publishes, each its own transaction, from
 *       one thread (per-call latency p50/p99), then one bulk publish of N
 *       rows in lq_publish calls of 1000.
 *   lq_bench w3 --url U --form F [--jobs 500] [--rate 50] [--poll-ms 10] [--notify]
 *       W3 latency: an idle subscription with workers(4); another process
 *       (lq_bench w3-pub) publishes the jobs at the rate with the send time
 *       in the payload; enqueue-to-handler-start p50/p99/max.
 *   lq_bench serve --url U --form F [--workers 4] [--poll-ms 50] [--pool P] [--progress FILE --slot I]
 *       One worker process of a fleet (bench/scale.py): opens a push
 *       subscription with a no-op C handler on the bench table, prints
 *       "ready", runs it once a line arrives on stdin and until stdin
 *       closes; meanwhile keeps its settled and claim counts in slot I of
 *       FILE (two native int64s at I * 16), so that the parent reads the
 *       fleet's progress without asking the database. At the end, one
 *       record of its counts.
 */
#include "bench_common.h"
#include "bench_db.h"
#include "libqueue.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <math.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifdef LQ_BENCH_CALLGRIND
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

extern char **environ;

static void check(int rc, const char *what) {
    if (rc != LQ_OK) bench_die("%s: %s (%s)", what, lq_errmsg(), lq_status_name(rc));
}

static lq_options *options(void) {
    lq_options *o;
    check(lq_options_new(&o), "lq_options_new");
    return o;
}

static lq_broker *open_broker(const char *url, int64_t pool, bool notify) {
    lq_options *o = options();
    if (pool > 0) check(lq_options_set_int(o, LQ_OPT_POOL_SIZE, pool), "pool_size");
    if (notify) check(lq_options_set_int(o, LQ_OPT_LISTEN_NOTIFY, 1), "listen_notify");
    lq_broker *b;
    check(lq_broker_open(&b, url, o), "lq_broker_open");
    lq_options_free(o);
    return b;
}

static const char *required(int argc, char **argv, const char *name) {
    const char *v = bench_arg(argc, argv, name, NULL);
    if (!v) bench_die("%s is required", name);
    return v;
}

/* ---------------------------------------------------------------- W1 -- */

static atomic_llong lease_ahead_max_ms; /* the furthest lease token seen ahead of now */
static bool probe_leases;

static int noop_handler(lq_delivery *d, void *userdata) {
    (void)userdata;
    (void)lq_delivery_payload(d);
    if (probe_leases) {
        long long ahead = (long long)(lq_delivery_lease_expiry_ms(d) - bench_wall_ms());
        long long seen = atomic_load(&lease_ahead_max_ms);
        while (ahead > seen && !atomic_compare_exchange_weak(&lease_ahead_max_ms, &seen, ahead)) {
        }
    }
    return LQ_OK;
}

static int noop_batch_handler(lq_delivery *const *deliveries, size_t count, void *userdata) {
    (void)userdata;
    for (size_t i = 0; i < count; i++) (void)lq_delivery_payload(deliveries[i]);
    return LQ_OK; /* acks every delivery of the batch */
}

static int cmd_w1(int argc, char **argv) {
    const char *url = required(argc, argv, "--url");
    bench_form form = bench_form_of(required(argc, argv, "--form"));
    int64_t n = bench_arg_int(argc, argv, "--n", 20000);
    int64_t warm = bench_arg_int(argc, argv, "--warm", 0);
    int64_t total = n + warm;
    int64_t workers = bench_arg_int(argc, argv, "--workers", 4);
    int64_t batch = bench_arg_int(argc, argv, "--batch", 0);
    int64_t pool = bench_arg_int(argc, argv, "--pool", 0);
    int64_t poll_ms = bench_arg_int(argc, argv, "--poll-ms", 50);
    const char *workload = bench_arg(argc, argv, "--workload", batch > 0 ? "W1-batch" : "W1");
    bool callgrind = bench_flag(argc, argv, "--callgrind");
    const char *db = bench_db_name(bench_db_of_url(url));
    if (form == BENCH_NO_FORM) bench_die("unknown form");
    probe_leases = form == BENCH_LEASE && !callgrind && batch == 0;

    /* RSS thresholds, e.g. "100000,1000000". */
    int64_t rss_at[8];
    long rss_kb[8], anon_kb[8]; /* the resident set, and its anonymous part (the heaps) */
    long sqlite_kb[8];          /* of the heaps, SQLite's own (its page caches) */
    int rss_count = 0;
    const char *rss_list = bench_arg(argc, argv, "--rss-at", NULL);
    for (const char *p = rss_list; p && *p && rss_count < 8;) {
        rss_at[rss_count++] = strtoll(p, (char **)&p, 10);
        if (*p == ',') p++;
    }

    if (!bench_flag(argc, argv, "--no-setup")) bench_setup(url, form, total);
    lq_broker *broker = open_broker(url, pool, false);
    lq_table *table = bench_table(form);
    lq_options *o = options();
    check(lq_options_set_int(o, LQ_OPT_WORKERS, workers), "workers");
    check(lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, poll_ms), "poll_interval_ms");
    if (batch > 0) check(lq_options_set_int(o, LQ_OPT_BATCH, batch), "batch");
    const char *coalesce = bench_arg(argc, argv, "--coalesce", NULL);
    if (coalesce) check(lq_options_set_int(o, LQ_OPT_COALESCE, strtoll(coalesce, NULL, 10)), "coalesce");
    const char *coalesce_wait = bench_arg(argc, argv, "--coalesce-wait-us", NULL);
    if (coalesce_wait)
        check(lq_options_set_int(o, LQ_OPT_COALESCE_WAIT_US, strtoll(coalesce_wait, NULL, 10)),
              "coalesce_wait_us");
    const char *concurrency = bench_arg(argc, argv, "--concurrency", NULL);
    if (concurrency)
        check(lq_options_set_int(o, LQ_OPT_CONCURRENCY, strtoll(concurrency, NULL, 10)), "concurrency");
    lq_subscription *sub;
    int rc = lq_subscription_open(&sub, broker, table, o);
    lq_options_free(o);
    bench_json j;
    if (rc != LQ_OK) {
        /* A setting the library refuses: the figure is not available, and
         * the record says why. */
        char note[600];
        snprintf(note, sizeof note, "not available: %s (%s)",
                 lq_errmsg(), lq_status_name(rc));
        bj_head(&j, "lib", db, bench_form_name(form), "c", workload);
        bj_int(&j, "n", n);
        bj_num(&j, "jobs_per_s", BENCH_NULL);
        bj_str(&j, "note", note);
        bj_print(&j);
        lq_table_free(table);
        lq_broker_close(broker);
        return 0;
    }

    long rss_start = bench_rss_kb();
    double poll_s = callgrind ? 0.02 : 0.001;
    int next_rss = 0;
    double t0 = bench_now();
    if (warm == 0) CALLGRIND_START_INSTRUMENTATION;
    if (batch > 0) check(lq_subscription_run_batch(sub, noop_batch_handler, NULL), "lq_subscription_run_batch");
    else
        check(lq_subscription_run(sub, noop_handler, NULL), "lq_subscription_run");
    int64_t settled = 0, last = 0, warmed = 0;
    while (warm > 0 && (settled = lq_subscription_stat(sub, LQ_STAT_SETTLED)) < warm && bench_now() - t0 < 60)
        bench_sleep_ms(1);
    if (warm > 0) {
        CALLGRIND_START_INSTRUMENTATION;
        t0 = bench_now();
        warmed = last = settled;
    }
    double last_progress = t0, t1;
    for (;;) {
        settled = lq_subscription_stat(sub, LQ_STAT_SETTLED);
        while (next_rss < rss_count && settled >= rss_at[next_rss]) {
            anon_kb[next_rss] = bench_status_kb("RssAnon");
            sqlite_kb[next_rss] = bench_sqlite_memory_kb();
            rss_kb[next_rss++] = bench_rss_kb();
        }
        t1 = bench_now();
        if (settled >= total) break;
        if (settled != last) {
            last = settled;
            last_progress = t1;
        } else if (t1 - last_progress > 60) {
            break; /* stalled: reported below */
        }
        bench_sleep_ms(poll_s * 1000);
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    int64_t claims = lq_subscription_stat(sub, LQ_STAT_CLAIMS);
    int64_t empty = lq_subscription_stat(sub, LQ_STAT_EMPTY_CLAIMS);
    lq_subscription_close(sub);
    lq_table_free(table);
    lq_broker_close(broker);
    int64_t remaining = bench_count(url);

    double seconds = t1 - t0;
    char note[256] = "";
    int64_t counted = total - warmed;
    if (settled < total) snprintf(note, sizeof note, "stalled: %lld of %lld settled", (long long)settled, (long long)total);
    else if (remaining != 0) snprintf(note, sizeof note, "%lld rows left in the table", (long long)remaining);
    bj_head(&j, "lib", db, bench_form_name(form), "c", workload);
    bj_int(&j, "n", n);
    if (warm) bj_int(&j, "warm", warm);
    bj_int(&j, "counted", counted);
    bj_num(&j, "seconds", seconds);
    bj_num(&j, "jobs_per_s", settled < total || remaining ? BENCH_NULL : (double)counted / seconds);
    bj_int(&j, "workers", workers);
    if (batch > 0) bj_int(&j, "batch", batch);
    if (coalesce) bj_int(&j, "coalesce", strtoll(coalesce, NULL, 10));
    if (concurrency) bj_int(&j, "concurrency", strtoll(concurrency, NULL, 10));
    bj_int(&j, "poll_ms", poll_ms);
    bj_int(&j, "claims", claims);
    bj_int(&j, "empty_claims", empty);
    bj_int(&j, "remaining", remaining);
    if (probe_leases) bj_num(&j, "max_lease_ahead_s", (double)atomic_load(&lease_ahead_max_ms) / 1000.0);
    if (rss_count) {
        bj_int(&j, "rss_start_kb", rss_start);
        for (int i = 0; i < rss_count; i++) {
            char key[64];
            snprintf(key, sizeof key, "rss_at_%lld_kb", (long long)rss_at[i]);
            bj_int(&j, key, i < next_rss ? rss_kb[i] : -1);
            snprintf(key, sizeof key, "anon_at_%lld_kb", (long long)rss_at[i]);
            bj_int(&j, key, i < next_rss ? anon_kb[i] : -1);
            if (bench_db_of_url(url) != BENCH_SQLITE) continue;
            snprintf(key, sizeof key, "sqlite_at_%lld_kb", (long long)rss_at[i]);
            bj_int(&j, key, i < next_rss ? sqlite_kb[i] : -1);
        }
    }
    bj_str(&j, "note", *note ? note : NULL);
    bj_print(&j);
    return settled < total || remaining ? 1 : 0;
}

/* ---------------------------------------------------------------- W2 -- */

static void w2_record(const char *db, const char *workload, int64_t n, double seconds,
                      double p50, double p99, int64_t count) {
    bench_json j;
    char note[128] = "";
    if (count != n) snprintf(note, sizeof note, "%lld rows in the table, expected %lld", (long long)count, (long long)n);
    bj_head(&j, "lib", db, NULL, "c", workload);
    bj_int(&j, "n", n);
    bj_num(&j, "seconds", seconds);
    bj_num(&j, "jobs_per_s", count == n ? (double)n / seconds : BENCH_NULL);
    bj_num(&j, "p50_ms", p50);
    bj_num(&j, "p99_ms", p99);
    bj_str(&j, "note", *note ? note : NULL);
    bj_print(&j);
}

static int cmd_w2(int argc, char **argv) {
    const char *url = required(argc, argv, "--url");
    int64_t n = bench_arg_int(argc, argv, "--n", 20000);
    /* The table of the form given (default lease): publishing does not
     * depend on it beyond the columns. */
    bench_form form = bench_form_of(bench_arg(argc, argv, "--form", "lease"));
    const char *db = bench_db_name(bench_db_of_url(url));
    char payload[256];

    /* Single-row publishes: each lq_publish is its own transaction. */
    bench_setup(url, form, 0);
    lq_broker *broker = open_broker(url, 0, false);
    lq_table *table = bench_table(form);
    lq_message *m;
    check(lq_message_new(&m), "lq_message_new");
    double *lat = calloc((size_t)n, sizeof *lat);
    if (!lat) bench_die("out of memory");
    double t0 = bench_now();
    for (int64_t i = 0; i < n; i++) {
        size_t len = bench_payload(payload, sizeof payload, i + 1, 0);
        check(lq_message_set_payload(m, payload, len), "payload");
        double s = bench_now();
        int64_t id;
        check(lq_publish(&id, broker, table, &m, 1), "lq_publish");
        lat[i] = (bench_now() - s) * 1000.0;
    }
    double seconds = bench_now() - t0;
    lq_broker_close(broker);
    double p50 = bench_percentile(lat, (size_t)n, 50), p99 = bench_percentile(lat, (size_t)n, 99);
    w2_record(db, "W2-single", n, seconds, p50, p99, bench_count(url));
    free(lat);

    /* Bulk: lq_publish of 1000 messages at a time, one transaction each. */
    bench_setup(url, form, 0);
    broker = open_broker(url, 0, false);
    enum { CHUNK = 1000 };
    lq_message *msgs[CHUNK];
    int64_t ids[CHUNK];
    for (int i = 0; i < CHUNK; i++) check(lq_message_new(&msgs[i]), "lq_message_new");
    t0 = bench_now();
    for (int64_t done = 0; done < n;) {
        size_t k = (size_t)(n - done < CHUNK ? n - done : CHUNK);
        for (size_t i = 0; i < k; i++) {
            size_t len = bench_payload(payload, sizeof payload, done + (int64_t)i + 1, 0);
            check(lq_message_set_payload(msgs[i], payload, len), "payload");
        }
        check(lq_publish(ids, broker, table, msgs, k), "lq_publish (bulk)");
        done += (int64_t)k;
    }
    seconds = bench_now() - t0;
    lq_broker_close(broker);
    w2_record(db, "W2-bulk", n, seconds, BENCH_NULL, BENCH_NULL, bench_count(url));
    for (int i = 0; i < CHUNK; i++) lq_message_free(msgs[i]);
    lq_message_free(m);
    lq_table_free(table);
    return 0;
}

/* ---------------------------------------------------------------- W3 -- */

typedef struct w3_state {
    double *lat_ms;
    int64_t cap;
    atomic_llong received;
} w3_state;

static int w3_handler(lq_delivery *d, void *userdata) {
    int64_t now = bench_wall_us();
    w3_state *st = userdata;
    int64_t sent = bench_payload_sent_us(lq_delivery_payload(d), lq_delivery_payload_size(d));
    long long i = atomic_fetch_add(&st->received, 1);
    if (i < st->cap) st->lat_ms[i] = sent ? (double)(now - sent) / 1000.0 : BENCH_NULL;
    return LQ_OK;
}

static int cmd_w3(int argc, char **argv) {
    const char *url = required(argc, argv, "--url");
    bench_form form = bench_form_of(required(argc, argv, "--form"));
    int64_t jobs = bench_arg_int(argc, argv, "--jobs", 500);
    int64_t rate = bench_arg_int(argc, argv, "--rate", 50);
    int64_t poll_ms = bench_arg_int(argc, argv, "--poll-ms", 10);
    bool notify = bench_flag(argc, argv, "--notify");
    const char *db = bench_db_name(bench_db_of_url(url));

    bench_setup(url, form, 0);
    lq_broker *broker = open_broker(url, 0, notify);
    lq_table *table = bench_table(form);
    lq_options *o = options();
    check(lq_options_set_int(o, LQ_OPT_WORKERS, 4), "workers");
    check(lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, poll_ms), "poll_interval_ms");
    lq_subscription *sub;
    check(lq_subscription_open(&sub, broker, table, o), "lq_subscription_open");
    lq_options_free(o);
    w3_state st = {calloc((size_t)jobs, sizeof(double)), jobs, 0};
    if (!st.lat_ms) bench_die("out of memory");
    check(lq_subscription_run(sub, w3_handler, &st), "lq_subscription_run");
    bench_sleep_ms(500); /* idle: the subscription is waiting */

    char jobs_s[32], rate_s[32];
    snprintf(jobs_s, sizeof jobs_s, "%lld", (long long)jobs);
    snprintf(rate_s, sizeof rate_s, "%lld", (long long)rate);
    char *child_argv[] = {"lq_bench", "w3-pub", "--url", (char *)url, "--form",
                          (char *)bench_form_name(form), "--jobs", jobs_s, "--rate", rate_s,
                          notify ? "--notify" : NULL, NULL};
    pid_t pid;
    int sp = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, child_argv, environ);
    if (sp != 0) bench_die("cannot start the publisher: %s", strerror(sp));
    double deadline = bench_now() + (double)jobs / (double)rate + 30.0;
    while (atomic_load(&st.received) < jobs && bench_now() < deadline) bench_sleep_ms(5);
    int status = 0;
    waitpid(pid, &status, 0);
    lq_subscription_close(sub);
    lq_table_free(table);
    lq_broker_close(broker);

    int64_t got = atomic_load(&st.received);
    if (got > jobs) got = jobs;
    double p50 = bench_percentile(st.lat_ms, (size_t)got, 50);
    double p99 = bench_percentile(st.lat_ms, (size_t)got, 99);
    double max = got ? st.lat_ms[got - 1] : BENCH_NULL; /* sorted by bench_percentile */
    char note[160] = "";
    if (got < jobs) snprintf(note, sizeof note, "received %lld of %lld", (long long)got, (long long)jobs);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        snprintf(note, sizeof note, "the publisher failed (status %d)", status);
    bench_json j;
    bj_head(&j, "lib", db, bench_form_name(form), "c", notify ? "W3-notify" : "W3-poll");
    bj_int(&j, "n", jobs);
    bj_num(&j, "jobs_per_s", BENCH_NULL);
    bj_num(&j, "p50_ms", p50);
    bj_num(&j, "p99_ms", p99);
    bj_num(&j, "max_ms", max);
    bj_int(&j, "poll_ms", poll_ms);
    bj_int(&j, "rate", rate);
    bj_str(&j, "note", *note ? note : NULL);
    bj_print(&j);
    free(st.lat_ms);
    return got < jobs;
}

static int cmd_w3_pub(int argc, char **argv) {
    const char *url = required(argc, argv, "--url");
    bench_form form = bench_form_of(required(argc, argv, "--form"));
    int64_t jobs = bench_arg_int(argc, argv, "--jobs", 500);
    int64_t rate = bench_arg_int(argc, argv, "--rate", 50);
    /* A publish sends NOTIFY only from a broker that listens. */
    lq_broker *broker = open_broker(url, 2, bench_flag(argc, argv, "--notify"));
    lq_table *table = bench_table(form);
    lq_message *m;
    check(lq_message_new(&m), "lq_message_new");
    char payload[256];
    double t0 = bench_now();
    for (int64_t i = 0; i < jobs; i++) {
        double wait = t0 + (double)i / (double)rate - bench_now();
        if (wait > 0) bench_sleep_ms(wait * 1000);
        size_t len = bench_payload(payload, sizeof payload, i + 1, bench_wall_us());
        check(lq_message_set_payload(m, payload, len), "payload");
        check(lq_publish(NULL, broker, table, &m, 1), "lq_publish");
    }
    lq_message_free(m);
    lq_table_free(table);
    lq_broker_close(broker);
    return 0;
}

/* ------------------------------------------------------------ serve -- */

/* Writes the subscription's settled and claim counts into its slot. */
static void write_progress(int fd, int64_t slot, lq_subscription *sub) {
    int64_t counts[2] = {lq_subscription_stat(sub, LQ_STAT_SETTLED),
                         lq_subscription_stat(sub, LQ_STAT_CLAIMS)};
    if (fd >= 0 && pwrite(fd, counts, sizeof counts, (off_t)(slot * (int64_t)sizeof counts)) < 0)
        bench_die("progress file: %s", strerror(errno));
}

/* Waits up to ms for stdin; false once it has closed. */
static bool stdin_open(int ms) {
    struct pollfd p = {.fd = 0, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return true;
    char buf[64];
    return read(0, buf, sizeof buf) > 0;
}

static int cmd_serve(int argc, char **argv) {
    const char *url = required(argc, argv, "--url");
    bench_form form = bench_form_of(required(argc, argv, "--form"));
    if (form == BENCH_NO_FORM) bench_die("unknown form");
    int64_t workers = bench_arg_int(argc, argv, "--workers", 4);
    int64_t poll_ms = bench_arg_int(argc, argv, "--poll-ms", 50);
    const char *progress = bench_arg(argc, argv, "--progress", NULL);
    int64_t slot = bench_arg_int(argc, argv, "--slot", 0);
    int fd = progress ? open(progress, O_WRONLY) : -1;
    if (progress && fd < 0) bench_die("%s: %s", progress, strerror(errno));
    lq_broker *broker = open_broker(url, bench_arg_int(argc, argv, "--pool", 0), false);
    lq_table *table = bench_table(form);
    lq_options *o = options();
    check(lq_options_set_int(o, LQ_OPT_WORKERS, workers), "workers");
    check(lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, poll_ms), "poll_interval_ms");
    lq_subscription *sub;
    check(lq_subscription_open(&sub, broker, table, o), "lq_subscription_open");
    lq_options_free(o);
    printf("ready\n");
    fflush(stdout);
    if (stdin_open(-1)) {
        check(lq_subscription_run(sub, noop_handler, NULL), "lq_subscription_run");
        while (stdin_open(1)) write_progress(fd, slot, sub);
    }
    write_progress(fd, slot, sub);
    int64_t settled = lq_subscription_stat(sub, LQ_STAT_SETTLED);
    int64_t claims = lq_subscription_stat(sub, LQ_STAT_CLAIMS);
    int64_t empty = lq_subscription_stat(sub, LQ_STAT_EMPTY_CLAIMS);
    lq_subscription_close(sub);
    lq_table_free(table);
    lq_broker_close(broker);
    if (fd >= 0) close(fd);
    bench_json j;
    bj_head(&j, "serve", bench_db_name(bench_db_of_url(url)), bench_form_name(form), "c", "W4");
    bj_int(&j, "workers", workers);
    bj_int(&j, "poll_ms", poll_ms);
    bj_int(&j, "settled", settled);
    bj_int(&j, "claims", claims);
    bj_int(&j, "empty_claims", empty);
    bj_print(&j);
    return 0;
}

/* ------------------------------------------------------------ setup -- */

static int cmd_setup(int argc, char **argv) {
    const char *url = required(argc, argv, "--url");
    bench_form form = bench_form_of(required(argc, argv, "--form"));
    bench_setup(url, form, bench_arg_int(argc, argv, "--n", 0));
    return 0;
}

static int cmd_count(int argc, char **argv) {
    printf("{\"remaining\": %lld}\n", (long long)bench_count(required(argc, argv, "--url")));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) bench_die("usage: lq_bench setup|count|w1|w2|w3|w3-pub|serve --url URL ...");
    const char *cmd = argv[1];
    if (strcmp(cmd, "setup") == 0) return cmd_setup(argc, argv);
    if (strcmp(cmd, "count") == 0) return cmd_count(argc, argv);
    if (strcmp(cmd, "w1") == 0) return cmd_w1(argc, argv);
    if (strcmp(cmd, "w2") == 0) return cmd_w2(argc, argv);
    if (strcmp(cmd, "w3") == 0) return cmd_w3(argc, argv);
    if (strcmp(cmd, "w3-pub") == 0) return cmd_w3_pub(argc, argv);
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc, argv);
    bench_die("unknown command %s", cmd);
}
