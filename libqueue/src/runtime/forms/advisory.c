/* The advisory lock form: read due rows with their keys, take each key
 * without waiting (skipping keys in work), then take the row while it is
 * still claimable, which counts its attempt. The key stays held until the
 * delivery settles. */
#include "base/clock.h"
#include "base/hash.h"
#include "core/pause.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct candidate {
    int64_t id;
    char *key;
    char *pkey; /* its partition key, read where partition_concurrency counts it */
} candidate;

typedef struct candidates {
    candidate *items;
    int count, cap;
} candidates;

static int on_candidate(void *arg, const lq__value *cols, int count) {
    candidates *c = arg;
    if (count < 2) return lq__error(LQ_BACKEND, "the candidate query returned %d columns", count);
    void *items = c->items;
    int grown = lq__room_for_one(&items, &c->cap, c->count, sizeof *c->items, 8);
    c->items = items;
    if (grown != LQ_OK) return grown;
    /* A key rendered from NULL columns is '' (concat), never NULL. */
    char *key = cols[1].type == LQ__V_NULL ? lq__strdup("") : lq__value_text(&cols[1]);
    bool keyed = count > 2 && cols[2].type != LQ__V_NULL;
    char *pkey = keyed ? lq__value_text(&cols[2]) : NULL;
    if (!key || (keyed && !pkey)) {
        free(key);
        free(pkey);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    c->items[c->count++] = (candidate){cols[0].i, key, pkey};
    return LQ_OK;
}

static void candidates_free(candidates *c) {
    for (int i = 0; i < c->count; i++) {
        free(c->items[i].key);
        free(c->items[i].pkey);
    }
    free(c->items);
    *c = (candidates){0};
}

typedef struct take_ctx {
    lq_subscription *s;
    lq_delivery *taken;
} take_ctx;

static int on_taken(void *arg, const lq__value *cols, int count) {
    take_ctx *ctx = arg;
    if (ctx->taken) return LQ_OK;
    return lq__delivery_from_row(&ctx->taken, ctx->s, cols, count);
}

/* The connection a candidate's key is locked on: the shared one where keys
 * live in the process, or for the claim's first key (so a claim of one row
 * holds one connection, as the flow counts it); else a connection of its
 * own where the lock lives in the session, taken without waiting and only
 * while the pool keeps one to spare for the handlers (a claim shrinks
 * rather than waits when the pool is short). */
static int key_connection(lq__conn **out, lq_subscription *s, lq__conn *shared, bool shared_free) {
    if (!s->broker->dialect->advisory_holds_connection || shared_free) {
        *out = shared;
        return LQ_OK;
    }
    if (lq__pool_spare(&s->broker->pool) < 2) return LQ_TIMEOUT; /* the caller stops here */
    return lq__pool_acquire_within(out, &s->broker->pool, 0);
}

/* Lets a key and a candidate's slots go (NULL: none), in one round trip
 * where the database can (one key alone by the simpler call); false when a
 * release was not confirmed. */
static bool unlock_all(lq_subscription *s, lq__conn *conn, const char *key, const char *slot,
                       const char *key_slot) {
    const lq__dialect *d = s->broker->dialect;
    const char *const keys[3] = {key, slot, key_slot};
    if (d->unlock_keys && (!!key + !!slot + !!key_slot) > 1) return d->unlock_keys(conn, keys);
    bool confirmed = true;
    for (int i = 0; i < 3; i++)
        if (keys[i] && !d->unlock_key(conn, &s->broker->target, keys[i])) confirmed = false;
    return confirmed;
}

/* The dialect's try_lock_any, or its one-key calls in turn. */
static int try_lock_any(int *taken, bool *then_locked, lq_subscription *s, lq__conn *conn,
                        const char *prefix, int n, int first, const char *then) {
    const lq__dialect *d = s->broker->dialect;
    const lq__broker_target *target = &s->broker->target;
    if (d->try_lock_any) return d->try_lock_any(taken, then_locked, conn, prefix, n, first, then);
    *taken = -1;
    *then_locked = false;
    for (int i = 0; i < n; i++) {
        char name[80];
        bool locked;
        snprintf(name, sizeof name, "%s%d", prefix, (first + i) % n);
        int rc = d->try_lock_key(&locked, conn, target, name);
        if (rc != LQ_OK) return rc;
        if (!locked) continue;
        *taken = (first + i) % n;
        return then ? d->try_lock_key(then_locked, conn, target, then) : LQ_OK;
    }
    return LQ_OK;
}

typedef char slot_prefix[64];

/* The prefix of a queue's slots' keys (pkey NULL), or of a partition key's. */
static void slots_of(slot_prefix prefix, const lq_subscription *s, const char *pkey) {
    unsigned long long queue = lq__fnv1a_str(s->limit_key);
    if (pkey) snprintf(prefix, sizeof(slot_prefix), "lq-kslot-%016llx-%016llx-", queue,
                       (unsigned long long)lq__fnv1a_str(pkey));
    else snprintf(prefix, sizeof(slot_prefix), "lq-slot-%016llx-", queue);
}

/* Slot i's key name. */
static void slot_name(char out[80], const slot_prefix prefix, long long i) {
    snprintf(out, 80, "%s%lld", prefix, i);
}

/* The slot of n a claim's tries start at. */
static int first_slot(const lq__conn *conn, int n) {
    unsigned seed = (unsigned)lq__mono_us() ^ (unsigned)(uintptr_t)conn; /* no lock held */
    return rand_r(&seed) % n;
}

/* concurrency in the advisory form: a slot is one more advisory key,
 * "lq-slot-<hash of the queue>-<i>" for i below the limit, taken on the
 * session (or in the process) that takes the row's key and held as long:
 * no two deliveries anywhere hold one slot, so no more than the limit run
 * at once, and a session that dies lets its slots go with its keys. The
 * tries start at a random slot, so claims beside each other seldom meet.
 * partition_concurrency's slots are the same, one set per partition key:
 * "lq-kslot-<hash of the queue>-<hash of the key>-<i>". *slot_out NULL:
 * every slot is held, the queue (or the key) is at its limit. Once a slot
 * is held, `then` (NULL: none) is tried too, in the same round trip where
 * the database can: *then_locked. */
static int take_slot(char **slot_out, bool *then_locked, lq_subscription *s, lq__conn *conn,
                     const char *pkey, const char *then) {
    *slot_out = NULL;
    int n = pkey ? s->partition_concurrency : s->concurrency;
    slot_prefix prefix;
    char name[80];
    slots_of(prefix, s, pkey);
    int taken;
    int rc = try_lock_any(&taken, then_locked, s, conn, prefix, n, first_slot(conn, n), then);
    if (taken < 0) return rc;
    slot_name(name, prefix, taken);
    if (rc != LQ_OK || !(*slot_out = lq__strdup(name))) {
        /* Not confirmed, a lock ends with its session: the caller ends it
         * on any failure (lq__advisory_claim). */
        unlock_all(s, conn, *then_locked ? then : NULL, name, NULL);
        *then_locked = false;
        return rc != LQ_OK ? rc : lq__error(LQ_NOMEM, "out of memory");
    }
    return LQ_OK;
}

/* The slots one candidate holds: the queue's and its partition key's. */
typedef struct slots {
    char *queue, *key;
} slots;

/* Lets a key (NULL: none) and the slots go; rc, or the failure of a
 * release not confirmed. */
static int release_slots(lq_subscription *s, lq__conn *conn, const char *key, slots *held, int rc) {
    bool confirmed = unlock_all(s, conn, key, held->queue, held->key);
    free(held->queue);
    free(held->key);
    *held = (slots){0};
    if (!confirmed && rc == LQ_OK)
        rc = key ? lq__error(LQ_BACKEND, "the release of advisory key \"%s\" or its slots was not confirmed", key)
                 : lq__error(LQ_BACKEND, "the release of a concurrency slot was not confirmed");
    return rc;
}

/* Takes the slots a candidate needs (none of the queue's where the session
 * holds one for it: `slot_held`), then its key, the last two in one round
 * trip where the database can. *locked: all are held. Else none is:
 * *full when the queue is at its limit, and the claim stops; a partition
 * key at its limit, or a key held elsewhere, passes over this candidate. */
static int take_turn(slots *out, bool *locked, bool *full, lq_subscription *s, lq__conn *conn,
                     const candidate *c, bool slot_held) {
    *out = (slots){0};
    *locked = *full = false;
    bool keyed = s->partition_concurrency && c->pkey;
    if ((!s->concurrency || slot_held) && !keyed)
        return s->broker->dialect->try_lock_key(locked, conn, &s->broker->target, c->key);
    int rc = LQ_OK;
    if (s->concurrency) {
        rc = take_slot(&out->queue, locked, s, conn, NULL, keyed ? NULL : c->key);
        *full = rc == LQ_OK && !out->queue;
        if (rc != LQ_OK || !out->queue) return rc;
    }
    if (keyed) rc = take_slot(&out->key, locked, s, conn, c->pkey, c->key);
    return rc == LQ_OK && *locked ? LQ_OK : release_slots(s, conn, NULL, out, rc);
}

static void give_slots(lq_delivery *d, slots *held) {
    d->slot = held->queue;
    d->key_slot = held->key;
    *held = (slots){0};
}

/* Lets a candidate's key and slots go; rc, or the failure of a release not
 * confirmed. */
static int let_go(lq_subscription *s, lq__conn *conn, const candidate *c, slots *held, int rc) {
    return release_slots(s, conn, c->key, held, rc);
}

/* Locks one candidate's key and takes its row; NULL in *out when the key is
 * held elsewhere, its partition key has no slot free, or the row was settled
 * since it was read. */
static int take_candidate(lq_delivery **out, bool *full, lq_subscription *s, lq__conn *conn,
                          const candidate *c, lq__value *args, bool slot_held) {
    const lq__dialect *d = s->broker->dialect;
    bool locked;
    *out = NULL;
    slots held;
    int rc = take_turn(&held, &locked, full, s, conn, c, slot_held);
    if (rc != LQ_OK || !locked) return rc;
    take_ctx take = {s, NULL};
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = c->id};
    int64_t changes = 0;
    rc = d->exec(&changes, conn, &s->sql.take, args, on_taken, &take);
    if (rc == LQ_OK && s->sql.take_read.sql && changes == 1)
        rc = d->exec(NULL, conn, &s->sql.take_read, args, on_taken, &take);
    if (rc == LQ_OK && take.taken) {
        give_slots(take.taken, &held);
        *out = take.taken;
        return LQ_OK;
    }
    if (take.taken) lq_delivery_free(take.taken);
    return let_go(s, conn, c, &held, rc);
}

