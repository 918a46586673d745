/* Settlements: what an outcome writes, on every form. The delivery's mutex
 * keeps a settlement and a lease extension of the same row apart, so the
 * token a settlement names is the one the row holds. */
#include "base/clock.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

static const char *outcome_name(lq__outcome o) {
    switch (o) {
    case LQ__ACK: return "ack";
    case LQ__RETRY: return "retry";
    case LQ__RETRY_AFTER: return "retry_after";
    case LQ__DEAD_LETTER: return "dead letter";
    default: return "release";
    }
}

/* Dead letter into a table: copy the row, clear the copy's lease, delete the
 * row, all inside the caller's transaction. */
static int dead_letter_to_table(int64_t *changes, lq_subscription *s, lq__conn *c,
                                const lq__value *args) {
    const lq__dialect *d = s->broker->dialect;
    int rc = d->exec(NULL, c, &s->sql.dead_copy, args, NULL, NULL);
    if (rc == LQ_OK && s->sql.dead_clear.sql) rc = d->exec(NULL, c, &s->sql.dead_clear, args, NULL, NULL);
    if (rc == LQ_OK) rc = d->exec(changes, c, &s->sql.dead_delete, args, NULL, NULL);
    return rc;
}

static const lq__stmt *outcome_statement(const lq_subscription *s, lq__outcome outcome) {
    switch (outcome) {
    case LQ__ACK: return &s->sql.ack;
    case LQ__RETRY: return &s->sql.retry;
    case LQ__RELEASE: return &s->sql.release;
    case LQ__RETRY_AFTER: return &s->sql.retry_after;
    default: return s->sql.dead_group.sql ? &s->sql.dead_group : NULL; /* NULL: to a table */
    }
}

/* Transactional mode: an ack commits the handler's statements with the
 * settlement; any other outcome rolls them back first (to the claim's
 * savepoint in the row lock form, where the claim's transaction goes on). */
static int end_handler_tx(lq_delivery *dv, lq__outcome outcome) {
    lq_subscription *s = dv->sub;
    const lq__dialect *d = s->broker->dialect;
    if (!dv->tx || outcome == LQ__ACK) return LQ_OK;
    dv->tx = false;
    if (s->form == LQ_FORM_ROW_LOCK) return d->execute(NULL, dv->conn, "ROLLBACK TO SAVEPOINT lq_claim", NULL, 0);
    return d->rollback(dv->conn);
}

/* A row lock batch: the settlement's statement runs in the shared
 * transaction, for `count` of its deliveries (one, or a set acked together,
 * whose statement must change one row each); the last settlement commits it.
 * A failing statement rolls the whole batch back, and every row returns, the
 * settled ones too. */
static int settle_shared(lq__freed *freed, lq_delivery *const *dvs, size_t count,
                         const lq__stmt *stmt, const lq__value *args) {
    lq_subscription *s = dvs[0]->sub;
    const lq__dialect *d = s->broker->dialect;
    lq__shared_tx *tx = dvs[0]->shared;
    int rc = LQ_OK;
    pthread_mutex_lock(&tx->mu);
    if (tx->rolled_back) {
        rc = lq__error(LQ_BATCH_ROLLED_BACK, "row %lld: an earlier settlement rolled its batch "
                                             "back; the row is back in the queue",
                       (long long)dvs[0]->id);
    } else {
        int64_t changes = 0;
        if (stmt && stmt->sql) rc = d->exec(&changes, tx->conn, stmt, args, NULL, NULL);
        else if (!stmt) rc = dead_letter_to_table(&changes, s, tx->conn, args);
        if (rc == LQ_OK && count > 1 && changes != (int64_t)count)
            rc = lq__error(LQ_BACKEND, "acking %zu rows of a batch together changed %lld", count,
                           (long long)changes);
        if (rc != LQ_OK) {
            d->rollback(tx->conn);
            tx->rolled_back = true;
        }
    }
    tx->open -= (int)count;
    bool last = tx->open == 0;
    if (last && !tx->rolled_back) {
        int end = d->commit(tx->conn);
        if (rc == LQ_OK) rc = end;
    }
    lq__conn *conn = NULL;
    if (last || tx->rolled_back) { /* the transaction is over */
        conn = tx->conn;
        tx->conn = NULL;
    }
    pthread_mutex_unlock(&tx->mu);
    if (conn) *freed = (lq__freed){.conn = conn, .broken = rc == LQ_CONNECT};
    for (size_t i = 0; i < count; i++) dvs[i]->shared = NULL;
    if (last) {
        pthread_mutex_destroy(&tx->mu);
        free(tx);
    }
    return rc;
}

