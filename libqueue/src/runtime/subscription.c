/* The subscription runtime. Claims go in flight for the free workers, as
 * the flow (flow.h) allows: made by claim threads, or, where each claim
 * serves one worker and keeps its connection (workers_claim), by the push
 * worker that finds no row waiting. Claimed rows wait in a queue (and, in the
 * lease form, in the lease book, where the keeper thread extends them) until
 * a push worker or a caller of next() takes them. After a claim that came
 * back short, the claimers wait for the poll interval or a wake-up, and the
 * flow probes with one claim at a time, so an empty table sees one claim per
 * wait. Under workers_by_key(n) each row goes to the lane its partition key
 * hashes to, and a lane runs one row at a time. */
#include "base/clock.h"
#include "base/hash.h"
#include "core/pause.h"
#include "core/publish_cache.h"
#include "core/schema.h"
#include "runtime/runtime.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAILED_CLAIM_WAIT_MS 1000

/* The subscription whose handler this thread is running, if any: stop waits
 * for handlers, so it cannot be called from one of its own. */
static _Thread_local lq_subscription *running_handler_of;
/* The subscription whose stop ends this thread's lock waits: its claimer's,
 * and its closer's while it gives rows back. */
static _Thread_local lq_subscription *waiting_for;

bool lq__lock_wait_abandoned(void) {
    return waiting_for && atomic_load(&waiting_for->waits_abandoned);
}
/* The pool of this handler thread, under on_threads. */
static _Thread_local lq__pool *own_pool;

lq__pool *lq__thread_pool(const lq_subscription *s) {
    return running_handler_of == s ? own_pool : NULL;
}

/* A push worker's connection in a transaction already open. In the row lock
 * form a worker that settles its row after the handler and claims again
 * next commits AND CHAINs: its next claim needs no BEGIN (a round trip less
 * per job). The worker claims on it next, or, when it does not claim at once
 * (it waits, stops, or takes a row already waiting), rolls the empty
 * transaction back and gives the connection back first, so no connection
 * sits idle in a transaction. Until then it stays counted in s->held, as
 * while its row held it, so no other claim counts on its room meanwhile;
 * the claim takes it over from held to running. */
static _Thread_local struct {
    lq_subscription *settling_for; /* the worker's settlement after its handler */
    lq_subscription *of;           /* whose claim `conn` is for */
    lq__conn *conn;
    lq_delivery *claimed; /* the advisory form: the row the settlement claimed, holding conn */
} chained;

static bool pause_read_due(const lq_subscription *s, int64_t now);

bool lq__subscription_chains(lq_subscription *s) {
    if (chained.settling_for != s || chained.conn) return false;
    if (s->form != LQ_FORM_ADVISORY) return true;
    pthread_mutex_lock(&s->mu); /* a row claimed now would only go back */
    bool claims = !s->paused && !s->stopping;
    pthread_mutex_unlock(&s->mu);
    return claims;
}

bool lq__subscription_pause_read_carried(lq_subscription *s) {
    pthread_mutex_lock(&s->mu);
    int64_t now = lq__mono_ms();
    bool due = s->pause_known && pause_read_due(s, now);
    if (due) { /* as paused_now takes a read on; its answer comes with the settlement */
        s->pause_due = false;
        s->pause_looked_at = now;
        s->pause_reading = true;
    }
    pthread_mutex_unlock(&s->mu);
    return due;
}

lq__conn *lq__subscription_take_chained(lq_subscription *s) {
    if (chained.of != s) return NULL;
    lq__conn *conn = chained.conn;
    chained.conn = NULL;
    chained.of = NULL;
    chained.claimed = NULL;
    return conn;
}

lq_delivery *lq__subscription_take_claimed(lq_subscription *s) {
    lq_delivery *claimed = chained.of == s ? chained.claimed : NULL;
    if (!claimed) return NULL;
    lq__subscription_take_chained(s);
    pthread_mutex_lock(&s->mu);
    s->carried--;
    pthread_mutex_unlock(&s->mu);
    return claimed;
}

static void subscription_free(lq_subscription *s) {
    lq_broker *b = s->broker;
    pthread_mutex_lock(&b->room_mu); /* nothing is left held by now; if it were, give it back */
    b->room.taken -= s->room_counted;
    if (s->room_starved) b->room.starved--;
    pthread_mutex_unlock(&b->room_mu);
    lq__ready_fd_close(&s->ready); /* closed at close already, unless open failed after it */
    lq__sqlset_free(&s->sql);
    free(s->pause_check.sql);
    lq__run_cancels_free(&s->cancels);
    lq_table_free(s->table);
    free(s->group);
    free(s->limit_key);
    free(s->starts_key);
    free(s->threads);
    free(s->claimers);
    free(s->lane_busy);
    lq__key_counts_free(&s->key_counts);
    lq__holds_free(&s->holds);
    lq__lease_clock_drop(s);
    if (s->key_space_held) b->dialect->let_go_key_space(&b->target); /* no key of it is held now */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->claim_cv);
    pthread_cond_destroy(&s->ready_cv);
    pthread_cond_destroy(&s->keeper_cv);
    pthread_cond_destroy(&s->stop_cv);
    lq__coalescer_destroy(&s->coalescer);
    lq__acker_destroy(&s->acker);
    lq__delivery_spares_free(s);
    pthread_mutex_destroy(&s->spares_mu);
    free(s);
    lq__broker_unref(b);
}

void lq__subscription_unref(lq_subscription *s) {
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) subscription_free(s);
}

static lq_subscription *of_member(lq__member *m) {
    return (lq_subscription *)((char *)m - offsetof(lq_subscription, member));
}

static void member_wake(lq__member *m) {
    lq_subscription *s = of_member(m);
    pthread_mutex_lock(&s->mu);
    s->woken = true;
    pthread_cond_signal(&s->claim_cv); /* that claimer wakes the next, as room allows */
    pthread_mutex_unlock(&s->mu);
}

static void member_control_changed(lq__member *m) {
    lq_subscription *s = of_member(m);
    pthread_mutex_lock(&s->mu);
    s->pause_due = true;
    s->woken = true;
    pthread_cond_signal(&s->claim_cv);
    pthread_mutex_unlock(&s->mu);
}

static void member_cancel_heard(lq__member *m, int64_t id) {
    lq_subscription *s = of_member(m);
    pthread_mutex_lock(&s->mu);
    if (s->has_keeper && (s->form == LQ_FORM_LEASE || s->cancels.watches) &&
        lq__run_cancels_heard(&s->cancels, id))
        pthread_cond_signal(&s->keeper_cv);
    pthread_mutex_unlock(&s->mu);
}

static void member_room_freed(lq__member *m) {
    lq_subscription *s = of_member(m);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->claim_cv); /* not a wake-up: a resting claimer rests on */
    pthread_mutex_unlock(&s->mu);
}

/* Whether a claimed row reaches no handler: past its expiry, or past a size
 * limit. */
static bool refused(const lq_delivery *d) {
    return d->past_expiry || d->oversize_payload || d->oversize_headers || d->passed_over;
}

/* A row past its expires_at is never started: it goes to the dead letters,
 * or without a destination is finished as an ack finishes a row. */
static void end_expired(lq_delivery *d) {
    const lq_table *t = d->sub->table;
    bool dead = t->dead_letter != NULL;
    lq__log(LQ_LOG_INFO, "row %lld: past its %s before it started; %s", (long long)d->id,
            t->columns[LQ_ROLE_EXPIRES_AT], dead ? "dead-lettered" : "finished unrun");
    if (lq__settle(d, dead ? LQ__DEAD_LETTER : LQ__ACK, 0) != LQ_OK)
        lq__log_error(LQ_LOG_WARNING, "ending a row past its expiry");
    else
        atomic_fetch_add(&d->sub->stats[LQ_STAT_EXPIRED_UNSTARTED], 1);
}

/* Rows past max_payload_bytes or max_headers_bytes reach no handler: their
 * values were never read, and they go to the dead letters at once, so a
 * sender cannot make a worker hold more, nor keep a row coming back. Rows
 * past their expiry neither (end_expired). */
static void end_refused(lq_delivery *list) {
    while (list) {
        lq_delivery *d = list;
        list = d->queue_next;
        d->queue_next = NULL;
        if (d->passed_over) { /* past its key's rate window: back, unrun, its attempt unspent */
            if (lq__settle(d, LQ__RELEASE, 0) != LQ_OK)
                lq__log_error(LQ_LOG_WARNING, "giving back a row past its key's rate window");
            lq__delivery_unref(d);
            continue;
        }
        if (d->past_expiry && !d->oversize_payload && !d->oversize_headers) {
            end_expired(d);
            lq__delivery_unref(d);
            continue;
        }
        const lq_table *t = d->sub->table;
        bool payload = d->oversize_payload != 0;
        lq__log(LQ_LOG_WARNING, "row %lld: its %s of %lld bytes passes %s (%lld); dead-lettered "
                "unread", (long long)d->id, payload ? "payload" : "headers",
                (long long)(payload ? d->oversize_payload : d->oversize_headers),
                payload ? "max_payload_bytes" : "max_headers_bytes",
                (long long)(payload ? t->max_payload : t->max_headers));
        if (lq__settle(d, LQ__DEAD_LETTER, 0) != LQ_OK)
            lq__log_error(LQ_LOG_WARNING, "dead-lettering a row over its size limit");
        lq__delivery_unref(d);
    }
}

/* The flow control options: a limit the form can keep, each within the
 * wider one. */
