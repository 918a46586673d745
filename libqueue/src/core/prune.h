/* Retention one batch at a time, for callers inside the library: a
 * subscription's claim threads prune in their idle time (retain_ms), where
 * lq_queue_prune and lq_dead_letters_prune loop until nothing old is left. */
#ifndef LQ_PRUNE_H
#define LQ_PRUNE_H

#include "core/broker.h"

/* The rows of one batch of lq_queue_prune and lq_dead_letters_prune. */
#define LQ__PRUNE_BATCH 1000

/* Deletes at most `limit` (>= 1) finished rows of `t`, those whose
 * processed_at is before `before_epoch_ms` (epoch ms on the host's clock,
 * the clock acks write processed_at on), of `group` where it is given (a
 * table with a group column; NULL: every group). One DELETE, in autocommit:
 * its own short transaction, holding the locks of at most `limit` rows.
 * Rows queued or in work (processed_at NULL) are never touched.
 *
 * *deleted (not NULL) receives how many went, 0 to `limit`; fewer than
 * `limit` means no older row was left when it ran (on PostgreSQL, or the
 * rest were locked by a pruner running at once, which this one passes
 * over rather than waits for).
 *
 * Takes a connection of the broker's pool for the statement, waiting for
 * one as any call does (acquire_timeout_ms), and gives it back. The
 * statement is interned in the broker, so each connection prepares it once
 * however often this runs. It does not make the index on processed_at that
 * keeps a batch from reading the table: lq__processed_index_create, once
 * (lq_table_create makes it for a table it creates).
 *
 * LQ_MISUSE without a processed_at column, with a group where the table has
 * no group column, or a limit below 1; the status and the thread's error
 * otherwise as the statement left them (the error is not cleared first).
 * Thread-safe. */
LQ__HIDDEN int lq__prune_batch(int64_t *deleted, lq_broker *b, const lq_table *t, const char *group,
                               int64_t before_epoch_ms, int limit);

/* The same for dead letters, in the dead-letter table or group (LQ_MISUSE
 * without one, or without a retry_after column): those dead-lettered before
 * `before_epoch_ms`, as dead-lettering stamps retry_after; in a dead-letter
 * group of a lease table, not those a lease holds now. */
LQ__HIDDEN int lq__dead_letters_prune_batch(int64_t *deleted, lq_broker *b, const lq_table *t,
                                            int64_t before_epoch_ms, int limit);

#endif
