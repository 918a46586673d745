/* Runs told of their cancels (run_cancels.h): the keeper's side. */
#include "runtime/runtime.h"

#include "base/clock.h"
#include "core/schema.h"

#include <stdlib.h>
#include <string.h>

/* How often the keeper of a row lock subscription looks at the requests
 * while its runs are in work. */
#define LOOK_EVERY_MS 500
/* The most requests one look takes up. */
#define PENDING_MAX 64
/* Without a requests table (the subscription could not make it), it looks
 * again this seldom, or when told: each look is an error in the server's
 * log; a cancel's first request makes the table, and waits longer. */
#define MISSING_LOOK_EVERY_MS 2000
/* How long a look waits for a pool connection before it passes. */
#define ACQUIRE_WAIT_MS 100

int lq__run_cancels_init(lq__run_cancels *c, lq_subscription *s) {
    memset(c, 0, sizeof *c);
    /* A batch's rows share one transaction, and a transactional run's
     * handler writes in it: neither is cancelled there; a cancel waits for
     * their settlement. */
    if (s->form != LQ_FORM_ROW_LOCK || s->batch || s->transactional) return LQ_OK;
    const lq__dialect *d = s->broker->dialect;
    int rc = lq__sql_build_cancel_requests(&c->requests, d, s->table);
    if (rc == LQ_OK) rc = lq__sql_build_cancel(&c->take_out, d, s->table);
    c->watches = rc == LQ_OK;
    /* Made now where missing, so that a look never asks for a table that is
     * not there; a role that may not create it is told, and goes on. */
    if (rc == LQ_OK && lq__cancel_requests_table_create(s->broker, s->table, &c->requests.create) != LQ_OK) {
        lq__log_error(LQ_LOG_WARNING, "cancels of rows in work cannot reach this subscription's "
                                      "runs until the table's owner makes it");
        lq__error_clear();
    }
    return rc;
}

void lq__run_cancels_free(lq__run_cancels *c) {
    lq__cancel_requests_sql_free(&c->requests);
    lq__cancel_sql_free(&c->take_out);
}

bool lq__run_cancels_heard(lq__run_cancels *c, int64_t id) {
    if (c->heard_count < LQ__HEARD_MAX) c->heard[c->heard_count++] = id;
    else c->heard_lost = true;
    c->due = true;
    return true;
}

static bool heard_of(const int64_t *ids, int n, bool lost, int64_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return lost;
}

/* Lease form: a run whose row left its queue learns so now. */
static void mark_heard(lq_subscription *s, const int64_t *ids, int n, bool lost) {
    size_t count;
    lq_delivery **dvs;
    if (lq__book_refs(&dvs, &count, s) != LQ_OK) return;
    for (size_t i = 0; i < count; i++) {
        lq_delivery *d = dvs[i];
        if (heard_of(ids, n, lost, d->id) && lq__lease_row_left(s, NULL, d)) {
            pthread_mutex_lock(&d->mu);
            if (!d->settled && !d->in_set && !d->expired && !d->cancelled) {
                d->cancelled = true;
                lq__log(LQ_LOG_INFO, "row %lld was cancelled while in work", (long long)d->id);
            }
            pthread_mutex_unlock(&d->mu);
        }
        lq__delivery_unref(d);
    }
    free(dvs);
}

typedef struct pending_ids {
    int64_t ids[PENDING_MAX];
    int count;
} pending_ids;

static int on_pending(void *ctx, const lq__value *cols, int count) {
    pending_ids *p = ctx;
    if (count > 0 && cols[0].type == LQ__V_INT && p->count < PENDING_MAX) p->ids[p->count++] = cols[0].i;
    return LQ_OK;
}

/* Runs the cancel's statements on the run's connection, in its transaction,
 * and commits them: the row leaves as a queued row's cancel takes it. */
static int take_out(lq_subscription *s, lq_delivery *d, const lq__value *args) {
    const lq__dialect *dl = s->broker->dialect;
    const lq__cancel_sql *sql = &s->cancels.take_out;
    int rc = LQ_OK;
    if (sql->copy.sql) rc = dl->exec(NULL, d->conn, &sql->copy, args, NULL, NULL);
    if (rc == LQ_OK && sql->clear.sql) rc = dl->exec(NULL, d->conn, &sql->clear, args, NULL, NULL);
    if (rc == LQ_OK) rc = dl->exec(NULL, d->conn, &sql->remove, args, NULL, NULL);
    if (rc == LQ_OK) return dl->commit(d->conn);
    lq__error_copy failure;
    lq__error_save(&failure);
    dl->rollback(d->conn);
    lq__error_restore(&failure);
    return rc;
}

/* Takes the request for d's row, if it is still to take and d's run still
 * holds the row, and cancels the row in the run's transaction. The run's
 * connection is let go at its settlement, as an expiry's is. */
