/* A descriptor an event loop can wait on: readable while it is raised,
 * empty while it is lowered (level, not edge). An eventfd on Linux, a pipe
 * elsewhere. The caller locks it; raising a raised one or lowering a
 * lowered one does nothing, so a change of state costs one system call. */
#ifndef LQ_READY_FD_H
#define LQ_READY_FD_H

#include "base/internal.h"

#include <stdbool.h>

typedef struct lq__ready_fd {
    bool open;
    bool raised;
    int read_fd, write_fd; /* one descriptor for an eventfd */
} lq__ready_fd;

/* Opens it lowered, non-blocking and close-on-exec. */
LQ__HIDDEN int lq__ready_fd_open(lq__ready_fd *r);
/* Raises or lowers it; nothing while not open. */
LQ__HIDDEN void lq__ready_fd_set(lq__ready_fd *r, bool raised);
/* Closes it; nothing while not open. */
LQ__HIDDEN void lq__ready_fd_close(lq__ready_fd *r);

#endif