/* What sqlset.claim_one answered: the slot it took (-1: none), the key
 * (NULL: none, and the slot was let go) and the row taken under it (NULL:
 * none). */
typedef struct one_ctx {
    lq_subscription *s;
    int64_t slot;
    int64_t id; /* the row of the key */
    char *key;
    lq_delivery *taken;
    bool answered;
} one_ctx;

enum { ONE_SLOT, ONE_ID, ONE_KEY, ONE_SLOT_FREED, ONE_ROW }; /* its columns, then the row's */

static int on_one(void *arg, const lq__value *cols, int count) {
    one_ctx *ctx = arg;
    if (ctx->answered || count <= ONE_ROW)
        return lq__error(LQ_BACKEND, "the claim of one row answered %s", ctx->answered ? "twice" : "too few columns");
    ctx->answered = true;
    ctx->slot = cols[ONE_SLOT].type == LQ__V_NULL ? -1 : cols[ONE_SLOT].i;
    if (cols[ONE_ID].type == LQ__V_NULL) { /* no key: the statement let its slot go */
        if (ctx->slot < 0 || cols[ONE_SLOT_FREED].i) return LQ_OK;
        return lq__error(LQ_BACKEND, "the release of a concurrency slot was not confirmed");
    }
    ctx->id = cols[ONE_ID].i;
    if (!(ctx->key = lq__value_text(&cols[ONE_KEY]))) return lq__error(LQ_NOMEM, "out of memory");
    if (cols[ONE_ROW].type == LQ__V_NULL) return LQ_OK; /* settled since it was read */
    return lq__delivery_from_row(&ctx->taken, ctx->s, cols + ONE_ROW, count - ONE_ROW);
}

