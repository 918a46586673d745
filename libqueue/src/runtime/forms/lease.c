/* The lease form: a claim writes the expiry into locked_until and commits at
 * once, so no connection is held while handlers run. The expiry is the
 * delivery's token; the keeper extends every lease in the book each half
 * lease, and settlements name the token they hold. */
#include "base/clock.h"
#include "base/hash.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

/* The last expiry this process wrote, per lease length and step (whole
 * seconds or milliseconds, so that a database keeping whole seconds does not
 * push the leases of another up to a second ahead): each new one is later,
 * so a row claimed again while an earlier holder still runs (its lease
 * backdated, or cleared by hand) never gets a token equal to the earlier
 * one's. Per length, so that leases of lease_ms=2000 stay that short beside
 * subscriptions of longer ones. (A token of another length equals an earlier
 * one only where the row was taken again, before its lease ran out, exactly
 * the difference of the lengths later.) The subscriptions of one length share
 * its clock, and the last to close frees it: nothing outlives them, not even
 * when the library is unloaded. */
struct lq__lease_clock {
    int64_t lease_ms, step;
    atomic_llong last;
    int users; /* clocks_mu */
    lq__lease_clock *next;
};
static pthread_mutex_t clocks_mu = PTHREAD_MUTEX_INITIALIZER;
static lq__lease_clock *clocks;

int lq__lease_clock_take(lq_subscription *s) {
    int64_t step = s->broker->dialect->whole_second_leases ? 1000 : 1;
    pthread_mutex_lock(&clocks_mu);
    lq__lease_clock *c = clocks;
    while (c && (c->lease_ms != s->lease_ms || c->step != step)) c = c->next;
    if (!c && (c = calloc(1, sizeof *c))) {
        *c = (lq__lease_clock){.lease_ms = s->lease_ms, .step = step, .next = clocks};
        clocks = c;
    }
    if (c) c->users++;
    pthread_mutex_unlock(&clocks_mu);
    s->lease_clock = c;
    return c ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}

void lq__lease_clock_drop(lq_subscription *s) {
    lq__lease_clock *c = s->lease_clock;
    if (!c) return;
    s->lease_clock = NULL;
    pthread_mutex_lock(&clocks_mu);
    if (--c->users == 0) {
        lq__lease_clock **at = &clocks;
        while (*at != c) at = &(*at)->next;
        *at = c->next;
        free(c);
    }
    pthread_mutex_unlock(&clocks_mu);
}

/* Where expiries fall on whole seconds, one clock for every row would push
 * leases ahead of the clock by a second per claim within a second, without
 * bound under load. There the rule holds per row and lease length instead:
 * the last expiry written for each slot (a hash of the database, the table,
 * the id and the length; rows sharing a slot only share its clock). A slot
 * claimed more than once a second, on average, would run ahead of the clock
 * without bound: 4,096 slots did at 13k claims a second; 65,536 keep a slot
 * to 0.2 claims a second there, and under one up to about 65k a second per
 * process, table and length. */
#define EXPIRY_SLOTS 65536
static atomic_llong last_row_expiry[EXPIRY_SLOTS];

static int64_t next_expiry(atomic_llong *last_slot, int64_t expiry, int64_t step) {
    long long last = atomic_load(last_slot);
    for (;;) {
        int64_t next = expiry > last ? expiry : (last + step) / step * step;
        if (atomic_compare_exchange_weak(last_slot, &last, next)) return next;
    }
}

int64_t lq__lease_expiry(const lq_subscription *s, int64_t now_ms) {
    /* Where the column keeps whole seconds, the expiry falls on one, so the
     * column holds the token exactly. */
    int64_t step = s->lease_clock->step;
    int64_t expiry = (now_ms + step - 1) / step * step + s->lease_ms;
    return next_expiry(&s->lease_clock->last, expiry, step);
}

/* The slot of a row: a hash of the database, the table, the id and the
 * lease length. */
static atomic_llong *row_slot(const lq_subscription *s, int64_t id) {
    const char *parts[] = {s->broker->target.url, s->table->schema, s->table->name};
    uint64_t h = LQ__FNV_OFFSET;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i]) h = lq__fnv1a(h, parts[i], strlen(parts[i]) + 1);
    h = lq__fnv1a(h, &id, sizeof id);
    h = lq__fnv1a(h, &s->lease_ms, sizeof s->lease_ms);
    return &last_row_expiry[h % EXPIRY_SLOTS];
}

/* A row slot's last expiry, a whole second, is made odd while the holder
 * of that token settles its row and may give the token back. A claim whose
 * expiry would fall on that second or before waits for the settlement, at
 * most GIVE_BACK_WAIT_US: where the claim itself holds the row (its lease
 * cleared by hand), the settlement waits for the claim, and the claim takes
 * the next second instead. A later expiry is written as it is: a give-back
 * only lowers the slot. */
