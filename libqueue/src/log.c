/* The core's log: one process-wide sink, stderr for warnings and errors unless
 * the application installs its own. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static lq_log_fn log_sink;
static void *log_userdata;

void lq_set_log(lq_log_fn log, void *userdata) {
    log_sink = log;
    log_userdata = userdata;
}

void lq__log(int level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    if (!log_sink && level < LQ_LOG_WARNING) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (log_sink) {
        log_sink(level, line, log_userdata);
    } else {
        fprintf(stderr, "libqueue %s: %s\n", level >= LQ_LOG_ERROR ? "error" : "warning", line);
    }
}

void lq__log_error(int level, const char *what) {
    lq__log(level, "%s: %s (%s)", what, lq_errmsg(), lq_status_name(lq_errcode()));
}
