/* The settler of the Lua module: threads that settle and free deliveries a
 * Lua handler has finished with, so sub:run pulls the next delivery while
 * earlier ones are still being written (a Lua state runs handlers on one
 * thread; the database round trips need not). */
#ifndef LQ_LUA_SETTLER_H
#define LQ_LUA_SETTLER_H

#include <stdbool.h>
#include <stdint.h>

#include "libqueue.h"

typedef struct lq_lua_settler lq_lua_settler;

/* What a settler does with a delivery. */
typedef enum lq_lua_settle {
    LQ_LUA_SETTLE_ACK = 1,
    LQ_LUA_SETTLE_RETRY = 2,
    LQ_LUA_SETTLE_RETRY_AFTER = 3
} lq_lua_settle;

/* Its counters: settlements done, and those that failed. */
typedef enum lq_lua_settled {
    LQ_LUA_SETTLED_ACKED = 1,
    LQ_LUA_SETTLED_RETRIED = 2,
    LQ_LUA_SETTLED_ERRORS = 3
} lq_lua_settled;

/* Starts `threads` settling threads (at least 1). `label` (the table's name)
 * names the rows in the warnings of failed settlements. With `together` (the
 * lease form, and the advisory form on SQLite, whose acks share a statement), a thread acks every ack queued
 * in a row at once; else each on its own, the threads side by side. NULL
 * when memory or a thread could not be had. Freed with lq_lua_settler_free. */
lq_lua_settler *lq_lua_settler_new(int threads, const char *label, bool together);

/* Hands `delivery` over: a thread settles it (`outcome`, `delay_ms` for
 * LQ_LUA_SETTLE_RETRY_AFTER) and frees it. A failed settlement is counted
 * and logged as a warning through the module's log shim. false when out of
 * memory: the delivery is still the caller's. */
bool lq_lua_settler_push(lq_lua_settler *settler, lq_delivery *delivery, int outcome,
                         int64_t delay_ms);

/* Waits until at most `most` deliveries handed over are not yet settled and
 * freed (0: every one is). */
void lq_lua_settler_wait(lq_lua_settler *settler, int most);

/* A counter (an lq_lua_settled), over every delivery settled so far. */
int64_t lq_lua_settler_count(lq_lua_settler *settler, int which);

/* Settles what is still handed over, stops the threads and frees. NULL is
 * ignored. */
void lq_lua_settler_free(lq_lua_settler *settler);

#endif