/* The values every settlement statement of a delivery binds. */
static void settle_args(lq__value *args, const lq_delivery *dv, int64_t delay_ms) {
    const char *dest = dv->sub->table->dead_letter, *group = dv->sub->group;
    int64_t now = lq__now_ms();
    memset(args, 0, LQ__P_COUNT * sizeof *args);
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = dv->id};
    args[LQ__P_HELD] = (lq__value){.type = LQ__V_TIME, .i = dv->token};
    args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = now};
    args[LQ__P_RETRY_AFTER] = (lq__value){.type = LQ__V_TIME, .i = lq__time_after(now, delay_ms)};
    if (dest) args[LQ__P_DEST] = (lq__value){.type = LQ__V_TEXT, .p = dest, .n = strlen(dest)};
    if (group) args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = group, .n = strlen(group)};
}

/* A settlement that found its row gone. In the lease form its token went:
 * the row left its queue (cancelled), or another claim holds it since this
 * lease ran out. In the advisory form, whose run holds the row's key, only
 * a cancel takes the row. */
static int row_lost(const lq_delivery *dv, lq__outcome outcome) {
    if (dv->cancelled || dv->sub->form == LQ_FORM_ADVISORY || lq__lease_row_left(dv->sub, NULL, dv))
        return lq__error(LQ_CANCELLED, "row %lld was cancelled while in work; the %s changed "
                                       "nothing",
                         (long long)dv->id, outcome_name(outcome));
    return lq__error(LQ_LEASE_LOST,
                     "row %lld: its lease ran out and another claim holds it; the %s changed "
                     "nothing",
                     (long long)dv->id, outcome_name(outcome));
}

/* Why a row goes to the dead letters, for the dead_reason role: `why` where
 * the caller knows (max_attempts, timeout), else what the delivery says. */
static const char *dead_reason(const lq_delivery *dv, const char *why) {
    if (why) return why;
    if (dv->past_expiry) return "expired";
    if (dv->oversize_payload || dv->oversize_headers) return "oversize";
    return "dead_letter";
}

