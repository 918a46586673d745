#include "raw_common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LQ_BENCH_CALLGRIND
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

void raw_config_args(raw_config *cfg, int argc, char **argv) {
    cfg->url = bench_arg(argc, argv, "--url", NULL);
    if (!cfg->url) bench_die("--url is required");
    cfg->form = bench_form_of(bench_arg(argc, argv, "--form", "lease"));
    cfg->n = bench_arg_int(argc, argv, "--n", 20000);
    cfg->threads = (int)bench_arg_int(argc, argv, "--threads", 4);
    cfg->batch = (int)bench_arg_int(argc, argv, "--batch", 1);
    cfg->workload = bench_arg(argc, argv, "--workload", cfg->batch > 1 ? "W1-batch" : "W1");
    cfg->fleet = bench_flag(argc, argv, "--fleet");
    if (cfg->threads < 1 || cfg->threads > 64) bench_die("--threads must be 1..64");
    if (cfg->batch < 1 || cfg->batch > 1000) bench_die("--batch must be 1..1000");
}

typedef struct shared {
    pthread_barrier_t ready, go;
} shared;

typedef struct thread_arg {
    raw_worker w;
    shared *sh;
    bool opened;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = p;
    a->opened = a->w.cfg->open(&a->w);
    pthread_barrier_wait(&a->sh->ready);
    pthread_barrier_wait(&a->sh->go);
    if (a->opened) a->w.cfg->drain(&a->w);
    return NULL;
}

int raw_w1(const raw_config *cfg) {
    shared sh;
    pthread_barrier_init(&sh.ready, NULL, (unsigned)cfg->threads + 1);
    pthread_barrier_init(&sh.go, NULL, (unsigned)cfg->threads + 1);
    thread_arg *args = calloc((size_t)cfg->threads, sizeof *args);
    pthread_t *tids = calloc((size_t)cfg->threads, sizeof *tids);
    if (!args || !tids) bench_die("out of memory");
    for (int i = 0; i < cfg->threads; i++) {
        args[i].w.index = i;
        args[i].w.cfg = cfg;
        args[i].sh = &sh;
        pthread_create(&tids[i], NULL, thread_main, &args[i]);
    }
    pthread_barrier_wait(&sh.ready); /* every connection open, statements prepared */
    if (cfg->fleet) {
        char line[16];
        puts("ready");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) bench_die("no go on stdin");
    }
    CALLGRIND_START_INSTRUMENTATION; /* under callgrind, only the drain is counted */
    double t0 = bench_now();
    pthread_barrier_wait(&sh.go);
    for (int i = 0; i < cfg->threads; i++) pthread_join(tids[i], NULL);
    double ended_at = bench_now(), seconds = ended_at - t0;
    CALLGRIND_STOP_INSTRUMENTATION;

    int64_t jobs = 0, retries = 0;
    const char *error = NULL;
    for (int i = 0; i < cfg->threads; i++) {
        jobs += args[i].w.jobs;
        retries += args[i].w.retries;
        if (args[i].w.error[0] && !error) error = args[i].w.error;
        if (args[i].opened) cfg->close(&args[i].w);
    }
    int64_t remaining = cfg->fleet ? 0 : cfg->count(cfg);
    char note[700] = "";
    if (error) snprintf(note, sizeof note, "error: %s", error);
    else if (!cfg->fleet && (jobs != cfg->n || remaining != 0))
        snprintf(note, sizeof note, "settled %lld of %lld, %lld rows left", (long long)jobs,
                 (long long)cfg->n, (long long)remaining);
    bool ok = !*note;
    bench_json j;
    bj_head(&j, "raw", bench_db_name(bench_db_of_url(cfg->url)), bench_form_name(cfg->form), NULL,
            cfg->workload);
    bj_int(&j, "n", cfg->n);
    bj_num(&j, "seconds", seconds);
    bj_num(&j, "jobs_per_s", ok ? (double)(cfg->fleet ? jobs : cfg->n) / seconds : BENCH_NULL);
    bj_int(&j, "threads", cfg->threads);
    bj_int(&j, "batch", cfg->batch);
    bj_int(&j, "retries", retries);
    if (cfg->fleet) {
        bj_int(&j, "settled", jobs);
        bj_int(&j, "ended_at_us", (int64_t)(ended_at * 1e6));
    }
    bj_str(&j, "note", ok ? NULL : note);
    bj_print(&j);
    free(args);
    free(tids);
    return ok ? 0 : 1;
}

void raw_w2_record(const char *db, const char *workload, int64_t n, double seconds, double p50,
                   double p99, int64_t count) {
    bench_json j;
    char note[128] = "";
    if (count != n) snprintf(note, sizeof note, "%lld rows in the table, expected %lld", (long long)count, (long long)n);
    bj_head(&j, "raw", db, NULL, NULL, workload);
    bj_int(&j, "n", n);
    bj_num(&j, "seconds", seconds);
    bj_num(&j, "jobs_per_s", count == n ? (double)n / seconds : BENCH_NULL);
    bj_num(&j, "p50_ms", p50);
    bj_num(&j, "p99_ms", p99);
    bj_str(&j, "note", *note ? note : NULL);
    bj_print(&j);
}

const char *raw_itoa(char buf[24], int64_t v) {
    snprintf(buf, 24, "%lld", (long long)v);
    return buf;
}

char *raw_insert_rows(const char *head, const char *tuple, const char *tail, int rows) {
    const char *mark = strstr(tuple, "%d");
    size_t prefix = mark ? (size_t)(mark - tuple) : strlen(tuple);
    size_t size = strlen(head) + strlen(tail) + (size_t)rows * (strlen(tuple) + 16) + 1;
    char *sql = malloc(size);
    if (!sql) bench_die("out of memory");
    size_t len = (size_t)snprintf(sql, size, "%s", head);
    for (int r = 0; r < rows; r++) {
        len += (size_t)snprintf(sql + len, size - len, "%s%.*s", r ? ", " : "", (int)prefix, tuple);
        if (mark) len += (size_t)snprintf(sql + len, size - len, "%d%s", r + 1, mark + 2);
    }
    snprintf(sql + len, size - len, "%s", tail);
    return sql;
}

/* ---- in-process advisory keys ---- */

enum { MAX_KEYS = 256 };
static pthread_mutex_t keys_mu = PTHREAD_MUTEX_INITIALIZER;
static char keys[MAX_KEYS][64];
static int key_count;

bool raw_key_try_lock(const char *key) {
    pthread_mutex_lock(&keys_mu);
    for (int i = 0; i < key_count; i++) {
        if (strcmp(keys[i], key) == 0) {
            pthread_mutex_unlock(&keys_mu);
            return false;
        }
    }
    bool taken = key_count < MAX_KEYS;
    if (taken) snprintf(keys[key_count++], sizeof keys[0], "%s", key);
    pthread_mutex_unlock(&keys_mu);
    return taken;
}

void raw_key_unlock(const char *key) {
    pthread_mutex_lock(&keys_mu);
    for (int i = 0; i < key_count; i++) {
        if (strcmp(keys[i], key) == 0) {
            memcpy(keys[i], keys[--key_count], sizeof keys[0]);
            break;
        }
    }
    pthread_mutex_unlock(&keys_mu);
}

int raw_keys_held(void) {
    pthread_mutex_lock(&keys_mu);
    int n = key_count;
    pthread_mutex_unlock(&keys_mu);
    return n;
}
