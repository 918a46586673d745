/* What the benchmark programs share: clocks, the payload, percentiles, the
 * record they print (one JSON object per figure), arguments, and the names
 * of the bench table and databases. Nothing here touches libqueue. */
#ifndef LQ_BENCH_COMMON_H
#define LQ_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The queue table every workload uses (created by `lq_bench setup`). */
#define BENCH_TABLE "lq_bench_jobs"
/* Lease length of the lease form (the library's default). */
#define BENCH_LEASE_MS 30000
/* The payload's size in bytes: a small JSON document. */
#define BENCH_PAYLOAD_SIZE 100

typedef enum bench_db { BENCH_SQLITE, BENCH_PG, BENCH_MYSQL, BENCH_UNKNOWN } bench_db;
typedef enum bench_form { BENCH_ROW_LOCK, BENCH_LEASE, BENCH_ADVISORY, BENCH_NO_FORM } bench_form;

/* The database a URL names, and its name in the records ("sqlite",
 * "postgresql", "mariadb"). */
bench_db bench_db_of_url(const char *url);
const char *bench_db_name(bench_db db);
/* The file of a sqlite: URL (sqlite:///abs, sqlite://rel, sqlite:rel). */
const char *bench_sqlite_path(const char *url);
bench_form bench_form_of(const char *name);
const char *bench_form_name(bench_form form);

/* Clocks: monotonic seconds, and wall-clock microseconds / milliseconds. */
double bench_now(void);
int64_t bench_wall_us(void);
int64_t bench_wall_ms(void);
void bench_sleep_ms(double ms);
/* UTC text as libqueue binds times: "YYYY-MM-DDTHH:MM:SS.fff+00:00". */
void bench_time_text(char out[32], int64_t epoch_ms);

/* A ~100-byte JSON payload for job `job`, carrying `sent_us` (0: none).
 * Returns its length. */
size_t bench_payload(char *out, size_t cap, int64_t job, int64_t sent_us);
/* The "sent_us" a payload carries, or 0. */
int64_t bench_payload_sent_us(const void *payload, size_t size);

/* A kB field of /proc/self/status ("VmRSS", "RssAnon"), or -1. */
long bench_status_kb(const char *field);
/* The resident set of this process, in kB (VmRSS), or -1. */
long bench_rss_kb(void);

/* Sorts `values` and returns the p-th percentile (0..100), nearest rank. */
double bench_percentile(double *values, size_t n, double p);

/* "--name value" arguments. */
const char *bench_arg(int argc, char **argv, const char *name, const char *fallback);
int64_t bench_arg_int(int argc, char **argv, const char *name, int64_t fallback);
bool bench_flag(int argc, char **argv, const char *name);

/* One record: a JSON object on one line of stdout. Keys are written in the
 * order given; a NULL string or a NaN number is written as null. */
typedef struct bench_json {
    char buf[4096];
    size_t len;
    bool first;
} bench_json;
void bj_start(bench_json *j);
void bj_str(bench_json *j, const char *key, const char *value);
void bj_num(bench_json *j, const char *key, double value);
void bj_int(bench_json *j, const char *key, int64_t value);
void bj_print(bench_json *j);
/* The keys every record starts with. */
void bj_head(bench_json *j, const char *kind, const char *db, const char *form,
             const char *binding, const char *workload);

#define BENCH_NULL (0.0 / 0.0)

/* Prints a message to stderr and exits with status 2. */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