static int run_outcome(lq__freed *freed, lq_delivery *dv, lq__outcome outcome, int64_t delay_ms,
                       const char *why) {
    lq_subscription *s = dv->sub;
    const lq__dialect *d = s->broker->dialect;
    const lq__stmt *stmt = outcome_statement(s, outcome);
    /* A transaction is open on the delivery's connection: the claim's (row
     * lock form) or the handler's (transactional mode). */
    int rc = end_handler_tx(dv, outcome);
    bool in_tx = dv->tx || s->form == LQ_FORM_ROW_LOCK;
    if (rc != LQ_OK) return rc;
    if (s->form == LQ_FORM_ROW_LOCK && !dv->conn && !dv->shared) return LQ_OK; /* nothing held */
    if (!in_tx && stmt && !stmt->sql) return LQ_OK; /* this form settles by letting go */

    lq__value args[LQ__P_COUNT];
    settle_args(args, dv, delay_ms);
    if (outcome == LQ__DEAD_LETTER) {
        const char *reason = dead_reason(dv, why);
        args[LQ__P_REASON] = (lq__value){.type = LQ__V_TEXT, .p = reason, .n = strlen(reason)};
    }

    if (dv->shared) return settle_shared(freed, &dv, 1, stmt, args);
    if (s->coalesce && !in_tx && !dv->conn && stmt) {
        /* One statement on a pool connection: commit it with the others. */
        int64_t changes = 0;
        rc = lq__coalesced_exec(&changes, &s->coalescer, &s->broker->pool, stmt, args);
        if (rc == LQ_OK && changes == 0) rc = row_lost(dv, outcome);
        return rc;
    }
    lq__conn *conn = dv->conn;
    if (!conn && (rc = lq__pool_acquire(&conn, &s->broker->pool)) != LQ_OK) return rc;
    bool own_tx = !in_tx && !stmt; /* a dead letter to a table is three statements */
    /* A row lock holds its row; a lease or a key may find it gone. */
    int64_t changes = 1, *counted = s->form != LQ_FORM_ROW_LOCK ? &changes : NULL;
    bool lost = false, chained = false;
    int tries = 0;
    do {
        rc = own_tx ? d->begin(conn, LQ_ISOLATION_DEFAULT) : LQ_OK;
        bool own_keys = s->form == LQ_FORM_ADVISORY && conn == dv->conn && !in_tx && !own_tx;
        bool claim_next = own_keys && outcome != LQ__RELEASE && lq__subscription_chains(s);
        if (rc == LQ_OK && stmt && stmt->sql && own_keys)
            rc = lq__advisory_settle_exec(counted, freed, dv, stmt, args, claim_next);
        else if (rc == LQ_OK && stmt && stmt->sql) rc = d->exec(counted, conn, stmt, args, NULL, NULL);
        else if (rc == LQ_OK && !stmt) rc = dead_letter_to_table(counted, s, conn, args);
        lost = rc == LQ_OK && changes == 0;
        if (in_tx || own_tx) {
            /* Nothing written (a release, a retry that counts nothing) or
             * nothing to keep: the rollback returns the row as it was. A row
             * lock worker that claims next chains its claim's transaction. */
            bool keep = rc == LQ_OK && !lost && (!stmt || stmt->sql);
            bool chain = keep && conn == dv->conn && d->commit_chain && lq__subscription_chains(s);
            int end = !keep ? d->rollback(conn) : chain ? d->commit_chain(&chained, conn) : d->commit(conn);
            if (rc == LQ_OK && keep) rc = end;
        }
        /* A conflict at commit (a Galera node's certification) rolled back
         * a settlement of its own: it runs again, not lost. One in the
         * claim's or the handler's transaction took that transaction with it. */
    } while (!in_tx && lq__settle_again(rc, &tries));
    dv->tx = false;
    /* The delivery's connection goes back now, but in the advisory form,
     * where it still holds the key until lq__advisory_release. */
    if (conn != dv->conn) {
        lq__pool_release(&s->broker->pool, conn, rc == LQ_CONNECT);
    } else if (s->form != LQ_FORM_ADVISORY) {
        dv->conn = NULL;
        *freed = (lq__freed){.conn = conn, .broken = rc == LQ_CONNECT, .chained = chained};
    }
    if (lost) rc = row_lost(dv, outcome);
    return rc;
}

/* Counts `n` settlements by how they ended: once a row, by its fate. */
static void count_outcome(lq_subscription *s, lq__outcome outcome, int rc, int64_t n) {
    int stat = rc == LQ_LEASE_LOST      ? LQ_STAT_LEASE_LOST
               : rc != LQ_OK            ? LQ_STAT_SETTLE_ERRORS
               : outcome == LQ__ACK     ? LQ_STAT_ACKED
               : outcome == LQ__RELEASE ? 0 /* unrun: back with no attempt spent */
               : outcome == LQ__DEAD_LETTER ? LQ_STAT_DEAD_LETTERED
                                            : LQ_STAT_RETRIED;
    if (stat) atomic_fetch_add(&s->stats[stat], n);
}

