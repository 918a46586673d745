/* The canceller's side of a cancel request: the request row, its state, its
 * withdrawal, and the notification that tells the runs. Requests are rare,
 * so their statements run unprepared, each committing on its own. */
#include "core/cancel_request.h"

#include "base/clock.h"
#include "core/cancel.h"
#include "core/schema.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run(lq__cancel_request *r, int64_t *changes, lq__stmt *st, lq__row_fn fn, void *ctx) {
    st->id = 0;
    return r->b->dialect->exec(changes, r->conn, st, r->args, fn, ctx);
}

void lq__cancel_tell(lq_broker *b, lq__conn *conn, const lq_table *t, int64_t id) {
    char label[256];
    lq__table_label(t, label, sizeof label);
    lq__broker_cancel_heard(b, label, id);
    if (!b->dialect->notify) return;
    char note[300];
    snprintf(note, sizeof note, "%s\n%" PRId64, label, id);
    if (b->dialect->notify(conn, LQ__CANCEL_CHANNEL, note) != LQ_OK) {
        lq__log_error(LQ_LOG_WARNING, "the cancel notification (runs see the cancel at their next look)");
        lq__error_clear();
    }
}

void lq__cancel_heard(lq_broker *b, const char *note) {
    const char *newline = strchr(note, '\n');
    if (!newline || (size_t)(newline - note) >= 256) return;
    char label[256], *end;
    memcpy(label, note, (size_t)(newline - note));
    label[newline - note] = '\0';
    long long id = strtoll(newline + 1, &end, 10);
    if (end == newline + 1 || *end) return; /* not a note of ours */
    lq__broker_cancel_heard(b, label, (int64_t)id);
}

int lq__cancel_request_ask(lq__cancel_request *r) {
    r->args[LQ__P_NOW] = (lq__value){.type = LQ__V_INT, .i = lq__now_ms()};
    int rc = run(r, NULL, &r->sql.request, NULL, NULL);
    return lq__error_ok_if(rc, LQ_DUPLICATE); /* a cancel beside this one asked already */
}

int lq__cancel_request_open(lq__cancel_request *r, lq_broker *b, lq__conn *conn, const lq_table *t,
                            int64_t id) {
    memset(r, 0, sizeof *r);
    r->b = b;
    r->t = t;
    r->conn = conn;
    r->args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = t->name, .n = strlen(t->name)};
    r->args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = id};
    int rc = lq__sql_build_cancel_requests(&r->sql, b->dialect, t);
    if (rc != LQ_OK) return rc;
    /* Requests left by cancellers that went away, whose waits are over. */
    r->args[LQ__P_NOW] = (lq__value){.type = LQ__V_INT, .i = lq__now_ms() - LQ__CANCEL_REQUEST_LIFE_MS};
    rc = run(r, NULL, &r->sql.prune, NULL, NULL);
    if (rc == LQ_SCHEMA) { /* the first request of this schema: make its table */
        lq__error_clear();
        rc = lq__cancel_requests_table_create(b, t, &r->sql.create);
    }
    if (rc == LQ_OK) rc = lq__cancel_request_ask(r);
    if (rc == LQ_OK) lq__cancel_tell(b, conn, t, id);
    return rc;
}

static int on_state(void *ctx, const lq__value *cols, int count) {
    *(int *)ctx = count > 0 && cols[0].type == LQ__V_INT ? (int)cols[0].i : 0;
    return LQ_OK;
}

int lq__cancel_request_state(int *state, lq__cancel_request *r) {
    *state = -1;
    return run(r, NULL, &r->sql.state, on_state, state);
}

int lq__cancel_request_withdraw(bool *withdrawn, lq__cancel_request *r) {
    int64_t changes = 0;
    int rc = run(r, &changes, &r->sql.withdraw, NULL, NULL);
    *withdrawn = rc == LQ_OK && changes > 0;
    return rc;
}

void lq__cancel_request_close(lq__cancel_request *r) {
    if (r->sql.forget.sql) {
        lq__error_copy failure;
        lq__error_save(&failure); /* the cancel's own outcome is the one to report */
        if (run(r, NULL, &r->sql.forget, NULL, NULL) != LQ_OK)
            lq__log_error(LQ_LOG_WARNING, "deleting a cancel request (a process that holds no "
                                          "run of the row passes over it)");
        lq__error_restore(&failure);
    }
    lq__cancel_requests_sql_free(&r->sql);
}
