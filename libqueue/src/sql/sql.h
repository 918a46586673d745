/* Statements: SQL text with its parameters named by symbol, so the code that
 * runs a statement binds values by meaning and each dialect keeps its own
 * placeholders and parameter order. */
#ifndef LQ_SQL_H
#define LQ_SQL_H

#include "base/strbuf.h"
#include "sql/table.h"

#include "base/options.h"

typedef enum lq__param {
    LQ__P_GROUP = 1,   /* the subscription's group */
    LQ__P_NOW,         /* due comparison */
    LQ__P_LEASE_NOW,   /* lease-ended comparison */
    LQ__P_LIMIT,       /* rows to claim */
    LQ__P_LEASE,       /* the new lease expiry */
    LQ__P_HELD,        /* the lease the delivery holds: its token */
    LQ__P_ID,
    LQ__P_RETRY_AFTER, /* the time a retried row is due again */
    LQ__P_DEST,        /* the dead-letter group */
    LQ__P_PAYLOAD,
    LQ__P_PKEY,
    LQ__P_PRIORITY,
    LQ__P_HEADERS,
    LQ__P_MSG_GROUP,   /* the group a publish writes */
    LQ__P_GUARD,       /* the FIFO group guard's key: "schema.table:group" */
    LQ__P_HELD_SET,    /* rows settled together, as lq__held_set_add writes them */
    LQ__P_CHANNEL,     /* the table's notification channel */
    LQ__P_SCHEMA,      /* a schema's name, looked up in the catalog */
    LQ__P_NAME,        /* a table's name, looked up in the catalog */
    LQ__P_MAX_PAYLOAD, /* claims: the largest payload read (max_payload_bytes) */
    LQ__P_MAX_HEADERS, /* and the largest headers' JSON */
    LQ__P_DEDUP,       /* a message's dedup key */
    LQ__P_QUEUE,       /* a rate limit's queue, in the starts table */
    LQ__P_PERIOD,      /* a rate limit's period, ms */
    LQ__P_EXPIRES,     /* a message's expires_at */
    LQ__P_CREATED,     /* a message's created_at: the publish's time */
    LQ__P_SCHEDULE,    /* a schedule's name, in the ticks table */
    LQ__P_TICK,        /* one of its ticks, epoch ms */
    LQ__P_FROM_ID,     /* a range of ids, both ends included */
    LQ__P_TO_ID,
    LQ__P_REASON,      /* why a row goes to the dead letters (the dead_reason role) */
    LQ__P_STARTED_AT,  /* a reserved start's time, epoch ms on the database's clock */
    LQ__P_CONCURRENCY, /* the queue-wide concurrency, where a claim counts its room itself */
    LQ__P_ACKS,        /* how many rows a set of acks names */
    LQ__P_SLOTS,       /* the advisory concurrency slots' key prefix, where a claim takes one */
    LQ__P_FIRST_SLOT,  /* and the slot its tries start at */
    LQ__P_PASSED,      /* the rows such a claim passes over: "{id,..}" */
    LQ__P_ATTEMPT,     /* the attempt count a take expects: the row as a claim read it */
    LQ__P_COUNT
} lq__param;

#define LQ__MAX_PARAMS 24

/* What the failure of sqlset.ack_set_whole says (a text cast to integer). */
#define LQ__ACKS_NOT_WHOLE "libqueue: an ack a claim carried found its lease lost"

typedef struct lq__stmt {
    char *sql;  /* NULL: the outcome runs no statement */
    int id;     /* process-wide, for the per-connection cache of prepared statements */
    int nparams;
    /* A multi-row insert: `rows` (> 1) tuples of the same nparams parameters,
     * bound from `rows` consecutive lq__param-indexed argument sets
     * (lq__stmt_arg). 0 or 1: one set. */
    int rows;
    /* A publish's insert: where the dialect has no INSERT .. RETURNING, exec
     * reports the new row's id as a one-column row. */
    bool insert;
    unsigned char params[LQ__MAX_PARAMS];
} lq__stmt;

/* Columns of every statement that returns rows of the queue, in this order,
 * those the table has (lq__row_layout: where each is); a role the table lacks
 * reads as NULL in the delivery. */