int lq__settle(lq_delivery *dv, lq__outcome outcome, int64_t delay_ms) {
    lq_subscription *s = dv->sub;
    pthread_mutex_lock(&dv->mu);
    if (dv->settled || dv->in_set) {
        pthread_mutex_unlock(&dv->mu);
        return lq__error(LQ_MISUSE, "row %lld is already %s", (long long)dv->id,
                         dv->settled ? "settled" : "being acked");
    }
    bool fails = outcome == LQ__RETRY || outcome == LQ__RETRY_AFTER;
    const char *why = NULL;
    if (fails && s->max_attempts > 0 && dv->attempt >= s->max_attempts) {
        outcome = LQ__DEAD_LETTER;
        why = "max_attempts";
    }
    if (outcome == LQ__RETRY_AFTER && !s->sql.retry_after.sql) {
        lq__log(LQ_LOG_WARNING,
                "row %lld: retry after %lld ms needs a retry_after column; retrying now",
                (long long)dv->id, (long long)delay_ms);
        outcome = LQ__RETRY;
    }
    if (outcome == LQ__DEAD_LETTER && !s->table->dead_letter) {
        pthread_mutex_unlock(&dv->mu);
        return lq__error(LQ_MISUSE, "row %lld: the table has no dead-letter destination",
                         (long long)dv->id);
    }
    atomic_store(&dv->run_ended, true); /* under mu: no expiry from now on */
    if (dv->expired || dv->taken_out) { /* its row went already: only counted out */
        dv->settled = true;
        bool expired = dv->expired, cancelled = dv->cancelled;
        pthread_mutex_unlock(&dv->mu);
        lq__subscription_settling(s, &dv, 1);
        lq__subscription_settled(s, &dv, 1, &dv->freed_early);
        if (!expired && cancelled)
            return lq__error(LQ_CANCELLED, "row %lld was cancelled while in work; the %s changed "
                                           "nothing",
                             (long long)dv->id, outcome_name(outcome));
        if (!expired)
            return lq__error(LQ_LEASE_LOST, "row %lld went back to its queue when a cancel could "
                                            "not take it out of its run; the %s changed nothing",
                             (long long)dv->id, outcome_name(outcome));
        return lq__error(LQ_LEASE_LOST, "row %lld: its run passed timeout_ms (%lld ms) and the row "
                                        "went back; the %s changed nothing",
                         (long long)dv->id, (long long)s->timeout_ms, outcome_name(outcome));
    }
    lq__subscription_settling(s, &dv, 1);
    lq__freed freed = {0};
    bool giving_back = s->form == LQ_FORM_LEASE && lq__lease_give_back_begin(s, dv->id, dv->token);
    int rc = run_outcome(&freed, dv, outcome, delay_ms, why);
    if (giving_back) lq__lease_give_back_end(s, dv->id, dv->token, rc == LQ_OK);
    if (rc == LQ_CANCELLED) dv->cancelled = true; /* lq_delivery_cancelled says so from now */
    if (!dv->past_expiry) count_outcome(s, outcome, rc, 1); /* LQ_STAT_EXPIRED_UNSTARTED's */
    dv->settled = true;
    pthread_mutex_unlock(&dv->mu);

    if (s->form == LQ_FORM_ADVISORY) lq__advisory_release(dv, &freed);
    lq__subscription_settled(s, &dv, 1, &freed);
    return rc;
}

void lq__settle_give_back(lq_delivery *dv, lq__freed *freed) {
    lq_subscription *s = dv->sub;
    pthread_mutex_lock(&dv->mu);
    if (s->sql.release.sql) {
        lq__value args[LQ__P_COUNT];
        settle_args(args, dv, 0);
        if (s->broker->dialect->exec(NULL, dv->conn, &s->sql.release, args, NULL, NULL) != LQ_OK)
            lq__log_error(LQ_LOG_WARNING, "giving back a row claimed ahead of its run");
    }
    dv->settled = true;
    pthread_mutex_unlock(&dv->mu);
    lq__advisory_release(dv, freed);
}

