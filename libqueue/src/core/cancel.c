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
#include <time.h>

/* How long a cancel waits for the process of a row lock run to take its
 * request (it looks twice a second, and at once when notified), and then
 * for it to finish taking the row. */
#define RUN_WAIT_MS 5000
#define TAKING_WAIT_MS 5000
#define LOOK_EVERY_MS 100

typedef struct found_row {
    bool found;
    bool leased; /* a lease, or a run holding its key, holds it now: in work */
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
 * it goes; a run that holds it already is in work (f->leased). */
static int take_key(bool *taken, lq_broker *b, lq__conn *conn, found_row *f) {
    int rc = b->dialect->try_lock_key(taken, conn, &b->target, f->key);
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
        return LQ_CONNECT; /* the session may hold the key: the connection is not reused */
    return rc;
}

static void nap(int64_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A row lock run holds the row: asks its process to cancel it there, and
 * looks until the row is gone (cancelled by it, or finished by the run),
 * free again (the run let it go: cancelled here), or the wait is over (the
 * request withdrawn, nothing changed). f->leased tells a cancel in work. */
static int cancel_in_its_run(found_row *f, lq_broker *b, lq__conn *conn, const lq_table *t,
                             const lq__cancel_sql *sql, int64_t id) {
    lq__error_clear();
    lq__cancel_request r;
    int rc = lq__cancel_request_open(&r, b, conn, t, id);
    int64_t start = lq__mono_ms();
    bool taken = false;
    while (rc == LQ_OK) {
        nap(LOOK_EVERY_MS);
        found_row now = {0};
        rc = cancel_on(&now, b, conn, t, sql, id);
        free(now.key);
        if (rc == LQ_OK) break; /* the run let it go: cancelled as queued */
        if (rc != LQ_CONTENTION && rc != LQ_NOT_FOUND) break;
        int state = -1;
        lq__error_copy why;
        lq__error_save(&why);
        int read = lq__cancel_request_state(&state, &r);
        if (read != LQ_OK) {
            rc = read;
            break;
        }
        taken = state == 1;
        lq__error_restore(&why);
        if (rc == LQ_NOT_FOUND && taken) { /* removed in its run */
            f->leased = true;
            rc = LQ_OK;
            break;
        }
        if (rc == LQ_NOT_FOUND && state < 0) break; /* a cancel beside this one took it */
        int64_t waited = lq__mono_ms() - start;
        if (taken ? waited < RUN_WAIT_MS + TAKING_WAIT_MS : waited < RUN_WAIT_MS) {
            if (rc == LQ_NOT_FOUND && state == 0) { /* finished by its run, unless taken now */
                bool withdrawn = false;
                rc = lq__cancel_request_withdraw(&withdrawn, &r);
                if (rc == LQ_OK && withdrawn)
                    rc = lq__error(LQ_NOT_FOUND, "row %lld was finished by its run before its "
                                                 "cancel reached it; nothing changed",
                                   (long long)id);
                if (withdrawn || rc != LQ_OK) break;
            }
            rc = LQ_OK;
            continue;
        }
        bool withdrawn = false;
        rc = lq__cancel_request_withdraw(&withdrawn, &r);
        if (rc == LQ_OK && (withdrawn || waited >= RUN_WAIT_MS + TAKING_WAIT_MS))
            rc = lq__error(LQ_TIMEOUT,
                           withdrawn ? "row %lld is in work, and its run's process did not take "
                                       "the cancel within %d ms (a batch or transactional run, "
                                       "or a process that does not look); nothing changed"
                                     : "row %lld: its run's process took the cancel but did not "
                                       "finish it within %d ms more; it may still take effect",
                           (long long)id, withdrawn ? RUN_WAIT_MS : TAKING_WAIT_MS);
        if (rc != LQ_OK) break;
    }
    lq__cancel_request_close(&r);
    return rc;
}

int lq_cancel(lq_broker *b, const lq_table *t, int64_t id) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    int rc = lq__broker_check_open(b);
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
        if (rc == LQ_CONTENTION && lq_table_form(t) == LQ_FORM_ROW_LOCK)
            rc = cancel_in_its_run(&f, b, conn, t, &sql, id);
        else if (rc == LQ_OK && f.leased && lq_table_form(t) == LQ_FORM_LEASE)
            lq__cancel_tell(b, conn, t, id);
        lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    }
    if (rc == LQ_OK)
        lq__log(LQ_LOG_INFO, "row %lld cancelled%s", (long long)id,
                !f.leased                     ? ""
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