#define GIVING_BACK 1
#define GIVE_BACK_WAIT_US 20000
#define GIVE_BACK_POLL_US 100

/* The expiry of one row: per row where leases keep whole seconds. */
static int64_t row_expiry(const lq_subscription *s, int64_t now_ms, int64_t id) {
    if (!s->broker->dialect->whole_second_leases) return lq__lease_expiry(s, now_ms);
    atomic_llong *slot = row_slot(s, id);
    int64_t expiry = (now_ms + 999) / 1000 * 1000 + s->lease_ms;
    /* Past the wait, an odd slot gives the next second: (T + 1 + 1000)
     * rounded down. */
    int64_t wait_until = lq__mono_us() + GIVE_BACK_WAIT_US;
    for (long long last = atomic_load(slot);
         (last & GIVING_BACK) && expiry <= (last & ~GIVING_BACK) && lq__mono_us() < wait_until;
         last = atomic_load(slot))
        lq__sleep_us(GIVE_BACK_POLL_US);
    return next_expiry(slot, expiry, 1000);
}

/* Its holder settles a row, naming `token`: once the settlement has changed
 * the row, no run holds `token` any more, and a claim of the row within the
 * same second may write it again, rather than a second later (a row
 * released or retried at once, again and again, would otherwise be leased
 * a second further ahead each time). Not before: a row whose lease was
 * cleared meanwhile (by hand) could be claimed with `token` while its
 * holder still runs, and the holder's settlement would then change the new
 * claim's row. Only while the slot's last expiry is this token: every other
 * row of the slot was written before it, a whole second or more earlier,
 * so their tokens stay below the slot's. */
bool lq__lease_give_back_begin(const lq_subscription *s, int64_t id, int64_t token) {
    if (!s->broker->dialect->whole_second_leases) return false;
    long long expected = token;
    return atomic_compare_exchange_strong(row_slot(s, id), &expected, token | GIVING_BACK);
}

void lq__lease_give_back_end(const lq_subscription *s, int64_t id, int64_t token, bool settled) {
    /* A claim that waited past GIVE_BACK_WAIT_US took the next second:
     * the slot is no longer odd, and stays as that claim left it. */
    long long expected = token | GIVING_BACK;
    atomic_compare_exchange_strong(row_slot(s, id), &expected, settled ? token - 1000 : token);
}

typedef struct claim_ctx {
    lq__claimed *out;
    lq_subscription *s;
    int64_t token;
} claim_ctx;

/* The rows a claim locked, stamped in one statement: it changes every row,
 * since the claim's transaction holds their locks; if not, the claim fails
 * and its transaction rolls back. */
static int stamp_set(lq__claimed *out, lq_subscription *s, lq__conn *conn, lq__value *args,
                     int64_t now) {
    const lq__dialect *d = s->broker->dialect;
    lq__strbuf sb = {0};
    for (lq_delivery *dv = out->head; dv; dv = dv->queue_next) {
        dv->token = row_expiry(s, now, dv->id);
        lq__held_set_add(&sb, d, true, dv->id, dv->token);
    }
    char *json = lq__held_set_take(&sb, d);
    if (!json) return lq__error(LQ_NOMEM, "out of memory");
    args[LQ__P_HELD_SET] = (lq__value){.type = LQ__V_TEXT, .p = json, .n = strlen(json)};
    int64_t changes = 0;
    int rc = d->exec(&changes, conn, &s->sql.stamp_set, args, NULL, NULL);
    args[LQ__P_HELD_SET] = (lq__value){0};
    free(json);
    if (rc == LQ_OK && changes != out->count)
        rc = lq__error(LQ_BACKEND, "the lease stamps of %d locked rows changed %lld", out->count,
                       (long long)changes);
    return rc;
}

/* Where the claim is a locking read, stamp each row it locked, in its
 * transaction (all in one statement where the dialect can); a row another
 * claim stamped since is passed over. */
static int stamp_claimed(lq__claimed *out, lq_subscription *s, lq__conn *conn, lq__value *args,
                         int64_t now) {
    if (out->count > 1 && s->sql.stamp_set.sql) return stamp_set(out, s, conn, args, now);
    lq__claimed stamped = {.cut = out->cut};
    int rc = LQ_OK;
    lq_delivery *d = out->head;
    while (d) {
        lq_delivery *next = d->queue_next;
        int64_t changes = 0;
        int64_t token = row_expiry(s, now, d->id);
        args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = d->id};
        args[LQ__P_LEASE] = (lq__value){.type = LQ__V_TIME, .i = token};
        if (rc == LQ_OK) rc = s->broker->dialect->exec(&changes, conn, &s->sql.stamp, args, NULL, NULL);
        if (rc == LQ_OK && changes == 1) {
            d->token = token;
            lq__claimed_add(&stamped, d);
        } else {
            d->settled = true; /* never leased here: nothing to give back */
            lq__delivery_unref(d);
        }
        d = next;
    }
    *out = stamped;
    return rc;
}