int lq__settle_expired(lq_delivery *dv) {
    lq_subscription *s = dv->sub;
    /* A run's end and its expiry take turns under dv->mu, and the first
     * wins: a run that ended (run_ended: its handler returned, its
     * settlement was asked for) is not sent back; one expired first finds,
     * at its settlement, that its row went already, and only counts it
     * out (lq__settle). Either way the row is settled once. */
    pthread_mutex_lock(&dv->mu);
    if (dv->settled || dv->in_set || dv->expired || dv->taken_out || atomic_load(&dv->run_ended)) {
        pthread_mutex_unlock(&dv->mu);
        return LQ_OK;
    }
    bool last = s->max_attempts > 0 && dv->attempt >= s->max_attempts;
    /* A lease delivery holds no connection; a row lock delivery's
     * transaction commits the retry (or the dead letter) on its own; an
     * advisory delivery lets its key go. The connection freed goes back
     * when the late handler settles, as it counts in work until then. */
    lq__freed freed = {0};
    int rc = run_outcome(&freed, dv, last ? LQ__DEAD_LETTER : LQ__RETRY, 0, "timeout");
    count_outcome(s, last ? LQ__DEAD_LETTER : LQ__RETRY, rc, 1);
    if (s->form == LQ_FORM_ADVISORY) lq__advisory_release(dv, &freed);
    dv->freed_early = freed;
    /* Failed or not, its row is let go: a lease no longer extended comes
     * back when it runs out, if not at once; a transaction that failed to
     * commit rolled back. */
    dv->expired = true;
    pthread_mutex_unlock(&dv->mu);
    lq__subscription_let_go_early(s, dv);
    if (rc != LQ_OK) return rc;
    atomic_fetch_add(&s->stats[LQ_STAT_EXPIRED], 1);
    lq__log(LQ_LOG_WARNING, "row %lld: its run passed timeout_ms (%lld ms): the row went %s",
            (long long)dv->id, (long long)s->timeout_ms, last ? "to the dead letters" : "back");
    return LQ_OK;
}

/* Whether a delivery's ack can join a set: it runs one statement on a pool
 * connection (coalesced or not), or in its batch's shared transaction. */
static bool joins_set(const lq_delivery *dv) {
    const lq_subscription *s = dv->sub;
    if (dv->settled || dv->in_set || dv->expired || dv->taken_out || dv->tx || !s->sql.ack_set.sql)
        return false;
    if (dv->shared) return true;
    return s->form != LQ_FORM_ROW_LOCK && !dv->conn;
}

/* Takes the deliveries of a set out of it, settled or not. */
static void leave_set(lq_delivery **dvs, size_t n, bool settled) {
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&dvs[i]->mu);
        dvs[i]->in_set = false;
        dvs[i]->settled = settled;
        pthread_mutex_unlock(&dvs[i]->mu);
    }
}

/* Marks a set of deliveries settled, as lq__settle does after its
 * statements. The rows of a set hold no connection of their own (joins_set):
 * `freed` is their batch's, if any. */
static void finish_settled(lq_delivery **dvs, size_t n, const lq__freed *freed) {
    lq_subscription *s = dvs[0]->sub;
    leave_set(dvs, n, true);
    for (size_t i = 0; i < n; i++) {
        lq__freed none = {0};
        if (s->form == LQ_FORM_ADVISORY) lq__advisory_release(dvs[i], &none);
    }
    lq__subscription_settled(s, dvs, n, freed);
}

/* Acks that ran through the coalescer, each with its own outcome (in
 * rcs[i]; logged unless `quiet`). */