/* Adds a row to the array text "{id,..}" of the rows a claim passes over. */
static void passed_add(lq__strbuf *passed, int64_t id) {
    if (passed->len && !passed->failed) passed->len--; /* its closing brace */
    lq__sb_addf(passed, passed->len ? ",%lld}" : "{%lld}", (long long)id);
}

/* sqlset.claim_one's values of its own: the slots' prefix (args point into
 * `prefix`), the slot its tries start at, and the rows it passes over
 * ("{id,..}"). */
static void one_args(lq__value *args, slot_prefix prefix, const lq_subscription *s, int first,
                     const char *passed) {
    int n = s->concurrency; /* 0: no slot is asked for */
    prefix[0] = '\0';
    if (n) slots_of(prefix, s, NULL);
    args[LQ__P_CONCURRENCY] = (lq__value){.type = LQ__V_INT, .i = n};
    args[LQ__P_FIRST_SLOT] = (lq__value){.type = LQ__V_INT, .i = first};
    args[LQ__P_SLOTS] = (lq__value){.type = LQ__V_TEXT, .p = prefix, .n = strlen(prefix)};
    args[LQ__P_PASSED] = (lq__value){.type = LQ__V_TEXT, .p = passed, .n = strlen(passed)};
}

/* What sqlset.claim_one answered (rc: how its run ended), as a delivery in
 * *out, holding its key and slot; or NULL: *full when no slot was free, or
 * a key was taken but not its row (settled since it was read), which is
 * let go, and its id added to `passed` (NULL: not kept). */
static int one_taken(lq_delivery **out, bool *full, lq__strbuf *passed, lq_subscription *s,
                     lq__conn *conn, one_ctx *one, const slot_prefix prefix, int rc) {
    *out = NULL;
    *full = false;
    if (rc == LQ_OK && !one->answered) rc = lq__error(LQ_BACKEND, "the claim of one row answered nothing");
    slots held = {0};
    if (one->key && one->slot >= 0) {
        char name[80];
        slot_name(name, prefix, one->slot);
        if (!(held.queue = lq__strdup(name)) && rc == LQ_OK) rc = lq__error(LQ_NOMEM, "out of memory");
    }
    if (rc == LQ_OK && one->taken) {
        one->taken->key = one->key;
        give_slots(one->taken, &held);
        *out = one->taken;
        return LQ_OK;
    }
    if (one->taken) lq_delivery_free(one->taken);
    *full = rc == LQ_OK && s->concurrency && one->slot < 0;
    if (rc == LQ_OK && one->key) {
        rc = release_slots(s, conn, one->key, &held, rc);
        if (passed) passed_add(passed, one->id);
        if (rc == LQ_OK && passed && passed->failed) rc = lq__error(LQ_NOMEM, "out of memory");
    }
    free(one->key);
    free(held.queue);
    return rc;
}

