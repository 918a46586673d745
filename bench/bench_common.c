#include "bench_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bench_db bench_db_of_url(const char *url) {
    if (!url) return BENCH_UNKNOWN;
    if (strncmp(url, "sqlite:", 7) == 0) return BENCH_SQLITE;
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0) return BENCH_PG;
    if (strncmp(url, "mysql://", 8) == 0 || strncmp(url, "mariadb://", 10) == 0) return BENCH_MYSQL;
    return BENCH_UNKNOWN;
}

const char *bench_db_name(bench_db db) {
    switch (db) {
    case BENCH_SQLITE: return "sqlite";
    case BENCH_PG: return "postgresql";
    case BENCH_MYSQL: return "mariadb";
    default: return "unknown";
    }
}

const char *bench_sqlite_path(const char *url) {
    const char *rest = url + 7; /* after "sqlite:" */
    if (strncmp(rest, "//", 2) == 0) rest += 2;
    return rest;
}

bench_form bench_form_of(const char *name) {
    if (!name) return BENCH_NO_FORM;
    if (strcmp(name, "row_lock") == 0) return BENCH_ROW_LOCK;
    if (strcmp(name, "lease") == 0) return BENCH_LEASE;
    if (strcmp(name, "advisory") == 0) return BENCH_ADVISORY;
    return BENCH_NO_FORM;
}

const char *bench_form_name(bench_form form) {
    switch (form) {
    case BENCH_ROW_LOCK: return "row_lock";
    case BENCH_LEASE: return "lease";
    case BENCH_ADVISORY: return "advisory";
    default: return NULL;
    }
}

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t bench_wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t bench_wall_ms(void) { return bench_wall_us() / 1000; }

void bench_sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

void bench_time_text(char out[32], int64_t epoch_ms) {
    time_t secs = (time_t)(epoch_ms / 1000);
    int ms = (int)(epoch_ms % 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char wide[64];
    snprintf(wide, sizeof wide, "%04d-%02d-%02dT%02d:%02d:%02d.%03d+00:00",
             (tm.tm_year + 1900) % 10000, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
             tm.tm_sec, ms);
    memcpy(out, wide, 31);
    out[31] = '\0';
}

size_t bench_payload(char *out, size_t cap, int64_t job, int64_t sent_us) {
    char body[256];
    int n = snprintf(body, sizeof body,
                     "{\"job\":%lld,\"task\":\"resize\",\"image\":\"images/%08lld.png\","
                     "\"size\":[640,480],\"sent_us\":%lld,\"pad\":\"",
                     (long long)job, (long long)job, (long long)sent_us);
    /* Pad to the payload size with the closing characters included. */
    while (n + 2 < BENCH_PAYLOAD_SIZE && n < (int)sizeof body - 3) body[n++] = 'x';
    body[n++] = '"';
    body[n++] = '}';
    body[n] = '\0';
    if ((size_t)n >= cap) n = (int)cap - 1;
    memcpy(out, body, (size_t)n);
    out[n] = '\0';
    return (size_t)n;
}

int64_t bench_payload_sent_us(const void *payload, size_t size) {
    static const char key[] = "\"sent_us\":";
    const char *p = payload;
    for (size_t i = 0; p && i + sizeof key - 1 < size; i++) {
        if (memcmp(p + i, key, sizeof key - 1) == 0) {
            int64_t v = 0;
            for (size_t k = i + sizeof key - 1; k < size && p[k] >= '0' && p[k] <= '9'; k++)
                v = v * 10 + (p[k] - '0');
            return v;
        }
    }
    return 0;
}

long bench_status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            kb = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

long bench_rss_kb(void) { return bench_status_kb("VmRSS"); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_percentile(double *values, size_t n, double p) {
    if (n == 0) return BENCH_NULL;
    qsort(values, n, sizeof *values, cmp_double);
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return values[rank - 1];
}

const char *bench_arg(int argc, char **argv, const char *name, const char *fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return fallback;
}

int64_t bench_arg_int(int argc, char **argv, const char *name, int64_t fallback) {
    const char *v = bench_arg(argc, argv, name, NULL);
    return v ? strtoll(v, NULL, 10) : fallback;
}

bool bench_flag(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return true;
    return false;
}

static void bj_raw(bench_json *j, const char *text) {
    size_t n = strlen(text);
    if (j->len + n + 1 >= sizeof j->buf) return;
    memcpy(j->buf + j->len, text, n + 1);
    j->len += n;
}

static void bj_key(bench_json *j, const char *key) {
    bj_raw(j, j->first ? "\"" : ", \"");
    j->first = false;
    bj_raw(j, key);
    bj_raw(j, "\": ");
}

void bj_start(bench_json *j) {
    j->len = 0;
    j->buf[0] = '\0';
    j->first = true;
    bj_raw(j, "{");
}

void bj_str(bench_json *j, const char *key, const char *value) {
    bj_key(j, key);
    if (!value) {
        bj_raw(j, "null");
        return;
    }
    char esc[1024];
    size_t k = 0;
    esc[k++] = '"';
    for (const char *p = value; *p && k + 8 < sizeof esc; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            esc[k++] = '\\';
            esc[k++] = (char)c;
        } else if (c < 0x20) {
            k += (size_t)snprintf(esc + k, sizeof esc - k, "\\u%04x", c);
        } else {
            esc[k++] = (char)c;
        }
    }
    esc[k++] = '"';
    esc[k] = '\0';
    bj_raw(j, esc);
}

void bj_num(bench_json *j, const char *key, double value) {
    bj_key(j, key);
    if (isnan(value) || isinf(value)) {
        bj_raw(j, "null");
        return;
    }
    char num[64];
    if (fabs(value) >= 100) snprintf(num, sizeof num, "%.1f", value);
    else snprintf(num, sizeof num, "%.3f", value);
    bj_raw(j, num);
}

void bj_int(bench_json *j, const char *key, int64_t value) {
    char num[32];
    bj_key(j, key);
    snprintf(num, sizeof num, "%lld", (long long)value);
    bj_raw(j, num);
}

void bj_print(bench_json *j) {
    bj_raw(j, "}");
    printf("%s\n", j->buf);
    fflush(stdout);
}

void bj_head(bench_json *j, const char *kind, const char *db, const char *form,
             const char *binding, const char *workload) {
    bj_start(j);
    bj_str(j, "kind", kind);
    bj_str(j, "db", db);
    bj_str(j, "form", form);
    bj_str(j, "binding", binding);
    bj_str(j, "workload", workload);
}

void bench_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}
