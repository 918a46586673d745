/* The table description: role columns, form, isolation, dead letters. */
#include "sql/table.h"

#include "base/strbuf.h"
#include "sql/dialect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int replace(char **slot, const char *value) {
    char *copy = NULL;
    if (value && !(copy = lq__strdup(value))) return lq__error(LQ_NOMEM, "out of memory");
    free(*slot);
    *slot = copy;
    return LQ_OK;
}

int lq_table_new(lq_table **out, const char *name) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL; /* a failure leaves no dangling handle behind */
    LQ__CHECK_ARG(name && *name, "the table needs a name");
    lq_table *t = calloc(1, sizeof *t);
    if (!t || !(t->name = lq__strdup(name)) || !(t->id = lq__strdup("id"))) {
        lq_table_free(t);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    t->id_generated = true;
    *out = t;
    return LQ_OK;
}

void lq_table_free(lq_table *t) {
    if (!t) return;
    free(t->name);
    free(t->schema);
    free(t->id);
    for (int i = 0; i < LQ__ROLE_COUNT; i++) free(t->columns[i]);
    free(t->advisory);
    lq__template_free(&t->key);
    free(t->dead_letter);
    free(t);
}

int lq_table_set_schema(lq_table *t, const char *schema) {
    lq__error_clear();
    LQ__CHECK_ARG(t, "table is NULL");
    LQ__CHECK_ARG(!schema || *schema, "the schema is empty");
    return replace(&t->schema, schema);
}

int lq_table_set_id(lq_table *t, const char *column, int generated) {
    lq__error_clear();
    LQ__CHECK_ARG(t, "table is NULL");
    LQ__CHECK_ARG(column && *column, "the id column needs a name");
    int rc = replace(&t->id, column);
    if (rc == LQ_OK) t->id_generated = generated != 0;
    return rc;
}

int lq_table_set_column(lq_table *t, int role, const char *column) {
    lq__error_clear();
    LQ__CHECK_ARG(t, "table is NULL");
    if (role < LQ_ROLE_PAYLOAD || role >= LQ__ROLE_COUNT)
        return lq__error(LQ_MISUSE, "unknown role %d", role);
    LQ__CHECK_ARG(!column || *column, "a column name is empty");
    if (role == LQ_ROLE_LOCKED_UNTIL && column && t->advisory)
        return lq__error(LQ_MISUSE, "a table takes one form: it has an advisory lock template, "
                                    "so it cannot also have a locked_until column");
    return replace(&t->columns[role], column);
}

int lq_table_set_fifo(lq_table *t, int fifo) {
    lq__error_clear();
    LQ__CHECK_ARG(t, "table is NULL");
    if (fifo && t->advisory)
        return lq__error(LQ_MISUSE, "FIFO groups do not combine with the advisory lock form: drop "
                                    "fifo and put the group's column into the lock key");
    t->fifo = fifo != 0;
    return LQ_OK;
}

int lq_table_set_advisory_lock(lq_table *t, const char *key_template) {
    lq__error_clear();
    LQ__CHECK_ARG(t, "table is NULL");
    if (!key_template) {
        lq__template_free(&t->key);
        return replace(&t->advisory, NULL);
    }
    if (t->columns[LQ_ROLE_LOCKED_UNTIL])
        return lq__error(LQ_MISUSE, "a table takes one form: it has a locked_until column, so it "
                                    "cannot also have an advisory lock template");
    if (t->fifo)
        return lq__error(LQ_MISUSE, "FIFO groups do not combine with the advisory lock form: drop "
                                    "fifo and put the group's column into the lock key");
    lq__key_template parsed;
    int rc = lq__template_parse(&parsed, key_template);
    if (rc != LQ_OK) return rc;
    rc = replace(&t->advisory, key_template);
    if (rc != LQ_OK) {
        lq__template_free(&parsed);
        return rc;
    }
    lq__template_free(&t->key);
    t->key = parsed;
    return LQ_OK;
}

int lq_table_set_isolation(lq_table *t, int isolation) {
    lq__error_clear();
    LQ__CHECK_ARG(t, "table is NULL");
    if (isolation < LQ_ISOLATION_DEFAULT || isolation > LQ_ISOLATION_SERIALIZABLE)
        return lq__error(LQ_MISUSE, "unknown isolation level %d", isolation);
    t->isolation = isolation;
    return LQ_OK;
}

int lq_table_set_dead_letter(lq_table *t, const char *destination) {
    lq__error_clear();
    LQ__CHECK_ARG(t, "table is NULL");
    LQ__CHECK_ARG(!destination || *destination, "the dead-letter destination is empty");
    return replace(&t->dead_letter, destination);
}

int lq_table_form(const lq_table *t) {
    if (!t) return 0;
    if (t->columns[LQ_ROLE_LOCKED_UNTIL]) return LQ_FORM_LEASE;
    if (t->advisory) return LQ_FORM_ADVISORY;
    return LQ_FORM_ROW_LOCK;
}

bool lq__has(const lq_table *t, int role) { return t->columns[role] != NULL; }

bool lq__table_carries_claims(const lq_table *t) { return !t->partition_limit && !t->key_rate_limit; }

const char *lq__table_label(const lq_table *t, char *buf, size_t size) {
    if (t->schema) snprintf(buf, size, "%s.%s", t->schema, t->name);
    else snprintf(buf, size, "%s", t->name);
    return buf;
}

int lq__table_check_form(const lq_table *t, const lq__dialect *d) {
    int form = lq_table_form(t);
    if (d->forms & (1u << form)) return LQ_OK;
    char label[256];
    lq__table_label(t, label, sizeof label);
    if (form == LQ_FORM_ROW_LOCK)
        return lq__error(LQ_DIALECT, "table %s: %s has no row locks, so it cannot serve the row lock "
                                     "form: give the table a locked_until column (lease form) or an "
                                     "advisory lock key template (advisory form)",
                         label, d->name);
    return lq__error(LQ_DIALECT, "table %s: %s cannot serve the %s form", label, d->name,
                     form == LQ_FORM_LEASE ? "lease" : "advisory");
}

int lq__table_copy(lq_table **out, const lq_table *t) {
    lq_table *c;
    int rc = lq_table_new(&c, t->name);
    if (rc == LQ_OK) rc = lq_table_set_id(c, t->id, t->id_generated);
    if (rc == LQ_OK && t->schema) rc = lq_table_set_schema(c, t->schema);
    for (int role = LQ_ROLE_PAYLOAD; rc == LQ_OK && role < LQ__ROLE_COUNT; role++)
        if (t->columns[role]) rc = lq_table_set_column(c, role, t->columns[role]);
    if (rc == LQ_OK && t->advisory) rc = lq_table_set_advisory_lock(c, t->advisory);
    if (rc == LQ_OK) rc = lq_table_set_fifo(c, t->fifo);
    if (rc == LQ_OK) rc = lq_table_set_isolation(c, t->isolation);
    if (rc == LQ_OK && t->dead_letter) rc = lq_table_set_dead_letter(c, t->dead_letter);
    if (rc != LQ_OK) {
        lq_table_free(c);
        return rc;
    }
    *out = c;
    return LQ_OK;
}
