/* lq_cancel: a row taken out of its queue, queued or in work. In the lease
 * form a row in work is cancelled too: its lease goes with the row, so the
 * run hears of it (a notification on PostgreSQL, else its lease's next
 * extension: lq_delivery_cancelled) and its settlement changes nothing. In
 * the advisory form the run holds the row's key, not the row: the row is
 * taken all the same, and the run's settlement finds it gone. In the row
 * lock form a row in work is held by its run's transaction, which no other
 * session passes: the cancel asks the run's process in the requests table
 * (core/cancel_request.h) and waits until the row is gone, or free again,
 * or its wait is over. */
#include "core/cancel_request.h"

#include "base/clock.h"

#include <stdlib.h>
#include <string.h>

/* How long a cancel waits for the process of a row lock run to take its
 * request (it looks twice a second, and at once when notified), and then
 * for it to finish taking the row. */
#define RUN_WAIT_MS 5000
#define TAKING_WAIT_MS 5000
#define LOOK_EVERY_MS 100

typedef struct found_row {
    bool found;
    bool leased; /* a lease, or a run holding its key, holds it now: in work */
    bool unseen; /* its key lives in another process (SQLite): in work or not, unknown */
    char *key;   /* the advisory key */
} found_row;

static int on_found(void *ctx, const lq__value *cols, int count) {
    found_row *f = ctx;
    f->found = true;
    f->leased = count > 0 && cols[0].type == LQ__V_INT && cols[0].i == 1;
    if (count > 1) {
        f->key = malloc(cols[1].n + 1);
        if (!f->key) return lq__error(LQ_NOMEM, "out of memory");
        if (cols[1].n) memcpy(f->key, cols[1].p, cols[1].n);
        f->key[cols[1].n] = '\0';
    }
    return LQ_OK;
}

/* The row's advisory key taken on conn, so that no claim starts it while
 * it goes; a run that holds it already is in work (f->leased). Where keys
 * live in a process (SQLite) and another process holds the file's key
 * space, the keys are that process's, out of sight here: the row goes
 * without a key, and its run, if any, finds it gone at its settlement
 * (f->unseen). The cancel only looks: a hold would refuse, meanwhile, the
 * advisory subscriptions of a process starting. */
static int take_key(bool *taken, lq_broker *b, lq__conn *conn, found_row *f) {
    const lq__dialect *d = b->dialect;
    if (d->key_space_elsewhere && d->key_space_elsewhere(&b->target)) {
        f->unseen = true;
        return LQ_OK;
    }
    int rc = d->try_lock_key(taken, conn, &b->target, f->key);
    if (rc == LQ_OK && !*taken) f->leased = true;
    return rc;
}

static int remove_row(lq_broker *b, lq__conn *conn, const lq__cancel_sql *sql, const lq__value *args) {
    const lq__dialect *d = b->dialect;
    int rc = LQ_OK;
    if (sql->copy.sql) rc = d->exec(NULL, conn, &sql->copy, args, NULL, NULL);
    if (rc == LQ_OK && sql->clear.sql) rc = d->exec(NULL, conn, &sql->clear, args, NULL, NULL);
    if (rc == LQ_OK) rc = d->exec(NULL, conn, &sql->remove, args, NULL, NULL);
    return rc;
}

