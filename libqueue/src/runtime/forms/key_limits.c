/* The per-key limits a claim keeps after it has its rows: it passed over
 * the keys at their limit, but may have taken several rows of one key, or
 * raced another claim to a key's last room. Under the queue's lock, in a
 * transaction, each key's room is counted once and the claim's rows past it
 * (the last in claim order) are given back; partition_rate_limit then
 * records a start of its key for each row kept, as the transaction
 * commits, so the starts count from just before the rows are handed out. */
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

static bool same_key(const lq_delivery *a, const lq_delivery *b) {
    return a->partition_key && b->partition_key && strcmp(a->partition_key, b->partition_key) == 0;
}

/* Where the first row of d's key is among all[0..i]. */
static int first_of_key(lq_delivery *const *all, int i) {
    int first = 0;
    while (first < i && !same_key(all[first], all[i])) first++;
    return first;
}

int lq__trim_keys(lq__claimed *out, lq_subscription *s, lq__conn *conn, lq__value *args,
                  lq__key_room_fn room_of, lq__give_back_fn give_back, void *ctx) {
    int n = out->count;
    if (n < 1) return LQ_OK;
    lq_delivery **all = malloc((size_t)n * sizeof *all);
    int64_t *room = malloc((size_t)n * sizeof *room);
    if (!all || !room) {
        free(all);
        free(room);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    int i = 0, rc = LQ_OK;
    for (lq_delivery *d = out->head; d; d = d->queue_next) all[i++] = d;
    for (i = 0; rc == LQ_OK && i < n; i++) { /* each key's room, at its first row */
        room[i] = 0;
        if (!all[i]->partition_key || first_of_key(all, i) < i) continue;
        int64_t mine = 0;
        for (int j = i; j < n; j++) mine += same_key(all[j], all[i]);
        args[LQ__P_PKEY] = (lq__value){.type = LQ__V_TEXT, .p = all[i]->partition_key,
                                       .n = strlen(all[i]->partition_key)};
        rc = room_of(&room[i], s, conn, args, mine);
    }
    lq__claimed kept = {.cut = out->cut};
    for (i = 0; i < n; i++) {
        bool keep = rc != LQ_OK || !all[i]->partition_key || room[first_of_key(all, i)]-- > 0;
        if (keep) lq__claimed_add(&kept, all[i]);
        else rc = give_back(s, conn, all[i], ctx);
    }
    *out = kept;
    free(all);
    free(room);
    return rc;
}

/* partition_rate_limit: the key's starts in its window (this claim's are
 * not recorded yet). */
static int starts_room(int64_t *room, lq_subscription *s, lq__conn *conn, const lq__value *args,
                       int64_t mine) {
    (void)mine;
    lq__window w = {0};
    int rc = s->broker->dialect->exec(NULL, conn, &s->sql.key_starts, args, lq__read_window, &w);
    *room = s->key_rate_limit - w.count;
    return rc;
}

int lq__limit_key_rates(lq__claimed *out, lq_subscription *s, lq__conn *conn,
                        const lq__value *claim_args, lq__give_back_fn give_back, void *ctx) {
    lq__value args[LQ__P_COUNT];
    memcpy(args, claim_args, sizeof args);
    args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = s->starts_key, .n = strlen(s->starts_key)};
    args[LQ__P_PERIOD] = (lq__value){.type = LQ__V_INT, .i = s->key_rate_period_ms};
    int rc = lq__trim_keys(out, s, conn, args, starts_room, give_back, ctx);
    const lq__dialect *d = s->broker->dialect;
    for (lq_delivery *dv = out->head; rc == LQ_OK && dv; dv = dv->queue_next) {
        if (!dv->partition_key) continue;
        args[LQ__P_PKEY] = (lq__value){.type = LQ__V_TEXT, .p = dv->partition_key,
                                       .n = strlen(dv->partition_key)};
        rc = d->exec(NULL, conn, &s->sql.key_start_prune, args, NULL, NULL);
        if (rc == LQ_OK) rc = d->exec(NULL, conn, &s->sql.key_start_add, args, NULL, NULL);
    }
    return rc;
}

int lq__key_rates_counted(lq__claimed *out, bool *broken, lq_subscription *s, lq__conn *conn,
                          const lq__value *args, lq__give_back_fn give_back, void *ctx) {
    const lq__dialect *d = s->broker->dialect;
    int rc = d->begin(conn, LQ_ISOLATION_READ_COMMITTED);
    bool locked = false;
    if (rc == LQ_OK && d->lock_queue) {
        rc = d->lock_queue(conn, s->limit_key);
        locked = rc == LQ_OK;
    }
    if (rc == LQ_OK) rc = lq__limit_key_rates(out, s, conn, args, give_back, ctx);
    if (rc == LQ_OK) rc = d->commit(conn);
    if (rc != LQ_OK) d->rollback(conn);
    if (locked && d->unlock_queue && !d->unlock_queue(conn, s->limit_key)) *broken = true;
    return rc;
}
