/* The tables the library keeps beside a queue's own. */
#ifndef LQ_SCHEMA_H
#define LQ_SCHEMA_H

#include "core/broker.h"

/* Creates, if missing, the table rate limits keep their starts in
 * (LQ__STARTS_TABLE, in the queue table's schema): a queue's name and a
 * start on the database's clock, indexed by both; with `keyed` the table of
 * partition_rate_limit's starts (LQ__KEY_STARTS_TABLE), by queue, partition
 * key and start. */
LQ__HIDDEN int lq__starts_table_create(lq_broker *b, const lq_table *t, bool keyed);

/* Creates, if missing, the table schedules claim their ticks in
 * (LQ__TICKS_TABLE, in the queue table's schema): a schedule's name, a
 * tick, and when it was enqueued on the database's clock, keyed by the
 * first two. */
LQ__HIDDEN int lq__ticks_table_create(lq_broker *b, const lq_table *t);
/* Creates the control table pauses are kept in (sql/control.c), beside the
 * queue's table, with the statement `create`, when it is missing. */
LQ__HIDDEN int lq__control_table_create(lq_broker *b, const lq_table *t, const lq__stmt *create);
/* The table `concurrency` keeps its holds in (sql/holds.c), beside the
 * queue's, with the statement `create`, when it is missing. */
LQ__HIDDEN int lq__holds_table_create(lq_broker *b, const lq_table *t, const lq__stmt *create);
/* The table of cancel requests (sql/cancel_requests.c), beside the queue's,
 * with the statement `create`, when it is missing. */
LQ__HIDDEN int lq__cancel_requests_table_create(lq_broker *b, const lq_table *t,
                                               const lq__stmt *create);

/* LQ_SCHEMA, naming each, where a column of `t` is missing or of a type
 * that cannot hold its role (an id of text, a payload of integers), as
 * lq_table_create's check; LQ_OK for a table the catalog does not show
 * (*found false). `if_free`: only with a pool connection to be had at once
 * (else LQ_OK, *found false). */
LQ__HIDDEN int lq__table_check_columns(bool *found, lq_broker *b, const lq_table *t, bool if_free);

/* Makes, if missing, the indexes the queue-wide limits count leased rows by
 * (on locked_until, and with `by_key` on the partition key and
 * locked_until; partial where the database has them). Best effort: where
 * they cannot be made (a role without CREATE), a warning says so, and the
 * limits count without them. */
LQ__HIDDEN void lq__limit_indexes_create(lq_broker *b, const lq_table *t, bool by_key);

/* Whether the lease form's claims on table `t` can sweep its expired
 * leases on this database: lease form, and partial indexes, which hold the
 * free rows' order apart (lq_table_create makes <table>_claim_free and
 * <table>_leased for such a table). */
LQ__HIDDEN bool lq__leases_sweepable(const lq__dialect *d, const lq_table *t);

/* *swept: whether the subscriptions to `t` sweep its expired leases, and
 * claim only the rows whose lease is NULL: where it can, and the table has
 * <table>_leased, the index a sweep reads (a table made before has it only
 * where queue-wide limits made it; without it a sweep would read the whole
 * table, and the claims take expired leases themselves, as always). */
LQ__HIDDEN int lq__leases_swept_find(bool *swept, lq_broker *b, const lq_table *t);

/* Makes, if missing, the index retention finds finished rows by
 * (<table>_processed on processed_at, partial on processed_at IS NOT NULL
 * where the database has them), as lq_table_create makes it for a new
 * table; on PostgreSQL CONCURRENTLY, so that writers go on meanwhile. On
 * `conn` (in no transaction), or one of the pool when NULL. Best effort, as
 * the limits' indexes: without it, a warning, and each batch of retention
 * reads the table for old rows. */
LQ__HIDDEN void lq__processed_index_create(lq_broker *b, lq__conn *conn, const lq_table *t);

#endif