/* One row in one statement where the dialect can (sqlset.claim_one): a
 * slot, a key and the take in one round trip, passing over the rows of
 * `passed`. NULL in *out when no row was taken (one_taken). A failure may
 * leave locks held: the caller ends the session. */
static int claim_one(lq_delivery **out, bool *full, lq__strbuf *passed, lq_subscription *s, lq__conn *conn,
                     lq__value *args) {
    slot_prefix prefix;
    int n = s->concurrency;
    one_args(args, prefix, s, n ? first_slot(conn, n) : 0, passed->len ? passed->data : "{}");
    one_ctx one = {.s = s, .slot = -1};
    int rc = s->broker->dialect->exec(NULL, conn, &s->sql.claim_one, args, on_one, &one);
    args[LQ__P_SLOTS] = args[LQ__P_PASSED] = (lq__value){.type = LQ__V_NULL}; /* theirs are ours */
    return one_taken(out, full, passed, s, conn, &one, prefix, rc);
}

/* The rows a set take returned, each matched to its candidate (taken[j]
 * for the candidate at[j]). */
typedef struct set_take_ctx {
    lq_subscription *s;
    const candidates *c;
    const int *at;
    lq_delivery **taken;
    int n;
} set_take_ctx;

static int on_set_taken(void *arg, const lq__value *cols, int count) {
    set_take_ctx *ctx = arg;
    lq_delivery *d;
    int rc = lq__delivery_from_row(&d, ctx->s, cols, count);
    if (rc != LQ_OK) return rc;
    for (int j = 0; j < ctx->n; j++) {
        if (ctx->c->items[ctx->at[j]].id == d->id && !ctx->taken[j]) {
            ctx->taken[j] = d;
            return LQ_OK;
        }
    }
    lq__delivery_unref(d);
    return lq__error(LQ_BACKEND, "the take of a set returned row %lld, which it was not asked for",
                     (long long)cols[LQ__COL_ID].i);
}

/* Where keys live in the process: locks the keys of up to `limit`
 * candidates, then takes their rows in one statement (one write rather
 * than one per row), and adds them to `out` in candidate order. A key whose
 * row was settled since it was read is let go. */
static int take_together(lq__claimed *out, bool *full, lq_subscription *s, lq__conn *conn,
                         candidates *c, int limit, lq__value *args) {
    const lq__dialect *d = s->broker->dialect;
    int *at = malloc((size_t)limit * sizeof *at);
    lq_delivery **taken = calloc((size_t)limit, sizeof *taken);
    slots *held = calloc((size_t)limit, sizeof *held);
    int rc = at && taken && held ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
    int n = 0;
    lq__strbuf set = {0};
    for (int i = 0; rc == LQ_OK && i < c->count && n < limit; i++) {
        bool locked;
        if ((rc = take_turn(&held[n], &locked, full, s, conn, &c->items[i], false)) != LQ_OK || *full) break;
        if (!locked) continue;
        at[n++] = i;
        lq__held_set_add(&set, d, false, c->items[i].id, 0);
    }
    char *text = n ? lq__held_set_take(&set, d) : NULL;
    lq__sb_free(&set);
    if (n && !text && rc == LQ_OK) rc = lq__error(LQ_NOMEM, "out of memory");
    if (rc == LQ_OK && n) {
        set_take_ctx ctx = {s, c, at, taken, n};
        args[LQ__P_HELD_SET] = (lq__value){.type = LQ__V_TEXT, .p = text, .n = strlen(text)};
        rc = d->exec(NULL, conn, &s->sql.take_set, args, on_set_taken, &ctx);
    }
    free(text);
    for (int j = 0; j < n; j++) {
        candidate *cand = &c->items[at[j]];
        if (rc == LQ_OK && taken[j]) {
            taken[j]->key = cand->key;
            cand->key = NULL;
            give_slots(taken[j], &held[j]);
            lq__claimed_add(out, taken[j]);
            continue;
        }
        /* After a failure the rows stay in the queue, their keys let go,
         * without the release that would undo a count: a failed write
         * counted nothing, and a failure after it (a delivery that could
         * not be made) leaves at worst one attempt counted too many. */
        if (taken[j]) lq__delivery_unref(taken[j]);
        rc = let_go(s, conn, cand, &held[j], rc);
    }
    free(at);
    free(taken);
    free(held);
    return rc;
}

/* A row past its key's window stays in the claim, marked: the subscription
 * releases it unrun once it has counted it (subscription.c). */
static int pass_over(lq_subscription *s, lq__conn *conn, lq_delivery *d, void *ctx) {
    (void)s;
    (void)conn;
    d->passed_over = true;
    lq__claimed_add(ctx, d);
    return LQ_OK;
}

/* partition_rate_limit, once the claim has its rows (forms/key_limits.c).
 * If it fails, no start was recorded and no row may run: all are passed
 * over. *broken when the queue's lock was not given back. */
