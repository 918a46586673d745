/* The process-wide registry of advisory keys in work, for databases that keep
 * keys in the process (SQLite): one key space per database file. */
#ifndef LQ_KEYS_H
#define LQ_KEYS_H

#include "base/internal.h"

/* Takes `key` in `space` if no one in this process holds it. */
LQ__HIDDEN int lq__keys_try_lock(bool *taken, const char *space, const char *key);
/* Gives `key` back; false when it was not held. */
LQ__HIDDEN bool lq__keys_unlock(const char *space, const char *key);
/* How many keys of `space` are held. */
LQ__HIDDEN size_t lq__keys_held(const char *space);

#endif