static int check_limits(lq_subscription *s, const char *label) {
    if (s->concurrency && s->form == LQ_FORM_ROW_LOCK && !s->broker->dialect->take_slots)
        return lq__error(LQ_MISUSE, "table %s: concurrency in the row lock form takes a slot lock "
                                    "per row, which %s has not; use the lease form",
                         label, s->broker->dialect->name);
    if (s->partition_concurrency && s->form == LQ_FORM_ROW_LOCK &&
        !s->broker->dialect->row_lock_key_slots && !s->broker->dialect->take_key_slot)
        return lq__error(LQ_MISUSE, "table %s: partition_concurrency in the row lock form takes a "
                                    "key's slot as the claim reaches each row, which %s's claim "
                                    "cannot; use the lease form",
                         label, s->broker->dialect->name);
    if (s->partition_concurrency && s->form == LQ_FORM_ROW_LOCK && s->batch)
        return lq__error(LQ_MISUSE, "table %s: partition_concurrency in the row lock form counts "
                                    "a key's slots per transaction, and a batch's rows share one; "
                                    "use the lease form for batches",
                         label);
    if (s->key_rate_limit && s->form == LQ_FORM_ROW_LOCK && s->batch)
        return lq__error(LQ_MISUSE, "table %s: partition_rate_limit in the row lock form gives "
                                    "back a row past its key's window by rolling back its "
                                    "transaction, which a batch's rows share; use the lease form "
                                    "for batches",
                         label);
    if (s->key_rate_limit && !lq__has(s->table, LQ_ROLE_PARTITION_KEY))
        return lq__error(LQ_MISUSE, "table %s: partition_rate_limit needs a partition_key column",
                         label);
    if (s->key_rate_set_alone)
        return lq__error(LQ_MISUSE, "table %s: partition_rate_period_ms is the window of "
                                    "partition_rate_limit, which is not set",
                         label);
    if (s->rate_limit && s->key_rate_limit > s->rate_limit &&
        s->key_rate_period_ms == s->rate_period_ms)
        return lq__error(LQ_MISUSE, "table %s: partition_rate_limit %d is above rate_limit %d "
                                    "in the same period",
                         label, s->key_rate_limit, s->rate_limit);
    if (s->partition_concurrency && !lq__has(s->table, LQ_ROLE_PARTITION_KEY))
        return lq__error(LQ_MISUSE, "table %s: partition_concurrency needs a partition_key column",
                         label);
    if (s->concurrency && s->partition_concurrency > s->concurrency)
        return lq__error(LQ_MISUSE, "table %s: partition_concurrency %d is above concurrency %d",
                         label, s->partition_concurrency, s->concurrency);
    if (s->timeout_ms && s->form == LQ_FORM_ROW_LOCK && s->batch)
        return lq__error(LQ_MISUSE, "table %s: timeout_ms cannot send back one row of a row lock "
                                    "batch: the batch's rows share one transaction",
                         label);
    if (s->timeout_ms && s->transactional)
        return lq__error(LQ_MISUSE, "table %s: timeout_ms cannot send back a transactional "
                                    "delivery: its handler's transaction is on its connection",
                         label);
    if (s->retention.retain_ms && !lq__has(s->table, LQ_ROLE_PROCESSED_AT))
        return lq__error(LQ_MISUSE, "table %s: retain_ms needs a processed_at column: without "
                                    "one an ack deletes its row, and no finished row is kept",
                         label);
    if (s->retention.dead_retain_ms &&
        (!s->table->dead_letter || !lq__has(s->table, LQ_ROLE_RETRY_AFTER)))
        return lq__error(LQ_MISUSE, "table %s: dead_letter_retain_ms needs dead letters and a "
                                    "retry_after column, where dead-lettering writes when",
                         label);
    if (s->rate_set_alone)
        return lq__error(LQ_MISUSE, "table %s: rate_period_ms is the window of rate_limit, "
                                    "which is not set",
                         label);
    if (s->ceiling_ms < s->poll_ms)
        return lq__error(LQ_MISUSE, "table %s: poll_ceiling_ms %lld is below poll_interval_ms %lld",
                         label, (long long)s->ceiling_ms, (long long)s->poll_ms);
    if (s->concurrency && s->worker_concurrency > s->concurrency)
        return lq__error(LQ_MISUSE, "table %s: worker_concurrency %d is above concurrency %d",
                         label, s->worker_concurrency, s->concurrency);
    if (s->key_limit && !lq__has(s->table, LQ_ROLE_PARTITION_KEY))
        return lq__error(LQ_MISUSE, "table %s: partition_worker_concurrency needs a "
                                    "partition_key column",
                         label);
    const struct {
        int above;
        const char *name;
    } key_caps[] = {{s->partition_concurrency, "partition_concurrency"},
                    {s->worker_concurrency, "worker_concurrency"},
                    {s->concurrency, "concurrency"}};
    for (size_t i = 0; s->key_limit && i < sizeof key_caps / sizeof key_caps[0]; i++)
        if (key_caps[i].above && s->key_limit > key_caps[i].above)
            return lq__error(LQ_MISUSE, "table %s: partition_worker_concurrency %d is above %s %d",
                             label, s->key_limit, key_caps[i].name, key_caps[i].above);
    return LQ_OK;
}

/* What the table and options declare must fit together before any statement
 * is built. */
static int check_declaration(lq_subscription *s) {
    const lq_table *t = s->table;
    char label[256];
    lq__table_label(t, label, sizeof label);
    int rc = lq__table_check_form(t, s->broker->dialect);
    if (rc == LQ_OK) rc = lq__broker_check_form(s->broker, t);
    if (rc != LQ_OK) return rc;
    if (s->form == LQ_FORM_ROW_LOCK && t->isolation == LQ_ISOLATION_READ_UNCOMMITTED &&
        !s->broker->dialect->read_uncommitted)
        return lq__error(LQ_DIALECT, "table %s: %s has no read uncommitted level that locks "
                                     "rows; declare read committed or stricter",
                         label, s->broker->dialect->name);
    if ((t->max_payload || t->max_headers) && !t->dead_letter)
        return lq__error(LQ_MISUSE, "table %s: max_payload_bytes and max_headers_bytes send the "
                                    "rows over them to the dead letters: the table needs a "
                                    "dead-letter destination",
                         label);
    if (lq__has(t, LQ_ROLE_GROUP) && !s->group)
        return lq__error(LQ_MISUSE, "table %s has a group column: name the group to read (option group)",
                         label);
    if (!lq__has(t, LQ_ROLE_GROUP) && s->group)
        return lq__error(LQ_MISUSE, "table %s has no group column, so option group does not apply",
                         label);
    if (t->fifo && !lq__has(t, LQ_ROLE_GROUP))
        return lq__error(LQ_MISUSE, "table %s: fifo needs a group column", label);
    if (s->max_attempts > 0 && !lq__has(t, LQ_ROLE_ATTEMPT))
        return lq__error(LQ_MISUSE, "table %s: max_attempts needs an attempt column", label);
    if (s->max_attempts > 0 && !t->dead_letter)
        return lq__error(LQ_MISUSE,
                         "table %s: max_attempts needs a dead-letter destination, declared together",
                         label);
    if (s->batch && s->transactional)
        return lq__error(LQ_MISUSE, "table %s: a batch subscription cannot be transactional "
                                    "(each delivery of a transactional one has a transaction of "
                                    "its own)",
                         label);
    if (s->batch && s->lanes)
        return lq__error(LQ_MISUSE, "table %s: a batch subscription cannot have lanes "
                                    "(workers_by_key)",
                         label);
    if (s->lanes && !lq__has(t, LQ_ROLE_PARTITION_KEY))
        return lq__error(LQ_MISUSE, "table %s: workers_by_key needs a partition_key column",
                         label);
    return check_limits(s, label);
}

/* "<prefix>:<queue>[:<group>]", the name of the queue in the limits' locks
 * and the starts table. */
static char *queue_name(const lq_subscription *s, const char *prefix) {
    char label[256];
    lq__table_label(s->table, label, sizeof label);
    size_t n = strlen(prefix) + strlen(label) + (s->group ? strlen(s->group) + 1 : 0) + 2;
    char *name = malloc(n);
    if (name) snprintf(name, n, "%s%s%s%s", prefix, label, s->group ? ":" : "", s->group ? s->group : "");
    return name;
}

/* The queue-wide limits' statements, the name of their lock and the table of
 * a rate limit's starts. */
/* The row lock form counts by slots (forms/rowlock.c); the lease form
 * counts its leased rows, or by holds where the dialect says so. */
static bool counts_by_holds(const lq_subscription *s) {
    return s->form == LQ_FORM_LEASE && s->concurrency > 0 && s->broker->dialect->counts_by_holds;
}

/* Whether the limits count the queue's leased rows, through an index of
 * them (<table>_leased) made for them where it is missing; made before the
 * claims are built, which sweep leases where that index is. */
static void plan_leases_counted(lq_subscription *s) {
    s->leases_counted = s->form == LQ_FORM_LEASE &&
                        ((s->concurrency && !counts_by_holds(s)) || s->partition_concurrency);
    if (s->leases_counted) lq__limit_indexes_create(s->broker, s->table, s->partition_concurrency > 0);
}

static int plan_limits(lq_subscription *s) {
    const lq__dialect *d = s->broker->dialect;
    /* With none, a claim alone may carry the acks (forms/lease.c). */
    if (!s->concurrency && !s->rate_limit && !s->partition_concurrency && !s->key_rate_limit)
        return lq__lease_claims_alone(s) && d->exec_together && lq__acker_wanted(s)
                   ? lq__sqlset_build_acks_whole(&s->sql, d, s->table)
                   : LQ_OK;
    if (!(s->limit_key = queue_name(s, "concurrency:"))) return lq__error(LQ_NOMEM, "out of memory");
    if ((s->rate_limit || s->key_rate_limit) && !(s->starts_key = queue_name(s, "")))
        return lq__error(LQ_NOMEM, "out of memory");
    bool holds = counts_by_holds(s);
    int rc = lq__sqlset_build_limits(&s->sql, s->broker->dialect, s->table,
                                     s->form == LQ_FORM_LEASE && s->concurrency > 0 && !holds,
                                     s->rate_limit > 0);
    if (rc == LQ_OK && holds) rc = lq__holds_open(s);
    if (rc == LQ_OK && s->rate_limit) rc = lq__starts_table_create(s->broker, s->table, false);
    if (rc == LQ_OK && s->key_rate_limit) rc = lq__starts_table_create(s->broker, s->table, true);
    return rc;
}

/* What the form and table ask of the flow. */
static void plan_flow(lq_subscription *s) {
    const lq__dialect *d = s->broker->dialect;
    lq__flow *f = &s->flow;
    f->holds = s->form != LQ_FORM_LEASE || s->transactional;
    if (s->form == LQ_FORM_ADVISORY && !d->advisory_holds_connection && !s->transactional)
        f->holds = false; /* keys kept in the process hold no connection */
    /* One claim at a time where claims beside each other only collide (one
     * writer), could finish out of claim order (FIFO groups, partition keys),
     * or where one claim serves every free worker: a lease claim asks a row
     * for every worker seen, one commit for all of them, and the rows past
     * the free workers wait in the lease book. Lease claims beside each
     * other would each find one worker free and spend a commit per row.
     * A batch claim serves one worker whatever the form: batches go beside
     * each other. */
    f->one_claim = d->single_writer || s->table->fifo || lq__has(s->table, LQ_ROLE_PARTITION_KEY) ||
                   (s->form == LQ_FORM_LEASE && !s->batch);
    f->one_row = s->form == LQ_FORM_ROW_LOCK && !s->batch;
    /* Rows waiting ahead hold a lease, which the keeper extends, or a key
     * the process keeps, and no connection: a claim asks a row for every
     * worker seen busy, and more, up to 16 per worker (at most 512), for
     * handlers that run faster than a claim's commit. */
    bool ahead_holds_nothing = s->form == LQ_FORM_LEASE || (s->form == LQ_FORM_ADVISORY && !f->holds);
    f->claim_seen = ahead_holds_nothing;
    if (ahead_holds_nothing && !s->batch) f->ahead_max = s->workers < 32 ? 16 * s->workers : 512;
}

/* Prepares a statement the subscription can do without, or drops it. */
static void prepare_optional(lq_subscription *s, lq__conn *conn, lq__stmt *stmt, const char *what) {
    if (!stmt->sql || s->broker->dialect->prepare(conn, stmt) == LQ_OK) return;
    lq__log_error(LQ_LOG_DEBUG, what);
    lq__error_clear();
    free(stmt->sql);
    stmt->sql = NULL;
}

/* A connection opened ahead prepares the claim, which a new session's first
 * statement on the table would otherwise pay for (PostgreSQL reads the
 * table's catalog entries into the session's caches then). */
static int prepare_claim(lq__conn *conn, void *ctx) {
    lq_subscription *s = ctx;
    return s->broker->dialect->prepare(conn, &s->sql.claim);
}

/* Where each row in work holds a connection, those of as many rows as may
 * be in work here are opened now, side by side: the first claims would
 * otherwise each wait for a connect of their own, and a backlog would start
 * one row at a time. */
static void open_connections_ahead(lq_subscription *s) {
    if (!s->flow.holds) return;
    int n = s->workers;
    if (s->concurrency && s->concurrency < n) n = s->concurrency;
    if (s->worker_concurrency && s->worker_concurrency < n) n = s->worker_concurrency;
    lq__pool_warm(&s->broker->pool, n, prepare_claim, s);
}

/* Prepares every statement on one connection: a missing table or column
 * fails here, naming it. */