static int on_claimed_row(void *arg, const lq__value *cols, int count) {
    claim_ctx *ctx = arg;
    lq_delivery *d;
    int rc = lq__delivery_from_row(&d, ctx->s, cols, count);
    if (rc != LQ_OK) return rc;
    d->token = ctx->token;
    lq__claimed_add(ctx->out, d);
    return LQ_OK;
}

typedef struct counted_ctx {
    claim_ctx *claim;
    int64_t count;
} counted_ctx;

/* A row of a claim that counts something beside its rows (sqlset.claim_in_room:
 * the room; sqlset.claim_swept: the leases swept): the count, last, and a
 * claimed row before it unless the claim found none. */
static int on_counted_row(void *arg, const lq__value *cols, int count) {
    counted_ctx *ctx = arg;
    if (count < 2 || cols[count - 1].type != LQ__V_INT)
        return lq__error(LQ_BACKEND, "a claim returned no count");
    ctx->count = cols[count - 1].i;
    if (cols[ctx->claim->s->row_at[LQ__COL_ID]].type == LQ__V_NULL) return LQ_OK; /* none */
    return on_claimed_row(ctx->claim, cols, count - 1);
}

static int by_claim_order(const void *a, const void *b) {
    const lq_delivery *x = *(lq_delivery *const *)a, *y = *(lq_delivery *const *)b;
    if (x->priority != y->priority) return x->priority < y->priority ? -1 : 1;
    int due = strcmp(x->due ? x->due : "", y->due ? y->due : "");
    if (due) return due;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Some databases return a claim's rows in no order: put them in claim order. */
static int sort_claimed(lq__claimed *c) {
    if (c->count < 2) return LQ_OK;
    lq_delivery **all = malloc((size_t)c->count * sizeof *all);
    if (!all) return lq__error(LQ_NOMEM, "out of memory");
    int n = 0;
    for (lq_delivery *d = c->head; d; d = d->queue_next) all[n++] = d;
    qsort(all, (size_t)n, sizeof *all, by_claim_order);
    c->head = c->tail = NULL;
    c->count = 0;
    for (int i = 0; i < n; i++) lq__claimed_add(c, all[i]);
    free(all);
    return LQ_OK;
}

static int read_count(void *ctx, const lq__value *cols, int count) {
    if (count < 1 || cols[0].type != LQ__V_INT)
        return lq__error(LQ_BACKEND, "counting the rows in work returned no number");
    *(int64_t *)ctx = cols[0].i;
    return LQ_OK;
}

/* Whether nothing follows the claim in its transaction but the commit. */
static bool claim_ends_it(const lq_subscription *s) {
    return s->broker->dialect->claim_writes_lease && !s->partition_concurrency && !s->key_rate_limit &&
           !s->rate_limit && !s->holds.on;
}

/* Whether a claim can count its room itself (sqlset.claim_in_room), so
 * that its begin, lock, acks it carries, claim and commit go in one round
 * trip: nothing follows the claim but the commit, and no FIFO guard goes
 * before it. (A carried ack whose lease was lost must roll the claim back:
 * its statement, ack_set_whole, then fails, which aborts the transaction
 * before the commit.) */
static bool in_one_trip(const lq_subscription *s) {
    return s->sql.claim_in_room.sql && s->broker->dialect->begin_locked && claim_ends_it(s) &&
           !s->sql.guard.sql;
}

/* Whether the claim's transaction failed as ack_set_whole fails. */
static bool acks_not_whole(void) {
    return strcmp(lq_errcode_sqlstate(), "22P02") == 0 && strstr(lq_errmsg(), LQ__ACKS_NOT_WHOLE);
}

/* Cuts *limit to `room`; returns whether the next run to end here should
 * wake a claim: the limit cut this one, or, where claims carry the acks of
 * the runs that end, this one takes all the room left. */
static bool cut_to(int *limit, int64_t room, bool carries_acks) {
    bool cut = room < *limit, full = room <= *limit;
    if (cut) *limit = room > 0 ? (int)room : 0;
    return carries_acks ? full : cut;
}

/* The queue-wide limits, in the claim's transaction: it takes the queue's
 * lock, counts the queue's rows leased now (by any broker, in any process)
 * for concurrency and its starts within the window for the rate limit, and
 * asks for no more rows than both leave. The lock is held until the leases
 * and the starts commit, so a claim that counts after another counts that
 * one's rows and starts too: two claims never share the same room. A lease
 * that ran out (its holder died or froze) no longer counts, and its row is
 * claimable again. The acks `acks` carries go first (at the limit, or where
 * the room is scarce): the rows whose runs ended here count no more. Where the claim can
 * count its room itself (in_one_trip), it goes in the same round trip, with
 * the commit: *claimed says so, and *committed whether the commit ran. */
static int limit_to_room(int *limit, bool *locked, bool *claimed, bool *committed,
                         lq__carried *acks, lq__claimed *out, lq_subscription *s, lq__conn *conn,
                         lq__value *args, claim_ctx *ctx) {
    int64_t in_work = 0;
    lq__window w = {0};
    counted_ctx in_room = {.claim = ctx};
    lq__step counts[3];
    int n = 0;
    bool counting = s->concurrency && !s->holds.on; /* holds: drawn before (forms/holds.c) */
    /* Where the claim could go in one round trip, only at the limit or where
     * the room the last count found is scarce, so that their slots may be
     * the claim's: elsewhere the acker acks them on its own (it leaves them
     * to a claim only while at_limit). */
    bool one_trip = in_one_trip(s);
    bool carry = acks && (!one_trip || atomic_load(&s->at_limit) ||
                          atomic_load(&s->room_seen) <= *limit + LQ__CARRY_MAX);
    *claimed = counting && one_trip;
    if (carry) {
        if (lq__acks_carry(acks, s, &counts[n], *claimed) != LQ_OK) lq__error_clear(); /* acked after */
        if (counts[n].stmt) n++;
    }
    bool acks_in = n > 0;
    if (*claimed) {
        args[LQ__P_CONCURRENCY] = (lq__value){.type = LQ__V_INT, .i = s->concurrency};
        counts[n++] = (lq__step){.stmt = &s->sql.claim_in_room, .args = args,
                                 .on_row = on_counted_row, .ctx = &in_room};
    } else if (counting) {
        counts[n++] = (lq__step){.stmt = &s->sql.in_work, .args = args, .on_row = read_count,
                                 .ctx = &in_work};
    }
    if (s->rate_limit)
        counts[n++] = (lq__step){.stmt = &s->sql.starts, .args = args, .on_row = lq__read_window,
                                 .ctx = &w};
    int64_t wait_ms = acks && acks->n ? lq__acks_lease_left(acks) / 2 + 1 : 0;
    int rc = lq__begin_locked(locked, s, conn, wait_ms, counts, n, *claimed ? committed : NULL);
    if (acks_in && *claimed) {
        if (rc == LQ_OK || *committed) acks->changes = (int64_t)acks->n; /* whole: else it failed */
        if (rc != LQ_OK && !*committed && acks_not_whole()) {
            lq__error_clear();
            *claimed = false; /* undone: the claim rolls back, and the acks go on their own */
            return LQ_OK;
        }
    }
    if ((rc == LQ_OK || *committed) && counting) {
        int64_t room = *claimed ? in_room.count : s->concurrency - in_work;
        atomic_store(&s->room_seen, room);
        out->cut = cut_to(limit, room, acks != NULL);
        atomic_store(&s->at_limit, out->cut);
    }
    if (rc == LQ_OK && s->rate_limit) *limit = lq__rate_room(s, &w, *limit);
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = *limit};
    return rc;
}

