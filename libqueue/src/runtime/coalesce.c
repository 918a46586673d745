#include "runtime/coalesce.h"

#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void lq__coalescer_init(lq__coalescer *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->done, NULL);
    lq__cond_init(&c->arrived);
}

void lq__coalescer_destroy(lq__coalescer *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->arrived);
}

/* Keeps a statement's outcome, and its error message for the thread that
 * asked (errors are per thread). */
static void record(lq__pending *p, int rc, int64_t changes) {
    p->rc = rc;
    p->changes = changes;
    if (rc != LQ_OK) {
        snprintf(p->message, sizeof p->message, "%s", lq_errmsg());
        snprintf(p->sqlstate, sizeof p->sqlstate, "%s", lq_errcode_sqlstate());
        p->native = lq_errcode_native();
    }
}

int lq__pending_error(const lq__pending *p) {
    if (p->rc != LQ_OK) lq__error_db(p->rc, p->sqlstate, p->native, "%s", p->message);
    return p->rc;
}

bool lq__settle_again(int rc, int *tries) {
    /* SQLSTATE class 40: the transaction was rolled back (a deadlock, a
     * certification or serialization failure), so it may run again at once;
     * a lock wait that timed out would only wait again. */
    if (rc != LQ_CONTENTION || strncmp(lq_errcode_sqlstate(), "40", 2) != 0) return false;
    if (++*tries >= LQ__SETTLE_TRIES) return false;
    lq__error_clear();
    lq__sleep_us(INT64_C(5000) << *tries); /* 10, 20, 40, 80 ms */
    return true;
}

/* A statement on its own commits alone: after a conflict it runs again. */
static void run_alone(const lq__dialect *d, lq__conn *conn, lq__pending *p) {
    int64_t changes = 0;
    int rc, tries = 0;
    do rc = d->exec(&changes, conn, p->stmt, p->args, NULL, NULL);
    while (lq__settle_again(rc, &tries));
    record(p, rc, changes);
}

static bool in_set(const lq__coalescer *c, const lq__pending *p) {
    return c->ack_set && c->ack_set->sql && p->stmt == c->ack;
}

/* The acks of the list as one statement over their rows, inside the open
 * transaction. *whole is false when it did not change one row per ack (a
 * lease was lost): the caller then rolls back and runs each on its own, to
 * learn which. */
static int run_ack_set(bool *whole, lq__coalescer *c, const lq__dialect *d, lq__conn *conn,
                       lq__pending *list) {
    size_t n = 0;
    lq__pending *first = NULL;
    for (lq__pending *p = list; p; p = p->next)
        if (in_set(c, p) && n++ == 0) first = p;
    *whole = true;
    /* No set: a lone ack among other statements runs as it is (the caller
     * runs only what is not in the set). */
    if (n < 2) return first ? d->exec(&first->changes, conn, first->stmt, first->args, NULL, NULL)
                            : LQ_OK;
    /* (id, token) pairs: on the stack for a set of the usual size. */
    int64_t on_stack[64][2];
    int64_t (*rows)[2] = n <= 64 ? on_stack : malloc(n * sizeof *rows);
    if (!rows) return lq__error(LQ_NOMEM, "out of memory");
    size_t k = 0;
    for (lq__pending *p = list; p; p = p->next) {
        if (!in_set(c, p)) continue;
        rows[k][0] = p->args[LQ__P_ID].i;
        rows[k++][1] = p->args[LQ__P_HELD].i;
    }
    char *json;
    const lq__stmt *stmt = lq__ack_set_text(&json, d, c->ack_set, c->ack_set_held, c->tokens,
                                            rows, n);
    if (rows != on_stack) free(rows);
    if (!stmt) return lq__error(LQ_NOMEM, "out of memory");
    lq__value args[LQ__P_COUNT];
    memcpy(args, first->args, sizeof args);
    args[LQ__P_HELD_SET] = (lq__value){.type = LQ__V_TEXT, .p = json, .n = strlen(json)};
    int64_t changes = 0;
    int rc = d->exec(&changes, conn, stmt, args, NULL, NULL);
    free(json);
    if (rc == LQ_OK && changes != (int64_t)n) *whole = false;
    for (lq__pending *p = list; rc == LQ_OK && p; p = p->next)
        if (in_set(c, p)) p->changes = 1;
    return rc;
}