static int limit_key_rates(lq__claimed *out, bool *broken, lq_subscription *s, lq__conn *conn,
                           const lq__value *args) {
    lq__claimed back = {0};
    int rc = lq__key_rates_counted(out, broken, s, conn, args, pass_over, &back);
    for (lq_delivery *dv = back.head, *next; dv; dv = next) {
        next = dv->queue_next;
        lq__claimed_add(out, dv);
    }
    return rc;
}

static void pass_over_all(lq__claimed *out) {
    for (lq_delivery *dv = out->head; dv; dv = dv->queue_next) dv->passed_over = true;
}

/* The rows of a claim that will run. */
static int runs_of(const lq__claimed *out) {
    int n = 0;
    for (const lq_delivery *dv = out->head; dv; dv = dv->queue_next) n += !dv->passed_over;
    return n;
}

/* The values a claim of up to `limit` rows binds. */
static void claim_values(lq__value *args, const lq_subscription *s, int limit) {
    const lq__dialect *d = s->broker->dialect;
    memset(args, 0, LQ__P_COUNT * sizeof *args);
    if (s->group) args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = s->group, .n = strlen(s->group)};
    args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = lq__now_ms()};
    if (s->starts_key) /* the candidates pass over keys at partition_rate_limit */
        args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = s->starts_key, .n = strlen(s->starts_key)};
    lq__claim_limits(s, args);
    /* Read past the rows whose keys this process holds, so later rows of
     * other keys are found without waiting for a poll. (Keys held by other
     * sessions are filtered by the query where the database knows them.) */
    int64_t held = d->keys_held ? (int64_t)d->keys_held(&s->broker->target) : 0;
    /* And past the rows the other claims in flight may take first (each
     * reads the same first rows): their keys are then held, and the claim
     * goes on to the next row rather than coming back empty. */
    int64_t beside = !s->flow.one_claim && s->workers > 1 ? s->workers - 1 : 0;
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = limit + held + beside};
}

int lq__advisory_claim(lq__claimed *out, lq_subscription *s, int limit) {
    const lq__dialect *d = s->broker->dialect;
    lq__pool *pool = &s->broker->pool;
    lq_delivery *carried = lq__subscription_take_claimed(s); /* this worker's settlement claimed it */
    if (carried) {
        lq__claimed_add(out, carried);
        return LQ_OK;
    }
    lq__conn *shared;
    int rc = lq__pool_acquire(&shared, pool);
    if (rc != LQ_OK) return rc;
    /* A rate limit's starts are reserved first (forms/starts.c). */
    lq__reserved reserved = {0};
    bool reserve_broken = false; /* the queue's lock was not given back */
    if (s->rate_limit) {
        rc = lq__starts_reserve(&reserved, &reserve_broken, s, shared, limit);
        if (rc != LQ_OK || reserved.count == 0 || reserve_broken) { /* broken: its starts err low */
            lq__pool_release(pool, shared, reserve_broken || rc == LQ_CONNECT);
            return rc;
        }
        limit = reserved.count;
    }
    lq__value args[LQ__P_COUNT];
    claim_values(args, s, limit);
    candidates c = {0};
    /* Where each row is claimed in one statement, no candidates are read;
     * a take that found its row settled is tried again past it, a few times. */
    bool one = s->sql.claim_one.sql != NULL;
    int tries = one ? limit + 3 : 0;
    lq__strbuf passed = {0};
    if (!one) rc = d->exec(NULL, shared, &s->sql.claim, args, on_candidate, &c);
    bool holds = d->advisory_holds_connection, shared_free = true, shared_broken = false;
    bool together = s->sql.take_set.sql && !holds && c.count > 1;
    bool full = false; /* every concurrency slot held */
    if (rc == LQ_OK && together) rc = take_together(out, &full, s, shared, &c, limit, args);
    for (int i = 0; rc == LQ_OK && !together && !full && i < (one ? tries : c.count) && out->count < limit; i++) {
        lq__conn *conn;
        if (key_connection(&conn, s, shared, shared_free) != LQ_OK) break; /* the pool is short */
        lq_delivery *taken;
        size_t passed_before = passed.len;
        if (one) rc = claim_one(&taken, &full, &passed, s, conn, args);
        else rc = take_candidate(&taken, &full, s, conn, &c.items[i], args, false);
        if (taken) {
            if (!one) {
                taken->key = c.items[i].key;
                c.items[i].key = NULL;
            }
            if (holds) taken->conn = conn;
            if (conn == shared) shared_free = false;
            lq__claimed_add(out, taken);
        } else if (conn != shared) {
            lq__pool_release(pool, conn, rc != LQ_OK);
        } else if (holds && rc != LQ_OK) {
            shared_broken = true; /* its session may still hold the key */
        }
        if (one && !taken && passed.len == passed_before) break; /* no row whose key is free */
    }
    out->cut = full; /* each settlement here wakes a claim anyway: it lets a key go */
    /* Every row taken, even by a claim that failed after, is counted
     * against its key's window, or none of them runs. */
    if (s->key_rate_limit && out->count) {
        int counted = shared_broken ? LQ_BACKEND : limit_key_rates(out, &shared_broken, s, shared, args);
        if (counted != LQ_OK) pass_over_all(out);
        if (rc == LQ_OK) rc = counted;
    }
    if (reserved.count && !shared_broken && rc != LQ_CONNECT)
        rc = lq__starts_unreserve(s, shared, &reserved, runs_of(out), rc);
    if (shared_broken && !shared_free) { /* a delivery holds shared: it must not be lent again */
        pass_over_all(out);
        for (lq_delivery *dv = out->head; dv; dv = dv->queue_next)
            if (dv->conn == shared) dv->conn_broken = true;
    }
    if (!holds || shared_free) lq__pool_release(pool, shared, rc == LQ_CONNECT || shared_broken);
    lq__sb_free(&passed);
    candidates_free(&c);
    return rc;
}

