/* The one-row inserts a broker's publishes run, built once per table
 * description: building an insert's text costs a single-row publish about
 * as much client time as running it through SQLite's statement cache. */
#ifndef LQ_INSERT_CACHE_H
#define LQ_INSERT_CACHE_H

#include "sql/sql.h"

typedef struct lq__insert_entry {
    lq_table *table; /* a copy of the description the insert was built for */
    bool notify;     /* the insert also sends the table's wake-up */
    lq__stmt insert;  /* interned */
} lq__insert_entry;

typedef struct lq__insert_cache {
    lq__insert_entry *entries;
    int count, cap;
} lq__insert_cache;

/* At most this many descriptions are kept; past them an insert is built
 * for each publish, so a process that makes up tables cannot grow a cache
 * without bound. */
enum { LQ__INSERT_CACHE_MAX = 64 };

typedef struct lq_broker lq_broker;

/* The one-row insert of `t` (with its wake-up when `notify`), built or
 * found in the broker's cache. `*owned`: the caller frees out->sql (a
 * full cache); otherwise the text belongs to the broker, which outlives
 * the publish. */
LQ__HIDDEN int lq__insert_for(lq__stmt *out, bool *owned, lq_broker *b, const lq_table *t, bool notify);
LQ__HIDDEN void lq__insert_cache_free(lq__insert_cache *c);

#endif
