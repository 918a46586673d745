/* The per-connection cache of prepared statements (stmt_cache.h). */
#include "sql/stmt_cache.h"

#include <stdlib.h>

int lq__cache_add(lq__stmt_cache *c, int id, void *handle) {
    void *items = c->items;
    int rc = lq__room_for_one(&items, &c->cap, c->count, sizeof *c->items, 16);
    c->items = items;
    if (rc != LQ_OK) return rc;
    c->items[c->count++] = (lq__cached){.id = id, .handle = handle};
    return LQ_OK;
}

void lq__cache_clear(lq__stmt_cache *c, void (*release)(void *handle)) {
    for (int i = 0; i < c->count; i++) release(c->items[i].handle);
    free(c->items);
    *c = (lq__stmt_cache){0};
}