static void forget_keys(lq_delivery *dv) {
    free(dv->key);
    free(dv->slot);
    free(dv->key_slot);
    dv->key = dv->slot = dv->key_slot = NULL;
}

/* The index of the queue slot a delivery holds (-1: none). */
static int slot_index(const lq_delivery *dv) {
    const char *dash = dv->slot ? strrchr(dv->slot, '-') : NULL;
    return dash ? atoi(dash + 1) : -1;
}

bool lq__advisory_carries(const lq_subscription *s) {
    const lq__dialect *d = s->broker->dialect;
    if (d->exec_unlock) return s->sql.claim_one.sql != NULL;
    return d->advisory_holds_connection && lq__table_carries_claims(s->table);
}

/* The claim a worker's settlement carries, in one statement, where the
 * dialect pipelines: its slot's try comes first, and the session holds that
 * slot already (advisory locks stack), so the row claimed takes it over; so
 * does a row of the same key. The settled row is gone or changed in the
 * claim's snapshot, in the same transaction. */
static void carried_claim(lq__step *step, lq__value *args, slot_prefix prefix, one_ctx *one,
                          const lq_delivery *dv) {
    lq_subscription *s = dv->sub;
    claim_values(args, s, 1);
    int kept = slot_index(dv);
    one_args(args, prefix, s, kept > 0 ? kept : 0, "{}");
    *one = (one_ctx){.s = s, .slot = -1};
    *step = (lq__step){.stmt = &s->sql.claim_one, .args = args, .on_row = on_one, .ctx = one};
}

bool lq__advisory_hands_slot_over(const lq_subscription *s, bool chains) {
    return chains && s->broker->dialect->exec_unlock;
}

/* What sqlset.pick answered: a candidate, whether its key was taken, and
 * its row (NULL: no candidate was left). */
typedef struct picked {
    lq_subscription *s;
    char *key;
    bool locked;
    lq__value attempt; /* as read: the take counts it only while it is so */
    lq_delivery *row;
} picked;

enum { PICK_LOCKED, PICK_KEY, PICK_ROW }; /* its columns, then the row's */

static int on_picked(void *arg, const lq__value *cols, int count) {
    picked *p = arg;
    if (p->row || count <= PICK_ROW)
        return lq__error(LQ_BACKEND, "the pick of a row answered %s", p->row ? "twice" : "too few columns");
    const lq__value *row = cols + PICK_ROW;
    int rc = lq__delivery_from_row(&p->row, p->s, row, count - PICK_ROW);
    if (rc != LQ_OK) return rc;
    /* Its key is the caller's to let go from here: set before any error. */
    if (!(p->key = lq__value_text(&cols[PICK_KEY]))) return lq__error(LQ_NOMEM, "out of memory");
    const lq__value *attempt = &row[p->s->row_at[LQ__COL_ATTEMPT]];
    if (cols[PICK_LOCKED].type != LQ__V_INT || (attempt->type != LQ__V_INT && attempt->type != LQ__V_NULL))
        return lq__error(LQ_BACKEND, "the pick of a row answered a key's try or an attempt count that is no integer");
    p->locked = cols[PICK_LOCKED].i == 1;
    p->attempt = attempt->type == LQ__V_INT ? (lq__value){.type = LQ__V_INT, .i = attempt->i}
                                            : (lq__value){.type = LQ__V_NULL};
    return LQ_OK;
}

/* Picks a carried claim makes past rows whose keys others took between the
 * read and the try, as sqlset.claim_one's claim tries a few times past
 * rows settled under it: a few collisions, then the next claim. */
enum { PICK_TRIES = 4 };

/* The carried claim where one statement picks a row (sqlset.pick): its key
 * tried and its row read, then taken while its attempt count is as read. A
 * row whose key another session took first, or which was settled or taken
 * since the read, is passed over, a few times. A failure may leave the key
 * held: the caller ends the session (lq__advisory_settle_exec). */
