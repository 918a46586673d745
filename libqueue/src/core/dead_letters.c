/* lq_dead_letters_list, _replay and _purge: what an operator does with the
 * rows a queue gave up on. Named rows go in one transaction; all of them go
 * a thousand to a transaction, so that a table of millions is never one
 * long transaction. */
#include "core/broker.h"

#include "base/headers.h"
#include "base/json_out.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH_ROWS = 1000, LIST_MOST = 10000 };

typedef struct dead_work {
    lq_broker *b;
    const lq_table *t;
    lq__conn *conn;
    lq__dead_letters_sql sql;
    lq__value args[LQ__P_COUNT];
} dead_work;

/* The checks every call shares, then the statements and a connection. */
static int begin_work(dead_work *w, lq_broker *b, const lq_table *t, const char *group,
                      bool needs_group) {
    memset(w, 0, sizeof *w);
    w->b = b;
    w->t = t;
    if (!t->dead_letter)
        return lq__error(LQ_MISUSE, "the table declares no dead letters (its description's dead_letter)");
    bool grouped = lq__has(t, LQ_ROLE_GROUP);
    if (grouped && needs_group && !group)
        return lq__error(LQ_MISUSE, "the table has a group column: name the group to replay into");
    if (!grouped && group)
        return lq__error(LQ_MISUSE, "the table has no group column, so a group does not apply");
    int rc = lq__broker_check_open(b);
    if (rc == LQ_OK) rc = lq__sql_build_dead_letters(&w->sql, b->dialect, t);
    if (rc == LQ_OK) rc = lq__pool_acquire(&w->conn, &b->pool);
    w->args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = lq__now_ms()};
    w->args[LQ__P_DEST] = (lq__value){.type = LQ__V_TEXT, .p = t->dead_letter, .n = strlen(t->dead_letter)};
    if (group) w->args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = group, .n = strlen(group)};
    return rc;
}

static int end_work(int rc, dead_work *w, const char *what) {
    if (w->conn) lq__pool_release(&w->b->pool, w->conn, rc == LQ_CONNECT);
    lq__dead_letters_sql_free(&w->sql);
    if (rc != LQ_OK && w->t) {
        char label[256];
        lq__error_prefix("%s of %s", what, lq__table_label(w->t, label, sizeof label));
    }
    return rc;
}

/* Runs one statement once (these are rare: no connection keeps them
 * prepared); NULL sql runs nothing. */
static int run_once(dead_work *w, lq__stmt *st, int64_t *changes, lq__row_fn fn, void *ctx) {
    if (!st->sql) return LQ_OK;
    st->id = 0;
    return w->b->dialect->exec(changes, w->conn, st, w->args, fn, ctx);
}

static void set_range(dead_work *w, int64_t from, int64_t to) {
    w->args[LQ__P_FROM_ID] = (lq__value){.type = LQ__V_INT, .i = from};
    w->args[LQ__P_TO_ID] = (lq__value){.type = LQ__V_INT, .i = to};
}

/* Replays or purges the rows of one range; *moved counts them. */
static int move_range(dead_work *w, bool replay, int64_t *moved) {
    int64_t n = 0, ignored = 0;
    int rc = LQ_OK;
    if (replay && w->sql.copy.sql) {
        rc = run_once(w, &w->sql.requeue, &ignored, NULL, NULL);
        if (rc == LQ_OK) rc = run_once(w, &w->sql.copy, &n, NULL, NULL);
        if (rc == LQ_OK) rc = run_once(w, &w->sql.remove, &ignored, NULL, NULL);
    } else {
        rc = run_once(w, replay ? &w->sql.requeue : &w->sql.remove, &n, NULL, NULL);
    }
    if (rc == LQ_OK) *moved += n;
    return rc;
}

