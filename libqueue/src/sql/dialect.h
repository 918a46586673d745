/* The seam between the core and a database: a dialect connects, runs
 * statements with bound values, and builds the statement shapes its database
 * needs. The core never splices a value into SQL. */
#ifndef LQ_DIALECT_H
#define LQ_DIALECT_H

#include "base/clock.h"
#include "sql/sql.h"

typedef struct lq__conn lq__conn; /* defined by each dialect */
typedef struct lq__broker_target lq__broker_target;

/* A value bound to or read from a statement. Text and blobs are borrowed: a
 * bound value lives until the call returns, a read value until the row
 * callback returns. LQ__V_TIME is epoch milliseconds, bound in the dialect's
 * time type. */
typedef enum lq__value_type { LQ__V_NULL, LQ__V_INT, LQ__V_TEXT, LQ__V_BLOB, LQ__V_TIME } lq__value_type;

typedef struct lq__value {
    lq__value_type type;
    int64_t i;
    const void *p;
    size_t n;
} lq__value;

/* Called once per result row; a non-zero return stops the statement and is
 * returned by exec. */
typedef int (*lq__row_fn)(void *ctx, const lq__value *columns, int count);

/* One statement of several sent together: its arguments, its rows' reader
 * and where to write the number of rows it changed (each may be NULL). */
typedef struct lq__step {
    const lq__stmt *stmt;
    const lq__value *args;
    lq__row_fn on_row;
    void *ctx;
    int64_t *changes;
} lq__step;
/* A column's value as a new string (sql/values.c); NULL for NULL, or when
 * out of memory. */
LQ__HIDDEN char *lq__value_text(const lq__value *v);
/* An integer column's value (sql/values.c); 0 for NULL or what is not one. */
LQ__HIDDEN int64_t lq__value_int(const lq__value *v);
/* A time column's value as epoch ms (an integer as it is, a time's text
 * parsed); false when NULL or not a time. */
LQ__HIDDEN bool lq__value_time_ms(int64_t *ms, const lq__value *v);
/* A row function reading a one-column count into the int64_t at ctx. */
LQ__HIDDEN int lq__on_count(void *ctx, const lq__value *columns, int count);

/* The kinds of value a column's declared type holds (lq__dialect.type_kinds),
 * checked against what each role needs when a table is verified. */
enum {
    LQ__KIND_INTEGER = 1,
    LQ__KIND_TEXT = 2,
    LQ__KIND_BYTES = 4,
    LQ__KIND_TIME = 8,
    LQ__KIND_JSON = 16
};

/* The column types of the recommended CREATE TABLE. */
typedef struct lq__ddl_types {
    const char *id_generated, *id_plain, *bytes, *integer, *time, *time_due, *text, *json;
    /* Text that keys a table of the library's own (a schedule's, a queue's
     * name): compared byte for byte, as the library compares names. */
    const char *key_text;
    bool partial_index;  /* CREATE INDEX .. WHERE */
    /* CREATE INDEX CONCURRENTLY (outside a transaction): an index made on a
     * table in use, without holding its writers. */
    bool concurrent_index;
    bool index_in_table; /* the claim-order index is declared inside CREATE TABLE,
                            where the database has no CREATE INDEX IF NOT EXISTS */
    int duplicate_index; /* there: the native error of a CREATE INDEX whose name exists */
} lq__ddl_types;

/* What the broker parsed from its URL: the URL and its password for every
 * dialect, and the dialect's own reading of it (made by parse_url, freed by
 * free_target). */
struct lq__broker_target {
    char *url;      /* the URL as given, for client libraries that parse it */
    char *password; /* the URL's password, if any: scrubbed from messages */
    /* A pooler in transaction mode (PgBouncer) stands before the server: it
     * hands the server's session to other clients between transactions, so
     * the connection keeps no state of a session (prepared statements,
     * settings, LISTEN, session locks). */
    bool transaction_pooling;
    void *own;
};