static int prepare_all(lq_subscription *s) {
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, &s->broker->pool);
    if (rc != LQ_OK) return rc;
    rc = s->broker->dialect->check_version(conn, s->table);
    if (rc == LQ_OK) rc = lq__multi_primary_check(s, conn);
    const struct {
        const char *what;
        const lq__stmt *stmt;
    } all[] = {
        {"claim", &s->sql.claim},          {"claim", &s->sql.claim_in_room},
        {"claim", &s->sql.claim_one},
        {"take", &s->sql.take},
        {"take", &s->sql.take_read},       {"claim", &s->sql.pick},
        {"take", &s->sql.take_picked},     {"lease stamp", &s->sql.stamp},
        {"FIFO group guard", &s->sql.guard},
        {"ack", &s->sql.ack},              {"retry", &s->sql.retry},
        {"release", &s->sql.release},
        {"retry_after", &s->sql.retry_after}, {"dead letter", &s->sql.dead_group},
        {"dead letter", &s->sql.dead_copy}, {"dead letter", &s->sql.dead_clear},
        {"dead letter", &s->sql.dead_delete}, {"lease extension", &s->sql.extend},
        {"lease sweep", &s->sql.sweep},    {"claim", &s->sql.claim_swept},
    };
    for (size_t i = 0; rc == LQ_OK && i < sizeof all / sizeof all[0]; i++) {
        if (!all[i].stmt->sql) continue;
        /* Built for the table, run only by claims alone. */
        if (all[i].stmt == &s->sql.claim_swept && !lq__lease_claims_alone(s)) continue;
        rc = s->broker->dialect->prepare(conn, all[i].stmt);
        if (rc != LQ_OK) lq__error_prefix("the %s statement", all[i].what);
    }
    /* Statements over a set of rows are an optimisation: a server that
     * cannot run them (MariaDB before 10.6 has no JSON_TABLE) settles and
     * stamps row by row. */
    if (rc == LQ_OK) prepare_optional(s, conn, &s->sql.ack_set, "acks of a set of rows (acking one by one)");
    if (rc == LQ_OK) prepare_optional(s, conn, &s->sql.ack_set_held, "acks of a claim's rows (acking one by one)");
    if (rc == LQ_OK) prepare_optional(s, conn, &s->sql.take_set, "takes of a set of rows (taking one by one)");
    if (rc == LQ_OK) prepare_optional(s, conn, &s->sql.stamp_set,
                                   "lease stamps of a set of rows (stamping one by one)");
    lq__pool_release(&s->broker->pool, conn, rc == LQ_CONNECT);
    return rc;
}

int lq_subscription_open(lq_subscription **out, lq_broker *b, const lq_table *table,
                         const lq_options *o) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL; /* a failure leaves no dangling handle behind */
    LQ__CHECK_ARG(b && table, "the broker or table is NULL");
    lq_subscription *s = calloc(1, sizeof *s);
    if (!s) return lq__error(LQ_NOMEM, "out of memory");
    atomic_init(&s->refs, 1);
    lq__broker_ref(b);
    s->broker = b;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->spares_mu, NULL);
    lq__cond_init(&s->claim_cv);
    lq__cond_init(&s->ready_cv);
    lq__cond_init(&s->keeper_cv);
    pthread_cond_init(&s->stop_cv, NULL);
    lq__book_init(&s->book);
    lq__coalescer_init(&s->coalescer);
    lq__acker_init(&s->acker);
    int64_t coalesce = lq__opt_int(o, LQ_OPT_COALESCE);
    s->coalesce = coalesce < 0 ? !b->dialect->single_writer : coalesce != 0;
    /* Acks behind the handlers gain on SQLite too: they wait for no one. */
    s->acks_behind = coalesce != 0;
    s->coalescer.wait_us = lq__opt_int(o, LQ_OPT_COALESCE_WAIT_US);
    /* Under a queue-wide limit a settlement frees a slot: it waits for no
     * other to commit with it, unless told to. */
    if (lq__opt_int(o, LQ_OPT_CONCURRENCY) && !lq__opt_is_set(o, LQ_OPT_COALESCE_WAIT_US))
        s->coalescer.wait_us = 0;
    s->lanes = (int)lq__opt_int(o, LQ_OPT_WORKERS_BY_KEY);
    s->on_threads = (int)lq__opt_int(o, LQ_OPT_ON_THREADS);
    s->thread_connections = (int)lq__opt_int(o, LQ_OPT_THREAD_CONNECTIONS);
    s->workers = s->lanes       ? s->lanes
                 : s->on_threads ? s->on_threads
                                 : (int)lq__opt_int(o, LQ_OPT_WORKERS);
    s->poll_ms = lq__opt_int(o, LQ_OPT_POLL_INTERVAL_MS);
    s->interval_ms = (double)s->poll_ms;
    s->ceiling_ms = lq__opt_int(o, LQ_OPT_POLL_CEILING_MS);
    if (!lq__opt_is_set(o, LQ_OPT_POLL_CEILING_MS) && s->ceiling_ms < s->poll_ms)
        s->ceiling_ms = s->poll_ms;
    s->lease_ms = (lq__opt_int(o, LQ_OPT_LEASE_MS) + 999) / 1000 * 1000; /* whole seconds, up */
    s->max_attempts = (int)lq__opt_int(o, LQ_OPT_MAX_ATTEMPTS);
    s->concurrency = (int)lq__opt_int(o, LQ_OPT_CONCURRENCY);
    s->worker_concurrency = (int)lq__opt_int(o, LQ_OPT_WORKER_CONCURRENCY);
    s->rate_limit = (int)lq__opt_int(o, LQ_OPT_RATE_LIMIT);
    s->partition_concurrency = (int)lq__opt_int(o, LQ_OPT_PARTITION_CONCURRENCY);
    s->key_limit = (int)lq__opt_int(o, LQ_OPT_PARTITION_WORKER_CONCURRENCY);
    s->key_rate_limit = (int)lq__opt_int(o, LQ_OPT_PARTITION_RATE_LIMIT);
    s->key_rate_period_ms = lq__opt_int(o, LQ_OPT_PARTITION_RATE_PERIOD_MS);
    s->key_rate_set_alone = !s->key_rate_limit && lq__opt_is_set(o, LQ_OPT_PARTITION_RATE_PERIOD_MS);
    s->timeout_ms = lq__opt_int(o, LQ_OPT_TIMEOUT_MS);
    s->retention.retain_ms = lq__opt_int(o, LQ_OPT_RETAIN_MS);
    s->retention.dead_retain_ms = lq__opt_int(o, LQ_OPT_DEAD_LETTER_RETAIN_MS);
    s->rate_period_ms = lq__opt_int(o, LQ_OPT_RATE_PERIOD_MS);
    s->rate_set_alone = !s->rate_limit && lq__opt_is_set(o, LQ_OPT_RATE_PERIOD_MS);
    s->transactional = lq__opt_int(o, LQ_OPT_TRANSACTIONAL) != 0;
    s->jitter_seed = (unsigned)lq__now_ms() ^ (unsigned)(uintptr_t)s;
    s->batch = (int)lq__opt_int(o, LQ_OPT_BATCH);
    /* A batch subscription's workers each take a batch. */
    lq__flow_init(&s->flow, s->batch ? s->workers * s->batch : s->workers, b->pool.size - 1);
    s->flow.batch = s->batch;
    if ((s->lanes && !(s->lane_busy = calloc((size_t)s->lanes, sizeof *s->lane_busy))) ||
        (s->key_limit && lq__key_counts_init(&s->key_counts, (size_t)s->workers * 2) != LQ_OK)) {
        subscription_free(s);
        return lq__error(LQ_NOMEM, "out of memory");
    }

    int rc = lq__table_copy(&s->table, table);
    if (rc == LQ_OK) {
        s->table->max_payload = lq__opt_int(o, LQ_OPT_MAX_PAYLOAD_BYTES);
        s->table->max_headers = lq__opt_int(o, LQ_OPT_MAX_HEADERS_BYTES);
        /* Written into the claim's statements (the row lock form takes key
         * slots where it has them). */
        bool row_lock = lq_table_form(s->table) == LQ_FORM_ROW_LOCK;
        bool key_slots = !row_lock || b->dialect->row_lock_key_slots || b->dialect->take_key_slot;
        s->table->partition_limit = key_slots ? s->partition_concurrency : 0;
        s->table->key_rate_limit = s->key_rate_limit;
        s->table->key_rate_period_ms = s->key_rate_period_ms;
    }
    if (rc == LQ_OK && lq__opt_str(o, LQ_OPT_GROUP) &&
        !(s->group = lq__strdup(lq__opt_str(o, LQ_OPT_GROUP))))
        rc = lq__error(LQ_NOMEM, "out of memory");
    if (rc == LQ_OK) {
        s->form = lq_table_form(s->table);
        plan_flow(s);
        rc = check_declaration(s);
    }
    /* Before the statements, whose preparing would name a column of a
     * wrong type less clearly, or not at all (SQLite). */
    if (rc == LQ_OK) rc = lq__columns_check_once(b, s->table, false);
    if (rc == LQ_OK && s->form == LQ_FORM_LEASE) rc = lq__lease_clock_take(s);
    if (rc == LQ_OK && s->form == LQ_FORM_ADVISORY && b->dialect->hold_key_space &&
        (rc = b->dialect->hold_key_space(&b->target)) == LQ_OK)
        s->key_space_held = true;
    if (rc == LQ_OK) plan_leases_counted(s);
    if (rc == LQ_OK) rc = lq__leases_swept_find(&s->table->leases_swept, b, s->table);
    if (rc == LQ_OK) rc = lq__sqlset_build(&s->sql, b->dialect, s->table);
    if (rc == LQ_OK) rc = plan_limits(s);
    if (rc == LQ_OK) rc = lq__run_cancels_init(&s->cancels, s);
    if (rc == LQ_OK) lq__row_layout(s->table, s->row_at);
    if (rc == LQ_OK) rc = lq__broker_intern_set(b, &s->sql);
    if (rc == LQ_OK) rc = lq__sql_build_paused(&s->pause_check, b->dialect, s->table);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &s->pause_check);
    if (rc == LQ_OK) rc = prepare_all(s);
    /* Under a queue-wide limit counted at each claim, a run that ended here
     * hands its slot to the next row in one commit: the claim carries its
     * ack (lq__acks_carry; forms/lease.c says when). Only where the
     * claim's wait for the queue's lock can be kept within the carried
     * rows' leases (begin_locked), or where that lock is the one writer's,
     * which the ack would wait for alone too. */
    const lq__dialect *dialect = b->dialect;
    s->carries_acks = rc == LQ_OK && s->form == LQ_FORM_LEASE && s->concurrency && !s->holds.on &&
                      s->sql.ack_set.sql && lq__acker_wanted(s) &&
                      (dialect->begin_locked || dialect->single_writer);
    if (s->carries_acks) s->acker.carried = &s->at_limit;
    /* A claim alone carries them too where the database runs the two in
     * one round trip and one commit. */
    bool alone = rc == LQ_OK && lq__lease_claims_alone(s) && dialect->exec_together &&
                 s->sql.ack_set_whole.sql && lq__acker_wanted(s);
    if (alone) {
        s->carries_acks = true;
        s->acker.carried = &s->alone_carries;
    }
    s->coalescer.ack = &s->sql.ack;
    s->coalescer.ack_set = &s->sql.ack_set;
    s->coalescer.tokens = s->form == LQ_FORM_LEASE;
    s->coalescer.ack_set_held = &s->sql.ack_set_held;
    s->member = (lq__member){.table = s->table, .group = s->group, .on_threads = s->on_threads,
                             .thread_connections = s->thread_connections,
                             .wake = member_wake, .room_freed = member_room_freed,
                             .control_changed = member_control_changed,
                             .cancel_heard = member_cancel_heard};
    if (rc == LQ_OK) rc = lq__broker_attach(b, &s->member);
    /* Once the subscription is sure to open: a refused one opens none. */
    if (rc == LQ_OK) open_connections_ahead(s);
    if (rc != LQ_OK) {
        if (s->table) {
            char label[256];
            lq__error_prefix("subscription to %s", lq__table_label(s->table, label, sizeof label));
        }
        subscription_free(s);
        return rc;
    }
    *out = s;
    return LQ_OK;
}

void lq__claim_limits(const lq_subscription *s, lq__value *args) {
    args[LQ__P_MAX_PAYLOAD] = (lq__value){.type = LQ__V_INT, .i = s->table->max_payload};
    args[LQ__P_MAX_HEADERS] = (lq__value){.type = LQ__V_INT, .i = s->table->max_headers};
}

