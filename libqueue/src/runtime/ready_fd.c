#include "runtime/ready_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

int lq__ready_fd_open(lq__ready_fd *r) {
    if (r->open) return LQ_OK;
#ifdef __linux__
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return lq__error(LQ_ERROR, "eventfd: %s", strerror(errno));
    r->read_fd = r->write_fd = fd;
#else
    int fds[2];
    if (pipe(fds) != 0) return lq__error(LQ_ERROR, "pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    r->read_fd = fds[0];
    r->write_fd = fds[1];
#endif
    r->open = true;
    r->raised = false;
    return LQ_OK;
}

void lq__ready_fd_set(lq__ready_fd *r, bool raised) {
    if (!r->open || r->raised == raised) return;
    ssize_t n;
#ifdef __linux__
    uint64_t v = 1;
#else
    char v = 1;
#endif
    /* Non-blocking: a raised descriptor holds one count (one byte), so
     * neither call can find it full or, lowering, empty. */
    do n = raised ? write(r->write_fd, &v, sizeof v) : read(r->read_fd, &v, sizeof v);
    while (n < 0 && errno == EINTR);
    r->raised = raised;
}

void lq__ready_fd_close(lq__ready_fd *r) {
    if (!r->open) return;
    close(r->read_fd);
    if (r->write_fd != r->read_fd) close(r->write_fd);
    r->open = false;
}