static int ack_pending(int *rcs, lq_delivery **dvs, size_t n, bool gather, bool quiet) {
    lq_subscription *s = dvs[0]->sub;
    lq__pending *items = calloc(n, sizeof *items);
    if (!items) { /* each is then acked on its own */
        leave_set(dvs, n, false);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        items[i].stmt = &s->sql.ack;
        settle_args(items[i].args, dvs[i], 0);
        items[i].next = i + 1 < n ? &items[i + 1] : NULL;
    }
    lq__coalesced_run(&s->coalescer, &s->broker->pool, items, gather);
    int first = LQ_OK;
    for (size_t i = 0; i < n; i++) {
        int rc = lq__pending_error(&items[i]);
        if (rc == LQ_OK && items[i].changes == 0 && s->form != LQ_FORM_ROW_LOCK)
            rc = row_lost(dvs[i], LQ__ACK);
        if (rc == LQ_CANCELLED) {
            pthread_mutex_lock(&dvs[i]->mu);
            dvs[i]->cancelled = true;
            pthread_mutex_unlock(&dvs[i]->mu);
        }
        if (rc != LQ_OK && !quiet) lq__log_error(LQ_LOG_WARNING, "acking after the handler");
        if (first == LQ_OK) first = rc;
        rcs[i] = rc;
        count_outcome(s, LQ__ACK, rc, 1);
    }
    finish_settled(dvs, n, &(lq__freed){0});
    free(items);
    return first;
}

