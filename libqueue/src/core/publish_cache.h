/* The statements a broker's publishes run, built once per table
 * description: its one-row insert (with or without the table's wake-up)
 * and its dedup key lookup. Building a statement's text costs a single-row
 * publish about as much client time as running it through SQLite's
 * statement cache. It also records the descriptions whose columns were
 * found fit, so that the catalog is read once per table. */
#ifndef LQ_PUBLISH_CACHE_H
#define LQ_PUBLISH_CACHE_H

#include "sql/sql.h"

typedef enum lq__publish_stmt {
    LQ__PUBLISH_INSERT,        /* one row */
    LQ__PUBLISH_INSERT_NOTIFY, /* one row, and the table's wake-up */
    LQ__PUBLISH_DEDUP_LOOKUP,  /* the row holding a dedup key */
    LQ__PUBLISH_COLUMNS_SEEN   /* no statement: the table's columns were checked */
} lq__publish_stmt;

typedef struct lq__publish_entry {
    lq_table *table;       /* a copy of the description the statement was built for */
    lq__publish_stmt kind;
    lq__stmt stmt;         /* interned */
} lq__publish_entry;

typedef struct lq__publish_cache {
    lq__publish_entry *entries;
    int count, cap;
} lq__publish_cache;

/* At most this many statements are kept; past them one is built for each
 * publish, so a process that makes up tables cannot grow a cache without
 * bound. */
enum { LQ__PUBLISH_CACHE_MAX = 128 };

typedef struct lq_broker lq_broker;

/* The statement `kind` of `t`, built or found in the broker's cache.
 * `*owned`: the caller frees out->sql (a full cache); otherwise the text
 * belongs to the broker, which outlives the publish. */
LQ__HIDDEN int lq__publish_stmt_for(lq__stmt *out, bool *owned, lq_broker *b, const lq_table *t,
                                    lq__publish_stmt kind);
/* LQ_OK once the columns of `t` were found fit (lq__table_check_columns):
 * the database is asked until it shows the table (and past a full cache),
 * then the broker remembers. A publish and a subscription's open ask it;
 * a publish on the caller's connection asks `if_free`, as it needs none of
 * the pool's otherwise. */
LQ__HIDDEN int lq__columns_check_once(lq_broker *b, const lq_table *t, bool if_free);
LQ__HIDDEN void lq__publish_cache_free(lq__publish_cache *c);

#endif