static int cancel_on(found_row *f, lq_broker *b, lq__conn *conn, const lq_table *t,
                     const lq__cancel_sql *sql, int64_t id) {
    const lq__dialect *d = b->dialect;
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = id};
    args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = lq__now_ms()};
    if (t->dead_letter)
        args[LQ__P_DEST] = (lq__value){.type = LQ__V_TEXT, .p = t->dead_letter, .n = strlen(t->dead_letter)};
    args[LQ__P_REASON] = (lq__value){.type = LQ__V_TEXT, .p = "cancelled", .n = strlen("cancelled")};
    bool key_taken = false;
    int rc = d->begin(conn, LQ_ISOLATION_DEFAULT);
    if (rc != LQ_OK) return rc;
    rc = d->exec(NULL, conn, &sql->find, args, on_found, f);
    if (rc == LQ_OK && !f->found)
        rc = lq__error(LQ_NOT_FOUND, "row %lld is neither queued nor in work (finished, "
                                     "cancelled, or never there); nothing changed",
                       (long long)id);
    if (rc == LQ_OK && f->key) rc = take_key(&key_taken, b, conn, f);
    if (rc == LQ_OK) rc = remove_row(b, conn, sql, args);
    if (rc == LQ_OK) {
        rc = d->commit(conn);
    } else {
        lq__error_copy failure;
        lq__error_save(&failure);
        d->rollback(conn);
        lq__error_restore(&failure);
    }
    if (key_taken && !d->unlock_key(conn, &b->target, f->key) && rc == LQ_OK)
        rc = LQ_CONNECT; /* the session may hold the key: the connection is not reused */
    return rc;
}

/* One look of a waiting cancel, on a connection of its own (so the pool's
 * spare goes back between looks, for the run's keeper among others): the
 * row cancelled if free, and the request's state. */
static int look_once(found_row *f, int *state, lq__cancel_request *r, const lq__cancel_sql *sql,
                     int64_t id) {
    lq__pool *pool = &r->b->pool;
    int rc = lq__pool_acquire(&r->conn, pool);
    if (rc != LQ_OK) return rc;
    rc = cancel_on(f, r->b, r->conn, r->t, sql, id);
    *state = -1;
    if (rc == LQ_CONTENTION || rc == LQ_NOT_FOUND) {
        lq__error_copy why;
        lq__error_save(&why);
        int read = lq__cancel_request_state(state, r);
        if (read == LQ_OK && *state < 0 && rc == LQ_CONTENTION)
            read = lq__cancel_request_ask(r); /* a cancel beside this one ended, with its request */
        if (read == LQ_OK) lq__error_restore(&why);
        else rc = read;
    }
    lq__pool_release(pool, r->conn, rc == LQ_CONNECT);
    r->conn = NULL;
    return rc;
}

static int withdraw(bool *withdrawn, lq__cancel_request *r) {
    lq__pool *pool = &r->b->pool;
    int rc = lq__pool_acquire(&r->conn, pool);
    if (rc == LQ_OK) {
        rc = lq__cancel_request_withdraw(withdrawn, r);
        lq__pool_release(pool, r->conn, rc == LQ_CONNECT);
    }
    r->conn = NULL;
    return rc;
}

/* A row lock run holds the row (or another transaction locks it): asks the
 * run's process to cancel it there, and looks until the row is gone
 * (cancelled there, or finished by the run), free again (the run let it go:
 * cancelled here), or the wait is over (the request withdrawn, nothing
 * changed). f->leased tells a cancel in work. `conn` is given back to the
 * pool first. */