enum { LQ__COL_ID, LQ__COL_PAYLOAD, LQ__COL_ATTEMPT, LQ__COL_GROUP, LQ__COL_PKEY, LQ__COL_HEADERS,
       LQ__COL_PRIORITY, LQ__COL_DUE,
       /* Where the table's copy limits them: the byte sizes, the values
        * themselves then read only when within the limits. */
       LQ__COL_PAYLOAD_SIZE, LQ__COL_HEADERS_SIZE,
       /* 1 where the row is past its expires_at (LQ__P_NOW), else 0. */
       LQ__COL_EXPIRED, LQ__COL_CREATED, LQ__COL_COUNT };

/* Every statement a subscription runs, built once when it opens. */
/* The leases a sweep (lq__sqlset.sweep) clears at most, so that after a
 * fleet's crash it stays within a statement's time: one that clears this
 * many leaves the next one due at once. */
#define LQ__SWEEP_MAX 10000

typedef struct lq__sqlset {
    lq__stmt claim;       /* lease: claims and stamps rows; advisory: candidates (id, key) */
    lq__stmt take;        /* advisory: counts the attempt of one candidate and reads it */
    lq__stmt claim_one;   /* advisory, where the database can: one row claimed by one
                          * statement (a slot, the key, the take), or NULL sql */
    lq__stmt take_read;   /* advisory, where an update cannot return rows: reads it after */
    lq__stmt pick;        /* advisory, where an update cannot return rows, for the claim a
                          * settlement carries: the first candidate past LQ__P_PASSED, its
                          * key's try and its row in one statement, or NULL sql */
    lq__stmt take_picked; /* and the take of the row pick read, while its attempt count is
                          * as read (LQ__P_ATTEMPT) */
    lq__stmt take_set;    /* advisory, where keys live in the process: takes a set of
                          * candidates (LQ__P_HELD_SET) in one statement, or NULL sql */
    lq__stmt stamp;       /* lease, where the claim is a locking read: leases one row */
    lq__stmt stamp_set;   /* and leases a set of rows (LQ__P_HELD_SET: id, expiry), or NULL
                          * sql where the database cannot (the stamps then run one by one) */
    lq__stmt guard;       /* FIFO: takes the group in the claim's transaction; returns 1 or 0 */
    lq__stmt ack;
    lq__stmt ack_set;     /* acks a set of rows in one statement, or NULL sql where the
                          * database cannot (the acks then run one by one) */
    lq__stmt ack_set_held; /* lease: acks a set of rows that share one token (LQ__P_HELD) */
    lq__stmt retry;       /* NULL sql in the advisory form: releasing the key is the retry */
    lq__stmt release;     /* gives back a row never settled, undoing the claim's count */
    lq__stmt retry_after;
    lq__stmt dead_group;  /* dead letter into another group */
    lq__stmt dead_copy;   /* dead letter into another table: copy, clear the lease, delete */
    lq__stmt dead_clear;
    lq__stmt dead_delete;
    lq__stmt extend;
    lq__stmt sweep;       /* lease, where leases are swept (lq_table.leases_swept, PostgreSQL):
                          * clears every lease run out, or NULL sql */
    lq__stmt claim_swept; /* and the claim with that sweep before it, in one statement: the
                          * count of leases swept one more column of its rows (one row of
                          * it alone where it claims none), or NULL sql */
    lq__stmt in_queue;    /* lease: a row one if still in the queue (its group, not processed),
                          * whoever holds it: a lost lease's row is, a cancelled one not */
    lq__stmt in_work;     /* concurrency, lease form: the queue's rows leased now, anywhere
                          * (NULL sql without a queue-wide limit) */
    lq__stmt starts;      /* rate limit: the queue's starts within the period, the oldest
                          * of them and the database's clock now (NULL sql without one) */
    lq__stmt start_add;   /* rate limit: one start, now */
    lq__stmt start_prune; /* rate limit: the starts past the period, deleted */
    lq__stmt start_at;    /* rate limit, row lock and advisory forms: one start reserved at
                          * LQ__P_STARTED_AT */
    lq__stmt start_unused; /* and up to LQ__P_LIMIT of those reserved then, deleted */
    lq__stmt key_in_work; /* partition_concurrency: one key's rows leased now */
    lq__stmt key_slot;    /* partition_concurrency, row lock form, where the claim's filter
                           * cannot take the slot (MySQL): tries slot LQ__P_LIMIT of the key
                           * of row LQ__P_ID; returns (its name, 1 when taken), or NULL sql */
    lq__stmt key_starts;  /* partition_rate_limit: the starts of one key (LQ__P_PKEY) within
                          * its period, the oldest and the database's clock now */
    lq__stmt key_start_add;   /* and one start of the key, now */
    lq__stmt key_start_prune; /* and the key's starts past the period, deleted */
    lq__stmt claim_in_room; /* concurrency, lease form, where the dialect can: the claim, of
                             * no more rows than the room it counts itself (LQ__P_CONCURRENCY
                             * less the queue's rows leased now), that room one more column
                             * of its rows (one row of it alone where it claims none), or
                             * NULL sql */
    lq__stmt ack_set_whole;      /* where claims carry acks: ack_set (and ack_set_held, below) */
    lq__stmt ack_set_held_whole; /* that fails unless it acked all LQ__P_ACKS rows */
} lq__sqlset;