typedef struct lq__dialect {
    const char *name;
    /* The bytes of a name the server keeps, or 0: a longer one it would cut
     * short, and so take for another (a table for its dead-letter table, an
     * index for another), and a statement that names one is refused. */
    size_t max_name;
    unsigned forms;     /* bit (1 << lq_form) for each form served */
    bool single_writer; /* one claim in flight at a time, whatever the table */
    /* Advisory deliveries hold the connection their key's lock lives on. */
    bool advisory_holds_connection;
    /* Lease columns keep whole seconds (MySQL DATETIME): expiries fall on one. */
    bool whole_second_leases;
    /* A READ UNCOMMITTED level of its own, under which row locks still hold
     * (PostgreSQL runs it as READ COMMITTED: a table declaring it is refused
     * there rather than silently run at another level). */
    bool read_uncommitted;
    /* Wakes subscriptions on rows other processes write (LISTEN/NOTIFY). */
    bool listen_notify;
    /* Works through a pooler in transaction mode (target.transaction_pooling). */
    bool transaction_pooling;
    /* The lease claim stamps its rows itself. Otherwise the claim is a
     * locking read, and the core stamps each row (sqlset.stamp) in the same
     * READ COMMITTED transaction. */
    bool claim_writes_lease;
    /* INSERT .. RETURNING gives the new id. Otherwise exec reports the
     * generated id of an insert as a one-column row. */
    bool insert_returning;
    /* Its drivers tell an insert's generated id without RETURNING (the
     * connection's last insert id). */
    bool last_insert_id;
    /* How an insert of nothing but defaults goes on after the table's name
     * (NULL: " DEFAULT VALUES"). */
    const char *insert_defaults;
    /* A column that names any row of a table (ctid, rowid), for a DELETE of
     * some rows where DELETE takes no LIMIT (NULL: it takes one). */
    const char *row_address;
    /* INSERT .. ON CONFLICT DO NOTHING: an insert of a key taken changes no
     * row instead of failing (which aborts a PostgreSQL transaction and is
     * logged by the server). */
    bool on_conflict_do_nothing;
    /* The most parameters one statement binds: multi-row inserts stay
     * within it. */
    int max_params;
    /* Whether this connection's server returns the ids of a multi-row
     * INSERT .. RETURNING (NULL: insert_returning says). Where it cannot,
     * rows whose ids the table generates are inserted one by one. */
    bool (*insert_rows_returning)(lq__conn *conn);

    /* Reads the URL's part after the scheme into the target. */
    int (*parse_url)(lq__broker_target *target, const char *url, const char *rest);
    void (*free_target)(void *own); /* NULL: own is never set */
    /* Opens one connection, with every deadline the options set. */
    int (*connect)(lq__conn **out, const lq__broker_target *target, const lq_options *options);
    void (*disconnect)(lq__conn *conn);
    /* Whether a connection may go back to the pool: alive, and in no
     * transaction. NULL: always. */
    bool (*reusable)(lq__conn *conn);
    /* Whether the server ended the session while it sat in the pool (a
     * terminate, an idle timeout, a restart), told without a round trip
     * from what came on its socket. The pool opens another instead of
     * lending it, so that no call fails for it. NULL: never. */
    bool (*closed_while_idle)(lq__conn *conn);
    /* Fails with LQ_SERVER_TOO_OLD when the database is below the floor for
     * `table` (its form and FIFO groups), or below every floor when NULL. */
    int (*check_version)(lq__conn *conn, const lq_table *table);
    /* Whether check_version found the server to be one node of a
     * multi-primary cluster (MariaDB Galera), where row locks and named
     * locks hold on that node alone and a write that conflicts with another
     * node's fails at commit. NULL: never. */
    bool (*node_local_locks)(lq__conn *conn);

    /* Statement shapes: quoting, placeholders, and the claims. */
    char quote;
    void (*placeholder)(lq__strbuf *sb, int position);
    /* Statements rendered for the caller's own driver (lq_publish_sql): the
     * placeholder that database's drivers commonly take, and a time as text
     * the database reads into its time columns as the UTC time it is. */
    void (*rendered_placeholder)(lq__strbuf *sb, int position);
    void (*rendered_time_text)(char out[LQ__TIME_TEXT_SIZE], int64_t epoch_ms);
    /* A cast after each LQ_COL_* column of a returned row (NULL: none), so
     * rows come back in the types the core reads. */
    const char *row_casts[LQ__COL_COUNT];
    int (*build_claims)(lq__sqlset *set, const lq_table *table);
    /* sqlset.claim_in_room for a lease table claimed under `concurrency`
     * (NULL: none; the claim then runs after the count, in a round trip of
     * its own). */
    int (*build_claim_in_room)(lq__stmt *out, const lq_table *table);
    /* Settling a set of rows in one statement (sqlset.ack_set): a row source
     * of column lq_id, and with `tokens` lq_held, read from LQ__P_HELD_SET as
     * lq__held_set_add writes it; and the time text its tokens are written
     * in. NULL: no such statement. */
    void (*held_set_source)(lq__sql *b, bool tokens);
    bool held_set_array; /* a set is an array of integers, not JSON (lq__held_set_add) */
    void (*held_time_text)(char out[LQ__TIME_TEXT_SIZE], int64_t epoch_ms);
    /* The set is joined to the table (DELETE t FROM set JOIN t), where a
     * subquery in a DELETE would not use the table's index; else the rows
     * are picked by (id, token) IN (SELECT .. FROM set). */
    bool held_set_joins;

    /* Prepares a statement without running it: a missing table or column
     * fails with LQ_SCHEMA and the database's message. */
    int (*prepare)(lq__conn *conn, const lq__stmt *stmt);
    /* Runs a statement with the values of its parameters, taken by symbol
     * from `args` (indexed by lq__param; a multi-row insert's, see
     * lq__stmt_arg). `changes` (may be NULL) receives the rows written. A
     * statement of id 0 runs once: the connection keeps no prepared copy. */
    int (*exec)(int64_t *changes, lq__conn *conn, const lq__stmt *stmt, const lq__value *args,
                lq__row_fn on_row, void *ctx);
    /* Runs SQL text of the caller's own, with text parameters in the
     * database's own placeholders (NULL entries are SQL NULL). */
    int (*execute)(int64_t *changes, lq__conn *conn, const char *sql, const char *const *params,
                   int count);
    /* Wraps a connection the caller owns (PGconn *, MYSQL *, sqlite3 *) for
     * the duration of one call; release_borrowed frees the wrapper only. */
    int (*borrow)(lq__conn **out, void *native);
    void (*release_borrowed)(lq__conn *conn);
    int (*begin)(lq__conn *conn, int isolation);
    int (*commit)(lq__conn *conn);
    int (*rollback)(lq__conn *conn);
    /* Commits and opens the next transaction in the same statement, at the
     * same isolation (COMMIT AND CHAIN): a round trip less for a worker that
     * claims again next. *chained tells whether a transaction is open now
     * (false also where the server is too old for it). NULL where the
     * database has none. */
    int (*commit_chain)(bool *chained, lq__conn *conn);
    /* Commits and has the connection's next transaction begun with it where
     * the database can (COMMIT AND CHAIN): its next begin, at the default
     * isolation, then costs no round trip. Until that begin the transaction
     * stays empty: a statement run first ends it, as such a statement
     * commits on its own, and a lock call (the keys, the slots) leaves it
     * be. NULL where the database has none. */
    int (*commit_then_begin)(lq__conn *conn);

    /* Wake-ups across processes (NULL where the database has none): send on
     * a channel, listen to one, and wait up to timeout_ms for notifications,
     * calling on_note for each. */
    int (*notify)(lq__conn *conn, const char *channel, const char *payload);
    /* The notification as an expression over LQ__P_CHANNEL and LQ__P_MSG_GROUP,
     * so an insert's statement can send it (NULL: a statement of its own). */
    void (*notify_call)(lq__sql *b);
    int (*listen)(lq__conn *conn, const char *channel);
    int (*wait_notes)(lq__conn *conn, int64_t timeout_ms,
                      void (*on_note)(void *ctx, const char *channel, const char *payload),
                      void *ctx);

    /* Creating and verifying tables (schema.c). */
    const lq__ddl_types *ddl;
    /* A statement returning a row when schema LQ__P_SCHEMA exists. */
    void (*schema_query)(lq__sql *b);
    /* A statement returning (name, declared type) for each column of table
     * LQ__P_NAME in schema LQ__P_SCHEMA, or where an unqualified name resolves
     * when that is NULL; no row when there is no such table. */
    void (*columns_query)(lq__sql *b);
    /* A statement returning a row when LQ__P_NAME (in LQ__P_SCHEMA, or where
     * an unqualified name resolves when that is NULL) is a view: create_table
     * refuses it by name rather than leave it to the server's error. */
    void (*view_query)(lq__sql *b);
    /* A statement returning a row when table LQ__P_NAME (in LQ__P_SCHEMA, or
     * where an unqualified name resolves when that is NULL) has an index
     * named `index`. NULL where the lease form's claims do not sweep expired
     * leases: without partial indexes (MySQL) the claim-order index holds
     * the leased rows whatever the claim asks; SQLite's one writer claims
     * alone, so no claim meets another's rows at the head, and the two
     * indexes would cost each lease two writes more. */
    void (*index_query)(lq__sql *b, const char *index);
    /* Column names match whatever their case (SQLite, MySQL). */
    bool columns_fold_case;
    /* The size in bytes of a role's column, as an SQL expression. */
    void (*byte_length)(lq__sql *b, int role);
    /* The LQ__KIND_* bits of the values a declared type holds. */
    unsigned (*type_kinds)(const char *type);
    /* Run first in the creating transaction, with LQ__P_NAME naming the table:
     * concurrent creators of one table take turns (NULL where the transaction
     * or the DDL itself keeps them apart). */
    void (*ddl_lock_query)(lq__sql *b);

    /* The database's clock now, in epoch milliseconds, as an SQL expression
     * read when the statement runs: rate limits count starts on it. */
    void (*now_ms_sql)(lq__sql *b);
    /* Queue-wide limits: takes the lock of the queue named `key` for the
     * claim's transaction open on conn, waiting for it up to the statement's
     * deadline, so that the claims counting the queue's rows in work take
     * turns (LQ_CONTENTION when the wait ends first). NULL where the
     * transaction is the lock already (SQLite's one writer). */
    int (*lock_queue)(lq__conn *conn, const char *key);
    /* A limited claim's transaction in fewer round trips where the database
     * pipelines statements (NULL: the core sends them one by one):
     * begin_locked opens a READ COMMITTED transaction, takes the queue's
     * lock as lock_queue does (a lock that ends with the transaction: such
     * a dialect has no unlock_queue), waiting for it no longer than
     * wait_ms where that is not 0, and runs the steps (at most 4), and
     * commits too where `committed` is not NULL; exec_commit runs the steps
     * and commits. Each sends all at once and reads the answers in order;
     * the first failure is the result, the statements after it do nothing,
     * and the transaction is left for a rollback. A step's row reader that
     * fails does not stop the server: *committed tells whether the commit
     * ran all the same. */
    int (*begin_locked)(lq__conn *conn, const char *key, int64_t wait_ms, const lq__step *steps,
                        int count, bool *committed);
    int (*exec_commit)(bool *committed, lq__conn *conn, const lq__step *steps, int count);
    /* A claim alone with the acks it carries: the steps (at most 4) in one
     * round trip and one implicit transaction, with no BEGIN or COMMIT of
     * their own. The first failure is the result, the steps after it do
     * nothing, and none of them commits; *committed says that all did.
     * NULL where the database does not pipeline. */
    int (*exec_together)(bool *committed, lq__conn *conn, const lq__step *steps, int count);
    /* Gives it back after the transaction ended (false: not confirmed, and
     * the connection must not be reused); NULL where it ends with it. */
    bool (*unlock_queue)(lq__conn *conn, const char *key);
    /* Queue-wide concurrency where a row in work is a lock (the row lock
     * form): takes up to `want` of the `limit` slots of the queue named `key`
     * for the transaction open on conn, without waiting; *taken is how many.
     * A slot is held until the transaction ends (a lock that ends with it,
     * or one given back after it), and a session that dies frees its slots
     * at once. NULL where the database has no such lock. */
    int (*take_slots)(int *taken, lq__conn *conn, const char *key, int limit, int want);
    /* `concurrency` in the lease form is counted by holds (runtime/forms/
     * holds.c) rather than by a count of the leased rows at every claim:
     * where that count is costly (InnoDB reads the entries acks leave for
     * its purge). */
    bool counts_by_holds;
    /* partition_concurrency in the row lock form: the claim build_claims
     * renders for a table with partition_limit set takes the key's slots
     * itself, as it reaches each row. */
    bool row_lock_key_slots;
    /* Where it does not: once the claim has locked row `id`, takes one of
     * the `limit` slots of its partition key without waiting, by the
     * statement build_claims rendered (sqlset.key_slot), held as take_slots
     * holds its slots; *taken false when all are held. NULL: neither. */
    int (*take_key_slot)(bool *taken, lq__conn *conn, const lq__stmt *try_slot, int64_t id,
                         int limit);
    /* The advisory key of the row as the claim's candidates render it, as an
     * SQL expression over the columns of b->table. */
    void (*advisory_key)(lq__sql *b);
    /* Advisory keys: take without waiting (*taken false when held
     * elsewhere), and give back (false when the database did not confirm). */
    int (*try_lock_key)(bool *taken, lq__conn *conn, const lq__broker_target *target, const char *key);
    bool (*unlock_key)(lq__conn *conn, const lq__broker_target *target, const char *key);
    /* In one round trip where the database can (NULL: the caller goes one
     * key at a time): tries the keys "<prefix><i>" for i from `first` round
     * to first - 1 of the n, and holds the first one free (*taken its i, or
     * -1 when all are held elsewhere), then, once one is held, tries `then`
     * (NULL: none; *then_taken); and gives back up to three keys (NULL
     * entries skipped), false unless each release was confirmed. */
    int (*try_lock_any)(int *taken, bool *then_taken, lq__conn *conn, const char *prefix, int n, int first,
                        const char *then);
    bool (*unlock_keys)(lq__conn *conn, const char *const keys[3]);
    /* An advisory settlement on the session that holds its keys: the steps
     * (at most 3) in one READ COMMITTED transaction, then, once it
     * committed, unlock_keys' release, in one round trip (NULL where the
     * database cannot pipeline them). The result is the first failure;
     * *committed whether the transaction committed (a step's row reader that
     * failed does not stop it), *confirmed as unlock_keys answers (false:
     * the keys may still be held, and the connection must not be reused).
     * `after` (NULL: none) runs last, in a transaction of its own, whatever
     * came before: its result is *after_rc, not the call's. */
    int (*exec_unlock)(bool *committed, bool *confirmed, lq__conn *conn, const lq__step *steps,
                       int count, const char *const keys[3], const lq__step *after, int *after_rc);
    /* How many keys the process holds, where keys live in the process (NULL
     * where sessions hold them and the claim's query filters them out). */
    size_t (*keys_held)(const lq__broker_target *target);
    /* Where keys live in the process: the target's key space held for this
     * process while an advisory subscription uses it, and refused while
     * another process holds it; let go by each holder (NULL elsewhere). */
    int (*hold_key_space)(const lq__broker_target *target);
    void (*let_go_key_space)(const lq__broker_target *target);
    /* Whether another process holds the key space now (its keys out of this
     * process's sight), looked at without holding it. */
    bool (*key_space_elsewhere)(const lq__broker_target *target);
} lq__dialect;

