/* The per-thread last error, and the names and descriptions of status codes. */
#include "base/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A fixed buffer per thread, so even an out-of-memory failure is reported. */
static _Thread_local lq__error_copy last_error;

void lq__error_save(lq__error_copy *out) { *out = last_error; }
void lq__error_restore(const lq__error_copy *saved) { last_error = *saved; }

static const struct {
    const char *name;
    const char *description;
} status_table[] = {
#define LQ__STATUS_ENTRY(name, value, description) [value] = {#name, description},
    LQ_STATUS_LIST(LQ__STATUS_ENTRY)
#undef LQ__STATUS_ENTRY
};

#define STATUS_COUNT ((int)(sizeof status_table / sizeof status_table[0]))

const char *lq_status_name(int status) {
    if (status < 0 || status >= STATUS_COUNT) return "LQ_UNKNOWN";
    return status_table[status].name;
}

const char *lq_status_describe(int status) {
    if (status < 0 || status >= STATUS_COUNT) return "unknown status";
    return status_table[status].description;
}

int lq_errcode(void) { return last_error.status; }
const char *lq_errmsg(void) { return last_error.message; }
const char *lq_errcode_sqlstate(void) { return last_error.sqlstate; }
int lq_errcode_native(void) { return last_error.native; }

void lq__error_clear(void) {
    last_error.status = LQ_OK;
    last_error.native = 0;
    last_error.sqlstate[0] = '\0';
    last_error.message[0] = '\0';
}

int lq__error_ok_if(int rc, int status) {
    if (rc != status) return rc;
    lq__error_clear();
    return LQ_OK;
}

static int set_error(int status, const char *sqlstate, int native, const char *fmt, va_list ap) {
    last_error.status = status;
    last_error.native = native;
    if (sqlstate) {
        snprintf(last_error.sqlstate, sizeof last_error.sqlstate, "%s", sqlstate);
    } else {
        last_error.sqlstate[0] = '\0';
    }
    vsnprintf(last_error.message, sizeof last_error.message, fmt, ap);
    return status;
}

int lq__error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(status, NULL, 0, fmt, ap);
    va_end(ap);
    return status;
}

int lq__error_db(int status, const char *sqlstate, int native, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(status, sqlstate, native, fmt, ap);
    va_end(ap);
    return status;
}

void lq__error_prefix(const char *fmt, ...) {
    char prefix[LQ__ERRMSG_SIZE];
    char old[LQ__ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error.message, sizeof old);
    /* Truncation is fine here: the message keeps its start. */
    size_t size = sizeof last_error.message, at = 0;
    const char *pieces[] = {prefix, ": ", old};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(pieces[i]);
        if (n > size - 1 - at) n = size - 1 - at;
        memcpy(last_error.message + at, pieces[i], n);
        at += n;
    }
    last_error.message[at] = '\0';
}

char *lq__strdup(const char *s) {
    if (!s) return NULL;
    return lq__memdup(s, strlen(s) + 1);
}

void *lq__memdup(const void *p, size_t n) {
    void *copy = malloc(n ? n : 1);
    if (copy && n) memcpy(copy, p, n);
    return copy;
}

int lq__room_for_one(void **items, int *cap, int count, size_t size, int first) {
    if (count < *cap) return LQ_OK;
    int grown_cap = *cap ? *cap * 2 : first;
    void *grown = realloc(*items, (size_t)grown_cap * size);
    if (!grown) return lq__error(LQ_NOMEM, "out of memory");
    *items = grown;
    *cap = grown_cap;
    return LQ_OK;
}

void lq_free(void *memory) { free(memory); }