static void take_one(lq_subscription *s, lq__conn *conn, lq_delivery *d) {
    const lq__dialect *dl = s->broker->dialect;
    const char *dest = s->table->dead_letter;
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = s->table->name, .n = strlen(s->table->name)};
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = d->id};
    args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = lq__now_ms()};
    if (dest) args[LQ__P_DEST] = (lq__value){.type = LQ__V_TEXT, .p = dest, .n = strlen(dest)};
    args[LQ__P_REASON] = (lq__value){.type = LQ__V_TEXT, .p = "cancelled", .n = strlen("cancelled")};
    lq__run_cancels *c = &s->cancels;
    pthread_mutex_lock(&d->mu);
    /* A run that ended is left to its settlement (run_ended): if it sends
     * the row back, the cancel takes it as a queued row. */
    if (d->settled || d->in_set || d->expired || d->taken_out || atomic_load(&d->run_ended) ||
        !d->conn || d->shared || d->tx) {
        pthread_mutex_unlock(&d->mu);
        return;
    }
    int64_t changes = 0;
    c->requests.take.id = c->requests.give_back.id = 0;
    c->take_out.copy.id = c->take_out.clear.id = c->take_out.remove.id = 0; /* rare: unprepared */
    int rc = dl->exec(&changes, conn, &c->requests.take, args, NULL, NULL);
    if (rc != LQ_OK || changes != 1) { /* withdrawn, or another took it */
        pthread_mutex_unlock(&d->mu);
        if (rc != LQ_OK) lq__log_error(LQ_LOG_WARNING, "taking a cancel request");
        return;
    }
    rc = take_out(s, d, args);
    /* Failed or not, the run's transaction is over: a row not taken out went
     * back with its rollback (where the canceller takes it as queued, or a
     * claim again), and this run no longer holds it. */
    d->freed_early = (lq__freed){.conn = d->conn, .broken = rc == LQ_CONNECT};
    d->conn = NULL;
    d->taken_out = true;
    d->cancelled = rc == LQ_OK;
    pthread_mutex_unlock(&d->mu);
    lq__subscription_let_go_early(s, d);
    if (rc == LQ_OK) {
        lq__log(LQ_LOG_INFO, "row %lld was cancelled while in work: taken out in its run's transaction",
                (long long)d->id);
        return;
    }
    lq__log_error(LQ_LOG_WARNING, "cancelling a row in its run's transaction (it went back to its "
                                  "queue, where its cancel takes it)");
    if (dl->exec(NULL, conn, &c->requests.give_back, args, NULL, NULL) != LQ_OK)
        lq__log_error(LQ_LOG_WARNING, "giving a cancel request back");
}

/* Row lock form: the requests for rows whose runs this subscription holds. */
static void take_requests(lq_subscription *s) {
    lq__run_cancels *c = &s->cancels;
    lq__pool *pool = &s->broker->pool;
    lq__conn *conn = NULL;
    /* The pool's spare may be a canceller's now: the look waits for no one. */
    if (lq__pool_acquire_within(&conn, pool, ACQUIRE_WAIT_MS) != LQ_OK) {
        lq__error_clear();
        return;
    }
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = s->table->name, .n = strlen(s->table->name)};
    args[LQ__P_NOW] = (lq__value){.type = LQ__V_INT, .i = lq__now_ms() - LQ__CANCEL_REQUEST_LIFE_MS};
    pending_ids pending = {.count = 0};
    c->requests.pending.id = 0;
    int rc = s->broker->dialect->exec(NULL, conn, &c->requests.pending, args, on_pending, &pending);
    c->table_missing = rc == LQ_SCHEMA;
    rc = lq__error_ok_if(rc, LQ_SCHEMA); /* no requests table: no cancel was ever asked for here */
    if (rc != LQ_OK) lq__log_error(LQ_LOG_WARNING, "looking at cancel requests");
    if (pending.count) {
        size_t count;
        lq_delivery **dvs;
        if (lq__book_refs(&dvs, &count, s) == LQ_OK) {
            for (size_t i = 0; i < count; i++) {
                if (heard_of(pending.ids, pending.count, false, dvs[i]->id)) take_one(s, conn, dvs[i]);
                lq__delivery_unref(dvs[i]);
            }
            free(dvs);
        }
    }
    lq__pool_release(pool, conn, rc == LQ_CONNECT);
}

int64_t lq__run_cancels_look(lq_subscription *s) {
    lq__run_cancels *c = &s->cancels;
    int64_t heard[LQ__HEARD_MAX];
    pthread_mutex_lock(&s->mu);
    int n = c->heard_count;
    bool lost = c->heard_lost, due = c->due, busy = s->in_work + s->waiting > 0;
    memcpy(heard, c->heard, (size_t)n * sizeof *heard);
    c->heard_count = 0;
    c->heard_lost = c->due = false;
    pthread_mutex_unlock(&s->mu);
    if (s->form == LQ_FORM_LEASE && (n || lost)) mark_heard(s, heard, n, lost);
    if (!c->watches) return 0;
    int64_t now = lq__mono_ms();
    int64_t every = c->table_missing ? MISSING_LOOK_EVERY_MS : LOOK_EVERY_MS;
    if (busy && (due || now - c->looked_at >= every)) {
        c->looked_at = now;
        take_requests(s);
    }
    now = lq__mono_ms();
    return c->looked_at + LOOK_EVERY_MS > now ? c->looked_at + LOOK_EVERY_MS : now + LOOK_EVERY_MS;
}
