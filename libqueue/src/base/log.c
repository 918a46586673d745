/* The core's log: one process-wide sink, stderr for warnings and errors unless
 * the application installs its own. */
#include "base/internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/* The sink and its userdata change together, under a lock, and are read
 * together, so a sink never sees another's userdata; the call itself runs
 * outside the lock. */
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static lq_log_fn log_sink;
static void *log_userdata;

void lq_set_log(lq_log_fn log, void *userdata) {
    pthread_mutex_lock(&sink_lock);
    log_sink = log;
    log_userdata = userdata;
    pthread_mutex_unlock(&sink_lock);
}

void lq__log(int level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    pthread_mutex_lock(&sink_lock);
    lq_log_fn sink = log_sink;
    void *userdata = log_userdata;
    pthread_mutex_unlock(&sink_lock);
    if (!sink && level < LQ_LOG_WARNING) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (sink) {
        sink(level, line, userdata);
    } else {
        fprintf(stderr, "libqueue %s: %s\n", level >= LQ_LOG_ERROR ? "error" : "warning", line);
    }
}

void lq__log_error(int level, const char *what) {
    lq__log(level, "%s: %s (%s)", what, lq_errmsg(), lq_status_name(lq_errcode()));
}
