/* `concurrency` in the lease form counted by holds (where the dialect says
 * so: MySQL, whose count of leased rows reads the index entries that acks
 * leave for the purge, thousands of them during a drain).
 *
 * Each subscription has a row in the holds table: how many rows of the
 * queue it may have in work (held) and until when that counts (held_until).
 * A claim takes room from what its subscription holds, in memory, without a
 * statement and without the queue's lock; only a subscription that needs
 * more goes to the database, and there:
 *
 *   begin; lock every row of the queue (the queue's own row first, so that
 *   growths take turns); sum the others' held whose time has not ended;
 *   set its own held to what it has in use plus what it wants, within the
 *   limit; commit.
 *
 * Why it cannot overshoot: a subscription's rows in work are never more than
 * its held (room is taken in memory before a claim asks for rows, and given
 * back when a row's run ends), and its held counts for every other growth
 * as long as any of those rows may be in work: held_until is kept no
 * earlier than the lease of each of its rows (written in the claim's
 * transaction with the leases, and before each extension), and room is
 * taken in memory only while held_until is at least half a lease ahead. A
 * held is lowered in memory before the database, and raised on the
 * database before memory; while a growth is written, no room is taken.
 *
 * What a crash does: the row stops counting when its time ends, at most a
 * quarter lease after the leases it covers (a growth writes a lease ahead).
 *
 * What it costs: a claim with room in hand costs what an unlimited one
 * does; growing, or renewing the time every half lease, is one transaction;
 * a claim that finds no row gives back what its subscription does not use
 * (one UPDATE), so that others have it, as stopping it does; after it, the
 * next claim first reads whether there is a row (an idle queue: a read a
 * poll, no growth). */
#include "base/clock.h"
#include "core/schema.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* A holder's number: 62 random bits, never 0. Two subscriptions sharing one
 * is as likely as two random UUIDs alike. */
static int64_t new_holder(const void *seen) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = ((uint64_t)lq__mono_us() << 20) ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)seen ^
            (uint64_t)lq__now_ms();
    return (int64_t)((v >> 2) | 1);
}

static void bind_holder(lq__value *args, const lq__holds *h, int64_t holder) {
    args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = h->queue, .n = strlen(h->queue)};
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = holder};
}

/* Writes a row of the queue: the queue's own (holder 0), unless it is
 * there, or a holder's, which must not be. */
static int insert_row(lq__holds *h, const lq__dialect *d, lq__conn *conn, int64_t holder,
                      int64_t held, int64_t until) {
    lq__value args[LQ__P_COUNT] = {0};
    bind_holder(args, h, holder);
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = held};
    args[LQ__P_LEASE] = (lq__value){.type = LQ__V_INT, .i = until};
    int rc = d->exec(NULL, conn, &h->sql.insert, args, NULL, NULL);
    return holder == 0 ? lq__error_ok_if(rc, LQ_DUPLICATE) : rc; /* the queue's: there already */
}

int lq__holds_open(lq_subscription *s) {
    lq__holds *h = &s->holds;
    const lq__dialect *d = s->broker->dialect;
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->write_mu, NULL);
    h->on = true;
    h->holder = new_holder(s);
    if (!(h->queue = lq__strdup(s->limit_key))) return lq__error(LQ_NOMEM, "out of memory");
    int rc = lq__sql_build_holds(&h->sql, d, s->table);
    if (rc == LQ_OK) rc = lq__holds_table_create(s->broker, s->table, &h->sql.create);
    lq__conn *conn = NULL;
    if (rc == LQ_OK) rc = lq__pool_acquire(&conn, &s->broker->pool);
    if (rc == LQ_OK) rc = insert_row(h, d, conn, 0, 0, 0);
    if (rc == LQ_OK) {
        /* Rows of holders a day gone: their processes ended without
         * closing (a live holder's row is written at least each lease). */
        lq__value args[LQ__P_COUNT] = {0};
        bind_holder(args, h, 0);
        args[LQ__P_LEASE] = (lq__value){.type = LQ__V_INT, .i = lq__now_ms() - 86400000};
        rc = d->exec(NULL, conn, &h->sql.prune, args, NULL, NULL);
    }
    if (conn) lq__pool_release(&s->broker->pool, conn, rc == LQ_CONNECT);
    if (rc != LQ_OK) lq__error_prefix("concurrency's holds");
    return rc;
}