/* A statement under construction. */
typedef struct lq__sql {
    lq__strbuf sb;
    lq__stmt *stmt;
    const struct lq__dialect *dialect;
    const lq_table *table;
    char too_long[136]; /* the first name past the dialect's max_name, cut for the message */
} lq__sql;

LQ__HIDDEN void lq__sql_start(lq__sql *b, lq__stmt *stmt, const struct lq__dialect *d, const lq_table *t);
/* Finishes the statement; LQ_NOMEM or LQ_MISUSE (too many parameters). */
LQ__HIDDEN int lq__sql_finish(lq__sql *b);
/* SELECT id, <every column the description names> FROM t WHERE 1 = 0: a
 * read of nothing that fails when the table or one of its columns is not
 * there. */
LQ__HIDDEN int lq__sql_probe(lq__stmt *out, const struct lq__dialect *d, const lq_table *t);
LQ__HIDDEN void lq__sql_add(lq__sql *b, const char *text);
LQ__HIDDEN void lq__sql_ident(lq__sql *b, const char *name);
LQ__HIDDEN void lq__sql_table(lq__sql *b);
LQ__HIDDEN void lq__sql_qualified(lq__sql *b, const char *schema, const char *name);
LQ__HIDDEN void lq__sql_col(lq__sql *b, int role);
LQ__HIDDEN void lq__sql_id(lq__sql *b);
LQ__HIDDEN void lq__sql_param(lq__sql *b, lq__param p);
/* "(locked_until IS NULL OR locked_until <= :lease_now)": no lease holds the row. */
LQ__HIDDEN void lq__sql_lease_free(lq__sql *b);
/* "a = b AND ..." for due, unprocessed rows of the group; with the lease
 * condition when `lease_free`. Writes "1 = 1" when there is nothing to say. */
LQ__HIDDEN void lq__sql_claim_where(lq__sql *b, bool lease_free);
/* " FROM <table> WHERE <claim_where>". */
LQ__HIDDEN void lq__sql_from_claimable(lq__sql *b, bool lease_free);
/* FIFO groups: " AND id = <the group's head>", the head being its first
 * unfinished row in claim order, due or not; in the lease form also " AND no
 * row of the group is leased". */
LQ__HIDDEN void lq__sql_fifo_head(lq__sql *b, bool lease);
/* "priority, retry_after, id" for the columns the table has. */
LQ__HIDDEN void lq__sql_claim_order(lq__sql *b);
/* " ORDER BY <claim order> LIMIT <LQ__P_LIMIT>". */
LQ__HIDDEN void lq__sql_claim_limit(lq__sql *b);
/* ", <partition key> AS lq_pkey" (`named`), or ", lq_pkey" where a
 * subquery named it: the advisory candidates' third column, where
 * partition_concurrency or partition_rate_limit counts by key; nothing
 * elsewhere. */
