/* The table description as the core reads it. */
#ifndef LQ_TABLE_H
#define LQ_TABLE_H

#include "sql/template.h"

#define LQ__ROLE_COUNT (LQ_ROLE_DEAD_REASON + 1)

struct lq_table {
    char *name;
    char *schema;
    char *id;
    bool id_generated;
    char *columns[LQ__ROLE_COUNT]; /* indexed by lq_role; NULL when unset */
    bool fifo;
    char *advisory;               /* the template's text */
    lq__key_template key;          /* the template, parsed */
    int isolation;
    char *dead_letter;
    /* A subscription's copy only: rows over these sizes are claimed by their
     * size alone (0: no limit; the statements bind the limits). */
    int64_t max_payload, max_headers;
    /* A subscription's copy only: its partition_concurrency, which its lease
     * claims keep to (0: none). */
    int partition_limit;
    /* A subscription's copy only: its partition_rate_limit, starts of one
     * key in any window of key_rate_period_ms, which its claims keep to. */
    int key_rate_limit;
    int64_t key_rate_period_ms;
    /* A subscription's copy only, lease form: expired leases are cleared by
     * the subscription's sweeps (sqlset.sweep), so its claims read only the
     * rows whose lease is NULL, which an index of their own holds
     * (schema.c, <table>_claim_free). */
    bool leases_swept;
};

/* A deep copy, so a subscription outlives the caller's description. */
LQ__HIDDEN int lq__table_copy(lq_table **out, const lq_table *t);
LQ__HIDDEN bool lq__has(const lq_table *t, int role);
/* Whether an advisory settlement may claim its worker's next row: not
 * under a partition key's limit or rate, which a poll's claim counts. */
LQ__HIDDEN bool lq__table_carries_claims(const lq_table *t);
/* LQ_OK when the dialect serves the description's form, else LQ_DIALECT
 * with why not and what to use instead. */
struct lq__dialect;
LQ__HIDDEN int lq__table_check_form(const lq_table *t, const struct lq__dialect *d);
/* "schema.name" or "name", unquoted, for messages. */
LQ__HIDDEN const char *lq__table_label(const lq_table *t, char *buf, size_t size);

#endif