void lq__holds_free(lq__holds *h) {
    if (!h->on) return;
    lq__holds_sql_free(&h->sql);
    free(h->queue);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->write_mu);
}

/* Takes up to `want` of the room in hand; h->mu held. */
static int take_in_hand(lq__holds *h, int want) {
    int n = h->granted - h->in_use;
    if (n > want) n = want;
    if (n < 0) n = 0;
    h->in_use += n;
    return n;
}

typedef struct holds_read {
    int64_t me, now;
    int64_t others; /* the others' held whose time has not ended */
    bool queue_row, own_row;
} holds_read;

static int on_hold(void *ctx, const lq__value *cols, int count) {
    holds_read *r = ctx;
    if (count < 3 || cols[0].type != LQ__V_INT || cols[1].type != LQ__V_INT || cols[2].type != LQ__V_INT)
        return lq__error(LQ_BACKEND, "reading the queue's holds returned no numbers");
    if (cols[0].i == 0) r->queue_row = true;
    else if (cols[0].i == r->me) r->own_row = true;
    else if (cols[2].i > r->now && cols[1].i > 0) r->others += cols[1].i;
    return LQ_OK;
}

/* The database's part of a growth: the queue's rows read under their locks
 * and this subscription's held written, in one transaction; *held is what
 * it holds after, and *until when that ends. h->write_mu held. */
static int grow(int *held, int64_t *until, lq_subscription *s, lq__conn *conn, int want) {
    lq__holds *h = &s->holds;
    const lq__dialect *d = s->broker->dialect;
    holds_read r = {.me = h->holder, .now = lq__now_ms()};
    lq__value args[LQ__P_COUNT] = {0};
    bind_holder(args, h, h->holder);
    int rc = d->begin(conn, LQ_ISOLATION_READ_COMMITTED);
    if (rc == LQ_OK) rc = d->exec(NULL, conn, &h->sql.read, args, on_hold, &r);
    /* Without the queue's own row, growths would not take turns. */
    if (rc == LQ_OK && !r.queue_row)
        rc = lq__error(LQ_BACKEND, "the holds table %s has lost the row of queue %s",
                       LQ__HOLDS_TABLE, h->queue);
    pthread_mutex_lock(&h->mu);
    int64_t target = h->in_use + want;
    if (target > s->concurrency - r.others) target = s->concurrency - r.others;
    if (target < h->in_use) target = h->in_use; /* what is in use is counted, always */
    pthread_mutex_unlock(&h->mu);
    /* A lease from now, read after the lock's wait: the row counts for
     * others from the commit on (they wait for its lock meanwhile). */
    *until = lq__now_ms() + s->lease_ms;
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = target};
    args[LQ__P_LEASE] = (lq__value){.type = LQ__V_INT, .i = *until};
    if (rc == LQ_OK && r.own_row) rc = d->exec(NULL, conn, &h->sql.set, args, NULL, NULL);
    else if (rc == LQ_OK) rc = insert_row(h, d, conn, h->holder, target, *until);
    if (rc == LQ_OK) rc = d->commit(conn);
    if (rc != LQ_OK) {
        lq__error_copy failure;
        lq__error_save(&failure);
        d->rollback(conn);
        lq__error_restore(&failure);
    }
    *held = (int)target;
    return rc;
}

/* Whether room may be taken in hand: the holds' time is at least half a
 * lease ahead (a claim ends well within it) and no growth is being
 * written; h->mu held. */
static bool fresh(const lq__holds *h, int64_t lease_ms) {
    return !h->growing && h->until - lq__now_ms() >= lease_ms / 2;
}

