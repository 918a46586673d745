/* A message's insert rendered for the caller's own driver (lq_publish_sql):
 * the statement lq_publish runs for one message, with the values it binds,
 * taken out as text and typed parameters the caller runs in its own
 * transaction. */
#include "base/clock.h"
#include "core/message.h"
#include "core/publish.h"

#include <stdlib.h>
#include <string.h>

/* The longest channel a wake-up can name: PostgreSQL's NAMEDATALEN - 1, as
 * notify.c's listener keeps to. */
enum { CHANNEL_MAX = 63 };

typedef struct rendered_param {
    int type; /* lq_sql_type */
    int64_t i;
    double d;
    char *data; /* text and bytes: an owned copy, NUL-terminated */
    size_t size;
    size_t offset; /* of its placeholder in sql */
} rendered_param;

struct lq_rendered_sql {
    char *sql;
    rendered_param *params;
    size_t count;
    bool returns_id;
};

void lq_rendered_sql_free(lq_rendered_sql *r) {
    if (!r) return;
    for (size_t i = 0; i < r->count; i++) free(r->params[i].data);
    free(r->params);
    free(r->sql);
    free(r);
}

/* The parameter a bound value renders as; times as the database reads them
 * from text. */
static int render_value(rendered_param *p, const lq__dialect *d, const lq__value *v) {
    char time_text[LQ__TIME_TEXT_SIZE];
    const void *bytes = v->p;
    size_t size = v->n;
    switch (v->type) {
    case LQ__V_INT: p->type = LQ_SQL_INT64; p->i = v->i; return LQ_OK;
    case LQ__V_TEXT: p->type = LQ_SQL_TEXT; break;
    case LQ__V_BLOB: p->type = LQ_SQL_BYTES; break;
    case LQ__V_TIME:
        d->rendered_time_text(time_text, v->i);
        p->type = LQ_SQL_TEXT;
        bytes = time_text;
        size = strlen(time_text);
        break;
    default: p->type = LQ_SQL_NULL; return LQ_OK;
    }
    p->data = malloc(size + 1);
    if (!p->data) return lq__error(LQ_NOMEM, "out of memory");
    if (size) memcpy(p->data, bytes, size);
    p->data[size] = '\0';
    p->size = size;
    return LQ_OK;
}

/* Where each placeholder starts, in order, skipping quoted identifiers and
 * string literals (whose quotes are doubled inside, as the builder writes
 * them); false when they do not number `count`. */
static bool find_placeholders(rendered_param *params, size_t count, const char *sql) {
    size_t found = 0;
    for (const char *s = sql; *s; s++) {
        if (*s == '"' || *s == '`' || *s == '\'') {
            char quote = *s;
            for (s++; *s && !(*s == quote && s[1] != quote); s++)
                if (*s == quote) s++; /* a doubled quote */
            if (!*s) break;
        } else if (*s == '?' || (*s == '$' && s[1] >= '0' && s[1] <= '9')) {
            if (found == count) return false;
            params[found++].offset = (size_t)(s - sql);
        }
    }
    return found == count;
}

/* The statement and its values: the insert of one row, sending the
 * table's wake-up where the dialect can and the caller wants it. */
static int render(lq_rendered_sql *r, const lq__dialect *native, const lq_table *t,
                  const lq_message *m, int flags) {
    lq__dialect d = *native;
    d.placeholder = native->rendered_placeholder;
    /* Without RETURNING where the driver can read the id itself. */
    if ((flags & LQ_PUBLISH_SQL_NO_RETURNING) && d.last_insert_id) d.insert_returning = false;
    char channel[256];
    lq__table_label(t, channel, sizeof channel);
    bool notify = d.notify_call && !(flags & LQ_PUBLISH_SQL_NO_NOTIFY) && strlen(channel) <= CHANNEL_MAX;
    lq__stmt st = {0};
    int rc = notify ? lq__sql_build_insert_notify(&st, &d, t) : lq__sqlset_build_insert(&st, &d, t);
    if (rc != LQ_OK) return rc;
    r->sql = st.sql;
    r->returns_id = notify || d.insert_returning;
    lq__value args[LQ__P_COUNT] = {0};
    lq__strbuf json = {0};
    rc = lq__publish_row_args(args, &json, m, lq__now_ms());
    args[LQ__P_CHANNEL] = (lq__value){.type = LQ__V_TEXT, .p = channel, .n = strlen(channel)};
    r->params = calloc(st.nparams ? (size_t)st.nparams : 1, sizeof *r->params);
    if (rc == LQ_OK && !r->params) rc = lq__error(LQ_NOMEM, "out of memory");
    for (int i = 0; rc == LQ_OK && i < st.nparams; i++, r->count++)
        rc = render_value(&r->params[i], &d, &args[st.params[i]]);
    lq__sb_free(&json);
    if (rc == LQ_OK && !find_placeholders(r->params, r->count, r->sql))
        rc = lq__error(LQ_ERROR, "the rendered statement does not show its %zu placeholders", r->count);
    return rc;
}

