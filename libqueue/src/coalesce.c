#include "coalesce.h"

#include <stdio.h>
#include <string.h>

struct lq_pending {
    const lq_stmt *stmt;
    lq_value args[LQ_P_COUNT];
    int64_t changes;
    int rc;
    bool done;
    char message[256];
    char sqlstate[6];
    int native;
    lq_pending *next;
};

void lq__coalescer_init(lq_coalescer *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->done, NULL);
}

void lq__coalescer_destroy(lq_coalescer *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->done);
}

/* Keeps a statement's outcome, and its error message for the thread that
 * asked (errors are per thread). */
static void record(lq_pending *p, int rc, int64_t changes) {
    p->rc = rc;
    p->changes = changes;
    if (rc != LQ_OK) {
        snprintf(p->message, sizeof p->message, "%s", lq_errmsg());
        snprintf(p->sqlstate, sizeof p->sqlstate, "%s", lq_errcode_sqlstate());
        p->native = lq_errcode_native();
    }
}

static void run_alone(const lq_dialect *d, lq_conn *conn, lq_pending *p) {
    int64_t changes = 0;
    int rc = d->exec(&changes, conn, p->stmt, p->args, NULL, NULL);
    record(p, rc, changes);
}

/* One transaction for the gathered statements; if any fails, the
 * transaction is rolled back and each runs on its own, so one bad row does not
 * fail the others. */
static void run_gathered(lq_pool *pool, lq_pending *list) {
    const lq_dialect *d = pool->dialect;
    lq_conn *conn;
    int rc = lq__pool_acquire(&conn, pool);
    if (rc != LQ_OK) {
        for (lq_pending *p = list; p; p = p->next) record(p, rc, 0);
        return;
    }
    if (!list->next) {
        run_alone(d, conn, list);
        lq__pool_release(pool, conn, list->rc == LQ_CONNECT);
        return;
    }
    rc = d->begin(conn, LQ_ISOLATION_DEFAULT);
    for (lq_pending *p = list; rc == LQ_OK && p; p = p->next)
        rc = d->exec(&p->changes, conn, p->stmt, p->args, NULL, NULL);
    if (rc == LQ_OK) rc = d->commit(conn);
    if (rc == LQ_OK) {
        for (lq_pending *p = list; p; p = p->next) p->rc = LQ_OK;
    } else {
        d->rollback(conn);
        for (lq_pending *p = list; p; p = p->next) run_alone(d, conn, p);
    }
    lq__pool_release(pool, conn, rc == LQ_CONNECT);
}

int lq__coalesced_exec(int64_t *changes, lq_coalescer *c, lq_pool *pool, const lq_stmt *stmt,
                       const lq_value *args) {
    lq_pending mine = {.stmt = stmt};
    memcpy(mine.args, args, sizeof mine.args);
    pthread_mutex_lock(&c->mu);
    if (c->tail) c->tail->next = &mine;
    else c->head = &mine;
    c->tail = &mine;
    while (!mine.done) {
        if (c->leading) {
            pthread_cond_wait(&c->done, &c->mu);
            continue;
        }
        /* Lead: take everything gathered so far and run it. */
        c->leading = true;
        lq_pending *list = c->head;
        c->head = c->tail = NULL;
        pthread_mutex_unlock(&c->mu);
        run_gathered(pool, list);
        pthread_mutex_lock(&c->mu);
        for (lq_pending *p = list, *next; p; p = next) {
            next = p->next;
            p->done = true;
        }
        c->leading = false;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    if (changes) *changes = mine.changes;
    if (mine.rc != LQ_OK) lq__error_db(mine.rc, mine.sqlstate, mine.native, "%s", mine.message);
    return mine.rc;
}