LQ__HIDDEN void lq__sql_candidate_pkey(lq__sql *b, bool named);
/* " AND <the row's partition key has room in its window>" after the
 * advisory candidates' conditions, where partition_rate_limit is set (a key
 * at its limit holds back no other); not in the take, whose rows are counted
 * again after it (forms/key_limits.c). */
LQ__HIDDEN void lq__sql_candidate_filter(lq__sql *b);
/* The locking read of claimable rows (row lock, and the lease claims of
 * PostgreSQL and MySQL): SELECT <row columns> FROM t WHERE <claimable> [FIFO
 * head] ORDER BY .. LIMIT .. FOR UPDATE SKIP LOCKED; with `bound`, LIMIT
 * LEAST(LQ__P_LIMIT, <what bound renders>). */
LQ__HIDDEN void lq__sql_locking_read(lq__sql *b, bool lease, void (*bound)(lq__sql *b));
/* The room the queue-wide concurrency leaves, as an expression: the limit
 * (LQ__P_CONCURRENCY) less the queue's rows leased now, 0 at the least. */
LQ__HIDDEN void lq__sql_room_left(lq__sql *b);
/* The advisory take up to its end: counts the attempt of a candidate still
 * claimable (UPDATE .. SET attempt = attempt + 1 WHERE ..), or, without an
 * attempt column, reads it (SELECT <row columns> FROM t WHERE ..); of the
 * candidate LQ__P_ID, or of the rows whose condition on the id `ids`
 * renders (" IN (..)"). */
LQ__HIDDEN void lq__sql_take(lq__sql *b, bool counts, void (*ids)(lq__sql *b));
/* The take, returning its row as the claims do where the database can. */
LQ__HIDDEN void lq__sql_take_returning(lq__sql *b, void (*ids)(lq__sql *b));
/* The LQ_COL_* columns the table has, in LQ_COL_* order, each named
 * "lq_c<its LQ_COL_*>"; `attempt_expr` follows the attempt column when set
 * (e.g. " - 1" after a count). */
LQ__HIDDEN void lq__sql_row_columns(lq__sql *b, const char *attempt_expr);
/* Where each LQ_COL_* column is in a row lq__sql_row_columns returns: its
 * position, or -1 where the table lacks it (the row then leaves it out). */
LQ__HIDDEN void lq__row_layout(const lq_table *t, int at[LQ__COL_COUNT]);
/* Splits a table's dead-letter destination, "schema.table" or "table",
 * into parts the caller frees; a destination that is the table itself is
 * refused. */
LQ__HIDDEN int lq__dead_letter_split(char **schema, char **name, const lq_table *t);
/* A string literal in single quotes. */
LQ__HIDDEN void lq__sql_literal(lq__sql *b, const char *text);
/* " AND processed_at IS NULL" where the table marks processed rows. */
LQ__HIDDEN void lq__sql_and_unprocessed(lq__sql *b);
/* A row that stays in the table after it leaves the queue (marked processed,
 * dead-lettered into a group) gives its dedup key back: ", key = NULL",
 * the column qualified by `qualifier` when given; nothing without one. */
LQ__HIDDEN void lq__sql_free_dedup_key(lq__sql *b, const char *qualifier);
/* Dead-lettering writes when it happened, on the host's clock: "<sep>
 * retry_after = <LQ__P_NOW>" where the table has the column (retention of
 * dead letters reads it; a replay sets it to now again); nothing without. */
LQ__HIDDEN void lq__sql_dead_stamp(lq__sql *b, const char *sep);
/* What a dead letter's copy in the dead-letter table `schema`.`name` is
 * given (row LQ__P_ID): no lease, and its time (lq__sql_dead_stamp). NULL sql
 * where there is neither to write. */
LQ__HIDDEN int lq__sql_build_dead_clear(lq__stmt *out, const struct lq__dialect *d,
                                        const lq_table *t, const char *schema, const char *name);