int lq_publish_sql(lq_rendered_sql **out, const char *dialect, const lq_table *t, const lq_message *m,
                   int flags) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL;
    LQ__CHECK_ARG(dialect && t && m, "the dialect, table or message is NULL");
    LQ__CHECK_ARG(!(flags & ~(LQ_PUBLISH_SQL_NO_NOTIFY | LQ_PUBLISH_SQL_NO_RETURNING)),
                  "unknown flags: LQ_PUBLISH_SQL_NO_NOTIFY, LQ_PUBLISH_SQL_NO_RETURNING");
    const lq__dialect *d = lq__dialect_named(dialect);
    if (!d)
        return lq__error(LQ_DIALECT, "unknown dialect \"%s\": sqlite, postgresql or mysql", dialect);
    char label[256];
    lq__table_label(t, label, sizeof label);
    if (m->dedup_key && m->on_duplicate == LQ_ON_DUPLICATE_EXISTING)
        return lq__error(LQ_MISUSE,
                         "publish_sql to %s: on_duplicate \"existing\" needs a look-up before the "
                         "insert (lq_publish_on makes it); here a duplicate key fails the insert",
                         label);
    int rc = lq__check_message(t, m, 0);
    if (rc != LQ_OK) return rc;
    lq_rendered_sql *r = calloc(1, sizeof *r);
    if (!r) return lq__error(LQ_NOMEM, "out of memory");
    rc = render(r, d, t, m, flags);
    if (rc != LQ_OK) {
        lq_rendered_sql_free(r);
        lq__error_prefix("publish_sql to %s", label);
        return rc;
    }
    *out = r;
    return LQ_OK;
}

static const rendered_param *param_at(const lq_rendered_sql *r, size_t index) {
    return r && index < r->count ? &r->params[index] : NULL;
}

const char *lq_rendered_sql_text(const lq_rendered_sql *r) { return r ? r->sql : ""; }

size_t lq_rendered_sql_param_count(const lq_rendered_sql *r) { return r ? r->count : 0; }

int lq_rendered_sql_param_type(const lq_rendered_sql *r, size_t index) {
    const rendered_param *p = param_at(r, index);
    return p ? p->type : LQ_SQL_NULL;
}

int64_t lq_rendered_sql_param_int64(const lq_rendered_sql *r, size_t index) {
    const rendered_param *p = param_at(r, index);
    return p && p->type == LQ_SQL_INT64 ? p->i : 0;
}

double lq_rendered_sql_param_double(const lq_rendered_sql *r, size_t index) {
    const rendered_param *p = param_at(r, index);
    return p && p->type == LQ_SQL_DOUBLE ? p->d : 0.0;
}

const void *lq_rendered_sql_param_data(const lq_rendered_sql *r, size_t index) {
    const rendered_param *p = param_at(r, index);
    return p ? p->data : NULL;
}

size_t lq_rendered_sql_param_size(const lq_rendered_sql *r, size_t index) {
    const rendered_param *p = param_at(r, index);
    return p ? p->size : 0;
}

size_t lq_rendered_sql_param_offset(const lq_rendered_sql *r, size_t index) {
    const rendered_param *p = param_at(r, index);
    return p ? p->offset : SIZE_MAX;
}

int lq_rendered_sql_returns_id(const lq_rendered_sql *r) { return r && r->returns_id ? 1 : 0; }