/* The values a statement binds: its parameters, in each of its rows. */
static inline int lq__stmt_values(const lq__stmt *st) {
    return st->rows > 1 ? st->nparams * st->rows : st->nparams;
}

/* The value bound at position i (from 0): row r's parameters come from the
 * r-th set of LQ__P_COUNT arguments. */
static inline const lq__value *lq__stmt_arg(const lq__stmt *st, const lq__value *args, int i) {
    if (st->rows <= 1) return &args[st->params[i]];
    return &args[(size_t)(i / st->nparams) * LQ__P_COUNT + st->params[i % st->nparams]];
}

/* The built-in dialects, and the one a URL names. */
LQ__HIDDEN extern const lq__dialect lq__sqlite_dialect;
LQ__HIDDEN extern const lq__dialect lq__postgres_dialect;
LQ__HIDDEN extern const lq__dialect lq__mysql_dialect;
LQ__HIDDEN const lq__dialect *lq__dialect_for_url(const char *url, const char **rest);
/* The dialect of a name ("sqlite", "postgresql", "postgres", "mysql",
 * "mariadb"), or NULL. */
LQ__HIDDEN const lq__dialect *lq__dialect_named(const char *name);

/* Whether the calling thread is to give up waiting for a lock: it claims
 * for a subscription that is stopping, whose own rows' transactions may hold
 * the lock it waits for. */
LQ__HIDDEN bool lq__lock_wait_abandoned(void);

#endif