/* The statements of lq_cancel (sql/cancel.c). */
typedef struct lq__cancel_sql {
    lq__stmt find;   /* the row if queued or in work, locked for the transaction: 1 when a
                        lease holds it now (LQ__P_NOW), and its advisory key */
    lq__stmt copy;   /* dead letters in a table: the row copied there (NULL sql otherwise) */
    lq__stmt clear;  /* and its lease cleared, its time stamped in the copy (or NULL sql) */
    lq__stmt remove; /* the row deleted, or moved into the dead-letter group */
} lq__cancel_sql;
LQ__HIDDEN int lq__sql_build_cancel(lq__cancel_sql *out, const struct lq__dialect *d,
                                    const lq_table *t);
LQ__HIDDEN void lq__cancel_sql_free(lq__cancel_sql *c);

/* The statements of cancel requests (sql/cancel_requests.c): how a cancel
 * reaches a row lock run, whose transaction holds the row. LQ__P_QUEUE the
 * queue's table name, LQ__P_ID the row, LQ__P_NOW when (epoch ms). State 0:
 * requested; 1: taken by the process whose run holds the row. */
typedef struct lq__cancel_requests_sql {
    lq__stmt create;    /* the requests table, if it is missing */
    lq__stmt request;   /* a request, at state 0 (a duplicate key while one is there) */
    lq__stmt pending;   /* the queue's row ids requested (state 0) since LQ__P_NOW */
    lq__stmt take;      /* 0 -> 1: one change when this process may apply it */
    lq__stmt give_back; /* 1 -> 0: an apply that failed */
    lq__stmt state;     /* the request's state, if there is one */
    lq__stmt withdraw;  /* deleted while still at 0: one change when withdrawn */
    lq__stmt forget;    /* deleted, whatever its state */
    lq__stmt prune;     /* the queue's requests made before LQ__P_NOW, deleted */
} lq__cancel_requests_sql;
#define LQ__CANCEL_REQUESTS_TABLE "lq_cancel_requests"
/* How long a request lives: a cancel's whole wait, and a margin for clocks
 * apart (requests are timed on the canceller's host, read on others). */
#define LQ__CANCEL_REQUEST_LIFE_MS 30000
LQ__HIDDEN int lq__sql_build_cancel_requests(lq__cancel_requests_sql *out,
                                             const struct lq__dialect *d, const lq_table *t);
LQ__HIDDEN void lq__cancel_requests_sql_free(lq__cancel_requests_sql *r);

/* The statements of lq_queue_stats (sql/queue_stats.c), each a bounded
 * count (LQ__P_LIMIT) of the queue's rows in one state; NULL sql where the
 * table cannot tell the state. */
typedef struct lq__queue_stats_sql {
    lq__stmt due;      /* due now and free to claim */
    lq__stmt delayed;  /* due later (retry_after) */
    lq__stmt in_work;  /* leased now (the lease form) */
    lq__stmt dead;     /* the dead letters, where the table declares them */
    lq__stmt head;     /* the due time of the next row in claim order */
    lq__stmt attempts; /* (attempt, rows) of the first rows in claim order */
} lq__queue_stats_sql;
LQ__HIDDEN int lq__sql_build_queue_stats(lq__queue_stats_sql *out, const struct lq__dialect *d,
                                         const lq_table *t);
LQ__HIDDEN void lq__queue_stats_sql_free(lq__queue_stats_sql *s);

/* The statements on a table's dead letters (sql/dead_letters.c), each on
 * the rows of a range of ids (LQ__P_FROM_ID to LQ__P_TO_ID), in the
 * dead-letter table or in the dead-letter group (LQ__P_DEST). */
typedef struct lq__dead_letters_sql {
    lq__stmt ids_first; /* the first ids in order, up to LQ__P_LIMIT */
    lq__stmt ids;     /* ids above LQ__P_FROM_ID in order, up to LQ__P_LIMIT */
    lq__stmt list;    /* the rows above LQ__P_FROM_ID as deliveries read them, up to LQ__P_LIMIT */
    lq__stmt requeue; /* replay: due now (LQ__P_NOW), first attempt, no lease (in the
                       * dead-letter table, before the copy), in the group LQ__P_GROUP
                       * where the dead letters are a group */
    lq__stmt copy;    /* replay from a table: the rows copied back into the queue */
    lq__stmt remove;  /* replay from a table, and purge: the dead letters deleted */
} lq__dead_letters_sql;
LQ__HIDDEN int lq__sql_build_dead_letters(lq__dead_letters_sql *out, const struct lq__dialect *d,
                                          const lq_table *t);