/* Gives back, in the claim's transaction, a row it leased. */
static int give_back(lq_subscription *s, lq__conn *conn, lq_delivery *d) {
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = d->id};
    args[LQ__P_HELD] = (lq__value){.type = LQ__V_TIME, .i = d->token};
    int rc = s->broker->dialect->exec(NULL, conn, &s->sql.release, args, NULL, NULL);
    d->settled = true; /* never handed out */
    lq__delivery_unref(d);
    return rc;
}

/* partition_concurrency: the key's rows leased now, this claim's among them. */
static int leased_room(int64_t *room, lq_subscription *s, lq__conn *conn, const lq__value *args,
                       int64_t mine) {
    int64_t leased = 0;
    int rc = s->broker->dialect->exec(NULL, conn, &s->sql.key_in_work, args, read_count, &leased);
    *room = s->partition_concurrency - (leased - mine);
    return rc;
}

/* A row past its key's limit goes back in the claim's transaction. */
static int give_back_now(lq_subscription *s, lq__conn *conn, lq_delivery *d, void *ctx) {
    (void)ctx;
    return give_back(s, conn, d);
}

/* The claim's starts, in its transaction, and the window's old ones gone. */
static int record_starts(lq_subscription *s, lq__conn *conn, const lq__value *args, int count) {
    const lq__dialect *d = s->broker->dialect;
    int rc = count ? d->exec(NULL, conn, &s->sql.start_prune, args, NULL, NULL) : LQ_OK;
    for (int i = 0; rc == LQ_OK && i < count; i++)
        rc = d->exec(NULL, conn, &s->sql.start_add, args, NULL, NULL);
    return rc;
}

