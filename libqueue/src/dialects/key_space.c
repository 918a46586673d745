/* One process per file's advisory key space.
 *
 * Where keys live in the process, two processes taking keys of one file
 * would not see each other's, and both could run the same row. So the
 * process whose advisory subscriptions use a file holds an exclusive lock
 * on a file beside it, "<file>-lqkeys" (as SQLite keeps "-wal" and "-shm"
 * there), taken without waiting; another process's advisory subscription
 * on that file is refused until it goes. The lock is the kernel's (flock):
 * it ends with the process however the process ends, so a crash leaves
 * nothing to clean up. The lock file holds the holder's pid, for the
 * message, and stays: removing it could let two processes each lock a
 * file of that name. A user who may read it but not write it locks it all
 * the same (flock asks for no write access), and names no pid. A child
 * forked while its parent held the space holds nothing of its own: it
 * closes its copies at the fork (the lock stays the parent's, and ends with
 * the parent alone), takes the lock anew, and is refused while the parent
 * holds it. */
#include "dialects/key_space.h"

#include "base/clock.h"
#include "base/strbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

typedef struct holder {
    struct holder *next;
    char *space;
    int fd; /* the lock file, locked */
    int users;
} holder;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static holder *holders;

static holder **find(const char *space) {
    holder **h = &holders;
    while (*h && strcmp((*h)->space, space) != 0) h = &(*h)->next;
    return h;
}

/* Closes this process's copy of the lock file: the lock goes with the last
 * copy open anywhere. */
static void drop(holder **h) {
    holder *gone = *h;
    *h = gone->next;
    close(gone->fd);
    free(gone->space);
    free(gone);
}

static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&lock); }

/* The child holds no space: its copies close, and the parent's lock stays
 * the parent's. */
static void after_fork_child(void) {
    while (holders) drop(&holders);
    pthread_mutex_unlock(&lock);
}

static void watch_forks(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }

/* The pid the holder wrote, or 0 when there is none to read. */
static long holder_pid(int fd) {
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) return 0;
    text[n] = '\0';
    return strtol(text, NULL, 10);
}

static void write_pid(int fd) {
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    /* Only a refused process's message reads it: one not written leaves the
     * holder unnamed there, and is no error. */
    bool written = ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) == n;
    (void)written;
}

static char *lock_path(const char *space) {
    lq__strbuf name = {0};
    lq__sb_addf(&name, "%s-lqkeys", space);
    return lq__sb_take(&name);
}

/* An exclusive lock of fd, without waiting past a few tries: another
 * process may hold a shared lock for an instant (lq__key_space_elsewhere). */
static int lock_exclusive(int fd) {
    enum { TRIES = 8 }; /* pauses of about 9 ms in all */
    for (int attempt = 0;; attempt++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK || attempt + 1 == TRIES) return -1;
        lq__sleep_us(lq__retry_pause_us(attempt));
    }
}

/* Opens and locks the space's lock file: *fd, or an error. */
static int lock_file(int *fd, const char *space) {
    char *path = lock_path(space);
    if (!path) return lq__error(LQ_NOMEM, "out of memory");
    int rc = LQ_OK;
    bool writable = true;
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0 && errno == EACCES) {
        writable = false;
        *fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (*fd < 0) {
        rc = lq__error(LQ_BACKEND, "SQLite file %s: cannot open %s, whose lock keeps the file's "
                                   "advisory keys to one process: %s",
                       space, path, strerror(errno));
    } else if (lock_exclusive(*fd) != 0) {
        int err = errno;
        long pid = err == EWOULDBLOCK ? holder_pid(*fd) : 0;
        close(*fd);
        *fd = -1;
        if (err == EWOULDBLOCK)
            rc = lq__error(LQ_MISUSE,
                           "SQLite file %s: another process (pid %ld) runs the advisory form on it. "
                           "Advisory keys live in the process, so two processes could run one row: "
                           "run one process per file in this form, or use the lease form, which "
                           "processes share",
                           space, pid);
        else
            rc = lq__error(LQ_BACKEND, "SQLite file %s: cannot lock %s: %s", space, path, strerror(err));
    } else if (writable) {
        write_pid(*fd);
    }
    free(path);
    return rc;
}

int lq__key_space_hold(const char *space) {
    pthread_once(&fork_once, watch_forks);
    pthread_mutex_lock(&lock);
    holder **h = find(space);
    int rc = LQ_OK;
    if (*h) {
        (*h)->users++;
    } else {
        holder *mine = calloc(1, sizeof *mine);
        if (!mine || !(mine->space = lq__strdup(space))) {
            free(mine);
            rc = lq__error(LQ_NOMEM, "out of memory");
        } else if ((rc = lock_file(&mine->fd, space)) != LQ_OK) {
            free(mine->space);
            free(mine);
        } else {
            mine->users = 1;
            mine->next = holders;
            holders = mine;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

bool lq__key_space_elsewhere(const char *space) {
    pthread_mutex_lock(&lock); /* no hold of this process begins meanwhile */
    bool elsewhere = false;
    char *path = *find(space) ? NULL : lock_path(space);
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1; /* none: no process ever held it */
    if (fd >= 0) {
        elsewhere = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
        close(fd); /* and the shared lock with it */
    }
    free(path);
    pthread_mutex_unlock(&lock);
    return elsewhere;
}

void lq__key_space_let_go(const char *space) {
    pthread_mutex_lock(&lock);
    holder **h = find(space);
    if (*h && --(*h)->users == 0) drop(h);
    pthread_mutex_unlock(&lock);
}
