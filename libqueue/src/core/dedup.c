/* Dedup keys at publish. The unique index on the key column is what keeps a
 * key to one row across processes (a publish racing another fails on it);
 * the lookup before the insert names the holder, and gives its id to a
 * message that asks for it. */
#include "core/dedup.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool lq__dedup_any(lq_message *const *messages, size_t count, bool *existing) {
    bool any = false;
    *existing = false;
    for (size_t i = 0; i < count; i++) {
        if (!messages[i]->dedup_key) continue;
        any = true;
        if (messages[i]->on_duplicate == LQ_ON_DUPLICATE_EXISTING) *existing = true;
    }
    return any;
}

static int read_holder(void *ctx, const lq__value *cols, int count) {
    if (count > 0 && cols[0].type == LQ__V_INT) *(int64_t *)ctx = cols[0].i;
    return LQ_OK;
}

/* The row holding `key`, or 0. */
static int holder_of(int64_t *id, lq_broker *b, lq__conn *conn, const lq__stmt *lookup,
                     const char *key) {
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_DEDUP] = (lq__value){.type = LQ__V_TEXT, .p = key, .n = strlen(key)};
    *id = 0;
    return b->dialect->exec(NULL, conn, lookup, args, read_holder, id);
}

/* The earlier message of the call with the same key, or SIZE_MAX. */
static size_t earlier_of(lq_message *const *messages, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (messages[j]->dedup_key && strcmp(messages[j]->dedup_key, messages[i]->dedup_key) == 0)
            return j;
    return SIZE_MAX;
}

static int refused(size_t index, const char *key, const char *holder) {
    return lq__error(LQ_DUPLICATE, "message %zu: dedup key \"%s\" is held by %s; nothing was written",
                     index, key, holder);
}

/* One message: written, left out for its holder, or refused. */
static int resolve_one(lq__dedup *dd, int64_t *ids_out, lq_broker *b, lq__conn *conn,
                       const lq__stmt *lookup, lq_message *const *messages, size_t i) {
    const lq_message *m = messages[i];
    bool existing = m->on_duplicate == LQ_ON_DUPLICATE_EXISTING;
    dd->same_as[i] = SIZE_MAX;
    if (m->dedup_key) {
        size_t earlier = earlier_of(messages, i);
        if (earlier != SIZE_MAX) {
            char which[64];
            snprintf(which, sizeof which, "message %zu of this publish", earlier);
            if (!existing) return refused(i, m->dedup_key, which);
            dd->same_as[i] = earlier;
            return LQ_OK;
        }
        int64_t holder = 0;
        int rc = holder_of(&holder, b, conn, lookup, m->dedup_key);
        if (rc != LQ_OK) return rc;
        if (holder) {
            char which[64];
            snprintf(which, sizeof which, "row %lld, queued or in work", (long long)holder);
            if (!existing) return refused(i, m->dedup_key, which);
            if (ids_out) ids_out[i] = holder;
            return LQ_OK;
        }
    }
    dd->at[dd->fresh_count] = i;
    dd->fresh[dd->fresh_count++] = messages[i];
    return LQ_OK;
}

int lq__dedup_resolve(lq__dedup *dd, int64_t *ids_out, lq_broker *b, lq__conn *conn,
                      const lq_table *t, lq_message *const *messages, size_t count) {
    memset(dd, 0, sizeof *dd);
    dd->fresh = malloc(count * sizeof *dd->fresh);
    dd->at = malloc(count * sizeof *dd->at);
    dd->same_as = malloc(count * sizeof *dd->same_as);
    if (!dd->fresh || !dd->at || !dd->same_as) return lq__error(LQ_NOMEM, "out of memory");
    lq__stmt lookup = {0};
    bool owned = false;
    int rc = lq__publish_stmt_for(&lookup, &owned, b, t, LQ__PUBLISH_DEDUP_LOOKUP);
    for (size_t i = 0; rc == LQ_OK && i < count; i++)
        rc = resolve_one(dd, ids_out, b, conn, &lookup, messages, i);
    if (owned) free(lookup.sql);
    return rc;
}

void lq__dedup_spread(const lq__dedup *dd, int64_t *ids_out, const int64_t *fresh_ids,
                      size_t count) {
    if (!ids_out) return;
    for (size_t j = 0; j < dd->fresh_count; j++) ids_out[dd->at[j]] = fresh_ids[j];
    for (size_t i = 0; i < count; i++)
        if (dd->same_as[i] != SIZE_MAX) ids_out[i] = ids_out[dd->same_as[i]];
}

void lq__dedup_free(lq__dedup *dd) {
    free(dd->fresh);
    free(dd->at);
    free(dd->same_as);
    memset(dd, 0, sizeof *dd);
}