/* The latest lease a claim wrote. */
static int64_t last_token(const lq__claimed *c) {
    int64_t last = 0;
    for (const lq_delivery *d = c->head; d; d = d->queue_next)
        if (d->token > last) last = d->token;
    return last;
}

/* After a claim counted by holds: its rows are counted until their runs
 * end, the room it drew and did not use goes back to the subscription, and
 * where the claim found no row, what the subscription does not use goes
 * back to the queue. */
static void claimed_by_holds(lq_subscription *s, lq__conn *conn, const lq__claimed *out, int drawn,
                             int64_t covered, bool found_none) {
    lq__holds_claimed(s, out, drawn, covered, found_none);
    if (found_none && conn && lq__holds_trim(s, conn, false) != LQ_OK) {
        lq__log_error(LQ_LOG_WARNING, "giving back concurrency's unused holds");
        lq__error_clear(); /* kept until the holds' time ends: the limit errs low */
    }
}

/* Where only concurrency counted by holds limits the queue, no claim takes
 * the queue's lock. */
static bool takes_queue_lock(const lq_subscription *s) {
    return s->limit_key != NULL &&
           (!s->holds.on || s->rate_limit || s->partition_concurrency || s->key_rate_limit);
}

bool lq__lease_claims_alone(const lq_subscription *s) {
    return s->form == LQ_FORM_LEASE && s->broker->dialect->claim_writes_lease && !s->sql.guard.sql &&
           !takes_queue_lock(s) && !s->holds.on;
}

/* The claim's arguments: rows due at `now`, leased until `token`. */
static void bind_claim(lq__value *args, lq_subscription *s, int64_t now, int64_t token, int limit) {
    if (s->group) args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = s->group, .n = strlen(s->group)};
    args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = now};
    args[LQ__P_LEASE_NOW] = (lq__value){.type = LQ__V_TIME, .i = now};
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = limit};
    args[LQ__P_LEASE] = (lq__value){.type = LQ__V_TIME, .i = token};
    lq__claim_limits(s, args);
    if (s->starts_key) {
        args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = s->starts_key, .n = strlen(s->starts_key)};
        args[LQ__P_PERIOD] = (lq__value){.type = LQ__V_INT, .i = s->rate_period_ms};
    }
}

/* How often a subscription sweeps the leases run out: a row whose lease ran
 * out is claimed again at most this much later than a claim would have
 * found it by its expiry. */
static int64_t sweep_every_ms(const lq_subscription *s) {
    int64_t every = s->lease_ms / 4;
    return every < 1000 ? every : 1000;
}

/* Where leases are swept (lq_table.leases_swept), whether this claim
 * sweeps: the last sweep of any claimer of the subscription is
 * sweep_every_ms old. The leases run out are cleared, so that the claims
 * find their rows. */
static bool sweep_due(lq_subscription *s) {
    if (!s->sql.sweep.sql) return false;
    /* Paced by the monotonic clock: a wall clock stepped back would hold
     * the sweeps off for as long as the step. */
    int64_t at = lq__mono_ms();
    long long last = atomic_load(&s->swept_at);
    return !(last && at - last < sweep_every_ms(s)) &&
           atomic_compare_exchange_strong(&s->swept_at, &last, (long long)at);
}

/* A sweep's outcome: logged, and where it cleared all it may, the next
 * sweep due at once, so that a backlog of leases run out (a fleet's crash)
 * is cleared by sweeps back to back. */
static void swept(lq_subscription *s, int64_t cleared) {
    if (!cleared) return;
    lq__log(LQ_LOG_INFO, "%lld leases had run out: their rows are due again", (long long)cleared);
    if (cleared >= LQ__SWEEP_MAX) atomic_store(&s->swept_at, 0);
}

/* The sweep on its own statement, before a claim that cannot carry it. Its
 * failure costs only that wait: a session lost is the claim's to report. */
static int sweep(lq_subscription *s, lq__conn *conn) {
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_LEASE_NOW] = (lq__value){.type = LQ__V_TIME, .i = lq__now_ms()};
    int64_t cleared = 0;
    int rc = s->broker->dialect->exec(&cleared, conn, &s->sql.sweep, args, NULL, NULL);
    if (rc == LQ_CONNECT) return rc;
    if (rc != LQ_OK) {
        lq__log_error(LQ_LOG_WARNING, "sweeping the leases run out");
        lq__error_clear();
    } else {
        swept(s, cleared);
    }
    return LQ_OK;
}

/* A claim alone in its statement (`stmt`: sqlset.claim, or claim_swept),
 * with the acks `acks` carries (may be NULL) before it in the same round
 * trip and the same commit, on one session: a process that drains keeps
 * one session busy rather than a claimer's and an acker's. *acked says the
 * acks committed. The acks' statement fails unless it acked every row it
 * names, and the claim with it: then a lease was lost, the acks go on
 * their own after the claim (to tell which), and the claim runs again,
 * alone. */
