/* Publishing: the messages' rows, in multi-row inserts where there are
 * several, all in one transaction, then a wake-up for this process's
 * subscriptions of the table. */
#include "base/clock.h"
#include "core/broker.h"
#include "core/dedup.h"
#include "core/message.h"
#include "core/publish.h"
#include "core/publish_cache.h"

#include <stdlib.h>
#include <string.h>

int lq__check_message(const lq_table *t, const lq_message *m, size_t index) {
    char label[256];
    const char *missing = NULL;
    if (m->group && !lq__has(t, LQ_ROLE_GROUP)) missing = "a group (no group column)";
    else if (m->partition_key && !lq__has(t, LQ_ROLE_PARTITION_KEY))
        missing = "a partition key (no partition_key column)";
    else if (m->has_priority && !lq__has(t, LQ_ROLE_PRIORITY)) missing = "a priority (no priority column)";
    else if (m->delay_ms && !lq__has(t, LQ_ROLE_RETRY_AFTER)) missing = "a delay (no retry_after column)";
    else if (m->headers.count && !lq__has(t, LQ_ROLE_HEADERS)) missing = "headers (no headers column)";
    else if (m->payload_size && !lq__has(t, LQ_ROLE_PAYLOAD)) missing = "a payload (no payload column)";
    else if (m->dedup_key && !lq__has(t, LQ_ROLE_DEDUP_KEY)) missing = "a dedup key (no dedup_key column)";
    else if (m->expires_in_ms && !lq__has(t, LQ_ROLE_EXPIRES_AT))
        missing = "an expiry (no expires_at column)";
    else if (!t->id_generated && !m->has_id) missing = "no id, and the table does not generate ids";
    else if (t->id_generated && m->has_id) missing = "an id, and the table generates ids";
    if (!missing) return LQ_OK;
    return lq__error(LQ_SCHEMA, "publish to %s: message %zu carries %s; nothing was written",
                     lq__table_label(t, label, sizeof label), index, missing);
}

/* A multi-row insert writes up to CHUNK_ROWS rows, within the dialect's
 * parameter limit, and about CHUNK_BYTES of values (a chunk ends early past
 * it, so a statement stays well inside a server's packet limit, e.g.
 * MariaDB's max_allowed_packet). */
enum { CHUNK_ROWS = 1000, CHUNK_BYTES = 4 << 20 };

int lq__publish_row_args(lq__value *args, lq__strbuf *json, const lq_message *m, int64_t now) {
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = m->id};
    args[LQ__P_PAYLOAD] = (lq__value){.type = LQ__V_BLOB, .p = m->payload, .n = m->payload_size};
    if (m->group) args[LQ__P_MSG_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = m->group, .n = strlen(m->group)};
    if (m->partition_key)
        args[LQ__P_PKEY] = (lq__value){.type = LQ__V_TEXT, .p = m->partition_key, .n = strlen(m->partition_key)};
    args[LQ__P_PRIORITY] = (lq__value){.type = LQ__V_INT, .i = m->priority};
    args[LQ__P_RETRY_AFTER] = (lq__value){.type = LQ__V_TIME, .i = lq__time_after(now, m->delay_ms)};
    args[LQ__P_CREATED] = (lq__value){.type = LQ__V_TIME, .i = now};
    if (m->expires_in_ms)
        args[LQ__P_EXPIRES] = (lq__value){.type = LQ__V_TIME, .i = lq__time_after(now, m->expires_in_ms)};
    if (m->dedup_key)
        args[LQ__P_DEDUP] = (lq__value){.type = LQ__V_TEXT, .p = m->dedup_key, .n = strlen(m->dedup_key)};
    if (m->headers.count) {
        lq__headers_to_json(json, &m->headers);
        if (json->failed) return lq__error(LQ_NOMEM, "out of memory");
        args[LQ__P_HEADERS] = (lq__value){.type = LQ__V_TEXT, .p = json->data, .n = json->len};
    }
    return LQ_OK;
}

