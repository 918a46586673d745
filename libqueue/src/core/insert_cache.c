/* The broker's cache of one-row inserts (insert_cache.h). */
#include "core/insert_cache.h"

#include "core/broker.h"

#include <stdlib.h>
#include <string.h>

static bool same_text(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Two descriptions whose inserts read the same: an insert names the table,
 * its id and the role columns, nothing else. */
static bool same_insert(const lq_table *a, const lq_table *b) {
    if (a->id_generated != b->id_generated || !same_text(a->name, b->name) ||
        !same_text(a->schema, b->schema) || !same_text(a->id, b->id))
        return false;
    for (int role = 0; role < LQ__ROLE_COUNT; role++)
        if (!same_text(a->columns[role], b->columns[role])) return false;
    return true;
}

/* The cached insert for (t, notify), under the broker's lock. */
static const lq__insert_entry *find(const lq__insert_cache *c, const lq_table *t, bool notify) {
    for (int i = 0; i < c->count; i++)
        if (c->entries[i].notify == notify && same_insert(c->entries[i].table, t)) return &c->entries[i];
    return NULL;
}

/* Keeps `built` (an interned insert) in the cache unless it is full or the
 * insert came in meanwhile; *kept tells which. Under the broker's lock. */
static int keep(bool *kept, lq__insert_cache *c, const lq_table *t, bool notify, const lq__stmt *built) {
    *kept = false;
    if (c->count == LQ__INSERT_CACHE_MAX || find(c, t, notify)) return LQ_OK;
    void *entries = c->entries;
    int rc = lq__room_for_one(&entries, &c->cap, c->count, sizeof *c->entries, 4);
    c->entries = entries;
    lq_table *copy = NULL;
    if (rc == LQ_OK) rc = lq__table_copy(&copy, t);
    if (rc != LQ_OK) return rc;
    c->entries[c->count++] = (lq__insert_entry){.table = copy, .notify = notify, .insert = *built};
    *kept = true;
    return LQ_OK;
}

int lq__insert_for(lq__stmt *out, bool *owned, lq_broker *b, const lq_table *t, bool notify) {
    pthread_mutex_lock(&b->mu);
    const lq__insert_entry *hit = find(&b->inserts, t, notify);
    if (hit) *out = hit->insert;
    pthread_mutex_unlock(&b->mu);
    *owned = false;
    if (hit) return LQ_OK;
    /* Built outside the lock: a miss costs one build, and two publishers
     * that miss together keep the first one's. */
    lq__stmt built = {0};
    int rc = notify ? lq__sql_build_insert_notify(&built, b->dialect, t)
                    : lq__sqlset_build_insert(&built, b->dialect, t);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &built);
    if (rc != LQ_OK) {
        free(built.sql);
        return rc;
    }
    bool kept = false;
    pthread_mutex_lock(&b->mu);
    rc = keep(&kept, &b->inserts, t, notify, &built);
    pthread_mutex_unlock(&b->mu);
    *out = built;
    *owned = !kept;
    if (rc != LQ_OK) {
        free(built.sql);
        *owned = false;
    }
    return rc;
}

void lq__insert_cache_free(lq__insert_cache *c) {
    for (int i = 0; i < c->count; i++) {
        lq_table_free(c->entries[i].table);
        free(c->entries[i].insert.sql);
    }
    free(c->entries);
    *c = (lq__insert_cache){0};
}
