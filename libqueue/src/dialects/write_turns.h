/* Turns at a database file's one write lock, among the connections of this
 * process (SQLite). A connection that finds the lock taken waits for it in
 * its busy handler; a writer of this process that lets the lock go wakes
 * those waits at once, so a wait lasts as long as the write before it, not
 * a sleep's fixed step. Writers in other processes wake no one here: the
 * waits still end at their step, and retry. */
#ifndef LQ_WRITE_TURNS_H
#define LQ_WRITE_TURNS_H

#include "base/internal.h"

typedef struct lq__turns lq__turns;

/* The turns of the file `path`, shared by every connection of this process
 * to it (NULL: out of memory). Each open is closed once. */
LQ__HIDDEN lq__turns *lq__turns_open(const char *path);
LQ__HIDDEN void lq__turns_close(lq__turns *t);
/* The count of writes ended so far: a wait that begins with it returns at
 * once where a write ended since. */
LQ__HIDDEN uint64_t lq__turns_ended_count(lq__turns *t);
/* Waits up to `us` microseconds for a write of this process to end, unless
 * one ended since *seen; *seen is brought up to date. */
LQ__HIDDEN void lq__turns_wait(lq__turns *t, uint64_t *seen, long us);
/* A connection of this process let the write lock go (a commit, a
 * rollback, a write outside a transaction): the waits retry. */
LQ__HIDDEN void lq__turns_ended(lq__turns *t);

#endif