/* The ranges of `ids` (one id each), or of [from, to], in one transaction. */
static int move_in_one(dead_work *w, bool replay, const int64_t *ids, size_t count, int64_t from,
                       int64_t to, int64_t *moved) {
    const lq__dialect *d = w->b->dialect;
    int64_t in_tx = 0;
    int rc = d->begin(w->conn, LQ_ISOLATION_DEFAULT);
    if (rc != LQ_OK) return rc;
    for (size_t i = 0; rc == LQ_OK && i < (ids ? count : 1); i++) {
        set_range(w, ids ? ids[i] : from, ids ? ids[i] : to);
        rc = move_range(w, replay, &in_tx);
    }
    if (rc == LQ_OK) rc = d->commit(w->conn);
    if (rc == LQ_OK) {
        *moved += in_tx;
        return LQ_OK;
    }
    lq__error_copy failure;
    lq__error_save(&failure);
    d->rollback(w->conn);
    lq__error_restore(&failure);
    return rc;
}

typedef struct id_span {
    int64_t first, last;
    int64_t rows;
} id_span;

static int on_id(void *ctx, const lq__value *cols, int count) {
    id_span *span = ctx;
    if (count < 1 || cols[0].type != LQ__V_INT) return lq__error(LQ_SCHEMA, "an id that is not an integer");
    if (span->rows++ == 0) span->first = cols[0].i;
    span->last = cols[0].i;
    return LQ_OK;
}

/* Every dead letter, a batch of ids at a time, each batch a transaction:
 * the range from its first id to its last. */
static int move_all(dead_work *w, bool replay, int64_t *moved) {
    w->args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = BATCH_ROWS};
    lq__stmt *next = &w->sql.ids_first;
    for (;;) {
        id_span span = {0};
        int rc = run_once(w, next, NULL, on_id, &span);
        if (rc != LQ_OK || span.rows == 0) return rc;
        rc = move_in_one(w, replay, NULL, 0, span.first, span.last, moved);
        if (rc != LQ_OK) return rc;
        /* The next batch: ids above this one's last. */
        w->args[LQ__P_FROM_ID] = (lq__value){.type = LQ__V_INT, .i = span.last};
        next = &w->sql.ids;
    }
}

static int move(int64_t *moved_out, lq_broker *b, const lq_table *t, const char *group,
                const int64_t *ids, size_t count, bool replay) {
    const char *what = replay ? "replay dead letters" : "purge dead letters";
    lq__error_clear();
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    LQ__CHECK_ARG(ids || count == 0, "ids is NULL and count is not 0");
    LQ__CHECK_ARG(!ids || count > 0, "ids given with count 0 (NULL and 0 mean every one)");
    dead_work w;
    int64_t moved = 0;
    int rc = begin_work(&w, b, t, group, replay);
    if (rc == LQ_OK) rc = ids ? move_in_one(&w, replay, ids, count, 0, 0, &moved) : move_all(&w, replay, &moved);
    if (moved_out) *moved_out = moved; /* what committed, even when a later batch failed */
    if (rc == LQ_OK)
        lq__log(LQ_LOG_INFO, "%s: %lld row(s)", what, (long long)moved);
    return end_work(rc, &w, what);
}

int lq_dead_letters_replay(int64_t *replayed_out, lq_broker *b, const lq_table *t, const char *group,
                           const int64_t *ids, size_t count) {
    return move(replayed_out, b, t, group, ids, count, true);
}

int lq_dead_letters_purge(int64_t *purged_out, lq_broker *b, const lq_table *t, const char *group,
                          const int64_t *ids, size_t count) {
    return move(purged_out, b, t, group, ids, count, false);
}

/* ---- the list ------------------------------------------------------------ */

typedef struct json_rows {
    lq__strbuf sb;
    int at[LQ__COL_COUNT];
    size_t rows;
} json_rows;