static int exec_alone(bool *acked, lq_subscription *s, lq__conn *conn, const lq__stmt *stmt,
                      lq__value *args, lq__row_fn on_row, void *ctx, lq__carried *acks) {
    const lq__dialect *d = s->broker->dialect;
    lq__step steps[2] = {{0}, {.stmt = stmt, .args = args, .on_row = on_row, .ctx = ctx}};
    *acked = false;
    if (acks && lq__acks_carry(acks, s, &steps[0], true) != LQ_OK) lq__error_clear(); /* acked after */
    if (!steps[0].stmt) return d->exec(NULL, conn, stmt, args, on_row, ctx);
    int rc = d->exec_together(acked, conn, steps, 2);
    if (*acked) acks->changes = (int64_t)acks->n;
    if (rc == LQ_OK || !acks_not_whole()) return rc;
    lq__error_clear();
    return d->exec(NULL, conn, stmt, args, on_row, ctx);
}

/* A claim alone that carries a due sweep (sqlset.claim_swept). The rows it
 * sweeps are the next claim's, which follows at once rather than at the
 * next poll. So does a claim alone where the sweep failed the statement (a
 * sweep past statement_timeout must not hold the claims up), the sweep's
 * failure logged as that of a sweep on its own is. */
static int claim_sweeping(bool *broken, bool *acked, lq_subscription *s, lq__conn *conn, lq__value *args,
                          int limit, claim_ctx *ctx, lq__carried *acks) {
    const lq__dialect *d = s->broker->dialect;
    counted_ctx count = {.claim = ctx};
    int rc = exec_alone(acked, s, conn, &s->sql.claim_swept, args, on_counted_row, &count, acks);
    if (rc == LQ_OK) swept(s, count.count);
    bool sweep_failed = rc != LQ_OK && rc != LQ_CONNECT && ctx->out->count == 0;
    bool freed_left = rc == LQ_OK && count.count > 0 && ctx->out->count < limit;
    if (sweep_failed) {
        lq__log_error(LQ_LOG_WARNING, "sweeping the leases run out, in a claim");
        lq__error_clear();
    }
    if (!sweep_failed && !freed_left) return rc;
    args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = limit - ctx->out->count};
    int again = d->exec(NULL, conn, &s->sql.claim, args, on_claimed_row, ctx);
    if (again == LQ_OK || ctx->out->count == 0) return again;
    /* The rows the first claimed are this claim's all the same. */
    *broken = again == LQ_CONNECT;
    lq__log_error(LQ_LOG_WARNING, "claiming the rows a sweep freed");
    lq__error_clear();
    return LQ_OK;
}

/* Nothing was leased, or whether it was is not known: the rows are not
 * handed out (a lease that was written runs out, and its row comes back). */
static void drop_claimed(lq__claimed *out) {
    lq_delivery *dv = out->head;
    while (dv) {
        lq_delivery *next = dv->queue_next;
        dv->settled = true;
        lq__delivery_unref(dv);
        dv = next;
    }
    memset(out, 0, sizeof *out);
}

