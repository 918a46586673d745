/* The broker's cache of publishes' statements (publish_cache.h). */
#include "core/publish_cache.h"

#include "core/broker.h"
#include "core/schema.h"

#include <stdlib.h>
#include <string.h>

static bool same_text(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Two descriptions whose statements read the same and whose columns'
 * check (lq__table_check_columns) looks at the same: the table, its id, the
 * role columns and the advisory key's columns. */
static bool same_columns(const lq_table *a, const lq_table *b) {
    if (a->id_generated != b->id_generated || !same_text(a->name, b->name) ||
        !same_text(a->schema, b->schema) || !same_text(a->id, b->id) || a->key.count != b->key.count)
        return false;
    for (int role = 0; role < LQ__ROLE_COUNT; role++)
        if (!same_text(a->columns[role], b->columns[role])) return false;
    for (size_t i = 0; i < a->key.count; i++)
        if (a->key.parts[i].is_column != b->key.parts[i].is_column ||
            !same_text(a->key.parts[i].text, b->key.parts[i].text))
            return false;
    return true;
}

/* The cached statement (t, kind), under the broker's lock. */
static const lq__publish_entry *find(const lq__publish_cache *c, const lq_table *t,
                                     lq__publish_stmt kind) {
    for (int i = 0; i < c->count; i++)
        if (c->entries[i].kind == kind && same_columns(c->entries[i].table, t)) return &c->entries[i];
    return NULL;
}

/* Keeps `built` (an interned statement) in the cache unless it is full or
 * the statement came in meanwhile; *kept tells which. Under the broker's
 * lock. */
static int keep(bool *kept, lq__publish_cache *c, const lq_table *t, lq__publish_stmt kind,
                const lq__stmt *built) {
    *kept = false;
    if (c->count == LQ__PUBLISH_CACHE_MAX || find(c, t, kind)) return LQ_OK;
    void *entries = c->entries;
    int rc = lq__room_for_one(&entries, &c->cap, c->count, sizeof *c->entries, 4);
    c->entries = entries;
    lq_table *copy = NULL;
    if (rc == LQ_OK) rc = lq__table_copy(&copy, t);
    if (rc != LQ_OK) return rc;
    c->entries[c->count++] = (lq__publish_entry){.table = copy, .kind = kind, .stmt = *built};
    *kept = true;
    return LQ_OK;
}

static int build(lq__stmt *out, const lq__dialect *d, const lq_table *t, lq__publish_stmt kind) {
    switch (kind) {
    case LQ__PUBLISH_INSERT: return lq__sqlset_build_insert(out, d, t);
    case LQ__PUBLISH_INSERT_NOTIFY: return lq__sql_build_insert_notify(out, d, t);
    case LQ__PUBLISH_DEDUP_LOOKUP: return lq__sql_build_dedup_lookup(out, d, t);
    default: return lq__error(LQ_ERROR, "a publish statement of no kind");
    }
}

int lq__publish_stmt_for(lq__stmt *out, bool *owned, lq_broker *b, const lq_table *t,
                         lq__publish_stmt kind) {
    pthread_mutex_lock(&b->mu);
    const lq__publish_entry *hit = find(&b->publish_statements, t, kind);
    if (hit) *out = hit->stmt;
    pthread_mutex_unlock(&b->mu);
    *owned = false;
    if (hit) return LQ_OK;
    /* Built outside the lock: a miss costs one build, and two publishers
     * that miss together keep the first one's. */
    lq__stmt built = {0};
    int rc = build(&built, b->dialect, t, kind);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &built);
    if (rc != LQ_OK) {
        free(built.sql);
        return rc;
    }
    bool kept = false;
    pthread_mutex_lock(&b->mu);
    rc = keep(&kept, &b->publish_statements, t, kind, &built);
    pthread_mutex_unlock(&b->mu);
    *out = built;
    *owned = !kept;
    if (rc != LQ_OK) {
        free(built.sql);
        *owned = false;
    }
    return rc;
}

int lq__columns_check_once(lq_broker *b, const lq_table *t, bool if_free) {
    pthread_mutex_lock(&b->mu);
    bool seen = find(&b->publish_statements, t, LQ__PUBLISH_COLUMNS_SEEN) != NULL;
    pthread_mutex_unlock(&b->mu);
    if (seen) return LQ_OK;
    bool found, kept;
    int rc = lq__table_check_columns(&found, b, t, if_free);
    if (rc != LQ_OK || !found) return rc; /* a table made later is looked at then */
    pthread_mutex_lock(&b->mu);
    rc = keep(&kept, &b->publish_statements, t, LQ__PUBLISH_COLUMNS_SEEN, &(lq__stmt){0});
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void lq__publish_cache_free(lq__publish_cache *c) {
    for (int i = 0; i < c->count; i++) {
        lq_table_free(c->entries[i].table);
        free(c->entries[i].stmt.sql);
    }
    free(c->entries);
    *c = (lq__publish_cache){0};
}