/* Acks of one shared transaction, as one statement over their rows. */
static int ack_shared(int *rcs, lq_delivery **dvs, size_t n) {
    lq_subscription *s = dvs[0]->sub;
    lq__strbuf sb = {0};
    /* A row lock batch's rows: no tokens. */
    for (size_t i = 0; i < n; i++) lq__held_set_add(&sb, s->broker->dialect, false, dvs[i]->id, 0);
    char *json = lq__held_set_take(&sb, s->broker->dialect);
    if (!json) {
        leave_set(dvs, n, false);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    lq__value args[LQ__P_COUNT];
    settle_args(args, dvs[0], 0);
    args[LQ__P_HELD_SET] = (lq__value){.type = LQ__V_TEXT, .p = json, .n = strlen(json)};
    lq__freed freed = {0};
    int rc = settle_shared(&freed, dvs, n, &s->sql.ack_set, args);
    free(json);
    for (size_t i = 0; i < n; i++) rcs[i] = rc;
    count_outcome(s, LQ__ACK, rc, (int64_t)n);
    finish_settled(dvs, n, &freed);
    return rc;
}

int lq__settle_acks(int *statuses, lq_delivery *const *dvs, size_t n, bool gather) {
    if (n == 0) return LQ_OK;
    int first = LQ_OK;
    size_t k = 0;
    /* The rows that join the set (at[j]: where set[j] is in dvs), marked
     * in_set until they settle: rows of one subscription, and of one shared
     * transaction if any. */
    lq_delivery **set = malloc(n * sizeof *set);
    size_t *at = malloc(n * sizeof *at);
    int *rcs = malloc(n * sizeof *rcs);
    if (!set || !at || !rcs) first = lq__error(LQ_NOMEM, "out of memory"); /* each on its own */
    for (size_t i = 0; first == LQ_OK && i < n; i++) {
        pthread_mutex_lock(&dvs[i]->mu);
        atomic_store(&dvs[i]->run_ended, true); /* its ack is asked for */
        if (joins_set(dvs[i]) && (k == 0 || dvs[i]->shared == set[0]->shared)) {
            dvs[i]->in_set = true;
            at[k] = i;
            set[k++] = dvs[i];
        }
        pthread_mutex_unlock(&dvs[i]->mu);
    }
    if (k == 1) { /* nothing to gain: the usual path */
        leave_set(set, 1, false);
        k = 0;
    }
    if (k) lq__subscription_settling(set[0]->sub, set, k);
    if (k) first = set[0]->shared ? ack_shared(rcs, set, k) : ack_pending(rcs, set, k, gather, statuses);
    if (k && set[0]->shared && first != LQ_OK && !statuses)
        lq__log_error(LQ_LOG_WARNING, "acking a batch after its handler");
    for (size_t j = 0; statuses && j < k; j++) statuses[at[j]] = rcs[j];
    for (size_t i = 0; i < n; i++) {
        if (dvs[i]->settled) continue; /* in the set, or by its handler */
        int rc = lq__settle(dvs[i], LQ__ACK, 0);
        if (rc != LQ_OK && !statuses) lq__log_error(LQ_LOG_WARNING, "acking after the handler");
        if (rc != LQ_OK && first == LQ_OK) first = rc;
        if (statuses) statuses[i] = rc;
    }
    free(set);
    free(at);
    free(rcs);
    return first;
}

int lq__acks_carry(lq__carried *c, lq_subscription *s, lq__step *step, bool whole) {
    memset(c, 0, sizeof *c);
    *step = (lq__step){0};
    lq_delivery *taken[LQ__CARRY_MAX];
    size_t n = lq__acker_hand_over(&s->acker, taken, LQ__CARRY_MAX);
    for (size_t i = 0; i < n; i++) {
        lq_delivery *d = taken[i];
        pthread_mutex_lock(&d->mu);
        atomic_store(&d->run_ended, true); /* its ack is asked for */
        bool joins = joins_set(d) && !d->shared;
        if (joins) d->in_set = true;
        pthread_mutex_unlock(&d->mu);
        if (joins) c->set[c->n++] = d;
        else c->rest[c->rest_n++] = d;
    }
    if (!c->n) return LQ_OK;
    int64_t rows[LQ__CARRY_MAX][2];
    for (size_t i = 0; i < c->n; i++) {
        rows[i][0] = c->set[i]->id;
        rows[i][1] = c->set[i]->token;
    }
    const lq__stmt *stmt = lq__ack_set_text(&c->json, s->broker->dialect,
                                            whole ? &s->sql.ack_set_whole : &s->sql.ack_set,
                                            whole ? &s->sql.ack_set_held_whole : &s->sql.ack_set_held,
                                            s->coalescer.tokens, rows, c->n);
    if (!stmt) { /* acked after the claim, as the acker would */
        leave_set(c->set, c->n, false);
        memcpy(c->rest + c->rest_n, c->set, c->n * sizeof *c->set);
        c->rest_n += c->n;
        c->n = 0;
        return lq__error(LQ_NOMEM, "out of memory");
    }
    settle_args(c->args, c->set[0], 0);
    c->args[LQ__P_HELD_SET] = (lq__value){.type = LQ__V_TEXT, .p = c->json, .n = strlen(c->json)};
    c->args[LQ__P_ACKS] = (lq__value){.type = LQ__V_INT, .i = (int64_t)c->n};
    /* A whole set's statement returns a row, not the rows it changed: the
     * claim counts them as all acked once it ran. */
    *step = (lq__step){.stmt = stmt, .args = c->args, .changes = whole ? NULL : &c->changes};
    return LQ_OK;
}

int64_t lq__acks_lease_left(const lq__carried *c) {
    if (!c->n) return 0;
    int64_t first = c->set[0]->token;
    for (size_t i = 1; i < c->n; i++)
        if (c->set[i]->token < first) first = c->set[i]->token;
    int64_t left = first - lq__now_ms();
    return left > 0 ? left : 1;
}

bool lq__acks_whole(const lq__carried *c) { return c->changes == (int64_t)c->n; }

void lq__acks_carried(lq__carried *c, bool committed) {
    free(c->json);
    c->json = NULL;
    if (c->n && committed) {
        count_outcome(c->set[0]->sub, LQ__ACK, LQ_OK, (int64_t)c->n);
        finish_settled(c->set, c->n, &(lq__freed){.room_taken = true});
    } else if (c->n) { /* the claim's transaction did not commit: acked on their own */
        leave_set(c->set, c->n, false);
        lq__settle_acks(NULL, c->set, c->n, false);
    }
    if (c->rest_n) lq__settle_acks(NULL, c->rest, c->rest_n, false);
    lq__deliveries_unref(c->set, c->n);
    lq__deliveries_unref(c->rest, c->rest_n);
    c->n = c->rest_n = 0;
}