/* A claim; `acks`: the acks it carries (NULL: none). */
static int claim(lq__claimed *out, lq_subscription *s, int limit, lq__carried *acks) {
    const lq__dialect *d = s->broker->dialect;
    bool limited = takes_queue_lock(s), locked = false, broken = false;
    /* A claim alone in its statement carries a sweep that is due; the
     * others send it before. */
    bool alone = lq__lease_claims_alone(s);
    if (alone && acks) atomic_store(&s->alone_carries, true); /* claims come again */
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, &s->broker->pool);
    bool sweeps = rc == LQ_OK && sweep_due(s);
    if (sweeps && !alone && (rc = sweep(s, conn)) != LQ_OK) lq__pool_release(&s->broker->pool, conn, true);
    if (rc != LQ_OK) return rc;
    lq__value args[LQ__P_COUNT] = {0};
    int drawn = 0;
    if (s->holds.on) {
        int64_t before = lq__now_ms();
        bind_claim(args, s, before, lq__lease_expiry(s, before), limit); /* for its look */
        rc = lq__holds_draw(&drawn, &out->cut, s, conn, limit, args);
        if (rc != LQ_OK || drawn == 0) {
            lq__pool_release(&s->broker->pool, conn, rc == LQ_CONNECT);
            return rc;
        }
        limit = drawn;
    }
    /* Read after the draw, which may have waited for the holds' lock. */
    int64_t now = lq__now_ms();
    claim_ctx ctx = {out, s, lq__lease_expiry(s, now)};
    bind_claim(args, s, now, ctx.token, limit);
    int64_t covered = 0; /* holds: the time the claim's transaction wrote */
    bool acks_committed = false;
    if (alone) {
        rc = sweeps ? claim_sweeping(&broken, &acks_committed, s, conn, args, limit, &ctx, acks)
                    : exec_alone(&acks_committed, s, conn, &s->sql.claim, args, on_claimed_row, &ctx, acks);
        /* Rows read before the round trip failed (its commit unknown). */
        if (rc != LQ_OK) drop_claimed(out);
    } else {
        /* A transaction: for a queue-wide limit, for the FIFO guard, or for
         * the stamps after a locking read. */
        bool guarded = true, claimed = false, committed = false;
        /* Under the queue's lock, so that no two claims count the same room. */
        rc = limited ? limit_to_room(&limit, &locked, &claimed, &committed, acks, out, s, conn, args,
                                     &ctx)
                     : d->begin(conn, LQ_ISOLATION_READ_COMMITTED);
        bool undone = rc == LQ_OK && acks && !lq__acks_whole(acks);
        if (rc == LQ_OK && limit > 0 && !undone && !claimed) rc = lq__fifo_guard(&guarded, s, conn);
        lq__step claim = {.stmt = &s->sql.claim, .args = args, .on_row = on_claimed_row,
                          .ctx = &ctx};
        bool claims = guarded && limit > 0;
        if (claimed) {
            /* the claim ran with the count, and the commit was sent with them */
        } else if (undone) { /* a carried ack found its lease lost: they go on their own first */
            rc = d->rollback(conn);
            out->cut = true; /* their settlement wakes the next claim */
            atomic_store(&s->at_limit, true);
        } else if (rc == LQ_OK && claim_ends_it(s)) {
            rc = lq__exec_commit(&committed, s, conn, &claim, claims ? 1 : 0); /* one round trip */
        } else {
            if (rc == LQ_OK && claims) rc = d->exec(NULL, conn, claim.stmt, args, on_claimed_row, &ctx);
            if (rc == LQ_OK && !d->claim_writes_lease) rc = stamp_claimed(out, s, conn, args, now);
            if (rc == LQ_OK && s->partition_concurrency)
                rc = lq__trim_keys(out, s, conn, args, leased_room, give_back_now, NULL);
            if (rc == LQ_OK && s->key_rate_limit)
                rc = lq__limit_key_rates(out, s, conn, args, give_back_now, NULL);
            if (rc == LQ_OK && s->rate_limit) rc = record_starts(s, conn, args, out->count);
            if (rc == LQ_OK && s->holds.on && out->count)
                rc = lq__holds_cover(&covered, s, conn, last_token(out), true); /* with the leases */
            if (rc == LQ_OK) committed = (rc = d->commit(conn)) == LQ_OK;
        }
        acks_committed = committed;
        /* Committed all the same (a row reader failed after the commit was
         * sent): the rows read are the claim's, as after an autocommit claim. */
        if (rc != LQ_OK && !committed) {
            d->rollback(conn);
            drop_claimed(out);
        }
        /* A lock not given back would keep every other claim out: its
         * session ends instead. */
        if (locked && d->unlock_queue && !d->unlock_queue(conn, s->limit_key)) broken = true;
    }
    if (s->holds.on)
        claimed_by_holds(s, broken || rc == LQ_CONNECT ? NULL : conn, out, drawn, covered,
                         rc == LQ_OK && out->count == 0);
    lq__pool_release(&s->broker->pool, conn, broken || rc == LQ_CONNECT);
    if (acks) lq__acks_carried(acks, acks_committed); /* with no connection held */
    if (rc == LQ_OK) rc = sort_claimed(out);
    return rc;
}

int lq__lease_claim(lq__claimed *out, lq_subscription *s, int limit) {
    if (!s->carries_acks) return claim(out, s, limit, NULL);
    lq__carried acks = {0};
    return claim(out, s, limit, &acks);
}

static int on_any(void *ctx, const lq__value *cols, int count) {
    (void)cols;
    (void)count;
    *(bool *)ctx = true;
    return LQ_OK;
}

bool lq__lease_row_left(lq_subscription *s, lq__conn *conn, const lq_delivery *d) {
    lq__pool *pool = &s->broker->pool;
    lq__conn *own = NULL;
    if (!conn && lq__pool_acquire(&own, pool) != LQ_OK) return false;
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = d->id};
    if (s->group) args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = s->group, .n = strlen(s->group)};
    bool there = false;
    lq__error_copy failure;
    lq__error_save(&failure); /* the settlement's own error is the one to report */
    int rc = s->broker->dialect->exec(NULL, conn ? conn : own, &s->sql.in_queue, args, on_any, &there);
    lq__error_restore(&failure);
    if (own) lq__pool_release(pool, own, rc == LQ_CONNECT);
    return rc == LQ_OK && !there;
}

