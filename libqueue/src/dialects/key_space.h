/* A database file's advisory key space, where keys live in the process
 * (SQLite, keys.c), belongs to one process at a time. */
#ifndef LQ_KEY_SPACE_H
#define LQ_KEY_SPACE_H

#include "base/internal.h"

/* Holds `space` (a file's canonical name) for this process, for one more
 * user; refused (LQ_MISUSE, naming the holder) while another process holds
 * it. */
LQ__HIDDEN int lq__key_space_hold(const char *space);
/* One user fewer; the last lets the space go. */
LQ__HIDDEN void lq__key_space_let_go(const char *space);
/* Whether another process holds `space` now. A look, not a hold: a shared
 * lock of the lock file taken and let go at once, which a process taking
 * the space in that instant waits out (lq__key_space_hold tries a few
 * times). */
LQ__HIDDEN bool lq__key_space_elsewhere(const char *space);

#endif