/* Takes room in hand for `want` rows where there is as much; where there is
 * less, takes it if the last growth found the queue at its limit (growing
 * again would find no more, while every growth takes its turn with the
 * queue's), else leaves it for a growth. h->mu held. */
static bool take_fresh(lq__holds *h, int64_t lease_ms, int want, bool at_limit, int *drawn) {
    int in_hand = h->granted - h->in_use;
    if (!fresh(h, lease_ms) || in_hand <= 0 || (in_hand < want && !at_limit)) return false;
    *drawn = take_in_hand(h, want);
    return true;
}

int lq__holds_draw(int *drawn, bool *cut, lq_subscription *s, lq__conn *conn, int want,
                   const lq__value *claim_args) {
    lq__holds *h = &s->holds;
    *drawn = 0;
    *cut = false;
    if (want <= 0) return LQ_OK;
    pthread_mutex_lock(&h->mu);
    bool taken = take_fresh(h, s->lease_ms, want, atomic_load(&s->at_limit), drawn);
    bool look = h->found_none;
    pthread_mutex_unlock(&h->mu);
    if (taken) {
        *cut = *drawn < want; /* in hand, short, only at the limit (take_fresh) */
        return LQ_OK;
    }
    if (look) { /* an idle queue costs a read a poll, not a growth, a claim and a trim */
        int64_t rows = 0;
        int rc = s->broker->dialect->exec(NULL, conn, &h->sql.probe, claim_args, lq__on_count, &rows);
        /* Room in hand short of `want` goes back, as after a claim that found no row. */
        if (rc == LQ_OK && rows == 0) rc = lq__holds_trim(s, conn, false);
        if (rc != LQ_OK || rows == 0) return rc;
    }

    pthread_mutex_lock(&h->write_mu);
    pthread_mutex_lock(&h->mu);
    /* A growth just ahead may have made room. */
    taken = take_fresh(h, s->lease_ms, want, atomic_load(&s->at_limit), drawn);
    /* Growing: no room is taken in hand until it is written, so that what
     * is in use only falls meanwhile, and the count written covers it. */
    if (!taken) h->growing = true;
    pthread_mutex_unlock(&h->mu);
    int rc = LQ_OK;
    if (!taken) {
        int held = 0;
        int64_t until = 0;
        rc = grow(&held, &until, s, conn, want);
        pthread_mutex_lock(&h->mu);
        h->growing = false;
        if (rc == LQ_OK) {
            h->granted = held;
            if (until > h->until) h->until = until;
            /* A commit that came later than half a lease takes nothing:
             * the next claim grows again. */
            if (fresh(h, s->lease_ms)) *drawn = take_in_hand(h, want);
        }
        pthread_mutex_unlock(&h->mu);
        /* Cut short by the limit: a settlement here wakes a claim. */
        *cut = rc == LQ_OK && *drawn < want;
        if (rc == LQ_OK) atomic_store(&s->at_limit, *cut);
    } else {
        *cut = *drawn < want;
    }
    pthread_mutex_unlock(&h->write_mu);
    return rc;
}

void lq__holds_claimed(lq_subscription *s, const lq__claimed *c, int drawn, int64_t covered,
                       bool found_none) {
    lq__holds *h = &s->holds;
    for (lq_delivery *d = c->head; d; d = d->queue_next) atomic_store(&d->holds_room, true);
    pthread_mutex_lock(&h->mu);
    if (c->count && covered > h->until) h->until = covered;
    h->in_use -= drawn - (int)c->count;
    h->found_none = found_none;
    pthread_mutex_unlock(&h->mu);
}

void lq__holds_let_go(lq_delivery *d) {
    lq__holds *h = &d->sub->holds;
    if (!h->on || !atomic_exchange(&d->holds_room, false)) return;
    pthread_mutex_lock(&h->mu);
    h->in_use--;
    pthread_mutex_unlock(&h->mu);
}

/* A growth of nothing: the row counted again, for what is in use, from a
 * time that ended (a keeper late by half a lease). */