/* Extends one delivery's lease; the new expiry becomes its token. */
static int extend_one(lq_subscription *s, lq__conn *conn, lq_delivery *d) {
    int rc = LQ_OK;
    pthread_mutex_lock(&d->mu);
    if (!d->settled && !d->in_set && !d->expired && !d->cancelled) { /* a set's ack binds its token */
        int64_t until = row_expiry(s, lq__now_ms(), d->id);
        lq__value args[LQ__P_COUNT] = {0};
        args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = d->id};
        args[LQ__P_HELD] = (lq__value){.type = LQ__V_TIME, .i = d->token};
        args[LQ__P_LEASE] = (lq__value){.type = LQ__V_TIME, .i = until};
        int64_t changes = 0, covered = 0;
        /* Counted by holds: the holds outlast the lease before it is written. */
        if (s->holds.on && (rc = lq__holds_cover(&covered, s, conn, until, false)) == LQ_OK)
            lq__holds_covered(s, covered);
        if (rc == LQ_OK) rc = s->broker->dialect->exec(&changes, conn, &s->sql.extend, args, NULL, NULL);
        if (rc == LQ_OK && changes == 1) {
            /* Where limits count leased rows, a lease that ran out before
             * its extension landed counted for no claim meanwhile: one may
             * have taken its room. The row is this delivery's again, but it
             * must not start a run: it counts as lost (lq__lease_holds). */
            if (s->leases_counted && lq__now_ms() >= d->token) d->lease_lost = true;
            d->token = until;
            atomic_fetch_add(&s->stats[LQ_STAT_EXTENSIONS], 1);
        } else if (rc == LQ_OK && lq__lease_row_left(s, conn, d)) {
            d->cancelled = true; /* out of its queue while this lease held it: lq_cancel */
            lq__log(LQ_LOG_INFO, "row %lld was cancelled while in work", (long long)d->id);
        } else if (rc == LQ_OK) {
            d->lease_lost = true;
            lq__log(LQ_LOG_WARNING, "row %lld: its lease was lost before it could be extended",
                    (long long)d->id);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

/* The keeper extends every half lease: a quarter left means it is late. */
bool lq__lease_fresh(const lq_delivery *d) {
    return !d->lease_lost && d->token - lq__now_ms() >= d->sub->lease_ms / 4;
}

bool lq__lease_holds(lq_delivery *d) {
    lq_subscription *s = d->sub;
    if (s->form != LQ_FORM_LEASE) return true;
    pthread_mutex_lock(&d->mu);
    bool fresh = lq__lease_fresh(d);
    pthread_mutex_unlock(&d->mu);
    if (fresh) return true;
    lq__pool *pool = &s->broker->pool;
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, pool);
    if (rc == LQ_OK) {
        rc = extend_one(s, conn, d);
        lq__pool_release(pool, conn, rc == LQ_CONNECT);
    }
    if (rc != LQ_OK) lq__log_error(LQ_LOG_WARNING, "extending a lease before its run");
    lq__error_clear();
    pthread_mutex_lock(&d->mu);
    bool holds = !d->lease_lost && d->token > lq__now_ms();
    pthread_mutex_unlock(&d->mu);
    return holds;
}

int64_t lq__lease_expire_overdue(lq_subscription *s) {
    size_t n;
    lq_delivery **entries;
    if (lq__book_refs(&entries, &n, s) != LQ_OK) return 0;
    int64_t now = lq__mono_ms(), next = 0;
    for (size_t i = 0; i < n; i++) {
        lq_delivery *d = entries[i];
        pthread_mutex_lock(&s->mu);
        /* A run that ended waits for its settlement, not in work: passed
         * over here without its mutex, which a settlement may hold while
         * its statement runs; lq__settle_expired decides under it. */
        bool running = d->handed && !atomic_load(&d->run_ended);
        int64_t due = d->handed_ms + s->timeout_ms;
        pthread_mutex_unlock(&s->mu);
        if (running && due <= now) {
            if (lq__settle_expired(d) != LQ_OK)
                lq__log_error(LQ_LOG_ERROR, "sending back a run past timeout_ms");
        } else if (running && (!next || due < next)) {
            next = due;
        }
        lq__delivery_unref(d);
    }
    free(entries);
    return next;
}

int lq__lease_extend(lq_subscription *s) {
    size_t n;
    lq_delivery **entries;
    int rc = lq__book_refs(&entries, &n, s);
    if (rc != LQ_OK) return rc;
    lq__conn *conn = NULL;
    if (n) rc = lq__pool_acquire(&conn, &s->broker->pool);
    for (size_t i = 0; i < n; i++) {
        lq_delivery *d = entries[i];
        if (rc == LQ_OK && (rc = extend_one(s, conn, d)) != LQ_OK)
            lq__log_error(LQ_LOG_ERROR, "extending a lease");
        lq__delivery_unref(d);
    }
    if (conn) lq__pool_release(&s->broker->pool, conn, rc == LQ_CONNECT);
    free(entries);
    return rc;
}