/* Whether a failure `rc` left `conn` unfit for another statement: its link
 * failed, or a deadline passed with its statement still in progress. */
static bool broke(const lq__dialect *d, lq__conn *conn, int rc) {
    return rc == LQ_CONNECT || (d->reusable && !d->reusable(conn));
}

/* Each statement of the list on its own, then the connection back to the
 * pool. Once one breaks the connection, the rest report its failure: none
 * is sent on a broken connection, nor waits out another deadline on a new
 * one. */
static void run_each(lq__pool *pool, lq__conn *conn, lq__pending *list) {
    const lq__dialect *d = pool->dialect;
    for (lq__pending *p = list; p; p = p->next) {
        run_alone(d, conn, p);
        if (p->rc != LQ_OK && broke(d, conn, p->rc)) {
            for (lq__pending *q = p->next; q; q = q->next) record(q, p->rc, 0);
            lq__pool_release(pool, conn, true);
            return;
        }
    }
    lq__pool_release(pool, conn, false);
}

/* One transaction for the gathered statements; if any fails, the
 * transaction is rolled back and each runs on its own, so one bad row does not
 * fail the others: on the same connection, or on a new one when the failure
 * broke it. */
static void run_gathered(lq__coalescer *c, lq__pool *pool, lq__pending *list) {
    const lq__dialect *d = pool->dialect;
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, pool);
    if (rc != LQ_OK) {
        for (lq__pending *p = list; p; p = p->next) record(p, rc, 0);
        return;
    }
    if (!list->next) {
        run_each(pool, conn, list);
        return;
    }
    bool whole = true;
    rc = d->begin(conn, LQ_ISOLATION_DEFAULT);
    if (rc == LQ_OK) rc = run_ack_set(&whole, c, d, conn, list);
    for (lq__pending *p = list; rc == LQ_OK && whole && p; p = p->next)
        if (!in_set(c, p)) rc = d->exec(&p->changes, conn, p->stmt, p->args, NULL, NULL);
    if (rc == LQ_OK && whole) rc = d->commit(conn);
    if (rc == LQ_OK && whole) {
        for (lq__pending *p = list; p; p = p->next) p->rc = LQ_OK;
        lq__pool_release(pool, conn, false);
        return;
    }
    d->rollback(conn);
    if (broke(d, conn, rc)) {
        lq__pool_release(pool, conn, true);
        if ((rc = lq__pool_acquire(&conn, pool)) != LQ_OK) {
            for (lq__pending *p = list; p; p = p->next) record(p, rc, 0);
            return;
        }
    }
    run_each(pool, conn, list);
}

void lq__coalesced_run(lq__coalescer *c, lq__pool *pool, lq__pending *list, bool gather) {
    if (!gather) {
        run_gathered(c, pool, list);
        return;
    }
    lq__pending *last = list;
    int count = 1;
    for (; last->next; last = last->next) count++;
    pthread_mutex_lock(&c->mu);
    if (c->tail) c->tail->next = list;
    else c->head = list;
    c->tail = last;
    c->gathered += count;
    pthread_cond_signal(&c->arrived);
    while (!last->done) {
        if (c->leading) {
            pthread_cond_wait(&c->done, &c->mu);
            continue;
        }
        /* Lead: wait a moment for the deliveries in work that have not
         * joined, then take everything gathered and run it. */
        c->leading = true;
        if (c->wait_us > 0 && c->gathered < atomic_load(&c->in_work)) {
            struct timespec until = lq__deadline_in_us(c->wait_us);
            while (c->gathered < atomic_load(&c->in_work))
                if (pthread_cond_timedwait(&c->arrived, &c->mu, &until) == ETIMEDOUT) break;
        }
        lq__pending *taken = c->head;
        c->head = c->tail = NULL;
        c->gathered = 0;
        pthread_mutex_unlock(&c->mu);
        run_gathered(c, pool, taken);
        pthread_mutex_lock(&c->mu);
        for (lq__pending *p = taken; p; p = p->next) p->done = true;
        c->leading = false;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
}

int lq__coalesced_exec(int64_t *changes, lq__coalescer *c, lq__pool *pool, const lq__stmt *stmt,
                       const lq__value *args) {
    lq__pending mine = {.stmt = stmt};
    memcpy(mine.args, args, sizeof mine.args);
    lq__coalesced_run(c, pool, &mine, true);
    if (changes) *changes = mine.changes;
    return lq__pending_error(&mine);
}
