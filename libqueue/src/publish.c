/* Publishing: one insert per message, all in one transaction, then a wake-up
 * for this process's subscriptions of the table. */
#include "clock.h"
#include "message.h"
#include "runtime.h"

#include <stdlib.h>
#include <string.h>

/* A field the table cannot hold is refused before anything is written. */
static int check_message(const lq_table *t, const lq_message *m, size_t index) {
    char label[256];
    const char *missing = NULL;
    if (m->group && !lq__has(t, LQ_ROLE_GROUP)) missing = "a group (no group column)";
    else if (m->partition_key && !lq__has(t, LQ_ROLE_PARTITION_KEY))
        missing = "a partition key (no partition_key column)";
    else if (m->has_priority && !lq__has(t, LQ_ROLE_PRIORITY)) missing = "a priority (no priority column)";
    else if (m->delay_ms && !lq__has(t, LQ_ROLE_RETRY_AFTER)) missing = "a delay (no retry_after column)";
    else if (m->headers.count && !lq__has(t, LQ_ROLE_HEADERS)) missing = "headers (no headers column)";
    else if (m->payload_size && !lq__has(t, LQ_ROLE_PAYLOAD)) missing = "a payload (no payload column)";
    else if (!t->id_generated && !m->has_id) missing = "no id, and the table does not generate ids";
    else if (t->id_generated && m->has_id) missing = "an id, and the table generates ids";
    if (!missing) return LQ_OK;
    return lq__error(LQ_SCHEMA, "publish to %s: message %zu carries %s; nothing was written",
                     lq__table_label(t, label, sizeof label), index, missing);
}

static int read_id(void *ctx, const lq_value *cols, int count) {
    int64_t *id = ctx;
    if (count > 0) *id = cols[0].i;
    return LQ_OK;
}

static int insert_one(int64_t *id, lq_broker *b, lq_conn *conn, const lq_stmt *insert,
                      const lq_message *m, int64_t now) {
    lq_value args[LQ_P_COUNT] = {0};
    lq_strbuf json = {0};
    args[LQ_P_ID] = (lq_value){.type = LQ_V_INT, .i = m->id};
    args[LQ_P_PAYLOAD] = (lq_value){.type = LQ_V_BLOB, .p = m->payload, .n = m->payload_size};
    if (m->group) args[LQ_P_MSG_GROUP] = (lq_value){.type = LQ_V_TEXT, .p = m->group, .n = strlen(m->group)};
    if (m->partition_key)
        args[LQ_P_PKEY] = (lq_value){.type = LQ_V_TEXT, .p = m->partition_key, .n = strlen(m->partition_key)};
    args[LQ_P_PRIORITY] = (lq_value){.type = LQ_V_INT, .i = m->priority};
    args[LQ_P_RETRY_AFTER] = (lq_value){.type = LQ_V_TIME, .i = now + m->delay_ms};
    if (m->headers.count) {
        lq__headers_to_json(&json, &m->headers);
        if (json.failed) return lq__error(LQ_NOMEM, "out of memory");
        args[LQ_P_HEADERS] = (lq_value){.type = LQ_V_TEXT, .p = json.data, .n = json.len};
    }
    int rc = b->dialect->exec(NULL, conn, insert, args, read_id, id);
    lq__sb_free(&json);
    return rc;
}

/* Checks every message, then inserts them on `conn`; the caller owns the
 * transaction. */
static int insert_all(int64_t *ids_out, lq_broker *b, lq_conn *conn, const lq_table *t,
                      lq_message *const *messages, size_t count) {
    lq_stmt insert;
    int rc = lq__sqlset_build_insert(&insert, b->dialect, t);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &insert);
    int64_t now = lq__now_ms();
    for (size_t i = 0; rc == LQ_OK && i < count; i++) {
        int64_t id = 0;
        rc = insert_one(&id, b, conn, &insert, messages[i], now);
        if (rc == LQ_OK && ids_out) ids_out[i] = id;
    }
    free(insert.sql);
    return rc;
}

static int check_call(lq_broker *b, const lq_table *t, lq_message *const *messages, size_t count) {
    LQ_CHECK_ARG(b && t, "the broker or table is NULL");
    LQ_CHECK_ARG(messages || count == 0, "messages is NULL");
    for (size_t i = 0; i < count; i++) {
        LQ_CHECK_ARG(messages[i], "a message is NULL");
        int rc = check_message(t, messages[i], i);
        if (rc != LQ_OK) return rc;
    }
    pthread_mutex_lock(&b->mu);
    bool closed = b->closed;
    pthread_mutex_unlock(&b->mu);
    return closed ? lq__error(LQ_CLOSED, "the broker is closed") : LQ_OK;
}

static void wake_groups(lq_broker *b, const lq_table *t, lq_message *const *messages, size_t count) {
    for (size_t i = 0; i < count; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) {
            const char *a = messages[i]->group, *g = messages[j]->group;
            seen = (!a && !g) || (a && g && strcmp(a, g) == 0);
        }
        if (!seen) lq__broker_wake(b, t, messages[i]->group);
    }
}

int lq_publish(int64_t *ids_out, lq_broker *b, const lq_table *t, lq_message *const *messages,
               size_t count) {
    lq__error_clear();
    int rc = check_call(b, t, messages, count);
    if (rc != LQ_OK || count == 0) return rc;
    lq_conn *conn;
    if ((rc = lq__pool_acquire(&conn, &b->pool)) != LQ_OK) return rc;
    bool in_tx = count > 1;
    if (in_tx) rc = b->dialect->begin(conn, LQ_ISOLATION_DEFAULT);
    if (rc == LQ_OK) rc = insert_all(ids_out, b, conn, t, messages, count);
    if (rc == LQ_OK) rc = lq__notify_publish(b, conn, t, messages, count);
    if (in_tx && rc == LQ_OK) rc = b->dialect->commit(conn);
    if (in_tx && rc != LQ_OK) b->dialect->rollback(conn);
    lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("publish to %s", lq__table_label(t, label, sizeof label));
        return rc;
    }
    wake_groups(b, t, messages, count);
    return LQ_OK;
}

int lq_publish_on(int64_t *ids_out, lq_broker *b, void *connection, const lq_table *t,
                  lq_message *const *messages, size_t count) {
    lq__error_clear();
    LQ_CHECK_ARG(connection, "the connection is NULL");
    int rc = check_call(b, t, messages, count);
    if (rc != LQ_OK || count == 0) return rc;
    lq_conn *conn;
    if ((rc = b->dialect->borrow(&conn, connection)) != LQ_OK) return rc;
    rc = insert_all(ids_out, b, conn, t, messages, count);
    if (rc == LQ_OK) rc = lq__notify_publish(b, conn, t, messages, count);
    b->dialect->release_borrowed(conn);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("publish to %s", lq__table_label(t, label, sizeof label));
    }
    return rc;
}