static int cancel_in_its_run(found_row *f, lq_broker *b, lq__conn *conn, const lq_table *t,
                             const lq__cancel_sql *sql, int64_t id) {
    lq__error_clear();
    lq__cancel_request r;
    int rc = lq__cancel_request_open(&r, b, conn, t, id);
    lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    int64_t start = lq__mono_ms();
    bool taken = false; /* seen at 1: a process took it */
    while (rc == LQ_OK) {
        lq__sleep_us(LOOK_EVERY_MS * 1000);
        found_row now = {0};
        int state;
        rc = look_once(&now, &state, &r, sql, id);
        free(now.key);
        if (rc == LQ_OK) break; /* the run let it go: cancelled as queued */
        if (rc != LQ_CONTENTION && rc != LQ_NOT_FOUND) break;
        if (state == 1) taken = true;
        if (rc == LQ_NOT_FOUND && state == 1) { /* removed in its run */
            f->leased = true;
            rc = LQ_OK;
            break;
        }
        if (rc == LQ_NOT_FOUND && state < 0) break; /* a cancel beside this one took it */
        int64_t waited = lq__mono_ms() - start;
        bool withdrawn = false;
        if (rc == LQ_NOT_FOUND || waited >= RUN_WAIT_MS) {
            /* Finished by its run, or waited long enough: withdrawn, unless
             * a process took it just now. */
            int w = withdraw(&withdrawn, &r);
            if (w != LQ_OK) {
                rc = w;
                break;
            }
        }
        if (withdrawn && rc == LQ_NOT_FOUND) {
            rc = lq__error(LQ_NOT_FOUND, "row %lld was finished by its run before its cancel "
                                         "reached it; nothing changed",
                           (long long)id);
            break;
        }
        if (withdrawn) {
            rc = lq__error(LQ_TIMEOUT, "row %lld is locked by a transaction (its run, or a claim "
                                       "holding rows it will not run), and no process took its "
                                       "cancel within %d ms (a batch or transactional run, or a "
                                       "process that does not look); nothing changed",
                           (long long)id, RUN_WAIT_MS);
            break;
        }
        if (waited >= RUN_WAIT_MS + TAKING_WAIT_MS) {
            rc = lq__error(LQ_TIMEOUT, taken ? "row %lld: its run's process took the cancel but "
                                               "did not finish it within %d ms; it may still "
                                               "take effect"
                                             : "row %lld: its cancel was neither taken nor "
                                               "withdrawn within %d ms; it may still take effect",
                           (long long)id, RUN_WAIT_MS + TAKING_WAIT_MS);
            break;
        }
        rc = LQ_OK;
    }
    lq__error_copy outcome;
    lq__error_save(&outcome);
    if (lq__pool_acquire(&r.conn, &b->pool) == LQ_OK) {
        lq__cancel_request_close(&r);
        lq__pool_release(&b->pool, r.conn, false);
    } else {
        lq__cancel_requests_sql_free(&r.sql); /* left behind: pruned by a later cancel */
    }
    lq__error_restore(&outcome);
    return rc;
}

int lq_cancel(lq_broker *b, const lq_table *t, int64_t id) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    int rc = lq__broker_check_open(b);
    if (rc == LQ_OK) rc = lq__broker_check_form(b, t);
    if (rc != LQ_OK) return rc;
    lq__cancel_sql sql;
    rc = lq__sql_build_cancel(&sql, b->dialect, t);
    lq__conn *conn = NULL;
    if (rc == LQ_OK) rc = lq__pool_acquire(&conn, &b->pool);
    found_row f = {0};
    if (rc == LQ_OK) {
        /* Run once each: a cancel is rare, so no connection keeps them prepared. */
        sql.find.id = sql.copy.id = sql.clear.id = sql.remove.id = 0;
        rc = cancel_on(&f, b, conn, t, &sql, id);
        if (rc == LQ_CONTENTION && lq_table_form(t) == LQ_FORM_ROW_LOCK) {
            rc = cancel_in_its_run(&f, b, conn, t, &sql, id); /* gives conn back */
        } else {
            if (rc == LQ_OK && f.leased && lq_table_form(t) == LQ_FORM_LEASE)
                lq__cancel_tell(b, conn, t, id);
            lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
        }
    }
    if (rc == LQ_OK)
        lq__log(LQ_LOG_INFO, "row %lld cancelled%s", (long long)id,
                f.unseen ? "; another process holds its file's advisory keys: a run of it there, if any, "
                           "finds it gone at its settlement"
                : !f.leased                     ? ""
                : lq_table_form(t) == LQ_FORM_LEASE    ? " in work: its run hears of it, or finds it at its lease's next extension"
                : lq_table_form(t) == LQ_FORM_ROW_LOCK ? " in work: its run's process took it out in the run's transaction"
                                                       : " in work: its run finds it at its settlement");
    free(f.key);
    lq__cancel_sql_free(&sql);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("cancel in %s", lq__table_label(t, label, sizeof label));
    }
    return rc;
}