static int run_claim(lq__claimed *got, lq_subscription *s, int limit) {
    switch (s->form) {
    case LQ_FORM_LEASE: return lq__lease_claim(got, s, limit);
    case LQ_FORM_ADVISORY: return lq__advisory_claim(got, s, limit);
    default: return lq__row_lock_claim(got, s, limit);
    }
}

/* What the subscription takes of its broker's room: its claims in flight,
 * and the connections its deliveries keep where they keep one. s->mu held. */
static int room_of(const lq_subscription *s) {
    return s->flow.running + s->claim_extra + (s->flow.holds ? s->held : 0);
}

/* Whether each row of a claim holds a connection of its own (an advisory
 * claim of several keys, a transactional claim's rows), so the claim takes
 * room for every row it asks for. */
static bool rows_hold(const lq_subscription *s) { return s->flow.holds && !s->flow.batch; }

/* Marks the subscription starved for room, or not; room_mu held. */
static void set_starved(lq_subscription *s, bool starved) {
    if (starved == s->room_starved) return;
    s->broker->room.starved += starved ? 1 : -1;
    s->room_starved = starved;
}

/* Brings the broker's room up to date with what the subscription holds;
 * true when room came free that another subscription waited for (the caller
 * wakes them, with no subscription's mu held). s->mu held. */
static bool account_room(lq_subscription *s) {
    lq_broker *b = s->broker;
    int now = room_of(s);
    pthread_mutex_lock(&b->room_mu);
    b->room.taken += now - s->room_counted;
    bool wake = now < s->room_counted && b->room_wanted;
    if (wake) b->room_wanted = false;
    s->room_counted = now;
    pthread_mutex_unlock(&b->room_mu);
    return wake;
}

/* Whether the flow lets another claim start now; `kept`: this thread keeps
 * a chained connection for it, which counts as given back. s->mu held. */
static bool flow_may_start(const lq_subscription *s, int kept) {
    return lq__flow_may_start(&s->flow, s->in_work - s->settling, s->waiting, s->held - kept,
                              lq__pool_spare(&s->broker->pool) + kept);
}

/* Wakes one idle claimer (a claim thread, or under workers_claim a worker)
 * when another claim may start: each change of the flow starts at most the
 * one claim it makes room for, and a claimer that starts wakes the next
 * while room is left, rather than every change waking every claimer to
 * contend for the lock. None while the claimers rest (they claim when the
 * rest ends). s->mu held. */
static void wake_a_claimer(lq_subscription *s) {
    if (!s->claimers_idle || !flow_may_start(s, 0)) return;
    if (!s->woken && s->rest_until > lq__mono_ms()) return;
    pthread_cond_signal(&s->claim_cv);
}

/* Whether each row in work holds its concurrency slot in this process (a
 * row lock transaction's, an advisory session's), where the lease form's
 * leases are counted at the database. */
static bool slots_held_here(const lq_subscription *s) {
    return s->concurrency && s->form != LQ_FORM_LEASE;
}

/* The rows of this subscription that hold a slot here: in work (less those
 * whose slot went first), claimed and waiting, asked for, and claimed by
 * workers' settlements. s->mu held. */
static int slot_rows_here(const lq_subscription *s) {
    return s->in_work - s->let_go_early + s->waiting + s->flow.asked + s->carried;
}

/* Cuts a claim's rows to the `left` a bound leaves, or forgoes it. */
static void cap_claim(bool *wants, int *limit, int left) {
    if (left <= 0) *wants = false;
    else if (*limit > left) *limit = left;
}

/* Whether another claim may start now: the flow allows it, and so does the
 * broker's room, whose share for the claim is taken at once, so two
 * subscriptions never count on the same room. Returns the rows the claim
 * asks for (0: no claim); where rows hold connections, no more than the
 * room, all of it taken now (the claim's connection and claim_extra). A
 * chained connection this worker keeps (counted in held) is reckoned as
 * given back, and the claim takes it over. s->mu held. */
static int may_claim(lq_subscription *s) {
    int kept = chained.of == s;
    bool wants = flow_may_start(s, kept);
    int limit = lq__flow_claim_size(&s->flow, s->in_work - s->settling, s->waiting);
    /* Rows held here beside those in work: the rows claimed and waiting,
     * those asked for, and those other workers' settlements claimed (this
     * worker's own is what its claim takes). */
    int own_claimed = kept && chained.claimed;
    int here = s->waiting + s->flow.asked + s->carried - own_claimed;
    if (s->worker_concurrency) cap_claim(&wants, &limit, s->worker_concurrency - s->in_work - here);
    /* While this process's rows hold every slot, a claim could only find
     * them all held: none is made until one is free. */
    if (slots_held_here(s)) cap_claim(&wants, &limit, s->concurrency - slot_rows_here(s) + own_claimed);
    lq_broker *b = s->broker;
    int mine = room_of(s) - kept;
    pthread_mutex_lock(&b->room_mu);
    lq__room room = b->room;
    room.taken -= kept;
    int share = wants ? lq__room_share(&room, mine, s->room_starved) : 0;
    int own = s->flow.budget - mine;
    if (rows_hold(s) && share > own) share = own;
    set_starved(s, wants && share <= 0 && mine == 0);
    if (wants && share <= 0) b->room_wanted = true;
    if (share <= 0) limit = 0;
    int take = 1; /* the claim's connection: running goes up next */
    if (limit && rows_hold(s)) {
        if (limit > share) limit = share;
        take = limit;
        s->claim_extra += take - 1;
    }
    if (limit) {
        b->room.taken += take - kept;
        s->room_counted += take - kept;
        s->held -= kept; /* the claim's connection now: running goes up next */
    }
    pthread_mutex_unlock(&b->room_mu);
    return limit;
}

void lq__subscription_hold(lq_subscription *s) {
    pthread_mutex_lock(&s->mu);
    s->held++;
    account_room(s);
    pthread_mutex_unlock(&s->mu);
}

/* A held connection went back to the pool. */
static void forget_held(lq_subscription *s) {
    pthread_mutex_lock(&s->mu);
    s->held--;
    bool wake = account_room(s);
    wake_a_claimer(s);
    pthread_mutex_unlock(&s->mu);
    if (wake) lq__broker_wake_room(s->broker, &s->member);
}


/* Ends a chained transaction the worker will not claim in, or gives back
 * the row its settlement claimed; s->mu not held. */
static void drop_chained(lq_subscription *s) {
    lq_delivery *claimed = lq__subscription_take_claimed(s);
    if (claimed) {
        lq__freed freed = {0};
        lq__settle_give_back(claimed, &freed);
        lq__delivery_unref(claimed);
        if (freed.conn) lq__pool_release(&s->broker->pool, freed.conn, freed.broken);
        forget_held(s);
        return;
    }
    lq__conn *conn = lq__subscription_take_chained(s);
    if (!conn) return;
    int rc = s->broker->dialect->rollback(conn);
    lq__pool_release(&s->broker->pool, conn, rc != LQ_OK);
    forget_held(s);
}

/* The connections a claim's deliveries went on holding, and in transactional
 * mode those they will hold: a delivery's transaction takes its connection
 * when a worker begins it, and counting it only then would let claims pass
 * the pool's room in between. */
static int held_by(const lq_subscription *s, const lq__claimed *got) {
    int n = 0;
    const lq__shared_tx *last = NULL;
    for (lq_delivery *d = got->head; d; d = d->queue_next) {
        if (d->conn) n++;
        else if (d->shared && d->shared != last) n++;
        else if (!d->shared && s->transactional) {
            d->reserved = true;
            n++;
        }
        if (d->shared) last = d->shared;
    }
    return n;
}

/* The rows a claim took: counted, and how long each waited since it was due. */
static void count_waits(lq_subscription *s, const lq__claimed *got) {
    if (!got->count) return;
    atomic_fetch_add(&s->stats[LQ_STAT_CLAIMED], got->count);
    int64_t now = lq__now_ms();
    for (const lq_delivery *d = got->head; d; d = d->queue_next)
        if (d->ready_ms) lq__histogram_add(&s->wait_seconds, (now - d->ready_ms) * 1000);
}

/* The lane of a row: its partition key's, or spread by id without one. */
static int lane_of(const lq_subscription *s, const lq_delivery *d) {
    if (!s->lanes) return 0;
    uint64_t h = d->partition_key ? lq__fnv1a_str(d->partition_key) : (uint64_t)d->id;
    return (int)(h % (uint64_t)s->lanes);
}

/* The wait after a claim. A conflict over a lock another transaction holds
 * (a lock wait that ran out, a FIFO group held under NOWAIT, SQLite's busy
 * write lock) doubles the poll interval, up to the ceiling: the holder may
 * keep it a while. A transaction the server rolled back (SQLSTATE class 40:
 * a serialization failure, a deadlock) doubles nothing: the rollback ended
 * the conflict, and under SERIALIZABLE one claim in several meets one while
 * rows keep flowing, so doubling would climb to the ceiling and leave a busy
 * queue idle. A claim that took rows brings the interval back to
 * poll_interval_ms; an empty one that met no conflict shrinks it by x0.9.
 * Every wait is x0.95-1.05 at random, so claimers that started together do
 * not poll in step. Under a rate limit the wait ends no later than the
 * window frees a start. s->mu held. */
static int64_t rest_after(lq_subscription *s, int rc, bool rolled_back, bool short_claim,
                          bool took_rows) {
    if (rc == LQ_CONTENTION && !rolled_back) {
        s->interval_ms *= 2;
        if (s->interval_ms > (double)s->ceiling_ms) s->interval_ms = (double)s->ceiling_ms;
    } else if (rc == LQ_OK && took_rows) {
        s->interval_ms = (double)s->poll_ms;
    } else if (rc == LQ_OK && s->interval_ms > (double)s->poll_ms) {
        s->interval_ms *= 0.9;
        if (s->interval_ms < (double)s->poll_ms) s->interval_ms = (double)s->poll_ms;
    }
    double wait = rc == LQ_CONTENTION || (rc == LQ_OK && short_claim) ? s->interval_ms
                  : rc != LQ_OK                                        ? FAILED_CLAIM_WAIT_MS
                                                                       : 0;
    double jitter = 0.95 + 0.1 * ((double)rand_r(&s->jitter_seed) / RAND_MAX);
    int64_t rest = (int64_t)(wait * jitter);
    int64_t rate_wait = atomic_load(&s->rate_wait_ms); /* the window frees a start then */
    return rc == LQ_OK && rate_wait && rate_wait < rest ? rate_wait : rest;
}

/* Wakes the workers a claim's rows need, s->mu held: under lanes or a key
 * limit every one (only a row's own lane, or a key with room, takes it);
 * otherwise one per row, or one per batch for a batch handler, since one
 * worker takes a whole batch and the others woken with it would only find
 * the queue empty. A worker that claimed for
 * itself (`own`) takes the first itself; under workers_claim a claim serves
 * that one worker, so none is woken, and idle workers wait on claim_cv. */
static void wake_takers(lq_subscription *s, int rows, bool own) {
    if (s->lanes || s->key_limit) {
        pthread_cond_broadcast(&s->ready_cv);
        return;
    }
    int wakes = (s->batch_handler ? (rows + s->batch - 1) / s->batch : rows) - own;
    pthread_cond_t *takers = s->workers_claim ? &s->claim_cv : &s->ready_cv;
    for (int i = 0; i < wakes; i++) pthread_cond_signal(takers);
}

static void show_ready(lq_subscription *s);

/* Gives back the rows claimed and not yet handed out, as a stop does (but
 * where a transactional delivery in work may hold SQLite's write lock
 * their release would wait for: those rows are handed out). s->mu held, let
 * go while they go back. */
/* Whether rows claimed may go back now: not while a transactional handler
 * holds a single writer's lock, which their release would wait for. */