LQ__HIDDEN void lq__dead_letters_sql_free(lq__dead_letters_sql *s);

/* Retention (sql/prune.c): a batch of up to LQ__P_LIMIT rows past their
 * time deleted, LQ__P_NOW being the cut. With `dead` false, finished rows
 * (processed_at before the cut), of the group LQ__P_GROUP with `by_group`;
 * with `dead` true, dead letters (retry_after, as dead-lettering stamps it,
 * before the cut) in the dead-letter table, or in the group LQ__P_DEST and
 * not leased now (LQ__P_LEASE_NOW). */
typedef struct lq__prune_sql {
    lq__stmt pick;   /* where the dialect joins sets (held_set_joins): the ids of the
                        batch, read without a lock; else NULL sql */
    lq__stmt remove; /* DELETE of the batch, picked by a subquery, or of the rows of
                        LQ__P_HELD_SET (ids, as lq__held_set_add writes them) still past
                        the cut */
} lq__prune_sql;
LQ__HIDDEN int lq__sql_build_prune(lq__prune_sql *out, const struct lq__dialect *d,
                                   const lq_table *t, bool dead, bool by_group);
LQ__HIDDEN void lq__prune_sql_free(lq__prune_sql *s);

/* The statements of the control table (sql/control.c), one row per paused
 * queue: LQ__P_QUEUE the queue's table name, LQ__P_GROUP its group ("" for
 * the whole table), LQ__P_NOW when (epoch ms, as an integer). */
typedef struct lq__control_sql {
    lq__stmt create; /* the control table, if it is missing */
    lq__stmt pause;  /* the row inserted: a duplicate key when paused already */
    lq__stmt resume; /* the row deleted */
    lq__stmt paused; /* COUNT(*) of the rows pausing a group: its own and its table's */
    lq__stmt probe;  /* reads no row of the queue's table: it exists */
} lq__control_sql;
#define LQ__CONTROL_TABLE "lq_queue_control"
LQ__HIDDEN int lq__sql_build_control(lq__control_sql *out, const struct lq__dialect *d,
                                     const lq_table *t);
/* The `paused` statement alone, which a subscription keeps. */
LQ__HIDDEN int lq__sql_build_paused(lq__stmt *out, const struct lq__dialect *d, const lq_table *t);
LQ__HIDDEN void lq__control_sql_free(lq__control_sql *c);

/* The statements of the holds table (sql/holds.c), where `concurrency` is
 * counted by holds (runtime/forms/holds.c): LQ__P_QUEUE the queue's name,
 * LQ__P_ID a holder's number (0: the queue's own row), LQ__P_LIMIT how many
 * rows it may have in work, LQ__P_LEASE until when that counts (epoch ms). */
typedef struct lq__holds_sql {
    lq__stmt create; /* the holds table, if it is missing */
    lq__stmt insert; /* a holder's row */
    lq__stmt read;   /* (holder, held, held_until) of every row of the queue, locked */
    lq__stmt set;    /* a holder's count, and its time no earlier */
    lq__stmt extend; /* a holder's time, no earlier */
    lq__stmt drop;   /* a holder's row */
    lq__stmt prune;  /* the rows of holders whose time ended before LQ__P_LEASE */
    lq__stmt probe;  /* a row of the queue's table the claim could take (its arguments) */
} lq__holds_sql;
#define LQ__HOLDS_TABLE "lq_limit_holds"
LQ__HIDDEN int lq__sql_build_holds(lq__holds_sql *out, const struct lq__dialect *d,
                                   const lq_table *t);
LQ__HIDDEN void lq__holds_sql_free(lq__holds_sql *h);

/* Builds the settlements and the extension every dialect shares, then the
 * dialect's claims. */
LQ__HIDDEN int lq__sqlset_build(lq__sqlset *set, const struct lq__dialect *d, const lq_table *t);
LQ__HIDDEN void lq__sqlset_free(lq__sqlset *set);
/* Every statement of a set, in `all`, for what is done to each of them
 * (interning, freeing); returns how many. */
