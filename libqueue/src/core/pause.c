/* lq_queue_pause, lq_queue_resume and lq_queue_paused: a pause is a row of
 * the control table, so every process sees it at its next look (each
 * subscription looks once a poll interval), and at once where it is heard
 * of: the subscriptions of this broker are told now, and on PostgreSQL a
 * notification tells every broker that listens. */
#include "core/pause.h"

#include "core/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct control_work {
    lq_broker *b;
    lq__conn *conn;
    lq__control_sql sql;
    lq__value args[LQ__P_COUNT];
} control_work;

static void bind_queue(lq__value *args, const lq_table *t, const char *group) {
    args[LQ__P_QUEUE] = (lq__value){.type = LQ__V_TEXT, .p = t->name, .n = strlen(t->name)};
    const char *g = group ? group : "";
    args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = g, .n = strlen(g)};
}

/* Runs a statement once: pauses are rare, so no connection keeps them. */
static int run_once(control_work *w, lq__stmt *st, lq__row_fn fn, void *ctx) {
    st->id = 0;
    return w->b->dialect->exec(NULL, w->conn, st, w->args, fn, ctx);
}

/* The checks every call shares, then the statements and a connection, and
 * the probe that the queue's table is there. */
static int begin_work(control_work *w, lq_broker *b, const lq_table *t, const char *group) {
    memset(w, 0, sizeof *w);
    w->b = b;
    if (group && !lq__has(t, LQ_ROLE_GROUP))
        return lq__error(LQ_MISUSE, "the table has no group column, so a group does not apply");
    if (group && !*group) return lq__error(LQ_MISUSE, "the group is empty: NULL means the whole table");
    int rc = lq__broker_check_open(b);
    if (rc == LQ_OK) rc = lq__sql_build_control(&w->sql, b->dialect, t);
    if (rc == LQ_OK) rc = lq__pool_acquire(&w->conn, &b->pool);
    bind_queue(w->args, t, group);
    w->args[LQ__P_NOW] = (lq__value){.type = LQ__V_INT, .i = lq__now_ms()};
    if (rc == LQ_OK) rc = run_once(w, &w->sql.probe, NULL, NULL);
    return rc;
}

static int end_work(int rc, control_work *w, const lq_table *t, const char *group, const char *what) {
    if (w->conn) lq__pool_release(&w->b->pool, w->conn, rc == LQ_CONNECT);
    lq__control_sql_free(&w->sql);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("%s %s%s%s", what, lq__table_label(t, label, sizeof label),
                         group ? " group " : "", group ? group : "");
    }
    return rc;
}

/* "<table label>\n<group>": what a control notification names. */
static void control_note(char *out, size_t size, const lq_table *t, const char *group) {
    char label[256];
    snprintf(out, size, "%s\n%s", lq__table_label(t, label, sizeof label), group ? group : "");
}

/* Tells this broker's subscriptions, and on PostgreSQL every listening
 * broker. A notification that fails changes nothing: the others see the
 * row at their next look. */
static void tell(control_work *w, const lq_table *t, const char *group) {
    char label[256];
    lq__broker_control_changed(w->b, lq__table_label(t, label, sizeof label), group);
    if (!w->b->dialect->notify) return;
    char note[600];
    control_note(note, sizeof note, t, group);
    if (w->b->dialect->notify(w->conn, LQ__CONTROL_CHANNEL, note) != LQ_OK) {
        lq__log_error(LQ_LOG_WARNING, "the pause notification (others see it at their next poll)");
        lq__error_clear();
    }
}

int lq_queue_pause(lq_broker *b, const lq_table *t, const char *group) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    control_work w;
    int rc = begin_work(&w, b, t, group);
    if (rc == LQ_OK) {
        rc = run_once(&w, &w.sql.pause, NULL, NULL);
        if (rc == LQ_SCHEMA) { /* the first pause of this schema: make its table */
            lq__error_clear();
            rc = lq__control_table_create(b, t, &w.sql.create);
            if (rc == LQ_OK) rc = run_once(&w, &w.sql.pause, NULL, NULL);
        }
        rc = lq__error_ok_if(rc, LQ_DUPLICATE); /* paused already: still paused */
    }
    if (rc == LQ_OK) tell(&w, t, group);
    return end_work(rc, &w, t, group, "pause");
}

int lq_queue_resume(lq_broker *b, const lq_table *t, const char *group) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    control_work w;
    int rc = begin_work(&w, b, t, group);
    if (rc == LQ_OK) {
        rc = run_once(&w, &w.sql.resume, NULL, NULL);
        rc = lq__error_ok_if(rc, LQ_SCHEMA); /* no control table: nothing was ever paused here */
    }
    if (rc == LQ_OK) tell(&w, t, group);
    return end_work(rc, &w, t, group, "resume");
}

int lq_queue_paused(int *paused_out, lq_broker *b, const lq_table *t, const char *group) {
    lq__error_clear();
    LQ__CHECK_ARG(paused_out && b && t, "paused_out, the broker or table is NULL");
    control_work w;
    int rc = begin_work(&w, b, t, group);
    int64_t rows = 0;
    if (rc == LQ_OK) rc = run_once(&w, &w.sql.paused, lq__on_count, &rows);
    rc = lq__error_ok_if(rc, LQ_SCHEMA); /* no control table: nothing is paused */
    if (rc == LQ_OK) *paused_out = rows > 0;
    return end_work(rc, &w, t, group, "paused");
}

int lq__pause_read(bool *paused, lq_broker *b, const lq__stmt *check, const lq_table *t,
                   const char *group) {
    lq__value args[LQ__P_COUNT] = {0};
    bind_queue(args, t, group);
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, &b->pool);
    if (rc != LQ_OK) return rc;
    int64_t rows = 0;
    rc = b->dialect->exec(NULL, conn, check, args, lq__on_count, &rows);
    lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    rc = lq__error_ok_if(rc, LQ_SCHEMA); /* no control table yet: nothing was ever paused */
    *paused = rc == LQ_OK && rows > 0;
    return rc;
}

void lq__pause_step(lq__step *step, lq__value *args, int64_t *rows, const lq__stmt *check,
                    const lq_table *t, const char *group) {
    memset(args, 0, LQ__P_COUNT * sizeof *args);
    bind_queue(args, t, group);
    *rows = 0;
    *step = (lq__step){.stmt = check, .args = args, .on_row = lq__on_count, .ctx = rows};
}

void lq__pause_heard(lq_broker *b, const char *note) {
    const char *newline = strchr(note, '\n');
    if (!newline || (size_t)(newline - note) >= 256) return;
    char label[256];
    memcpy(label, note, (size_t)(newline - note));
    label[newline - note] = '\0';
    lq__broker_control_changed(b, label, newline[1] ? newline + 1 : NULL);
}
