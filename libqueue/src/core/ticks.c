/* A schedule's ticks in the database (core/ticks.h). */
#include "core/ticks.h"

#include "core/message.h"
#include "core/publish.h"
#include "core/schema.h"

#include <stdlib.h>
#include <string.h>

static void add_where_schedule(lq__sql *b) {
    lq__sql_add(b, " WHERE ");
    lq__sql_ident(b, "schedule");
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_SCHEDULE);
}

static int build_claim(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "INSERT INTO ");
    lq__sql_qualified(&b, t->schema, LQ__TICKS_TABLE);
    lq__sql_add(&b, " (");
    lq__sql_ident(&b, "schedule");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "tick");
    lq__sql_add(&b, ", ");
    lq__sql_ident(&b, "enqueued_at");
    lq__sql_add(&b, ") VALUES (");
    lq__sql_param(&b, LQ__P_SCHEDULE);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_TICK);
    lq__sql_add(&b, ", ");
    d->now_ms_sql(&b);
    lq__sql_add(&b, ")");
    if (d->on_conflict_do_nothing) lq__sql_add(&b, " ON CONFLICT DO NOTHING");
    return lq__sql_finish(&b);
}

static int build_last(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "SELECT MAX(");
    lq__sql_ident(&b, "tick");
    lq__sql_add(&b, ") FROM ");
    lq__sql_qualified(&b, t->schema, LQ__TICKS_TABLE);
    add_where_schedule(&b);
    return lq__sql_finish(&b);
}

static int build_prune(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "DELETE FROM ");
    lq__sql_qualified(&b, t->schema, LQ__TICKS_TABLE);
    add_where_schedule(&b);
    lq__sql_add(&b, " AND ");
    lq__sql_ident(&b, "tick");
    lq__sql_add(&b, " < ");
    lq__sql_param(&b, LQ__P_TICK);
    return lq__sql_finish(&b);
}

void lq__ticks_free(lq__ticks *ticks) {
    free(ticks->claim.sql);
    free(ticks->last.sql);
    free(ticks->prune.sql);
    memset(ticks, 0, sizeof *ticks);
}

int lq__ticks_open(lq__ticks *out, lq_broker *b, const lq_table *t) {
    const lq__dialect *d = b->dialect;
    memset(out, 0, sizeof *out);
    int rc = lq__ticks_table_create(b, t);
    if (rc == LQ_OK) rc = build_claim(&out->claim, d, t);
    if (rc == LQ_OK) rc = build_last(&out->last, d, t);
    if (rc == LQ_OK) rc = build_prune(&out->prune, d, t);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &out->claim);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &out->last);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &out->prune);
    if (rc != LQ_OK) lq__ticks_free(out);
    return rc;
}

static void bind_schedule(lq__value *args, const char *name, int64_t tick) {
    args[LQ__P_SCHEDULE] = (lq__value){.type = LQ__V_TEXT, .p = name, .n = strlen(name)};
    args[LQ__P_TICK] = (lq__value){.type = LQ__V_INT, .i = tick};
}

typedef struct last_tick {
    int64_t tick;
    bool found;
} last_tick;

static int read_last(void *ctx, const lq__value *cols, int count) {
    last_tick *last = ctx;
    if (count >= 1 && cols[0].type != LQ__V_NULL) {
        last->tick = cols[0].i;
        last->found = true;
    }
    return LQ_OK;
}

int lq__ticks_last(int64_t *out, bool *found, lq_broker *b, const lq__ticks *ticks,
                   const char *name) {
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, &b->pool);
    if (rc != LQ_OK) return rc;
    lq__value args[LQ__P_COUNT] = {0};
    bind_schedule(args, name, 0);
    last_tick last = {0};
    rc = b->dialect->exec(NULL, conn, &ticks->last, args, read_last, &last);
    lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    *out = last.tick;
    *found = last.found;
    return rc;
}

int lq__ticks_fire(bool *fired, lq_broker *b, const lq__ticks *ticks, const lq_table *t,
                   const char *name, int64_t tick, int64_t keep_ms, lq_message *m) {
    const lq__dialect *d = b->dialect;
    *fired = false;
    lq__conn *conn;
    int rc = lq__pool_acquire(&conn, &b->pool);
    if (rc != LQ_OK) return rc;
    lq__value args[LQ__P_COUNT] = {0};
    bind_schedule(args, name, tick);
    bool begun = (rc = d->begin(conn, LQ_ISOLATION_DEFAULT)) == LQ_OK;
    /* Another broker's claim of the tick, committed or not yet, makes this
     * insert write nothing (or fail, without ON CONFLICT) on the key, once
     * that claim commits. */
    int64_t claimed = 0;
    if (rc == LQ_OK) rc = d->exec(&claimed, conn, &ticks->claim, args, NULL, NULL);
    bool taken = rc == LQ_DUPLICATE || (rc == LQ_OK && claimed == 0);
    if (taken && rc == LQ_OK) rc = LQ_DUPLICATE; /* rolled back below, as the failure is */
    int64_t id = 0;
    if (rc == LQ_OK) rc = lq__publish_in(&id, b, conn, t, &m, 1);
    bind_schedule(args, name, tick - keep_ms);
    if (rc == LQ_OK) rc = d->exec(NULL, conn, &ticks->prune, args, NULL, NULL);
    if (rc == LQ_OK) {
        rc = d->commit(conn);
        *fired = rc == LQ_OK;
    } else if (begun) {
        lq__error_copy failure;
        lq__error_save(&failure);
        d->rollback(conn);
        lq__error_restore(&failure);
    }
    lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    if (taken) {
        lq__error_clear();
        return LQ_OK;
    }
    if (*fired) lq__broker_wake(b, t, m->group);
    return rc;
}