#define LQ__SQLSET_STATEMENTS 38
/* SELECT id FROM t WHERE <dedup_key> = LQ__P_DEDUP: the row holding a key. */
LQ__HIDDEN int lq__sql_build_dedup_lookup(lq__stmt *out, const struct lq__dialect *d,
                                          const lq_table *t);
/* The statements of the queue-wide limits a subscription sets: in_work for
 * concurrency, the starts for a rate limit. */
LQ__HIDDEN int lq__sqlset_build_limits(lq__sqlset *set, const struct lq__dialect *d,
                                       const lq_table *t, bool concurrency, bool rate);
/* ack_set_whole and ack_set_held_whole, for claims that carry acks. */
LQ__HIDDEN int lq__sqlset_build_acks_whole(lq__sqlset *set, const struct lq__dialect *d,
                                           const lq_table *t);
/* The table rate limits keep their starts in, beside the queue's table. */
#define LQ__STARTS_TABLE "lq_starts"
#define LQ__KEY_STARTS_TABLE "lq_key_starts"
/* The table schedules claim their ticks in, beside the queue's table. */
#define LQ__TICKS_TABLE "lq_schedule_ticks"
LQ__HIDDEN size_t lq__sqlset_each(lq__sqlset *set, lq__stmt *all[LQ__SQLSET_STATEMENTS]);
/* The advisory take where an update returns rows: count the attempt of a
 * candidate still claimable and read it as it was (or only read it, without
 * an attempt column). */
LQ__HIDDEN int lq__sql_build_take_returning(lq__stmt *take, const struct lq__dialect *d,
                                           const lq_table *t);
/* The same for the candidates of LQ__P_HELD_SET, in one statement. */
LQ__HIDDEN int lq__sql_build_take_set_returning(lq__stmt *take, const struct lq__dialect *d,
                                               const lq_table *t);
/* A set of rows as one text parameter: JSON [id, ..], or with tokens
 * [[id, "token"], ..]; where the dialect reads arrays (held_set_array), an
 * array literal of integers: {id, ..}, or with tokens {id, token ms, id,
 * token ms, ..}. Add each row, then take the text (NULL when out of
 * memory). */
LQ__HIDDEN void lq__held_set_add(lq__strbuf *sb, const struct lq__dialect *d, bool tokens, int64_t id,
                                int64_t token);
LQ__HIDDEN char *lq__held_set_take(lq__strbuf *sb, const struct lq__dialect *d);
/* The acks of n rows as one statement (rows[i]: id, lease token): *text is
 * their set, the caller's to free; the statement is `one_token` where it
 * exists and the rows share their token (bound once, as LQ__P_HELD, so the
 * set names the rows alone), else `per_row`, whose set has each row's token
 * where `tokens`. NULL when out of memory. */
LQ__HIDDEN const lq__stmt *lq__ack_set_text(char **text, const struct lq__dialect *d,
                                           const lq__stmt *per_row, const lq__stmt *one_token,
                                           bool tokens, int64_t (*rows)[2], size_t n);
/* The insert a publish runs: one row, returning its id. */
LQ__HIDDEN int lq__sqlset_build_insert(lq__stmt *insert, const struct lq__dialect *d, const lq_table *t);
/* One message's insert that also notifies the table's channel (LQ__P_CHANNEL)
 * with its group, in one statement and one commit, where the dialect can
 * (notify_call); it returns the id. */
LQ__HIDDEN int lq__sql_build_insert_notify(lq__stmt *insert, const struct lq__dialect *d,
                                          const lq_table *t);
/* Whether an insert writes a column: otherwise its row is DEFAULT VALUES,
 * which takes one statement a row. */
LQ__HIDDEN bool lq__sql_insert_writes(const lq_table *t);
/* The insert of `rows` rows in one statement (VALUES (..), (..), ..),
 * returning the generated ids where the table generates them (in no promised
 * order); only for a table lq__sql_insert_writes. */
LQ__HIDDEN int lq__sql_build_insert_rows(lq__stmt *insert, const struct lq__dialect *d, const lq_table *t,
                                        int rows);

#endif
