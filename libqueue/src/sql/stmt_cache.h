/* The statements a connection has prepared, by the statement's id: one
 * cache for every dialect, each keeping its own handles in it (an
 * sqlite3_stmt, a MYSQL_STMT, a PostgreSQL statement's name). */
#ifndef LQ_STMT_CACHE_H
#define LQ_STMT_CACHE_H

#include "base/internal.h"

typedef struct lq__cached {
    int id;
    void *handle;
} lq__cached;

typedef struct lq__stmt_cache {
    lq__cached *items;
    int count, cap;
} lq__stmt_cache;

/* The handle cached for statement `id`, or NULL. */
static inline void *lq__cache_find(const lq__stmt_cache *c, int id) {
    for (int i = 0; i < c->count; i++)
        if (c->items[i].id == id) return c->items[i].handle;
    return NULL;
}

/* Keeps `handle` (not NULL) for statement `id`; LQ_NOMEM when it cannot,
 * and the handle is then still the caller's. */
LQ__HIDDEN int lq__cache_add(lq__stmt_cache *c, int id, void *handle);
/* Lets every handle go through `release`, and empties the cache. */
LQ__HIDDEN void lq__cache_clear(lq__stmt_cache *c, void (*release)(void *handle));

#endif