static int pick_in_turn(one_ctx *one, lq__conn *conn, lq_subscription *s, lq__value *args) {
    const lq__dialect *d = s->broker->dialect;
    lq__strbuf passed = {0};
    int rc = LQ_OK;
    for (int i = 0; rc == LQ_OK && !one->taken && i < PICK_TRIES && !passed.failed; i++) {
        const char *past = passed.len ? passed.data : "{}"; /* no memory for it: the next claim goes on */
        args[LQ__P_PASSED] = (lq__value){.type = LQ__V_TEXT, .p = past, .n = strlen(past)};
        picked p = {.s = s};
        rc = d->exec(NULL, conn, &s->sql.pick, args, on_picked, &p);
        int64_t changes = 0;
        if (rc == LQ_OK && p.locked) {
            args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = p.row->id};
            args[LQ__P_ATTEMPT] = p.attempt;
            rc = d->exec(&changes, conn, &s->sql.take_picked, args, NULL, NULL);
            if (rc == LQ_OK && changes != 1 && !d->unlock_key(conn, &s->broker->target, p.key))
                rc = lq__error(LQ_BACKEND, "the release of advisory key \"%s\" was not confirmed", p.key);
        }
        if (rc == LQ_OK && changes == 1) {
            one->taken = p.row;
            one->id = p.row->id;
            one->key = p.key;
            break;
        }
        bool left = p.row != NULL;
        if (left) passed_add(&passed, p.row->id);
        lq__delivery_unref(p.row); /* not taken: nothing to give back */
        free(p.key);
        if (!left) break; /* no candidate: the queue has no row for this claim */
    }
    args[LQ__P_PASSED] = (lq__value){.type = LQ__V_NULL};
    lq__sb_free(&passed);
    return rc;
}

/* The carried claim statement by statement, in the settlement's open
 * transaction, where the dialect has no pipeline: a pick and a take (where
 * the database has sqlset.pick), or the candidates, then for each its key's
 * try, its take and its read, until a row is taken. The
 * session's slot passes to that row without a try (MySQL counts a name
 * taken twice by one session twice, so it is not taken again); a row of
 * the settled row's key waits, its key still held. The answer is as
 * sqlset.claim_one's. */
static int claim_in_turn(one_ctx *one, const lq_delivery *dv) {
    lq_subscription *s = dv->sub;
    *one = (one_ctx){.s = s, .slot = s->concurrency ? slot_index(dv) : -1, .answered = true};
    lq__value args[LQ__P_COUNT];
    claim_values(args, s, 1);
    if (s->sql.pick.sql) return pick_in_turn(one, dv->conn, s, args);
    candidates c = {0};
    int rc = s->broker->dialect->exec(NULL, dv->conn, &s->sql.claim, args, on_candidate, &c);
    for (int i = 0; rc == LQ_OK && !one->taken && i < c.count; i++) {
        bool full;
        rc = take_candidate(&one->taken, &full, s, dv->conn, &c.items[i], args, true);
        if (!one->taken) continue;
        one->id = c.items[i].id;
        one->key = c.items[i].key;
        c.items[i].key = NULL;
    }
    candidates_free(&c);
    return rc;
}

/* A claim the transaction did not commit: its row is dropped as it is, its
 * attempt's count rolled back with it. */
static void one_dropped(one_ctx *one) {
    if (one->taken) lq__delivery_unref(one->taken);
    free(one->key);
}

/* The settlement and the claim it carries, one statement after another in
 * one transaction, then the release of the settled row's key (and of its
 * slot where no row took it over): *committed, *confirmed as exec_unlock's,
 * and the pause read where one is due (after). */
static int exec_in_turn(bool *committed, bool *confirmed, one_ctx *one, lq_delivery *dv,
                        const lq__step *settlement, const lq__step *after, int *after_rc) {
    lq_subscription *s = dv->sub;
    const lq__dialect *d = s->broker->dialect;
    *committed = *confirmed = false;
    *one = (one_ctx){.s = s, .slot = -1};
    if (after) *after_rc = LQ_BACKEND; /* until it has run */
    int rc = d->begin(dv->conn, LQ_ISOLATION_DEFAULT);
    if (rc == LQ_OK) rc = d->exec(settlement->changes, dv->conn, settlement->stmt, settlement->args, NULL, NULL);
    if (rc == LQ_OK) rc = claim_in_turn(one, dv);
    /* The row taken is settled next in a transaction of this session: begun
     * with this commit where the database can. */
    bool ahead = one->taken && d->commit_then_begin;
    if (rc == LQ_OK) *committed = (rc = ahead ? d->commit_then_begin(dv->conn) : d->commit(dv->conn)) == LQ_OK;
    if (!*committed) return rc; /* the caller rolls back */
    *confirmed = unlock_all(s, dv->conn, dv->key, one->taken ? NULL : dv->slot, dv->key_slot);
    if (after) *after_rc = d->exec(after->changes, dv->conn, after->stmt, after->args, after->on_row, after->ctx);
    return LQ_OK;
}