/* The ids a statement returns, as they come. */
typedef struct id_list {
    int64_t *ids;
    size_t count, cap;
} id_list;

static int read_id(void *ctx, const lq__value *cols, int count) {
    id_list *list = ctx;
    if (count < 1 || list->count == list->cap)
        return lq__error(LQ_BACKEND, "an insert returned more rows than it wrote");
    list->ids[list->count++] = cols[0].i;
    return LQ_OK;
}

/* One row; `channel`, where the insert notifies, is the channel it names. */
static int insert_one(int64_t *id, lq_broker *b, lq__conn *conn, const lq__stmt *insert,
                      const lq_message *m, int64_t now, const char *channel) {
    lq__value args[LQ__P_COUNT] = {0};
    lq__strbuf json = {0};
    id_list list = {.ids = id, .cap = 1};
    int rc = lq__publish_row_args(args, &json, m, now);
    if (channel) args[LQ__P_CHANNEL] = (lq__value){.type = LQ__V_TEXT, .p = channel, .n = strlen(channel)};
    if (rc == LQ_OK) rc = b->dialect->exec(NULL, conn, insert, args, read_id, &list);
    lq__sb_free(&json);
    return rc;
}

static int cmp_id(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Inserts messages[0..n) with one multi-row statement of n rows. */
static int insert_rows(int64_t *ids_out, lq_broker *b, lq__conn *conn, const lq_table *t,
                       const lq__stmt *insert, lq_message *const *messages, size_t n, int64_t now) {
    lq__value *args = calloc(n * LQ__P_COUNT, sizeof *args);
    lq__strbuf *json = calloc(n, sizeof *json);
    id_list list = {.ids = ids_out, .cap = ids_out ? n : 0};
    int rc = args && json ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
    for (size_t i = 0; rc == LQ_OK && i < n; i++)
        rc = lq__publish_row_args(&args[i * LQ__P_COUNT], &json[i], messages[i], now);
    bool read = t->id_generated && ids_out;
    if (rc == LQ_OK) rc = b->dialect->exec(NULL, conn, insert, args, read ? read_id : NULL, &list);
    if (rc == LQ_OK && read && list.count != n)
        rc = lq__error(LQ_BACKEND, "an insert of %zu rows returned %zu ids", n, list.count);
    /* RETURNING's row order is promised by no server, but a generated id
     * (identity or serial, SQLite's rowid, AUTO_INCREMENT) is taken as each
     * row is inserted, in VALUES order: the ids sorted ascending are the
     * messages' in order. */
    if (rc == LQ_OK && read) qsort(ids_out, n, sizeof *ids_out, cmp_id);
    for (size_t i = 0; rc == LQ_OK && !t->id_generated && ids_out && i < n; i++)
        ids_out[i] = messages[i]->id;
    for (size_t i = 0; json && i < n; i++) lq__sb_free(&json[i]);
    free(json);
    free(args);
    return rc;
}

static size_t message_bytes(const lq_message *m) {
    size_t n = m->payload_size + (m->group ? strlen(m->group) : 0) +
               (m->partition_key ? strlen(m->partition_key) : 0);
    for (size_t i = 0; i < m->headers.count; i++)
        n += strlen(m->headers.names[i]) + strlen(m->headers.values[i]) + 6;
    return n;
}

/* The rows of the next chunk: up to `most`, and past the first, within
 * CHUNK_BYTES. */
static size_t chunk_of(lq_message *const *messages, size_t count, size_t most) {
    size_t n = 0, bytes = 0;
    while (n < count && n < most) {
        bytes += message_bytes(messages[n]);
        if (n && bytes > CHUNK_BYTES) break;
        n++;
    }
    return n;
}

/* Checks every message, then inserts them on `conn`; the caller owns the
 * transaction. Several messages go in multi-row inserts of full chunks,
 * whose statement is interned (prepared once per connection), and the rest:
 * a chunk cut short (the remainder, or a chunk of large values) has a size
 * of its own, so its statement runs once, unprepared (id 0), and the
 * broker's statements do not grow with every size seen. Where ids the table
 * generates cannot be read back from a multi-row insert (MySQL without
 * INSERT .. RETURNING), or where the table has no column to write (each
 * row is DEFAULT VALUES), the rows go one by one. */
static int insert_all(int64_t *ids_out, bool *notified, lq_broker *b, lq__conn *conn,
                      const lq_table *t, lq_message *const *messages, size_t count) {
    const lq__dialect *d = b->dialect;
    lq__stmt insert = {0}, full = {0};
    /* A single message's insert sends the wake-up itself where it can: one
     * round trip and one commit, and no row written without its wake-up. */
    char channel[256];
    *notified = count == 1 && b->listener && d->notify_call;
    if (*notified) lq__table_label(t, channel, sizeof channel);
    bool owned = false;
    int rc = lq__publish_stmt_for(&insert, &owned, b, t,
                                  *notified ? LQ__PUBLISH_INSERT_NOTIFY : LQ__PUBLISH_INSERT);
    bool rows = count > 1 && lq__sql_insert_writes(t) &&
                (!t->id_generated ||
                 (d->insert_rows_returning ? d->insert_rows_returning(conn) : d->insert_returning));
    size_t most = CHUNK_ROWS;
    if (insert.nparams && (size_t)(d->max_params / insert.nparams) < most)
        most = (size_t)(d->max_params / insert.nparams);
    if (rc == LQ_OK && rows && count >= most) {
        rc = lq__sql_build_insert_rows(&full, d, t, (int)most);
        if (rc == LQ_OK) rc = lq__broker_intern(b, &full);
    }
    if (!rows || most < 2) most = 1;
    int64_t now = lq__now_ms();
    for (size_t i = 0, n; rc == LQ_OK && i < count; i += n) {
        n = chunk_of(messages + i, count - i, most);
        int64_t *ids = ids_out ? ids_out + i : NULL;
        if (n == 1) {
            int64_t id = 0;
            rc = insert_one(&id, b, conn, &insert, messages[i], now, *notified ? channel : NULL);
            if (ids) *ids = id;
            continue;
        }
        lq__stmt part = {0};
        if (n < most) {
            rc = lq__sql_build_insert_rows(&part, d, t, (int)n);
            part.id = 0;
        }
        if (rc == LQ_OK) rc = insert_rows(ids, b, conn, t, n < most ? &part : &full, messages + i, n, now);
        free(part.sql);
    }
    if (owned) free(insert.sql);
    free(full.sql);
    return rc;
}

/* insert_all, past the messages whose dedup key a row holds. */
static int write_messages(int64_t *ids_out, bool *notified, lq_broker *b, lq__conn *conn,
                          const lq_table *t, lq_message *const *messages, size_t count) {
    bool existing;
    *notified = false;
    if (!lq__dedup_any(messages, count, &existing))
        return insert_all(ids_out, notified, b, conn, t, messages, count);
    lq__dedup dd;
    int64_t *fresh_ids = calloc(count, sizeof *fresh_ids);
    int rc = fresh_ids ? lq__dedup_resolve(&dd, ids_out, b, conn, t, messages, count)
                       : lq__error(LQ_NOMEM, "out of memory");
    if (rc == LQ_OK && dd.fresh_count)
        rc = insert_all(fresh_ids, notified, b, conn, t, dd.fresh, dd.fresh_count);
    if (rc == LQ_OK) lq__dedup_spread(&dd, ids_out, fresh_ids, count);
    if (fresh_ids) lq__dedup_free(&dd);
    free(fresh_ids);
    return rc;
}

static int check_call(lq_broker *b, const lq_table *t, lq_message *const *messages, size_t count) {
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    LQ__CHECK_ARG(messages || count == 0, "messages is NULL");
    for (size_t i = 0; i < count; i++) {
        LQ__CHECK_ARG(messages[i], "a message is NULL");
        int rc = lq__check_message(t, messages[i], i);
        if (rc != LQ_OK) return rc;
    }
    return lq__broker_check_open(b);
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

/* The arguments, and the columns' types at a broker's first publish to the
 * table: a row written to an id of text, say, would take no id and wait
 * unclaimed. `if_free`: a publish on the caller's connection, which reads
 * the columns only through a pool connection free at once. */
static int check_publish(lq_broker *b, const lq_table *t, lq_message *const *messages, size_t count,
                         bool if_free) {
    int rc = check_call(b, t, messages, count);
    if (rc != LQ_OK || count == 0) return rc;
    if ((rc = lq__columns_check_once(b, t, if_free)) != LQ_OK) {
        char label[256];
        lq__error_prefix("publish to %s", lq__table_label(t, label, sizeof label));
    }
    return rc;
}

int lq_publish(int64_t *ids_out, lq_broker *b, const lq_table *t, lq_message *const *messages,
               size_t count) {
    lq__error_clear();
    int rc = check_publish(b, t, messages, count, false);
    if (rc != LQ_OK || count == 0) return rc;
    lq__conn *conn;
    if ((rc = lq__pool_acquire(&conn, &b->pool)) != LQ_OK) return rc;
    bool existing;
    lq__dedup_any(messages, count, &existing);
    bool in_tx = count > 1; /* one message: its lookup and insert need none */
    /* A key taken by a publish racing this one since its lookup fails the
     * insert on the unique index: looked up again, it names the holder,
     * whose id a message may take. */
    for (int tries = 0;; tries++) {
        if (in_tx) rc = b->dialect->begin(conn, LQ_ISOLATION_DEFAULT);
        bool notified = false;
        if (rc == LQ_OK) rc = write_messages(ids_out, &notified, b, conn, t, messages, count);
        if (rc == LQ_OK && !notified) rc = lq__notify_publish(b, conn, t, messages, count);
        if (in_tx && rc == LQ_OK) rc = b->dialect->commit(conn);
        if (in_tx && rc != LQ_OK) b->dialect->rollback(conn);
        if (rc != LQ_DUPLICATE || !existing || tries == 2) break;
        rc = LQ_OK;
    }
    lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("publish to %s", lq__table_label(t, label, sizeof label));
        return rc;
    }
    wake_groups(b, t, messages, count);
    return LQ_OK;
}

int lq__publish_in(int64_t *ids_out, lq_broker *b, lq__conn *conn, const lq_table *t,
                   lq_message *const *messages, size_t count) {
    bool notified = false;
    int rc = write_messages(ids_out, &notified, b, conn, t, messages, count);
    if (rc == LQ_OK && !notified) rc = lq__notify_publish(b, conn, t, messages, count);
    return rc;
}

int lq_publish_on(int64_t *ids_out, lq_broker *b, void *connection, const lq_table *t,
                  lq_message *const *messages, size_t count) {
    lq__error_clear();
    LQ__CHECK_ARG(connection, "the connection is NULL");
    /* The columns are read through the broker's pool, where a connection is
     * free at once (a failed read inside the caller's transaction would end
     * it on PostgreSQL): the publish needs none of the pool's, and waits for
     * none. */
    int rc = check_publish(b, t, messages, count, true);
    if (rc != LQ_OK || count == 0) return rc;
    lq__conn *conn;
    if ((rc = b->dialect->borrow(&conn, connection)) != LQ_OK) return rc;
    rc = lq__publish_in(ids_out, b, conn, t, messages, count);
    b->dialect->release_borrowed(conn);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("publish to %s", lq__table_label(t, label, sizeof label));
    }
    return rc;
}