static int recount(int64_t *until_now, lq_subscription *s, lq__conn *conn) {
    lq__holds *h = &s->holds;
    pthread_mutex_lock(&h->write_mu);
    pthread_mutex_lock(&h->mu);
    h->growing = true;
    pthread_mutex_unlock(&h->mu);
    int held = 0;
    int64_t until = 0;
    int rc = grow(&held, &until, s, conn, 0);
    pthread_mutex_lock(&h->mu);
    h->growing = false;
    if (rc == LQ_OK) {
        h->granted = held;
        if (until > h->until) h->until = until;
    }
    *until_now = h->until;
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_unlock(&h->write_mu);
    return rc;
}

int lq__holds_cover(int64_t *pending, lq_subscription *s, lq__conn *conn, int64_t token,
                    bool in_claim) {
    lq__holds *h = &s->holds;
    *pending = 0;
    pthread_mutex_lock(&h->mu);
    int64_t before = h->until;
    pthread_mutex_unlock(&h->mu);
    if (before >= token) return LQ_OK;
    /* Its time ended: counted by no one meanwhile. A claim's transaction
     * cannot count again (its statements are the claim's): it fails. */
    if (!in_claim && lq__now_ms() >= before) {
        int rc = recount(&before, s, conn);
        if (rc != LQ_OK || before >= token) return rc;
    }
    /* A quarter lease beyond: not written again at every claim. */
    int64_t until = token + s->lease_ms / 4;
    lq__value args[LQ__P_COUNT] = {0};
    bind_holder(args, h, h->holder);
    args[LQ__P_LEASE] = (lq__value){.type = LQ__V_INT, .i = until};
    int64_t changes = 0;
    int rc = s->broker->dialect->exec(&changes, conn, &h->sql.extend, args, NULL, NULL);
    /* Once written, others wait for the row's lock; before, it counted for
     * them only while its time had not ended. A write that came after that
     * (a stall of half a lease since the room was taken), or found no row,
     * cannot stand: others may have counted without it. */
    if (rc == LQ_OK && (changes != 1 || lq__now_ms() >= before)) {
        pthread_mutex_lock(&h->mu);
        h->until = 0; /* the next claim grows, which counts again */
        pthread_mutex_unlock(&h->mu);
        rc = lq__error(LQ_CONTENTION, "concurrency's holds of %s ran out before a lease could be "
                                      "covered; not written", h->queue);
    }
    if (rc == LQ_OK) *pending = until;
    return rc;
}

void lq__holds_covered(lq_subscription *s, int64_t until) {
    lq__holds *h = &s->holds;
    pthread_mutex_lock(&h->mu);
    if (until > h->until) h->until = until;
    pthread_mutex_unlock(&h->mu);
}

int lq__holds_trim(lq_subscription *s, lq__conn *conn, bool closing) {
    lq__holds *h = &s->holds;
    pthread_mutex_lock(&h->write_mu);
    pthread_mutex_lock(&h->mu);
    bool spare = h->granted > h->in_use;
    if (spare) h->granted = h->in_use; /* in memory first: no claim takes it meanwhile */
    int64_t held = h->granted;
    pthread_mutex_unlock(&h->mu);
    int rc = LQ_OK;
    if (closing && held == 0) { /* nothing in work is left to count */
        lq__value args[LQ__P_COUNT] = {0};
        bind_holder(args, h, h->holder);
        rc = s->broker->dialect->exec(NULL, conn, &h->sql.drop, args, NULL, NULL);
    } else if (spare) {
        lq__value args[LQ__P_COUNT] = {0};
        bind_holder(args, h, h->holder);
        args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = held};
        args[LQ__P_LEASE] = (lq__value){.type = LQ__V_INT, .i = 0}; /* its time as it is */
        rc = s->broker->dialect->exec(NULL, conn, &h->sql.set, args, NULL, NULL);
    }
    pthread_mutex_unlock(&h->write_mu);
    return rc;
}
