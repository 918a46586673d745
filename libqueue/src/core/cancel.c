/* lq_cancel: a row taken out of its queue, queued or in work. In the lease
 * form a row in work is cancelled too: its lease goes with the row, so the
 * run's next lease extension finds it gone (lq_delivery_cancelled) and its
 * settlement changes nothing. In the advisory form the run holds the row's
 * key, not the row: the row is taken all the same, and the run's settlement
 * finds it gone. In the row lock form a row in work is held by its run's
 * transaction, which a cancel does not pass: it is refused, and nothing
 * changes. */
#include "core/broker.h"

#include <stdlib.h>
#include <string.h>

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
    if (rc == LQ_CONTENTION && lq_table_form(t) == LQ_FORM_ROW_LOCK)
        rc = lq__error(LQ_CONTENTION, "row %lld is in work: in the row lock form its lock is its "
                                      "run, which a cancel does not stop; nothing changed",
                       (long long)id);
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
        lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    }
    if (rc == LQ_OK)
        lq__log(LQ_LOG_INFO, "row %lld cancelled%s", (long long)id,
                !f.leased                     ? ""
                : lq_table_form(t) == LQ_FORM_LEASE ? " in work: its run finds it at its lease's next extension"
                                                    : " in work: its run finds it at its settlement");
    free(f.key);
    lq__cancel_sql_free(&sql);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("cancel in %s", lq__table_label(t, label, sizeof label));
    }
    return rc;
}
