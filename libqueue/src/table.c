/* The table description: role columns, form, isolation, dead letters, and the
 * recommended CREATE TABLE for each dialect. */
#include "table.h"

#include "strbuf.h"

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
    LQ_CHECK_ARG(out, "out is NULL");
    LQ_CHECK_ARG(name && *name, "the table needs a name");
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
    for (int i = 0; i < LQ_ROLE_COUNT; i++) free(t->columns[i]);
    free(t->advisory);
    lq__template_free(&t->key);
    free(t->dead_letter);
    free(t);
}

int lq_table_set_schema(lq_table *t, const char *schema) {
    lq__error_clear();
    LQ_CHECK_ARG(t, "table is NULL");
    LQ_CHECK_ARG(!schema || *schema, "the schema is empty");
    return replace(&t->schema, schema);
}

int lq_table_set_id(lq_table *t, const char *column, int generated) {
    lq__error_clear();
    LQ_CHECK_ARG(t, "table is NULL");
    LQ_CHECK_ARG(column && *column, "the id column needs a name");
    int rc = replace(&t->id, column);
    if (rc == LQ_OK) t->id_generated = generated != 0;
    return rc;
}

int lq_table_set_column(lq_table *t, int role, const char *column) {
    lq__error_clear();
    LQ_CHECK_ARG(t, "table is NULL");
    if (role < LQ_ROLE_PAYLOAD || role > LQ_ROLE_HEADERS)
        return lq__error(LQ_MISUSE, "unknown role %d", role);
    LQ_CHECK_ARG(!column || *column, "a column name is empty");
    if (role == LQ_ROLE_LOCKED_UNTIL && column && t->advisory)
        return lq__error(LQ_MISUSE, "a table takes one form: it has an advisory lock template, "
                                    "so it cannot also have a locked_until column");
    return replace(&t->columns[role], column);
}

int lq_table_set_fifo(lq_table *t, int fifo) {
    lq__error_clear();
    LQ_CHECK_ARG(t, "table is NULL");
    if (fifo && t->advisory)
        return lq__error(LQ_MISUSE, "FIFO groups do not combine with the advisory lock form: drop "
                                    "fifo and put the group's column into the lock key");
    t->fifo = fifo != 0;
    return LQ_OK;
}

int lq_table_set_advisory_lock(lq_table *t, const char *key_template) {
    lq__error_clear();
    LQ_CHECK_ARG(t, "table is NULL");
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
    lq_key_template parsed;
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
    LQ_CHECK_ARG(t, "table is NULL");
    if (isolation < LQ_ISOLATION_DEFAULT || isolation > LQ_ISOLATION_SERIALIZABLE)
        return lq__error(LQ_MISUSE, "unknown isolation level %d", isolation);
    t->isolation = isolation;
    return LQ_OK;
}

int lq_table_set_dead_letter(lq_table *t, const char *destination) {
    lq__error_clear();
    LQ_CHECK_ARG(t, "table is NULL");
    LQ_CHECK_ARG(!destination || *destination, "the dead-letter destination is empty");
    return replace(&t->dead_letter, destination);
}

int lq_table_form(const lq_table *t) {
    if (!t) return 0;
    if (t->columns[LQ_ROLE_LOCKED_UNTIL]) return LQ_FORM_LEASE;
    if (t->advisory) return LQ_FORM_ADVISORY;
    return LQ_FORM_ROW_LOCK;
}

bool lq__has(const lq_table *t, int role) { return t->columns[role] != NULL; }

const char *lq__table_label(const lq_table *t, char *buf, size_t size) {
    if (t->schema) snprintf(buf, size, "%s.%s", t->schema, t->name);
    else snprintf(buf, size, "%s", t->name);
    return buf;
}

