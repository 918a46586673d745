/* The frame of the raw-SQL baselines: threads that each open their own
 * connection and prepare their statements before the clock starts, drain the
 * bench table, and one record of the result. Each raw_<db>.c supplies the
 * connection, the loop and the count. */
#ifndef LQ_BENCH_RAW_COMMON_H
#define LQ_BENCH_RAW_COMMON_H

#include "bench_common.h"

typedef struct raw_config raw_config;

typedef struct raw_worker {
    int index;
    const raw_config *cfg;
    void *conn;        /* the thread's own connection and statements */
    int64_t jobs;      /* rows this thread settled */
    int64_t retries;   /* claims or settlements retried after a conflict */
    char error[512];   /* set on failure */
} raw_worker;

struct raw_config {
    const char *url;
    bench_form form;
    int threads;
    int batch;         /* rows per claim */
    int64_t n;
    const char *workload;
    /* One of several processes draining the table (W4's raw fleet): says
     * "ready" once its connections are open, starts on a line from stdin,
     * and reports what it settled and when it ended (CLOCK_MONOTONIC, which
     * the parent shares), leaving the table's count to the parent. */
    bool fleet;
    /* Opens the thread's connection and prepares; false (with w->error) on failure. */
    bool (*open)(raw_worker *w);
    /* Drains until a claim finds nothing; false (with w->error) on failure. */
    bool (*drain)(raw_worker *w);
    void (*close)(raw_worker *w);
    /* Rows left in the table, on a fresh connection (-1 on failure). */
    int64_t (*count)(const raw_config *cfg);
};

/* Reads the common arguments (--url --form --n --threads --batch --workload --fleet). */
void raw_config_args(raw_config *cfg, int argc, char **argv);
/* Runs the W1 drain with cfg->threads threads and prints its record;
 * returns the exit status. */
int raw_w1(const raw_config *cfg);
/* The record of a single-threaded W2 figure. */
void raw_w2_record(const char *db, const char *workload, int64_t n, double seconds, double p50,
                   double p99, int64_t count);
/* A multi-row insert of `rows` tuples, as the library writes one
 * (lq__sql_build_insert_rows): head, the tuples separated by ", ", tail. A
 * "%d" in `tuple` is its row's placeholder number (from 1; one parameter a
 * row). Exits when out of memory; the caller frees the text. */
char *raw_insert_rows(const char *head, const char *tuple, const char *tail, int rows);
/* Text of an integer, into buf. */
const char *raw_itoa(char buf[24], int64_t v);

/* An in-process set of held advisory keys (SQLite's advisory form keeps its
 * keys in the process, as the library does). */
bool raw_key_try_lock(const char *key);
void raw_key_unlock(const char *key);
int raw_keys_held(void);

#endif