static void json_int_field(lq__strbuf *sb, const char *name, const lq__value *v) {
    if (v->type == LQ__V_NULL) return;
    int64_t i = v->i;
    if (v->type != LQ__V_INT) { /* a number the database wrote as text */
        char text[LQ__INT_TEXT_SIZE] = "";
        if (v->n < sizeof text) memcpy(text, v->p, v->n);
        i = strtoll(text, NULL, 10);
    }
    lq__sb_addf(sb, ",\"%s\":%lld", name, (long long)i);
}

/* A text or bytes field: a string when it is UTF-8, else "<name>_base64". */
static void json_bytes_field(lq__strbuf *sb, const char *name, const lq__value *v) {
    if (v->type == LQ__V_NULL) return;
    bool text = lq__utf8_valid(v->p, v->n);
    lq__sb_addf(sb, ",\"%s%s\":", name, text ? "" : "_base64");
    if (text) lq__json_string(sb, v->p, v->n);
    else lq__json_base64(sb, v->p, v->n);
}

/* The headers column's JSON, parsed and written again, so that the list is
 * JSON whatever the column holds (left out when it is not an object). */
static void json_headers_field(lq__strbuf *sb, const lq__value *v) {
    if (v->type == LQ__V_NULL) return;
    lq__headers h = {0};
    if (lq__headers_from_json(&h, v->p, v->n) == LQ_OK) {
        lq__sb_add(sb, ",\"headers\":");
        lq__headers_to_json(sb, &h);
    }
    lq__headers_clear(&h);
}

static int on_row(void *ctx, const lq__value *cols, int count) {
    json_rows *j = ctx;
    const int *at = j->at;
    (void)count; /* the layout of the table's columns says where each is */
    lq__sb_add(&j->sb, j->rows++ ? ",{\"id\":" : "{\"id\":");
    lq__sb_addf(&j->sb, "%lld", (long long)cols[at[LQ__COL_ID]].i);
    if (at[LQ__COL_ATTEMPT] >= 0) json_int_field(&j->sb, "attempt", &cols[at[LQ__COL_ATTEMPT]]);
    if (at[LQ__COL_GROUP] >= 0) json_bytes_field(&j->sb, "group", &cols[at[LQ__COL_GROUP]]);
    if (at[LQ__COL_PKEY] >= 0) json_bytes_field(&j->sb, "partition_key", &cols[at[LQ__COL_PKEY]]);
    if (at[LQ__COL_PRIORITY] >= 0) json_int_field(&j->sb, "priority", &cols[at[LQ__COL_PRIORITY]]);
    if (at[LQ__COL_HEADERS] >= 0) json_headers_field(&j->sb, &cols[at[LQ__COL_HEADERS]]);
    if (at[LQ__COL_PAYLOAD] >= 0) json_bytes_field(&j->sb, "payload", &cols[at[LQ__COL_PAYLOAD]]);
    lq__sb_addc(&j->sb, '}');
    return LQ_OK;
}

int lq_dead_letters_list(char **json_out, lq_broker *b, const lq_table *t, const char *group,
                         int64_t after_id, int64_t limit) {
    lq__error_clear();
    LQ__CHECK_ARG(json_out, "json_out is NULL");
    *json_out = NULL;
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    if (limit < 1 || limit > LIST_MOST)
        return lq__error(LQ_MISUSE, "limit %lld is not within 1 to %d", (long long)limit, LIST_MOST);
    dead_work w;
    int rc = begin_work(&w, b, t, group, false);
    json_rows j = {0};
    lq__row_layout(t, j.at);
    lq__sb_addc(&j.sb, '[');
    w.args[LQ__P_FROM_ID] = (lq__value){.type = LQ__V_INT, .i = after_id};
    w.args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = limit};
    if (rc == LQ_OK) rc = run_once(&w, &w.sql.list, NULL, on_row, &j);
    lq__sb_addc(&j.sb, ']');
    char *json = lq__sb_take(&j.sb);
    if (rc == LQ_OK && !json) rc = lq__error(LQ_NOMEM, "out of memory");
    if (rc == LQ_OK) *json_out = json;
    else free(json);
    return end_work(rc, &w, "list dead letters");
}