static bool may_give_back(const lq_subscription *s) {
    return !(s->transactional && s->in_work > 0 && s->broker->dialect->single_writer);
}

static void give_back_waiting(lq_subscription *s) {
    if (!s->waiting || !may_give_back(s)) return;
    lq__claimed left = {.head = s->queue_head, .tail = s->queue_tail, .count = s->waiting};
    s->queue_head = s->queue_tail = NULL;
    s->waiting = 0;
    show_ready(s);
    pthread_mutex_unlock(&s->mu);
    lq__claimed_free(&left);
    pthread_mutex_lock(&s->mu);
}

/* Whether the queue is paused: the control table is read once a poll
 * interval (by one claimer; the others take its answer, and before the
 * first answer wait for it), or at once after a pause or resume was heard
 * of. A read that fails keeps the last answer. A pause gives back the rows
 * waiting for a worker; deliveries in work finish. s->mu held, let go while
 * it reads. */
static bool pause_read_due(const lq_subscription *s, int64_t now) {
    return !s->pause_reading &&
           (s->pause_due || !s->pause_known || now - s->pause_looked_at >= s->poll_ms);
}

static bool pause_answer(lq_subscription *s, bool read, bool paused);

static bool paused_now(lq_subscription *s) {
    int64_t now = lq__mono_ms();
    while (s->pause_reading && !s->pause_known && !s->stopping) {
        s->claimers_idle++;
        pthread_cond_wait(&s->claim_cv, &s->mu);
        s->claimers_idle--;
    }
    if (!pause_read_due(s, now)) return s->paused;
    s->pause_due = false;
    s->pause_looked_at = now;
    s->pause_reading = true;
    pthread_mutex_unlock(&s->mu);
    bool paused = false;
    int rc = lq__pause_read(&paused, s->broker, &s->pause_check, s->table, s->group);
    if (rc != LQ_OK) lq__log_error(LQ_LOG_WARNING, "reading whether the queue is paused");
    pthread_mutex_lock(&s->mu);
    s->pause_reading = false;
    return pause_answer(s, rc == LQ_OK, paused);
}

/* A read of the pause answered (`read`: it did not fail). s->mu held, let
 * go while a pause gives back the rows waiting. */
static bool pause_answer(lq_subscription *s, bool read, bool paused) {
    s->pause_known = true;
    pthread_cond_broadcast(&s->claim_cv); /* the claimers that waited for the answer */
    if (!read || paused == s->paused) return s->paused;
    s->paused = paused;
    char label[256];
    lq__log(LQ_LOG_INFO, "queue %s%s%s %s", lq__table_label(s->table, label, sizeof label),
            s->group ? " group " : "", s->group ? s->group : "",
            paused ? "paused: claims stop, deliveries in work finish" : "resumed: claims go on");
    if (paused) give_back_waiting(s);
    return paused;
}

/* Gives back what a claim that does not go on took (may_claim's room, the
 * flow's count, the chained transaction kept for it): the queue is paused,
 * or the subscription stops. s->mu held, let go while it ends the chained
 * transaction and wakes the other subscriptions. */
static void forgo_claim(lq_subscription *s, int limit, int extra) {
    bool kept = chained.of == s;
    s->flow.running--;
    s->flow.asked -= limit;
    s->claim_extra -= extra;
    s->held += kept; /* counted in held again until drop_chained forgets it */
    s->woken = false;
    atomic_store(&s->at_limit, false); /* no claim comes soon: the acker waits for none */
    atomic_store(&s->alone_carries, false);
    s->rest_until = lq__mono_ms() + s->poll_ms;
    bool room_freed = account_room(s);
    if (!kept && !room_freed) return;
    pthread_mutex_unlock(&s->mu);
    if (kept) drop_chained(s);
    if (room_freed) lq__broker_wake_room(s->broker, &s->member);
    pthread_mutex_lock(&s->mu);
}

/* A claim the queue-wide limit cut rests until a settlement here: the
 * mark makes the next one wake a claim. One that came while the claim ran
 * found no mark and woke none, so then the claim goes again at once (the
 * mark is stored before the count is read, and an ack queued counts before
 * it reads the mark: one of the two sees the other). s->mu held. */
static void rest_at_limit(lq_subscription *s, unsigned long long events) {
    atomic_store(&s->limit_rests, true);
    if (atomic_load(&s->room_events) != events) s->woken = true;
}

/* One turn of a claimer, s->mu held (let go while it waits or claims): it
 * rests after a short or failed claim until the wait is over or a wake-up
 * comes (one claim per wait, whichever thread makes it), waits while no
 * claim may start, or claims and queues the rows. `own`: a worker claiming
 * for itself, which takes a row of its claim next; it calls this only when
 * it found no row waiting, and only its own claims queue rows, so it never
 * waits while a row waits. */
static void claim_turn(lq_subscription *s, bool own) {
    if (s->woken) s->rest_until = 0;
    /* A row this worker's settlement claimed already (the advisory form)
     * is taken now, whatever rest another claim set. */
    bool carried = chained.of == s && chained.claimed;
    bool rests = !carried && s->rest_until > lq__mono_ms();
    /* A pause or resume heard of is read at once, so that the rows waiting
     * go back now; the reads of every poll come with a claim, below. */
    if (s->pause_due && !rests && paused_now(s)) {
        s->woken = false;
        s->rest_until = lq__mono_ms() + s->poll_ms;
        return;
    }
    if (s->stopping) return; /* paused_now let go of s->mu: a stop's wake-up may have passed */
    /* The read takes a connection of the claim's room: a worker's chained
     * transaction, which would be that room, ends first. */
    if (!rests && !carried && chained.of == s && pause_read_due(s, lq__mono_ms())) {
        pthread_mutex_unlock(&s->mu);
        drop_chained(s);
        pthread_mutex_lock(&s->mu);
    }
    int limit = rests ? 0 : may_claim(s);
    if (!limit && chained.of == s) { /* no claim now: let the chained transaction go first */
        pthread_mutex_unlock(&s->mu);
        drop_chained(s);
        pthread_mutex_lock(&s->mu);
        return;
    }
    /* Idle: resting after a short claim, or no room to claim in. */
    if ((rests || !limit) && lq__retention_take_turn(&s->retention, lq__mono_ms())) {
        pthread_mutex_unlock(&s->mu);
        int64_t due = lq__retention_run(&s->retention, s->broker, s->table, s->group, s->poll_ms);
        pthread_mutex_lock(&s->mu);
        lq__retention_end_turn(&s->retention, due);
        return; /* the loop looks at stopping and the rest again */
    }
    if (rests) {
        struct timespec deadline = lq__deadline_in(s->rest_until - lq__mono_ms());
        s->claimers_idle++;
        pthread_cond_timedwait(&s->claim_cv, &s->mu, &deadline);
        s->claimers_idle--;
        return;
    }
    if (!limit) {
        s->claimers_idle++;
        pthread_cond_wait(&s->claim_cv, &s->mu);
        s->claimers_idle--;
        return;
    }
    int extra = rows_hold(s) ? limit - 1 : 0;
    s->flow.running++;
    s->flow.asked += limit;
    /* The pause is read within the room the claim took, so the read never
     * takes the connection the pool keeps for the handlers. A row claimed
     * already took that room, and the settlement that claimed it made the
     * read where one was due (lq__subscription_pause_read_carried). */
    if ((carried ? s->paused : paused_now(s)) || s->stopping) {
        forgo_claim(s, limit, extra);
        return;
    }
    /* This claim answers the wake-up or the mark, which it clears: the rest
     * ends, as the rest read above (before s->mu was let go for the pause
     * or the chained transaction) may be older than they are. */
    bool marked = atomic_exchange(&s->limit_rests, false);
    if (s->woken || marked) s->rest_until = 0;
    s->woken = false;
    unsigned long long events = atomic_load(&s->room_events);
    wake_a_claimer(s); /* the next, while room is left */
    pthread_mutex_unlock(&s->mu);

    lq__claimed got = {0};
    waiting_for = s;
    int64_t began_us = lq__mono_us();
    int rc = run_claim(&got, s, limit);
    lq__histogram_add(&s->claim_seconds, lq__mono_us() - began_us);
    waiting_for = NULL;
    count_waits(s, &got);
    atomic_fetch_add(&s->stats[LQ_STAT_CLAIMS], 1);
    if (got.count == 0) atomic_fetch_add(&s->stats[LQ_STAT_EMPTY_CLAIMS], 1);
    lq__error_copy failure;
    bool failed = rc != LQ_OK && rc != LQ_CONTENTION;
    bool rolled_back = rc == LQ_CONTENTION && strncmp(lq_errcode_sqlstate(), "40", 2) == 0;
    if (failed) lq__error_save(&failure);
    if (rc == LQ_CONTENTION) lq__log_error(LQ_LOG_DEBUG, "claim (contention, backing off)");
    else if (failed) lq__log_error(LQ_LOG_ERROR, "claim");

    pthread_mutex_lock(&s->mu);
    if (failed) {
        if (!s->failing_since) s->failing_since = lq__mono_ms();
        s->last_failure = failure;
    } else if (rc == LQ_OK) {
        s->failing_since = 0;
    }
    s->flow.running--;
    s->flow.asked -= limit;
    lq__flow_claimed(&s->flow, got.count, rc != LQ_OK);
    lq__flow_look_ahead(&s->flow, rc == LQ_OK && got.count == limit);
    if (rc == LQ_CONTENTION) atomic_fetch_add(&s->stats[LQ_STAT_CONTENTION], 1);
    s->claim_extra -= extra; /* now counted in held, as far as rows came */
    s->held += held_by(s, &got);
    bool room_freed = account_room(s);
    lq_delivery *unrun = NULL;
    lq__claimed kept = {0};
    /* Rows ended unrun still made the claim full: the next comes at once. */
    bool short_claim = got.count < limit;
    if (rc == LQ_OK && got.cut) rest_at_limit(s, events);
    bool took_rows = got.count > 0;
    for (lq_delivery *d = got.head, *next; d; d = next) {
        next = d->queue_next;
        d->queue_next = NULL;
        if (s->has_keeper) lq__book_add(&s->book, &d->entry); /* the keeper watches it */
        d->lane = lane_of(s, d);
        if (refused(d)) {
            d->queue_next = unrun;
            unrun = d;
        } else {
            lq__claimed_add(&kept, d);
        }
    }
    got = kept;
    if (got.count && s->paused && may_give_back(s)) { /* paused while it ran: back, as the waiting */
        pthread_mutex_unlock(&s->mu);
        lq__claimed_free(&got);
        pthread_mutex_lock(&s->mu);
        got = (lq__claimed){0};
    }
    if (got.count) {
        if (s->queue_tail) s->queue_tail->queue_next = got.head;
        else s->queue_head = got.head;
        s->queue_tail = got.tail;
        s->waiting += got.count;
        wake_takers(s, got.count, own);
        show_ready(s);
    }
    int64_t rest = rest_after(s, rc, rolled_back, short_claim, took_rows);
    if (rest && !s->woken) s->rest_until = lq__mono_ms() + rest;
    wake_a_claimer(s); /* the flow changed: another may go */
    if (room_freed) { /* the other subscriptions' claimers, with s->mu let go */
        pthread_mutex_unlock(&s->mu);
        lq__broker_wake_room(s->broker, &s->member);
        pthread_mutex_lock(&s->mu);
    }
    if (unrun) {
        pthread_mutex_unlock(&s->mu);
        end_refused(unrun);
        pthread_mutex_lock(&s->mu);
    }
}

static void *claimer_main(void *arg) {
    lq_subscription *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) claim_turn(s, false);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Takes a reference on a delivery of the book unless its last one is gone:
 * then a thread is freeing it, and waits for s->mu (held here) only to take
 * it out of the book. A reference taken then would outlive the free. */
static bool ref_if_live(lq_delivery *d) {
    int refs = atomic_load(&d->refs);
    while (refs > 0)
        if (atomic_compare_exchange_weak(&d->refs, &refs, refs + 1)) return true;
    return false;
}

