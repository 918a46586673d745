/* Shared by every source file of the core: the internal error setters, the
 * logger, allocation helpers and the forward declarations of internal types.
 * Nothing here is exported. */
#ifndef LQ_INTERNAL_H
#define LQ_INTERNAL_H

#include "libqueue.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LQ__HIDDEN __attribute__((visibility("hidden")))
#define LQ__PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Errors: every public entry point calls lq__error_clear() first; a failing
 * path sets the message once, where it knows the most, and returns the code. */
LQ__HIDDEN void lq__error_clear(void);
LQ__HIDDEN int lq__error(int status, const char *fmt, ...) LQ__PRINTF(2, 3);
/* Like lq__error, with the database's SQLSTATE (may be NULL) and native code. */
LQ__HIDDEN int lq__error_db(int status, const char *sqlstate, int native, const char *fmt, ...)
    LQ__PRINTF(4, 5);
/* Prefixes the current message with context ("subscription jobs: ..."). */
LQ__HIDDEN void lq__error_prefix(const char *fmt, ...) LQ__PRINTF(1, 2);
/* `rc`, or LQ_OK with the error cleared where rc is `status`: a failure that
 * is an answer (a key there already, a table no one has made yet). */
LQ__HIDDEN int lq__error_ok_if(int rc, int status);

/* The thread's last error as a value: a cleanup that may fail itself (a
 * rollback after a failure) keeps the failure that matters. */
#define LQ__ERRMSG_SIZE 512
typedef struct lq__error_copy {
    int status;
    int native;
    char sqlstate[6];
    char message[LQ__ERRMSG_SIZE];
} lq__error_copy;
LQ__HIDDEN void lq__error_save(lq__error_copy *out);
LQ__HIDDEN void lq__error_restore(const lq__error_copy *saved);

LQ__HIDDEN void lq__log(int level, const char *fmt, ...) LQ__PRINTF(2, 3);
/* Logs the calling thread's last error at `level`, prefixed by `what`. */
LQ__HIDDEN void lq__log_error(int level, const char *what);

LQ__HIDDEN char *lq__strdup(const char *s);
LQ__HIDDEN void *lq__memdup(const void *p, size_t n);
/* Makes room for one more item in a growable array (*items, count of *cap
 * items of `size` bytes), doubling from `first`; LQ_NOMEM when it cannot. */
LQ__HIDDEN int lq__room_for_one(void **items, int *cap, int count, size_t size, int first);

#define LQ__CHECK_ARG(cond, what)                                                   \
    do {                                                                            \
        if (!(cond))                                                                \
            return lq__error(LQ_MISUSE, "%s: %s", __func__, what);                  \
    } while (0)

#endif