int lq__table_copy(lq_table **out, const lq_table *t) {
    lq_table *c;
    int rc = lq_table_new(&c, t->name);
    if (rc == LQ_OK) rc = lq_table_set_id(c, t->id, t->id_generated);
    if (rc == LQ_OK && t->schema) rc = lq_table_set_schema(c, t->schema);
    for (int role = LQ_ROLE_PAYLOAD; rc == LQ_OK && role < LQ_ROLE_COUNT; role++)
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

/* Column types per dialect for the recommended CREATE TABLE. */
typedef struct dialect_types {
    const char *name;
    char quote;
    const char *id_generated, *id_plain, *bytes, *integer, *time, *time_due, *text, *json;
    const char *index_if_not_exists; /* MySQL has no CREATE INDEX IF NOT EXISTS */
} dialect_types;

static const dialect_types type_sets[] = {
    {"sqlite", '"', "INTEGER PRIMARY KEY", "INTEGER PRIMARY KEY", "BLOB NOT NULL DEFAULT x''",
     "INTEGER NOT NULL DEFAULT", "TEXT",
     "TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00','now'))", "TEXT", "TEXT",
     "IF NOT EXISTS "},
    {"postgresql", '"', "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "BIGINT PRIMARY KEY",
     "BYTEA NOT NULL DEFAULT ''", "INTEGER NOT NULL DEFAULT", "TIMESTAMPTZ",
     "TIMESTAMPTZ NOT NULL DEFAULT now()", "TEXT", "JSONB", "IF NOT EXISTS "},
    {"mysql", '`', "BIGINT AUTO_INCREMENT PRIMARY KEY", "BIGINT PRIMARY KEY", "LONGBLOB NOT NULL",
     "INT NOT NULL DEFAULT", "DATETIME(3)", "DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)",
     "VARCHAR(255)", "JSON", ""},
};

static void add_ident(lq_strbuf *sb, const dialect_types *d, const char *schema, const char *name) {
    if (schema) {
        lq__sb_add_quoted(sb, schema, d->quote);
        lq__sb_addc(sb, '.');
    }
    lq__sb_add_quoted(sb, name, d->quote);
}

static void add_column(lq_strbuf *sb, const dialect_types *d, const char *column,
                       const char *type) {
    lq__sb_add(sb, ",\n  ");
    lq__sb_add_quoted(sb, column, d->quote);
    lq__sb_addf(sb, " %s", type);
}

int lq_table_create_sql(char **sql_out, const lq_table *t, const char *dialect) {
    lq__error_clear();
    LQ_CHECK_ARG(sql_out && t && dialect, "an argument is NULL");
    const dialect_types *d = NULL;
    for (size_t i = 0; i < sizeof type_sets / sizeof type_sets[0]; i++)
        if (strcmp(type_sets[i].name, dialect) == 0) d = &type_sets[i];
    if (strcmp(dialect, "mariadb") == 0) d = &type_sets[2];
    if (!d) return lq__error(LQ_DIALECT, "unknown dialect \"%s\": sqlite, postgresql or mysql", dialect);

    char *const *c = t->columns;
    lq_strbuf sb = {0};
    lq__sb_add(&sb, "CREATE TABLE IF NOT EXISTS ");
    add_ident(&sb, d, t->schema, t->name);
    lq__sb_add(&sb, " (\n  ");
    lq__sb_add_quoted(&sb, t->id, d->quote);
    lq__sb_addf(&sb, " %s", t->id_generated ? d->id_generated : d->id_plain);
    if (c[LQ_ROLE_PAYLOAD]) add_column(&sb, d, c[LQ_ROLE_PAYLOAD], d->bytes);
    if (c[LQ_ROLE_ATTEMPT]) {
        add_column(&sb, d, c[LQ_ROLE_ATTEMPT], d->integer);
        lq__sb_add(&sb, " 1");
    }
    if (c[LQ_ROLE_GROUP]) add_column(&sb, d, c[LQ_ROLE_GROUP], d->text);
    if (c[LQ_ROLE_PARTITION_KEY]) add_column(&sb, d, c[LQ_ROLE_PARTITION_KEY], d->text);
    if (c[LQ_ROLE_PRIORITY]) {
        add_column(&sb, d, c[LQ_ROLE_PRIORITY], d->integer);
        lq__sb_add(&sb, " 0");
    }
    if (c[LQ_ROLE_RETRY_AFTER]) add_column(&sb, d, c[LQ_ROLE_RETRY_AFTER], d->time_due);
    if (c[LQ_ROLE_LOCKED_UNTIL]) add_column(&sb, d, c[LQ_ROLE_LOCKED_UNTIL], d->time);
    if (c[LQ_ROLE_PROCESSED_AT]) add_column(&sb, d, c[LQ_ROLE_PROCESSED_AT], d->time);
    if (c[LQ_ROLE_HEADERS]) add_column(&sb, d, c[LQ_ROLE_HEADERS], d->json);
    lq__sb_add(&sb, "\n)");

    /* The claim order, (group, priority, retry_after, id), for the columns the
     * table has: claims read it instead of sorting the table. */
    lq__sb_addf(&sb, ";\nCREATE INDEX %s", d->index_if_not_exists);
    lq_strbuf index_name = {0};
    lq__sb_addf(&index_name, "%s_claim_order", t->name);
    char *iname = lq__sb_take(&index_name);
    if (iname) lq__sb_add_quoted(&sb, iname, d->quote);
    free(iname);
    lq__sb_add(&sb, " ON ");
    add_ident(&sb, d, t->schema, t->name);
    lq__sb_add(&sb, " (");
    const int order[] = {LQ_ROLE_GROUP, LQ_ROLE_PRIORITY, LQ_ROLE_RETRY_AFTER};
    for (size_t i = 0; i < 3; i++) {
        if (!c[order[i]]) continue;
        lq__sb_add_quoted(&sb, c[order[i]], d->quote);
        lq__sb_add(&sb, ", ");
    }
    lq__sb_add_quoted(&sb, t->id, d->quote);
    lq__sb_add(&sb, ")");
    if (c[LQ_ROLE_PROCESSED_AT] && strcmp(d->name, "mysql") != 0) {
        lq__sb_add(&sb, " WHERE ");
        lq__sb_add_quoted(&sb, c[LQ_ROLE_PROCESSED_AT], d->quote);
        lq__sb_add(&sb, " IS NULL");
    }
    *sql_out = lq__sb_take(&sb);
    return *sql_out ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
}