int lq__advisory_settle_exec(int64_t *changes, lq__freed *freed, lq_delivery *dv, const lq__stmt *stmt,
                             const lq__value *args, bool claim_next) {
    lq_subscription *s = dv->sub;
    const lq__dialect *d = s->broker->dialect;
    /* A slot let go before the settlement (lq__advisory_slots_first) is
     * another claim's already; a session that may hold a lock it did not
     * take is not lent to another row. */
    bool carries = claim_next && dv->conn && !dv->conn_broken && lq__advisory_carries(s) && !s->rate_limit &&
                   (dv->key || dv->slot || dv->key_slot) && (!s->concurrency || dv->slot);
    if (!carries) return d->exec(changes, dv->conn, stmt, args, NULL, NULL); /* the keys go after */
    lq__step steps[2] = {{.stmt = stmt, .args = args, .changes = changes}};
    lq__value claim_args[LQ__P_COUNT];
    slot_prefix prefix = "";
    one_ctx one;
    if (d->exec_unlock) carried_claim(&steps[1], claim_args, prefix, &one, dv);
    else if (s->concurrency) slots_of(prefix, s, NULL); /* claim_in_turn fills `one` */
    /* And the read of the pause the worker's claim would make first. */
    lq__step pause_step;
    lq__value pause_args[LQ__P_COUNT];
    int64_t pauses;
    int pause_rc = LQ_OK;
    bool reads_pause = lq__subscription_pause_read_carried(s);
    if (reads_pause) lq__pause_step(&pause_step, pause_args, &pauses, &s->pause_check, s->table, s->group);
    const char *const keys[3] = {dv->key, dv->slot, dv->key_slot};
    bool committed, confirmed;
    int rc = d->exec_unlock ? d->exec_unlock(&committed, &confirmed, dv->conn, steps, 2, keys,
                                             reads_pause ? &pause_step : NULL, &pause_rc)
                            : exec_in_turn(&committed, &confirmed, &one, dv, &steps[0],
                                           reads_pause ? &pause_step : NULL, &pause_rc);
    lq__error_copy failure; /* what the pause read's outcome may replace */
    if (rc != LQ_OK) lq__error_save(&failure); /* only a failure is logged below */
    if (reads_pause) { /* answered always: lq__subscription_settled ends the read */
        pause_rc = lq__error_ok_if(pause_rc, LQ_SCHEMA); /* no control table: nothing paused */
        /* Its own error is the thread's only where the rest went well; a
         * failure of the rest is logged below, or by the caller. */
        if (pause_rc != LQ_OK && committed && rc == LQ_OK)
            lq__log_error(LQ_LOG_WARNING, "reading whether the queue is paused");
        freed->pause_read = pause_rc == LQ_OK ? 1 : -1;
        freed->paused = pause_rc == LQ_OK && pauses > 0;
        /* A session lost at the read took the claimed row's key with it. */
        if (pause_rc == LQ_CONNECT) confirmed = false;
    }
    if (!committed) {
        /* The claim or the commit failed and took the settlement with it.
         * The claim's locks may outlive the rollback: the session ends after.
         * Where the keys are still held (the release, after the failure,
         * did not run), the settlement goes alone; else the row may be
         * another's already, and it comes back as any unsettled row. */
        one_dropped(&one);
        dv->conn_broken = true;
        if (confirmed) forget_keys(dv);
        else if (rc != LQ_CONNECT && d->rollback(dv->conn) == LQ_OK)
            rc = d->exec(changes, dv->conn, stmt, args, NULL, NULL);
        return rc;
    }
    forget_keys(dv); /* let go after the commit */
    if (!confirmed) dv->conn_broken = true; /* the session ends, and its locks with it */
    lq_delivery *next;
    bool full;
    int claimed = one_taken(&next, &full, NULL, s, dv->conn, &one, prefix, confirmed ? rc : LQ_BACKEND);
    if (claimed != LQ_OK) {
        if (rc != LQ_OK) {
            lq__error_restore(&failure);
            if (lq_errcode() == LQ_OK) lq__error(rc, "%s", lq_status_describe(rc));
            lq__log_error(LQ_LOG_WARNING, "the claim a settlement carried");
        }
        dv->conn_broken = true; /* it may hold the claim's locks */
    }
    if (next) { /* its worker runs it next, on this session (lq__advisory_release) */
        next->conn = dv->conn;
        freed->conn = dv->conn;
        freed->chained = true;
        freed->claimed = next;
        freed->room_taken = s->concurrency > 0;
    }
    lq__error_clear(); /* the settlement holds: what failed after it cost only the session */
    return LQ_OK;
}

bool lq__advisory_slots_first(lq_delivery *dv) {
    pthread_mutex_lock(&dv->mu);
    bool has = dv->conn && !dv->settled && (dv->slot || dv->key_slot);
    if (has) {
        slots held = {dv->slot, dv->key_slot};
        dv->slot = dv->key_slot = NULL;
        /* Not confirmed, the slot ends with the session: after the
         * settlement, which still needs it for the key. */
        if (release_slots(dv->sub, dv->conn, NULL, &held, LQ_OK) != LQ_OK) {
            dv->conn_broken = true;
            lq__error_clear();
        }
    }
    pthread_mutex_unlock(&dv->mu);
    return has;
}

void lq__advisory_release(lq_delivery *dv, lq__freed *freed) {
    lq_subscription *s = dv->sub;
    bool confirmed = unlock_all(s, dv->conn, dv->key, dv->slot, dv->key_slot);
    forget_keys(dv);
    if (dv->conn && !freed->claimed) {
        /* A lock whose release is not confirmed ends with its session. */
        freed->conn = dv->conn;
        freed->broken = !confirmed || dv->conn_broken;
    }
    dv->conn = NULL;
}