int lq__book_refs(lq_delivery ***out, size_t *n, lq_subscription *s) {
    pthread_mutex_lock(&s->mu);
    *n = s->book.count;
    *out = *n ? malloc(*n * sizeof **out) : NULL;
    if (*n && !*out) {
        *n = 0;
        pthread_mutex_unlock(&s->mu);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    /* The entry is the delivery's first member. */
    size_t listed = lq__book_snapshot(&s->book, (lq__book_entry **)*out, *n);
    *n = 0;
    for (size_t i = 0; i < listed; i++)
        if (ref_if_live((*out)[i])) (*out)[(*n)++] = (*out)[i];
    pthread_mutex_unlock(&s->mu);
    return LQ_OK;
}

/* The keeper: extends the book's leases every half lease (lease form);
 * under timeout_ms, sends back the rows of runs that passed it, looking at
 * least every quarter of it (and when the next one falls due); and tells
 * runs of their cancels (run_cancels.h), at once when one is heard of. */
static void *keeper_main(void *arg) {
    lq_subscription *s = arg;
    bool leases = s->form == LQ_FORM_LEASE;
    int64_t extend_at = lq__mono_ms() + s->lease_ms / 2, overdue_at = 0;
    int64_t cancels_at = s->cancels.watches ? lq__mono_ms() : 0;
    pthread_mutex_lock(&s->mu);
    while (!s->closing) {
        int64_t now = lq__mono_ms(), next = leases ? extend_at : now + 60000;
        if (s->timeout_ms) {
            int64_t look = now + (s->timeout_ms / 4 > 0 ? s->timeout_ms / 4 : 1);
            if (overdue_at && overdue_at < look) look = overdue_at;
            if (look < next) next = look;
        }
        if (cancels_at && cancels_at < next) next = cancels_at;
        struct timespec deadline = lq__deadline_in(next - now);
        while (!s->closing && !s->cancels.due)
            if (pthread_cond_timedwait(&s->keeper_cv, &s->mu, &deadline) == ETIMEDOUT) break;
        if (s->closing) break;
        pthread_mutex_unlock(&s->mu);
        if (s->timeout_ms) overdue_at = lq__lease_expire_overdue(s);
        cancels_at = lq__run_cancels_look(s);
        if (leases && lq__mono_ms() >= extend_at) {
            lq__lease_extend(s);
            extend_at = lq__mono_ms() + s->lease_ms / 2;
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Starts the claimer (and the keeper, for leases) once; s->mu held. */
/* Whether the subscription may run in `mode`: not once stopped, nor in
 * the other mode than the one it runs in. s->mu held. */
static int mode_allowed(const lq_subscription *s, lq__mode mode) {
    if (s->stopping) return lq__error(LQ_CLOSED, "the subscription is stopped");
    if (s->mode != LQ__MODE_NONE && s->mode != mode)
        return lq__error(LQ_MISUSE, "a subscription runs in one mode: push (run) or pull (next)");
    return LQ_OK;
}

static int start_locked(lq_subscription *s, lq__mode mode) {
    int allowed = mode_allowed(s, mode);
    if (allowed != LQ_OK) return allowed;
    if (s->started) return LQ_OK;
    s->mode = mode;
    /* One claim thread for each claim the flow may keep in flight, or none
     * where the workers claim for themselves. */
    int count = s->workers_claim   ? 0
                : s->flow.one_claim ? 1
                : s->workers < s->flow.budget ? s->workers : s->flow.budget;
    if (count && !(s->claimers = calloc((size_t)count, sizeof *s->claimers)))
        return lq__error(LQ_NOMEM, "out of memory");
    s->started = true;
    for (; s->claimer_count < count; s->claimer_count++)
        if (pthread_create(&s->claimers[s->claimer_count], NULL, claimer_main, s) != 0)
            return lq__error(LQ_ERROR, "cannot start claim thread %d", s->claimer_count + 1);
    if (s->form == LQ_FORM_LEASE || s->timeout_ms || s->cancels.watches) {
        if (pthread_create(&s->keeper, NULL, keeper_main, s) != 0)
            return lq__error(LQ_ERROR, "cannot start the keeper thread");
        s->has_keeper = true;
    }
    return LQ_OK;
}

/* Whether the key of a waiting delivery has room under
 * partition_worker_concurrency (a row without a key always has). */
static bool key_has_room(const lq_subscription *s, const lq_delivery *d) {
    return !s->key_limit || !d->partition_key ||
           lq__key_counts_get(&s->key_counts, d->partition_key) < s->key_limit;
}

/* The first waiting delivery that may go into work: any whose key has room,
 * or under workers_by_key the first of a lane with nothing in work (and of
 * `lane` itself for a lane's own worker, -1 for any). s->mu held. */
static lq_delivery **next_ready(lq_subscription *s, int lane) {
    for (lq_delivery **p = &s->queue_head; *p; p = &(*p)->queue_next) {
        if (!key_has_room(s, *p)) continue;
        if (!s->lanes) return p;
        if ((lane < 0 || (*p)->lane == lane) && s->lane_busy[(*p)->lane] == 0) return p;
    }
    return NULL;
}

/* Keeps the ready descriptor raised exactly while a pull would take a
 * delivery now or find the subscription stopped; s->mu held. */
static void show_ready(lq_subscription *s) {
    if (s->ready.open) lq__ready_fd_set(&s->ready, s->stopping || next_ready(s, -1) != NULL);
}

/* Hands a waiting delivery out; s->mu held. */
static lq_delivery *take_locked(lq_subscription *s, lq_delivery **slot) {
    lq_delivery *d = *slot, *prev = NULL;
    for (lq_delivery *p = s->queue_head; p && p != d; p = p->queue_next) prev = p;
    *slot = d->queue_next;
    if (s->queue_tail == d) s->queue_tail = prev;
    d->queue_next = NULL;
    s->waiting--;
    s->in_work++;
    atomic_fetch_add(&s->coalescer.in_work, 1);
    d->handed = true;
    d->handed_ms = lq__mono_ms();
    if (s->lanes) s->lane_busy[d->lane]++;
    /* Out of memory, the row goes uncounted: past the limit by one, not lost. */
    if (s->key_limit && d->partition_key)
        d->key_counted = lq__key_counts_add(&s->key_counts, d->partition_key, 1);
    lq__flow_handed(&s->flow, s->in_work - 1);
    show_ready(s);
    wake_a_claimer(s); /* a row left the queue: a claim may go */
    atomic_fetch_add(&s->stats[LQ_STAT_DELIVERED], 1);
    return d;
}

/* A fresh lease is seen without letting s->mu go: a try of the delivery's
 * lock, which is taken before s->mu, cannot deadlock. */
static bool lease_seen_fresh(lq_delivery *d) {
    if (pthread_mutex_trylock(&d->mu) != 0) return false;
    bool fresh = lq__lease_fresh(d);
    pthread_mutex_unlock(&d->mu);
    return fresh;
}

/* Takes a waiting delivery for a handler or a caller where its lease still
 * holds (lq__lease_holds); else lets it go unrun and returns NULL: its row
 * is another claim's now, or goes back. s->mu held, let go meanwhile in the
 * lease form. */
static lq_delivery *take_held(lq_subscription *s, lq_delivery **slot) {
    lq_delivery *d = take_locked(s, slot);
    if (s->form != LQ_FORM_LEASE || lease_seen_fresh(d)) return d;
    pthread_mutex_unlock(&s->mu);
    bool holds = lq__lease_holds(d);
    if (!holds) {
        lq__log(LQ_LOG_WARNING, "row %lld: its lease ran out while it waited for a worker (its "
                                "extensions came late); not run here, left to its next claim",
                (long long)d->id);
        if (lq__settle(d, LQ__RELEASE, 0) == LQ_OK) /* its lease came back late: given back */
            atomic_fetch_add(&s->stats[LQ_STAT_LEASE_LOST], 1);
        else
            lq__error_clear(); /* lost: counted so */
        lq__delivery_unref(d);
    }
    pthread_mutex_lock(&s->mu);
    return holds ? d : NULL;
}

void lq__subscription_settling(lq_subscription *s, lq_delivery *const *dvs, size_t n) {
    if (s->flow.holds) return; /* their connections stay held until they settle */
    pthread_mutex_lock(&s->mu);
    int before = s->settling;
    for (size_t i = 0; i < n; i++) {
        if (dvs[i]->handed && !dvs[i]->settling) {
            dvs[i]->settling = true;
            s->settling++;
        }
    }
    if (s->settling != before) {
        /* Under holds, a run that ended gave its room back (forms/holds.c):
         * a claim cut short by the limit goes again now, not after the
         * settlement's commit. */
        if (s->holds.on) {
            atomic_fetch_add(&s->room_events, 1);
            if (atomic_load(&s->at_limit) || atomic_load(&s->limit_rests)) s->woken = true;
        }
        wake_a_claimer(s);
    }
    pthread_mutex_unlock(&s->mu);
}

void lq__subscription_let_go_early(lq_subscription *s, lq_delivery *d) {
    pthread_mutex_lock(&s->mu);
    if (d->handed && !d->let_go_early) {
        d->let_go_early = true;
        s->let_go_early++;
        if (slots_held_here(s)) { /* its slot is free */
            s->woken = true;
            wake_a_claimer(s);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void lq__subscription_acks_queued(lq_subscription *s) {
    if (!s->carries_acks) return;
    atomic_fetch_add(&s->room_events, 1); /* before the marks are read: rest_at_limit */
    if (!atomic_load(&s->at_limit) && !atomic_load(&s->limit_rests) && !atomic_load(&s->alone_carries))
        return;
    pthread_mutex_lock(&s->mu);
    s->woken = true;
    wake_a_claimer(s);
    pthread_mutex_unlock(&s->mu);
}

/* Counts a delivery out of the flow; true when it gave room back to the
 * broker. s->mu held. */
static bool count_settled(lq_subscription *s, lq_delivery *d) {
    bool room_freed = false;
    if (d->reserved) { /* it never took the connection counted for it */
        d->reserved = false;
        s->held--;
        room_freed = account_room(s);
    }
    if (d->settling) {
        d->settling = false;
        s->settling--;
    }
    if (d->handed) {
        s->in_work--;
        atomic_fetch_sub(&s->coalescer.in_work, 1);
        if (s->lanes) s->lane_busy[d->lane]--;
        if (d->key_counted) lq__key_counts_add(&s->key_counts, d->partition_key, -1);
        if (d->let_go_early) s->let_go_early--;
        d->let_go_early = false;
        d->key_counted = false;
        d->handed = false;
    }
    return room_freed;
}

void lq__subscription_settled(lq_subscription *s, lq_delivery *const *dvs, size_t n,
                              const lq__freed *freed) {
    /* The rows' room under concurrency's holds, back before the wake-up. */
    for (size_t i = 0; i < n; i++) lq__holds_let_go(dvs[i]);
    bool gave_back = freed->conn && !freed->chained;
    if (freed->chained) { /* still counted in s->held */
        chained.conn = freed->conn;
        chained.of = s;
        chained.claimed = freed->claimed;
    } else if (gave_back) {
        lq__pool_release(&s->broker->pool, freed->conn, freed->broken);
    }
    pthread_mutex_lock(&s->mu);
    s->carried += freed->claimed != NULL;
    bool room_freed = false;
    if (gave_back) {
        s->held--;
        room_freed = account_room(s);
    }
    for (size_t i = 0; i < n; i++) room_freed |= count_settled(s, dvs[i]);
    /* A key came free (an advisory key, or a row lock's key slot: its
     * transaction held it), which a claim of any size may have passed
     * over; or room under the queue-wide limit, which a claim it cut waits
     * for (rest_at_limit), unless a claim carrying the ack took it (as an
     * advisory settlement's claim takes its slot). */
    bool key_freed = s->form == LQ_FORM_ADVISORY ||
                     (s->form == LQ_FORM_ROW_LOCK && s->table->partition_limit);
    bool room_back = false;
    if (!freed->room_taken) { /* else the claim carrying its ack took the room */
        atomic_fetch_add(&s->room_events, 1);
        room_back = atomic_load(&s->at_limit) || atomic_load(&s->limit_rests);
    }
    if (key_freed || room_back) s->woken = true;
    wake_a_claimer(s);
    if (s->lanes || s->key_limit) { /* its lane or key may take the next */
        pthread_cond_broadcast(&s->ready_cv);
        show_ready(s);
    }
    if (freed->pause_read) { /* last: a pause lets go of s->mu */
        s->pause_reading = false;
        pause_answer(s, freed->pause_read > 0, freed->paused);
    }
    pthread_mutex_unlock(&s->mu);
    if (room_freed) lq__broker_wake_room(s->broker, &s->member);
    atomic_fetch_add(&s->stats[LQ_STAT_SETTLED], (int64_t)n);
}

typedef struct worker_arg {
    lq_subscription *s;
    int lane;
} worker_arg;

/* Settles a delivery its handler left unsettled: an ack when the handler
 * returned LQ_OK, a retry otherwise. */
static void settle_unsettled(lq_delivery *d, int status) {
    if (d->settled) return;
    int rc = status == LQ_OK ? lq__settle(d, LQ__ACK, 0) : lq__settle(d, LQ__RETRY, 0);
    if (rc != LQ_OK) lq__log_error(LQ_LOG_WARNING, "settling after the handler");
}

/* An advisory run that ended lets its concurrency slots go before its
 * settlement where a claimer here waits for room: that claim goes while the
 * settlement commits (what the limit bounds is runs, as under holds). Not
 * where the worker claims its next row in its settlement's transaction in
 * the same round trip (`chains`, where the dialect pipelines): that claim
 * takes the slot over, sooner. */
static void slots_first(lq_subscription *s, lq_delivery *d, bool chains) {
    if (s->form != LQ_FORM_ADVISORY || !s->concurrency || s->transactional) return;
    if (lq__advisory_hands_slot_over(s, chains)) return;
    pthread_mutex_lock(&s->mu);
    /* Claimers idle for room: the last claim found every slot held, or
     * this process's rows hold them all (may_claim). Not those resting on
     * an empty queue, which the slot would only wake to claim nothing. */
    bool at_limit = atomic_load(&s->limit_rests) || slot_rows_here(s) >= s->concurrency;
    bool wanted = s->claimers_idle > 0 && at_limit && !s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (wanted && lq__advisory_slots_first(d)) lq__subscription_let_go_early(s, d);
}

/* Settles what a handler left unsettled by its return, and lets go. An ack
 * goes to the acker where it runs (the acker lets go). */
static void finish_delivery(lq_delivery *d, int status, bool chains) {
    lq__delivery_end_run(d);
    if (status == LQ_OK && !d->settled && lq__acker_take(&d->sub->acker, &d, 1, false)) return;
    if (!d->settled) slots_first(d->sub, d, chains);
    settle_unsettled(d, status);
    lq__delivery_unref(d);
}

/* Takes up to `capacity` waiting deliveries; s->mu held. */
static size_t take_many(lq_subscription *s, lq_delivery **out, size_t capacity) {
    size_t n = 0;
    lq_delivery **slot;
    while (n < capacity && (slot = next_ready(s, -1)))
        if ((out[n] = take_held(s, slot))) n++;
    return n;
}

/* A push worker with no row waiting: claims for itself under workers_claim,
 * else waits for the claim threads' rows. s->mu held. */
static void await_rows(lq_subscription *s) {
    if (s->workers_claim) claim_turn(s, true);
    else pthread_cond_wait(&s->ready_cv, &s->mu);
}

static void *batch_worker_main(void *arg) {
    lq_subscription *s = ((worker_arg *)arg)->s;
    free(arg);
    /* The deliveries, and the handles the handler gets (lq__handle_of). */
    lq_delivery **batch = malloc(2 * (size_t)s->batch * sizeof *batch);
    lq_delivery **handles = batch ? batch + s->batch : NULL;
    pthread_mutex_lock(&s->mu);
    while (batch) {
        while (!s->stopping && !next_ready(s, -1)) await_rows(s);
        if (s->stopping) break;
        size_t n = take_many(s, batch, (size_t)s->batch);
        if (n == 0) continue; /* their leases ran out */
        pthread_mutex_unlock(&s->mu);
        for (size_t i = 0; i < n; i++) handles[i] = lq__handle_of(batch[i]);
        running_handler_of = s;
        int status = s->batch_handler(handles, n, s->userdata);
        running_handler_of = NULL;
        for (size_t i = 0; i < n; i++) lq__delivery_end_run(batch[i]);
        if (status == LQ_OK) lq__settle_acks(NULL, batch, n, s->coalesce);
        for (size_t i = 0; i < n; i++) settle_unsettled(batch[i], status);
        lq__deliveries_unref(batch, n);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    if (!batch) lq__log(LQ_LOG_ERROR, "a batch worker could not start: out of memory");
    free(batch);
    return NULL;
}

static void *handler_thread_main(void *arg);

/* Under on_threads a handler thread has a pool of its own, opened on the
 * thread and closed when it ends. */
static void *worker_main(void *arg) {
    lq_subscription *s = ((worker_arg *)arg)->s;
    if (!s->on_threads) return handler_thread_main(arg);
    lq__pool pool;
    if (lq__pool_init_sized(&pool, s->broker->dialect, &s->broker->target, s->broker->options,
                            s->thread_connections) != LQ_OK) {
        lq__log_error(LQ_LOG_ERROR, "a handler thread's pool");
        return handler_thread_main(arg);
    }
    own_pool = &pool;
    void *result = handler_thread_main(arg);
    own_pool = NULL;
    lq__pool_destroy(&pool);
    return result;
}

static void *handler_thread_main(void *arg) {
    lq_subscription *s = ((worker_arg *)arg)->s;
    if (s->batch_handler) return batch_worker_main(arg);
    int lane = s->lanes ? ((worker_arg *)arg)->lane : -1;
    free(arg);
    /* A worker claims next after its settlement: it chains (not under a
     * rate limit, whose starts are reserved before the claim's transaction
     * begins). In the row lock form its settlement commits AND CHAINs; in
     * the advisory form it claims the next row in its own transaction
     * (lq__advisory_settle_exec). */
    const lq__dialect *dialect = s->broker->dialect;
    bool chains = s->workers_claim && !s->transactional && !s->rate_limit &&
                  (s->form == LQ_FORM_ROW_LOCK ? dialect->commit_chain != NULL
                   : s->form == LQ_FORM_ADVISORY && lq__advisory_carries(s));
    pthread_mutex_lock(&s->mu);
    for (;;) {
        lq_delivery **slot;
        while (!s->stopping && !(slot = next_ready(s, lane))) {
            lq__flow_waited(&s->flow);
            await_rows(s);
        }
        if (s->stopping) break;
        lq_delivery *d = take_held(s, slot);
        if (!d) continue; /* its lease ran out */
        pthread_mutex_unlock(&s->mu);
        drop_chained(s); /* a row came some other way: no claim next */
        if (s->transactional && lq__delivery_begin(d) != LQ_OK) {
            lq__log_error(LQ_LOG_ERROR, "opening the handler's transaction");
            lq_delivery_free(d); /* back to the queue */
            pthread_mutex_lock(&s->mu);
            continue;
        }

        running_handler_of = s;
        int status = s->handler(lq__handle_of(d), s->userdata);
        running_handler_of = NULL;
        chained.settling_for = chains ? s : NULL;
        finish_delivery(d, status, chains);
        chained.settling_for = NULL;
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    drop_chained(s);
    return NULL;
}

static void stop_threads(lq_subscription *s);

static int start_push(lq_subscription *s, lq_handler_fn handler, lq_batch_handler_fn batch_handler,
                      void *userdata) {
    pthread_mutex_lock(&s->mu);
    /* Refused before anything changes: a subscription already running (or
     * pulled from, or stopped) goes on as it was. */
    int refused = s->mode == LQ__MODE_PUSH && !s->stopping
                      ? lq__error(LQ_MISUSE, "the subscription is already running")
                      : mode_allowed(s, LQ__MODE_PUSH);
    if (refused != LQ_OK) {
        pthread_mutex_unlock(&s->mu);
        return refused;
    }
    s->handler = handler;
    s->batch_handler = batch_handler;
    s->userdata = userdata;
    /* Where each claim serves one free worker (a row, or a batch, that keeps
     * its connection), the worker makes it and takes what it claimed: no
     * hand-off between threads per claim. One claim for many workers, lanes
     * and handler threads with pools of their own keep claim threads. */
    s->workers_claim =
        s->flow.holds && !s->flow.one_claim && !s->lanes && !s->key_limit && !s->on_threads;
    int rc = start_locked(s, LQ__MODE_PUSH);
    if (rc == LQ_OK && !batch_handler && lq__acker_wanted(s)) rc = lq__acker_start(&s->acker);
    if (rc == LQ_OK && !(s->threads = calloc((size_t)s->workers, sizeof *s->threads)))
        rc = lq__error(LQ_NOMEM, "out of memory");
    for (int i = 0; rc == LQ_OK && i < s->workers; i++) {
        worker_arg *arg = malloc(sizeof *arg);
        if (!arg) {
            rc = lq__error(LQ_NOMEM, "out of memory");
            break;
        }
        *arg = (worker_arg){s, i};
        if (pthread_create(&s->threads[i], NULL, worker_main, arg) != 0) {
            free(arg);
            rc = lq__error(LQ_ERROR, "cannot start worker thread %d", i + 1);
        } else {
            s->thread_count++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != LQ_OK) stop_threads(s); /* keeps the error that says why */
    return rc;
}

int lq_subscription_run(lq_subscription *s, lq_handler_fn handler, void *userdata) {
    lq__error_clear();
    LQ__CHECK_ARG(s && handler, "an argument is NULL");
    if (s->batch)
        return lq__error(LQ_MISUSE, "a batch subscription runs a batch handler "
                                    "(lq_subscription_run_batch)");
    return start_push(s, handler, NULL, userdata);
}

int lq_subscription_run_batch(lq_subscription *s, lq_batch_handler_fn handler, void *userdata) {
    lq__error_clear();
    LQ__CHECK_ARG(s && handler, "an argument is NULL");
    if (!s->batch) return lq__error(LQ_MISUSE, "lq_subscription_run_batch needs option batch");
    return start_push(s, NULL, handler, userdata);
}

/* A pull that timed out while claims kept failing for at least its whole
 * wait reports the last failure instead; s->mu held. */
static int timed_out(lq_subscription *s, int64_t timeout_ms) {
    int64_t failing_ms = s->failing_since ? lq__mono_ms() - s->failing_since : -1;
    if (failing_ms < timeout_ms)
        return lq__error(LQ_TIMEOUT, "no delivery within %lld ms", (long long)timeout_ms);
    lq__error_restore(&s->last_failure);
    lq__error_prefix("no delivery within %lld ms: claims have failed for %lld ms",
                     (long long)timeout_ms, (long long)failing_ms);
    return s->last_failure.status;
}

int lq_subscription_health(const lq_subscription *s, int64_t *failing_ms_out) {
    lq__error_clear();
    if (failing_ms_out) *failing_ms_out = 0;
    LQ__CHECK_ARG(s, "subscription is NULL");
    lq_subscription *m = (lq_subscription *)s;
    pthread_mutex_lock(&m->mu);
    int rc = LQ_OK;
    if (m->failing_since) {
        if (failing_ms_out) *failing_ms_out = lq__mono_ms() - m->failing_since;
        lq__error_restore(&m->last_failure);
        rc = m->last_failure.status;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int lq_subscription_next_batch(lq_delivery **out, size_t capacity, size_t *count_out,
                               lq_subscription *s, int64_t timeout_ms) {
    lq__error_clear();
    if (count_out) *count_out = 0;
    LQ__CHECK_ARG(out && count_out && s && capacity > 0, "an argument is NULL or zero");
    LQ__CHECK_ARG(timeout_ms >= -1, "timeout_ms is -1 (no limit) or from 0");
    pthread_mutex_lock(&s->mu);
    int rc = start_locked(s, LQ__MODE_PULL);
    struct timespec deadline = lq__deadline_in(timeout_ms);
    while (rc == LQ_OK && *count_out == 0) {
        while (rc == LQ_OK && !s->stopping && !next_ready(s, -1)) {
            if (timeout_ms < 0) pthread_cond_wait(&s->ready_cv, &s->mu);
            else if (pthread_cond_timedwait(&s->ready_cv, &s->mu, &deadline) == ETIMEDOUT)
                rc = timed_out(s, timeout_ms);
        }
        if (rc == LQ_OK && s->stopping) rc = lq__error(LQ_CLOSED, "the subscription is stopped");
        if (rc == LQ_OK) *count_out = take_many(s, out, capacity); /* none: their leases ran out */
    }
    for (size_t i = 0; i < *count_out; i++) out[i] = lq__handle_of(out[i]);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The delivery a pull took (rc LQ_OK), as the caller's handle: in
 * transactional mode with its transaction open. */
static int hand_out(lq_delivery **out, lq_subscription *s, int rc) {
    if (rc == LQ_OK && s->transactional && (rc = lq__delivery_begin(*out)) != LQ_OK) {
        lq_delivery_free(*out); /* back to the queue */
        *out = NULL;
    }
    *out = lq__handle_of(*out);
    return rc;
}

int lq_subscription_next(lq_delivery **out, lq_subscription *s, int64_t timeout_ms) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL;
    LQ__CHECK_ARG(s, "the subscription is NULL");
    LQ__CHECK_ARG(timeout_ms >= -1, "timeout_ms is -1 (no limit) or from 0");
    pthread_mutex_lock(&s->mu);
    int rc = start_locked(s, LQ__MODE_PULL);
    struct timespec deadline = lq__deadline_in(timeout_ms);
    while (rc == LQ_OK && !*out) {
        lq_delivery **slot = NULL;
        while (rc == LQ_OK && !s->stopping && !(slot = next_ready(s, -1))) {
            lq__flow_waited(&s->flow);
            if (timeout_ms < 0) pthread_cond_wait(&s->ready_cv, &s->mu);
            else if (pthread_cond_timedwait(&s->ready_cv, &s->mu, &deadline) == ETIMEDOUT)
                rc = timed_out(s, timeout_ms);
        }
        if (rc == LQ_OK && s->stopping) rc = lq__error(LQ_CLOSED, "the subscription is stopped");
        if (rc == LQ_OK) *out = take_held(s, slot); /* NULL: its lease ran out */
    }
    pthread_mutex_unlock(&s->mu);
    return hand_out(out, s, rc);
}

int lq_subscription_try_next(lq_delivery **out, lq_subscription *s) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL;
    LQ__CHECK_ARG(s, "the subscription is NULL");
    pthread_mutex_lock(&s->mu);
    int rc = start_locked(s, LQ__MODE_PULL);
    while (rc == LQ_OK && !*out) {
        lq_delivery **slot = NULL;
        if (s->stopping) {
            rc = lq__error(LQ_CLOSED, "the subscription is stopped");
        } else if (!(slot = next_ready(s, -1))) {
            lq__flow_waited(&s->flow); /* a taker found none: claims look ahead */
            rc = lq__error(LQ_TIMEOUT, "no delivery ready now");
        } else {
            *out = take_held(s, slot); /* NULL: its lease ran out */
        }
    }
    pthread_mutex_unlock(&s->mu);
    return hand_out(out, s, rc);
}

int lq_subscription_try_next_batch(lq_delivery **out, size_t capacity, size_t *count_out,
                                   lq_subscription *s) {
    lq__error_clear();
    LQ__CHECK_ARG(count_out, "count_out is NULL");
    *count_out = 0;
    LQ__CHECK_ARG(out && s && capacity > 0, "an argument is NULL or zero");
    pthread_mutex_lock(&s->mu);
    int rc = start_locked(s, LQ__MODE_PULL);
    size_t n = 0;
    if (rc == LQ_OK && s->stopping) {
        rc = lq__error(LQ_CLOSED, "the subscription is stopped");
    } else if (rc == LQ_OK && !(n = take_many(s, out, capacity))) {
        lq__flow_waited(&s->flow); /* a taker found none: claims look ahead */
        rc = lq__error(LQ_TIMEOUT, "no delivery ready now");
    }
    pthread_mutex_unlock(&s->mu);
    /* In transactional mode each opens its transaction; past the first that
     * cannot, the rest go back to the queue unspent, and the ones before it
     * are the caller's (its error only when it was the first). */
    size_t given = 0;
    for (size_t i = 0; i < n; i++) {
        if (given < i) {
            lq_delivery_free(out[i]);
            out[i] = NULL;
            continue;
        }
        int taken = hand_out(&out[i], s, LQ_OK);
        if (taken == LQ_OK) given++;
        else if (i == 0) rc = taken;
    }
    *count_out = given;
    return rc;
}

int lq_subscription_fd(int *fd_out, lq_subscription *s) {
    lq__error_clear();
    LQ__CHECK_ARG(fd_out, "fd_out is NULL");
    *fd_out = -1;
    LQ__CHECK_ARG(s, "the subscription is NULL");
    pthread_mutex_lock(&s->mu);
    /* Once open, it is given out even when stopped: it is raised then. */
    int rc = s->ready.open ? LQ_OK : start_locked(s, LQ__MODE_PULL);
    if (rc == LQ_OK && !s->ready.open && (rc = lq__ready_fd_open(&s->ready)) == LQ_OK)
        show_ready(s);
    if (rc == LQ_OK) *fd_out = s->ready.read_fd;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The room its holds keep beyond the rows still in work goes back to the
 * queue; where it cannot, it comes back when the holds' time ends. */
static void give_back_holds(lq_subscription *s, bool closing) {
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, &s->broker->pool);
    if (rc == LQ_OK) {
        rc = lq__holds_trim(s, conn, closing);
        lq__pool_release(&s->broker->pool, conn, rc == LQ_CONNECT);
    }
    if (rc != LQ_OK) lq__log_error(LQ_LOG_WARNING, "giving back concurrency's holds at close");
    lq__error_clear();
}

int lq_subscription_stop(lq_subscription *s) {
    lq__error_clear();
    LQ__CHECK_ARG(s, "subscription is NULL");
    if (running_handler_of == s)
        return lq__error(LQ_MISUSE, "a subscription cannot be stopped from its own handler, "
                                    "which stop waits for: stop it from another thread");
    stop_threads(s);
    if (s->holds.on) give_back_holds(s, false); /* a stopped subscription claims no more */
    return LQ_OK;
}

/* Stops the subscription's threads and gives back the rows claimed and never
 * handed out; the thread's error, if any, stays as it was. */
static void stop_threads(lq_subscription *s) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        /* Another thread's stop: this one ends with it, so that its caller
         * may close the subscription once it returns. */
        while (!s->stop_ended) pthread_cond_wait(&s->stop_cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->stopping = true;
    atomic_store(&s->waits_abandoned, true);
    bool started = s->started;
    pthread_cond_broadcast(&s->claim_cv);
    pthread_cond_broadcast(&s->ready_cv);
    show_ready(s); /* raised for good: its waiters find LQ_CLOSED */
    pthread_mutex_unlock(&s->mu);

    for (int i = 0; started && i < s->claimer_count; i++) pthread_join(s->claimers[i], NULL);
    atomic_store(&s->at_limit, false); /* no claim carries the acks of the runs still ending */
    atomic_store(&s->alone_carries, false);
    for (int i = 0; i < s->thread_count; i++) pthread_join(s->threads[i], NULL);
    lq__acker_stop(&s->acker); /* after the workers: it runs every ack they left */

    /* Rows claimed but never handed out go back at once, but where the
     * database has one writer and a transactional delivery is in work:
     * its transaction may hold the write lock their release would wait
     * for, on this very thread, so they go back at close. A stopped
     * subscription waits for no room, so the others need leave it none. */
    pthread_mutex_lock(&s->mu);
    lq__claimed left = {.head = s->queue_head, .tail = s->queue_tail, .count = s->waiting};
    s->queue_head = s->queue_tail = NULL;
    s->waiting = 0;
    s->stopped = true;
    if (s->transactional && s->in_work > 0 && s->broker->dialect->single_writer) {
        s->left_head = left.head;
        s->left_tail = left.tail;
        s->left_count = left.count;
        left = (lq__claimed){0};
    }
    pthread_mutex_lock(&s->broker->room_mu);
    bool was_starved = s->room_starved;
    set_starved(s, false);
    pthread_mutex_unlock(&s->broker->room_mu);
    pthread_mutex_unlock(&s->mu);
    if (was_starved) lq__broker_wake_room(s->broker, &s->member);
    lq__claimed_free(&left);
    pthread_mutex_lock(&s->mu);
    s->stop_ended = true;
    pthread_cond_broadcast(&s->stop_cv);
    pthread_mutex_unlock(&s->mu);
}

void lq_subscription_close(lq_subscription *s) {
    if (!s) return;
    if (running_handler_of == s) {
        lq__log(LQ_LOG_ERROR, "a subscription cannot be closed from its own handler; not closed");
        return;
    }
    lq_subscription_stop(s);
    pthread_mutex_lock(&s->mu);
    lq__claimed left = {.head = s->left_head, .tail = s->left_tail, .count = s->left_count};
    s->left_head = s->left_tail = NULL;
    s->left_count = 0;
    bool in_work = s->in_work > 0;
    pthread_mutex_unlock(&s->mu);
    /* A delivery still in work may hold the lock: the release does not wait
     * for it, and rows it cannot give back return when their leases end. */
    if (in_work) waiting_for = s;
    lq__claimed_free(&left);
    waiting_for = NULL;
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    pthread_cond_broadcast(&s->keeper_cv);
    lq__ready_fd_close(&s->ready); /* deliveries that outlive it settle without it */
    pthread_mutex_unlock(&s->mu);
    if (s->has_keeper) pthread_join(s->keeper, NULL);
    if (s->holds.on) give_back_holds(s, true);
    lq__broker_detach(s->broker, &s->member);
    lq__subscription_unref(s);
}

int lq_subscription_in_handler(const lq_subscription *s) {
    return s && running_handler_of == s;
}

int64_t lq_subscription_stat(const lq_subscription *s, int stat) {
    if (!s) return 0;
    lq_subscription *m = (lq_subscription *)s;
    if (stat == LQ_STAT_IN_WORK || stat == LQ_STAT_WAITING || stat == LQ_STAT_POLL_INTERVAL_MS ||
        stat == LQ_STAT_PAUSED) {
        pthread_mutex_lock(&m->mu);
        int64_t v = stat == LQ_STAT_IN_WORK   ? m->in_work
                    : stat == LQ_STAT_WAITING ? m->waiting
                    : stat == LQ_STAT_PAUSED  ? (int64_t)m->paused
                                              : (int64_t)m->interval_ms;
        pthread_mutex_unlock(&m->mu);
        return v;
    }
    if (stat == LQ_STAT_POOL_IN_USE || stat == LQ_STAT_POOL_IDLE) {
        int lent, idle;
        lq__pool_counts(&m->broker->pool, &lent, &idle);
        return stat == LQ_STAT_POOL_IN_USE ? lent : idle;
    }
    if (stat < LQ_STAT_CLAIMS || stat > LQ_STAT_SETTLE_ERRORS) return 0;
    return atomic_load(&m->stats[stat]);
}
