/* libqueue: task queues kept in a service's own SQL tables.
 *
 * This header is the whole public ABI. Anything not declared here is internal.
 *
 * Conventions
 * - Every fallible call returns an int status: LQ_OK (0) or one of lq_status.
 *   Results come back through out parameters, which always come first.
 * - After a failure, lq_errmsg(), lq_errcode_sqlstate() and lq_errcode_native()
 *   describe it. They are per thread and refer to the last failing call made on
 *   that thread; every public call clears them on entry.
 * - Handles are opaque. A handle returned through an out parameter belongs to
 *   the caller, who releases it with the function named on it. Destructors
 *   accept NULL and never fail.
 * - Strings are UTF-8 and NUL-terminated. Byte data is (pointer, length) and is
 *   copied by the library before the call returns.
 * - Times are int64_t milliseconds.
 * - Thread safety is stated on each handle and function; where nothing is said,
 *   a handle is used by one thread at a time.
 *
 * The header is written so that cffi's parser and SWIG read it as it is: no
 * function-like macros, no varargs, no bitfields, no conditional declarations.
 */
#ifndef LIBQUEUE_H
#define LIBQUEUE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef LQ_API
#define LQ_API __attribute__((visibility("default")))
#endif

/* The one place the version is written: the build (CMake, the Python
 * package) reads these three lines. */
#define LQ_VERSION_MAJOR 0
#define LQ_VERSION_MINOR 1
#define LQ_VERSION_PATCH 0
#define LQ_VERSION_NUMBER (LQ_VERSION_MAJOR * 10000 + LQ_VERSION_MINOR * 100 + LQ_VERSION_PATCH)

/* Status codes, each with its value and its description (lq_status_describe).
 * The one list of them: the enum below, the library's names and descriptions
 * and the bindings' exceptions are all made from it. Values are fixed for
 * good; new codes are only appended. */
#define LQ_STATUS_LIST(X)                                                              \
    X(LQ_OK, 0, "success")                                                             \
    X(LQ_ERROR, 1, "a failure with no more precise code")                              \
    X(LQ_MISUSE, 2, "a bad argument, option or call order")                            \
    X(LQ_NOMEM, 3, "out of memory")                                                    \
    X(LQ_CONNECT, 4, "the database could not be reached")                              \
    X(LQ_BACKEND, 5, "a statement failed on the database")                             \
    X(LQ_SCHEMA, 6, "the table or one of its columns is missing")                      \
    X(LQ_DIALECT, 7, "the database cannot serve this description")                     \
    X(LQ_SERVER_TOO_OLD, 8, "the database is older than the floor")                    \
    X(LQ_CONNECTION_LIMIT, 9, "more connections than allowed")                         \
    X(LQ_TIMEOUT, 10, "nothing arrived before the deadline")                           \
    X(LQ_CLOSED, 11, "the broker or subscription is stopped")                          \
    X(LQ_LEASE_LOST, 12, "the row is no longer ours: nothing changed")                 \
    X(LQ_CONTENTION, 13, "the database reported a conflict; retried later")            \
    X(LQ_ALREADY_SUBSCRIBED, 14, "this queue already has a subscription here")         \
    X(LQ_BATCH_ROLLED_BACK, 15, "an earlier settlement rolled the batch back")          \
    X(LQ_DUPLICATE, 16, "a row with this dedup key is queued or in work")                \
    X(LQ_NOT_FOUND, 17, "no row of this id is queued or in work")                      \
    X(LQ_CANCELLED, 18, "the row was cancelled: nothing changed")

#define LQ_STATUS_ENUMERATOR(name, value, description) name = value,
typedef enum lq_status { LQ_STATUS_LIST(LQ_STATUS_ENUMERATOR) } lq_status;
#undef LQ_STATUS_ENUMERATOR

/* Version of the linked library: LQ_VERSION_NUMBER and "major.minor.patch". */
LQ_API int lq_version_number(void);
LQ_API const char *lq_version_string(void);

/* The name ("LQ_LEASE_LOST") and a short description of a status code.
 * Never NULL, also for unknown codes. Static strings. Thread-safe. */
LQ_API const char *lq_status_name(int status);
LQ_API const char *lq_status_describe(int status);

/* The last failure on the calling thread.
 * lq_errcode(): its status (LQ_OK when the last call succeeded).
 * lq_errmsg(): a message naming what failed ("" when none). Valid until the
 *   next libqueue call on this thread.
 * lq_errcode_sqlstate(): the server's five-character SQLSTATE, or "".
 * lq_errcode_native(): the database's own error number (SQLite extended result
 *   code, MySQL errno), or 0. Thread-safe: each thread sees its own. */
LQ_API int lq_errcode(void);
LQ_API const char *lq_errmsg(void);
LQ_API const char *lq_errcode_sqlstate(void);
LQ_API int lq_errcode_native(void);

/* Frees memory the library returned for the caller to free (the SQL of
 * lq_table_create_sql). NULL is ignored. Thread-safe. */
LQ_API void lq_free(void *memory);

/* Log messages of the core (warnings such as a retry delay the table cannot
 * hold, errors of background claims and lease extensions). The function may be
 * called from any of the library's threads, never with a library lock held.
 * Without one (NULL), warnings and errors go to stderr. Thread-safe: it may be
 * changed at any time; a message already being delivered may still reach the
 * previous function. */
typedef enum lq_log_level {
    LQ_LOG_DEBUG = 10,
    LQ_LOG_INFO = 20,
    LQ_LOG_WARNING = 30,
    LQ_LOG_ERROR = 40
} lq_log_level;
typedef void (*lq_log_fn)(int level, const char *message, void *userdata);
LQ_API void lq_set_log(lq_log_fn log, void *userdata);

/* ------------------------------------------------------------------------ */
/* Options: one opaque set of typed values keyed by a pinned enum. Unset
 * options take the documented default. A broker reads the broker options, a
 * subscription the subscription options; setting an option of the other kind
 * is harmless, so one set may serve both (the bindings, whose options are
 * keyword arguments, refuse one given to a call that does not read it:
 * lq_option_scope_of). Not thread-safe; the library copies what it reads. */

typedef struct lq_options lq_options;

typedef enum lq_option {
    /* Broker options */
    LQ_OPT_POOL_SIZE = 1,           /* connections in the pool; default 8 */
    LQ_OPT_CONNECT_TIMEOUT_MS = 2,  /* deadline for a new connection; default 10000 */
    LQ_OPT_STATEMENT_TIMEOUT_MS = 3,/* deadline for one statement; default 30000 */
    LQ_OPT_ACQUIRE_TIMEOUT_MS = 4,  /* wait for a pool connection; default 30000 */
    LQ_OPT_CONNECTION_LIMIT = 5,    /* most connections in all; default 0 = none */
    LQ_OPT_LISTEN_NOTIFY = 6,       /* PostgreSQL wake-ups; default 0 */
    LQ_OPT_PGBOUNCER = 7,           /* string: "transaction" when the URL leads to PgBouncer
                                       in pool_mode transaction (as the URL parameter
                                       ?pgbouncer=transaction): no prepared statements, no
                                       session settings, no LISTEN on the pooled URL; the
                                       advisory form is refused */
    LQ_OPT_LISTEN_URL = 8,          /* string: a URL of the same database that the LISTEN
                                       connection of listen_notify takes instead of the
                                       broker's (the server itself, past a pooler) */
    /* Subscription options */
    LQ_OPT_WORKERS = 20,            /* deliveries in work at once; default 1 */
    LQ_OPT_WORKERS_BY_KEY = 21,     /* lanes by partition key; default 0 = off */
    LQ_OPT_BATCH = 22,              /* rows per claim for a batch subscription; default 0 */
    LQ_OPT_POLL_INTERVAL_MS = 23,   /* wait after a short claim, x0.95-1.05 at random;
                                       default 1000 */
    LQ_OPT_LEASE_MS = 24,           /* lease length, whole seconds; default 30000 */
    LQ_OPT_MAX_ATTEMPTS = 25,       /* dead-letter after this many; default 0 = none */
    LQ_OPT_TRANSACTIONAL = 26,      /* handler writes commit with the ack; default 0 */
    LQ_OPT_GROUP = 27,              /* string: the group read (group column); none */
    LQ_OPT_ON_THREADS = 28,         /* push handlers on n dedicated threads, each with
                                       a pool of its own for lq_delivery_exec; 0 = off */
    LQ_OPT_THREAD_CONNECTIONS = 29, /* connections of each on_threads pool; default 1 */
    LQ_OPT_COALESCE = 30,           /* settlements of concurrent deliveries that take a pool
                                       connection commit together: 1 on, 0 off; default
                                       -1: on where a commit waits for the server's log
                                       (PostgreSQL, MySQL), off on SQLite. Unless 0, a
                                       push handler's return in the lease form hands its
                                       ack to a thread that commits the acks gathered
                                       meanwhile together, and the worker moves on */
    LQ_OPT_COALESCE_WAIT_US = 31,   /* how long a coalesced settlement waits for the other
                                       deliveries in work to settle with it, at most;
                                       default 1000 (1 ms), 0 under concurrency (each
                                       settlement frees a slot), 0 = never */
    LQ_OPT_MAX_PAYLOAD_BYTES = 32,  /* a row whose payload is longer is dead-lettered
                                       unread, with a warning naming its size: the claim
                                       reads its size, not the payload; needs a dead-letter
                                       destination; default 0 = no limit */
    LQ_OPT_MAX_HEADERS_BYTES = 33,  /* the same for the headers' JSON; default 0 */
    LQ_OPT_CONCURRENCY = 34,        /* at most n rows of the queue (table, or table and
                                       group) in work at once, counted on the database
                                       across every broker and process that sets it;
                                       every form (row lock: a slot lock per row; lease on
                                       MySQL: counted by holds); default 0 = no limit */
    LQ_OPT_WORKER_CONCURRENCY = 35, /* at most n rows of the queue held by this
                                       subscription at once (in work, waiting for a worker,
                                       or being claimed), counted here without a round
                                       trip; not above concurrency; default 0 = no limit */
    LQ_OPT_POLL_CEILING_MS = 36,    /* the longest the poll interval grows to while claims
                                       meet contention (it doubles at each, goes back to
                                       poll_interval_ms at a claim that takes rows, and
                                       shrinks by x0.9 at an empty one); default 10000, or
                                       poll_interval_ms where that is longer */
    LQ_OPT_RATE_LIMIT = 37,         /* at most n starts (claims of a row) of the queue in
                                       any window of rate_period_ms, across every broker and
                                       process that sets it, on the database's clock; every
                                       form (row lock and advisory: a claim reserves its
                                       starts before it takes its rows); default 0 = none */
    LQ_OPT_RATE_PERIOD_MS = 38,     /* the window of rate_limit; default 1000 */
    LQ_OPT_PARTITION_CONCURRENCY = 39, /* at most n rows of one partition key in work at once,
                                       across every broker and process that sets it (1: one
                                       at a time per key, fleet-wide); rows without a key are
                                       not limited; every form (row lock: not with batch,
                                       and at most 16 on MySQL); default 0 = none */
    LQ_OPT_TIMEOUT_MS = 40,         /* a handler still running this long after its delivery
                                       was handed out has failed: its row goes back at once
                                       (a retry, or the dead letters at max_attempts), its
                                       lease is no longer extended, and the late settlement
                                       gets LQ_LEASE_LOST; the thread is not stopped
                                       (lq_delivery_expired tells it); every form (row
                                       lock: not with batch), not transactional; default
                                       0 = none */
    LQ_OPT_RETAIN_MS = 41,          /* finished rows (processed_at) acked longer ago than
                                       this are deleted in the claim threads' idle time, a
                                       thousand to a statement, each its own transaction
                                       (of the subscription's group, or of every group);
                                       needs processed_at; default 0 = kept */
    LQ_OPT_DEAD_LETTER_RETAIN_MS = 42, /* the same for the dead letters, dead-lettered
                                       longer ago than this; needs the dead letters and
                                       retry_after; default 0 = kept */
    LQ_OPT_PARTITION_WORKER_CONCURRENCY = 43, /* at most n rows of one partition key in
                                       work in this subscription, answered without a round
                                       trip: a row claimed while its key is at the limit
                                       waits, claimed, for the key's next free place; rows
                                       without a key are not limited; any form; not above
                                       partition_concurrency or worker_concurrency; default
                                       0 = none */
    LQ_OPT_PARTITION_RATE_LIMIT = 44, /* at most n starts of one partition key in any
                                       window of partition_rate_period_ms, across every broker
                                       and process that sets it, on the database's clock; a
                                       key at its limit is passed over, the others go on;
                                       every form (row lock: not with batch); default 0 =
                                       none */
    LQ_OPT_PARTITION_RATE_PERIOD_MS = 45, /* the window of partition_rate_limit; default
                                       1000 */
    /* Schedule options (lq_schedule_add) */
    LQ_OPT_CRON = 60,               /* string: a cron expression, five fields or six with
                                       seconds first, or @hourly and the other shorthands */
    LQ_OPT_EVERY_MS = 61,           /* or a fixed interval: ticks at the multiples of n ms
                                       since the epoch */
    LQ_OPT_TZ = 62,                 /* string: the cron's time zone ("Europe/Berlin"), from
                                       the system's tzdata; default UTC */
    LQ_OPT_CATCH_UP = 63,           /* string: what the ticks no broker was up for at their
                                       time enqueue: "skip" none (default), "once" the latest
                                       of them, "all" each */
    LQ_OPT_CATCH_UP_MS = 64         /* how late a tick may still be enqueued; default
                                       86400000 (a day) */
} lq_option;

typedef enum lq_option_type {
    LQ_OPTION_INT = 1,
    LQ_OPTION_STRING = 2
} lq_option_type;

/* Creates an empty option set. Ownership: the caller frees it with
 * lq_options_free. */
LQ_API int lq_options_new(lq_options **out);
LQ_API void lq_options_free(lq_options *options);
/* Sets an integer or string option. An option of the wrong type, or a value
 * out of range, fails with LQ_MISUSE. The string is copied. */
LQ_API int lq_options_set_int(lq_options *options, int option, int64_t value);
LQ_API int lq_options_set_str(lq_options *options, int option, const char *value);
/* Looks an option up by its name without the prefix, lower case ("workers",
 * "poll_interval_ms"), so bindings map keyword arguments mechanically.
 * Either out pointer may be NULL (an existence check). Returns LQ_MISUSE for
 * an unknown name. Thread-safe. */
LQ_API int lq_option_find(int *option_out, int *type_out, const char *name);

/* The call that reads an option. Bindings refuse a keyword given to a call
 * that does not read it (listen_notify given to a subscription, workers to a
 * broker), which C's shared option sets allow. */
typedef enum lq_option_scope {
    LQ_SCOPE_BROKER = 1,       /* lq_broker_open */
    LQ_SCOPE_SUBSCRIPTION = 2, /* lq_subscription_open */
    LQ_SCOPE_SCHEDULE = 3      /* lq_schedule_add */
} lq_option_scope;
/* An option's scope. Returns LQ_MISUSE for an unknown option. Thread-safe. */
LQ_API int lq_option_scope_of(int *scope_out, int option);

/* ------------------------------------------------------------------------ */
/* The table description. Each role names a column; a role left unset switches
 * its behaviour off. The form follows from the description:
 *   a locked_until column          -> lease form
 *   an advisory lock key template  -> advisory lock form
 *   neither                        -> row lock form (refused by SQLite)
 * Nothing is checked against the database here: a subscription checks every
 * name when it opens. A table is read-only once passed to the library, which
 * copies what it needs; it may be freed at any time after. Not thread-safe
 * while being changed. */

typedef struct lq_table lq_table;

typedef enum lq_role {
    LQ_ROLE_PAYLOAD = 1,        /* bytes (BLOB, BYTEA) or text */
    LQ_ROLE_ATTEMPT = 2,        /* integer NOT NULL DEFAULT 1 */
    LQ_ROLE_LOCKED_UNTIL = 3,   /* timestamp, NULL when free: lease form */
    LQ_ROLE_GROUP = 4,          /* text: subscriptions by group */
    LQ_ROLE_PARTITION_KEY = 5,  /* text, nullable */
    LQ_ROLE_PRIORITY = 6,       /* integer, smaller first */
    LQ_ROLE_RETRY_AFTER = 7,    /* timestamp: due when <= now */
    LQ_ROLE_PROCESSED_AT = 8,   /* timestamp: acks mark instead of deleting */
    LQ_ROLE_HEADERS = 9,        /* JSON object of strings */
    LQ_ROLE_DEDUP_KEY = 10,     /* text, nullable, under a unique index: a publish whose key
                                   a row queued or in work holds is refused */
    LQ_ROLE_EXPIRES_AT = 11,    /* timestamp, nullable: a row is never started (a retry
                                   included) once it is past; the claim that finds it so
                                   sends it to the dead letters unread, or deletes it
                                   without a destination */
    LQ_ROLE_CREATED_AT = 12,    /* timestamp: when it was published (the host's clock),
                                   never changed; a table without retry_after measures
                                   its queue wait from it (lq_subscription_metrics) */
    LQ_ROLE_DEAD_REASON = 13    /* text, nullable: why the row went to the dead letters,
                                   written as it goes: "dead_letter" (its handler said
                                   so), "max_attempts", "timeout" (its last run passed
                                   timeout_ms), "expired" (past expires_at, unstarted),
                                   "oversize" (past max_payload_bytes or
                                   max_headers_bytes), "cancelled" (lq_cancel) */
} lq_role;

typedef enum lq_form {
    LQ_FORM_ROW_LOCK = 1,
    LQ_FORM_LEASE = 2,
    LQ_FORM_ADVISORY = 3
} lq_form;

typedef enum lq_isolation {
    LQ_ISOLATION_DEFAULT = 0,
    LQ_ISOLATION_READ_UNCOMMITTED = 1,
    LQ_ISOLATION_READ_COMMITTED = 2,
    LQ_ISOLATION_REPEATABLE_READ = 3,
    LQ_ISOLATION_SERIALIZABLE = 4
} lq_isolation;

/* Creates a description of table `name` (unquoted; the library quotes every
 * identifier). The id column is "id", generated by the database, until
 * lq_table_set_id says otherwise. Ownership: the caller frees it with
 * lq_table_free. */
LQ_API int lq_table_new(lq_table **out, const char *name);
LQ_API void lq_table_free(lq_table *table);
/* The schema (PostgreSQL schema, MySQL database) qualifying the table. */
LQ_API int lq_table_set_schema(lq_table *table, const char *schema);
/* The id column (an integer), and whether the database generates it. When it
 * does not, every published message carries its id (lq_message_set_id). */
LQ_API int lq_table_set_id(lq_table *table, const char *column, int generated);
/* Gives a role to a column; NULL removes the role. */
LQ_API int lq_table_set_column(lq_table *table, int role, const char *column);
/* Makes the group column a FIFO group: one row of a group in work at a time,
 * in claim order. Needs LQ_ROLE_GROUP; refused with the advisory form. */
LQ_API int lq_table_set_fifo(lq_table *table, int fifo);
/* Selects the advisory lock form, with a key template of literal text and
 * {column} parts, e.g. "accounts-{account}". "{{" and "}}" are literal braces.
 * A malformed template fails here with LQ_MISUSE; an unknown column fails when
 * a subscription opens, with LQ_SCHEMA. But lq_table_create adds a template's
 * column the table lacks (nullable text) and no publish fills it: a NULL
 * renders as "", so every row shares one key and they run one at a time.
 * Name columns the rows carry (the id, partition_key, or one you write). */
LQ_API int lq_table_set_advisory_lock(lq_table *table, const char *key_template);
/* The isolation level of claim and handler transactions. */
LQ_API int lq_table_set_isolation(lq_table *table, int isolation);
/* Where dead letters go: a group name when the table has a group column, else
 * a table of the same columns ("table" or "schema.table"). */
LQ_API int lq_table_set_dead_letter(lq_table *table, const char *destination);
/* The form the description selects (an lq_form); 0 for NULL. */
LQ_API int lq_table_form(const lq_table *table);
/* Whether a database ("sqlite", "postgresql", "mysql") can serve the form
 * the description selects: LQ_OK, or LQ_DIALECT with a message that says why
 * not and which forms to use instead. A subscription's open makes the same
 * check; a table may still be created for a form its database cannot serve,
 * for publishers that describe it without the workers' columns. */
LQ_API int lq_table_check_form(const lq_table *table, const char *dialect);
/* The CREATE TABLE and CREATE INDEX statements lq_table_create runs for
 * this description on a dialect ("sqlite", "postgresql", "mysql"), separated
 * by ";\n", for a service that keeps its schema in migrations of its own.
 * Ownership: the caller frees *sql_out with lq_free. */
LQ_API int lq_table_create_sql(char **sql_out, const lq_table *table, const char *dialect);

/* ------------------------------------------------------------------------ */
/* The broker: a connection pool to one database, its dialect, its wake-ups.
 * Thread-safe: any thread may publish or open subscriptions on it. */

typedef struct lq_broker lq_broker;

/* Opens a broker on a URL:
 *   sqlite:///absolute/path/jobs.db   sqlite:relative/jobs.db
 *   postgresql://user@host:5432/db    postgres://...  (libpq parses it)
 *   mysql://user:pass@host:3306/db    mariadb://...   (?socket=, ?ssl_mode=, ...)
 * The dialect is picked from the scheme and checked against the database
 * (SQLite 3.35, PostgreSQL 9.5, MySQL 8.0.1, MariaDB 10.6 or later). Fails with LQ_MISUSE for a malformed URL,
 * LQ_DIALECT for an unknown scheme, LQ_CONNECT when the database cannot be
 * opened, LQ_SERVER_TOO_OLD below the floor. `options` may be NULL.
 * Ownership: the caller closes it with lq_broker_close. */
LQ_API int lq_broker_open(lq_broker **out, const char *url, const lq_options *options);
/* Closes the broker. Subscriptions still open keep it alive until they are
 * closed; after this call it takes no new publishes or subscriptions, and
 * its schedules stop. The handle is the caller's no more: no other call on
 * it may run during or after this one. */
LQ_API void lq_broker_close(lq_broker *broker);
/* A copy of `url` as it may be shown: the password of its user info and the
 * values of its password, sslpassword and tls_passphrase parameters as
 * "***". The library's own messages show URLs this way; bindings use it for
 * theirs. Ownership: the caller frees *url_out with lq_free. Thread-safe. */
LQ_API int lq_redact_url(char **url_out, const char *url);
/* The dialect's name: "sqlite", "postgresql" or "mysql". Static string. */
LQ_API const char *lq_broker_dialect(const lq_broker *broker);

/* Flags of lq_table_create. */
typedef enum lq_create_flag {
    LQ_CREATE_VERIFY_ONLY = 1 /* check the tables that exist; create nothing */
} lq_create_flag;

/* Makes the database ready for `table`: creates the table, its claim-order
 * index and, when the dead-letter destination is a table, that table, each
 * when missing (the statements of lq_table_create_sql), then checks every
 * table it looked at: each column the description names exists, with a type
 * that holds its role's values. A table that does not fit fails with
 * LQ_SCHEMA, naming every column missing or of the wrong type, and nothing is
 * changed; a schema that does not exist fails with LQ_SCHEMA (schemas are not
 * created). With LQ_CREATE_VERIFY_ONLY nothing is created: a missing table is
 * LQ_SCHEMA too. On PostgreSQL and SQLite everything runs in one transaction,
 * all or nothing, and concurrent callers (other processes included) take
 * turns. On MySQL and MariaDB each CREATE TABLE commits by itself and is
 * atomic (the index is part of it): a failure after the queue's table was
 * created leaves that table, and a second call creates the rest. Safe to call
 * at every start. Thread-safe. */
LQ_API int lq_table_create(lq_broker *broker, const lq_table *table, int flags);

/* ------------------------------------------------------------------------ */
/* Publishing. A message is built with setters, then written by lq_publish,
 * which writes one or many in one transaction and wakes this process's
 * subscriptions of the table (and group) at once. A message may be reused.
 * Not thread-safe while being changed. */

typedef struct lq_message lq_message;

LQ_API int lq_message_new(lq_message **out);
LQ_API void lq_message_free(lq_message *message);
/* Clears every field, keeping the allocation. */
LQ_API void lq_message_reset(lq_message *message);
LQ_API int lq_message_set_payload(lq_message *message, const void *data, size_t size);
LQ_API int lq_message_set_id(lq_message *message, int64_t id);
LQ_API int lq_message_set_group(lq_message *message, const char *group);
LQ_API int lq_message_set_partition_key(lq_message *message, const char *key);
LQ_API int lq_message_set_priority(lq_message *message, int64_t priority);
/* Due this many milliseconds from now (needs a retry_after column). A delay
 * that is negative, or puts the due time past 9999-12-31T23:59:59.999Z (the
 * latest time every database holds), fails with LQ_MISUSE, naming the longest
 * delay that fits. */
LQ_API int lq_message_set_delay_ms(lq_message *message, int64_t delay_ms);
/* Not to be started later than this many milliseconds from now (needs an
 * expires_at column); 0 = never expires. */
LQ_API int lq_message_set_expires_in_ms(lq_message *message, int64_t expires_in_ms);
/* Adds or replaces one header (needs a headers column). */
LQ_API int lq_message_set_header(lq_message *message, const char *name, const char *value);
/* The message's dedup key (needs a dedup_key column). While a row holding
 * the key is queued or in work (delayed, retried, leased, locked), a publish
 * of the same key fails with LQ_DUPLICATE and writes nothing, or, with
 * LQ_ON_DUPLICATE_EXISTING, writes nothing for this message and gives the
 * holder's id. The key is free again once its row is acked or dead-lettered.
 * The unique index lq_table_create makes keeps it exact across processes. */
LQ_API int lq_message_set_dedup_key(lq_message *message, const char *key);
typedef enum lq_on_duplicate {
    LQ_ON_DUPLICATE_REFUSE = 0,  /* LQ_DUPLICATE, and nothing of the call is written */
    LQ_ON_DUPLICATE_EXISTING = 1 /* the holder's id in ids_out; the others are written */
} lq_on_duplicate;
LQ_API int lq_message_set_on_duplicate(lq_message *message, int on_duplicate);

/* Writes `count` messages into `table` in one transaction: all or none.
 * A field the table has no column for fails with LQ_SCHEMA and writes nothing.
 * ids_out, when not NULL, receives `count` ids, in message order. Several
 * messages are written with multi-row INSERTs of up to 1000 rows (row by row
 * on MySQL, which cannot return a multi-row insert's ids, where the table
 * generates them). Thread-safe. */
LQ_API int lq_publish(int64_t *ids_out, lq_broker *broker, const lq_table *table,
                      lq_message *const *messages, size_t count);

/* Writes `count` messages on a connection the caller owns and keeps open, in
 * whatever transaction it has open there, so a task is written in the same
 * commit as the data it serves: a PGconn * on PostgreSQL, a MYSQL * on MySQL,
 * a sqlite3 * on SQLite. Nothing is committed here and no subscription is
 * woken (the caller's commit decides; LISTEN/NOTIFY wakes other processes when
 * the broker listens). The connection is used by this call only. */
LQ_API int lq_publish_on(int64_t *ids_out, lq_broker *broker, void *connection,
                         const lq_table *table, lq_message *const *messages, size_t count);

/* Publishing with any driver: the INSERT of one message rendered as SQL text
 * and its parameters, for the caller to run on a connection of its own, in
 * its own transaction, through whatever driver it uses. Values are never
 * spliced into the text; identifiers are quoted.
 *
 * Placeholders: $1, $2, .. on "postgresql"; ? on "mysql" and "sqlite", one
 * per parameter, in order. A binding converts them to its driver's style
 * (lq_rendered_sql_param_offset tells where each one is).
 *
 * Times are taken on the host's clock when the SQL is rendered, as lq_publish
 * takes them (subscriptions compare due times with the host's clock too): a
 * delay counts from the render, so render just before running it. A time is a
 * text parameter: "YYYY-MM-DDTHH:MM:SS.fff+00:00" on PostgreSQL (timestamptz;
 * a timestamp column keeps the UTC time) and SQLite, "YYYY-MM-DD
 * HH:MM:SS.ffffff" (UTC) on MySQL, which a DATETIME column keeps as it is (a
 * TIMESTAMP column needs a session in UTC, as libqueue's own sessions are).
 *
 * On PostgreSQL the statement also sends the table's wake-up, pg_notify with
 * the table's name as the description gives it (schema-qualified only where
 * it names a schema) as channel and the group as payload, which the server
 * delivers at the commit: a subscription whose broker listens
 * (LQ_OPT_LISTEN_NOTIFY) claims the row at once. LQ_PUBLISH_SQL_NO_NOTIFY
 * leaves it out, as does a channel name longer than PostgreSQL allows (63
 * bytes). The statement then reads
 *   WITH "lq_ins" AS (INSERT .. RETURNING "id") SELECT "lq_ins"."id",
 *   pg_notify($n, COALESCE($m, '')) FROM "lq_ins"
 * Where lq_rendered_sql_returns_id says so, the statement returns one row
 * whose first column is the new row's id (RETURNING: PostgreSQL, SQLite);
 * otherwise (MySQL) it returns no row, and the id is the driver's last insert
 * id (LAST_INSERT_ID(), cursor.lastrowid) where the table generates it, else
 * the message's own.
 *
 * A dedup key is checked by the table's unique index alone: a key a row
 * holds fails the statement with the driver's unique violation (SQLSTATE
 * 23505 on PostgreSQL, which also aborts the caller's transaction; error 1062
 * on MySQL; SQLITE_CONSTRAINT_UNIQUE), and writes nothing.
 * LQ_ON_DUPLICATE_EXISTING needs a look-up before the insert, which
 * lq_publish and lq_publish_on make: here it fails with LQ_MISUSE. No
 * subscription is woken from here: each finds the row by its next claim
 * after the caller's commit, or at once by the wake-up above. */

typedef struct lq_rendered_sql lq_rendered_sql;

typedef enum lq_sql_type {
    LQ_SQL_NULL = 0,
    LQ_SQL_INT64 = 1,
    LQ_SQL_DOUBLE = 2,
    LQ_SQL_TEXT = 3,  /* UTF-8 */
    LQ_SQL_BYTES = 4  /* BYTEA, BLOB: the payload */
} lq_sql_type;

typedef enum lq_publish_sql_flag {
    LQ_PUBLISH_SQL_NO_NOTIFY = 1,   /* PostgreSQL: no pg_notify in the statement */
    LQ_PUBLISH_SQL_NO_RETURNING = 2 /* SQLite: no RETURNING, for drivers that cannot take a
                                       write that returns rows (LuaSQL runs it twice); the
                                       id is then the driver's last insert id. PostgreSQL,
                                       which has none, keeps its RETURNING */
} lq_publish_sql_flag;

/* Renders the insert of `message` into `table` for `dialect` ("postgresql",
 * "mysql", "sqlite"; lq_broker_dialect gives a broker's). The message is
 * checked as lq_publish checks it: LQ_SCHEMA for a field the table has no
 * column for; LQ_DIALECT for an unknown dialect or one this build left out;
 * LQ_MISUSE for unknown flags or LQ_ON_DUPLICATE_EXISTING. `flags`: 0 or
 * lq_publish_sql_flag bits. Ownership: the caller frees *out with
 * lq_rendered_sql_free; it holds copies of every value, so the message may
 * be changed or freed at once. Thread-safe. */
LQ_API int lq_publish_sql(lq_rendered_sql **out, const char *dialect, const lq_table *table,
                          const lq_message *message, int flags);
LQ_API void lq_rendered_sql_free(lq_rendered_sql *rendered);
/* The accessors read what lq_publish_sql rendered; values stay valid until
 * lq_rendered_sql_free. NULL, or an index past the end, reads as an empty
 * value ("", 0, LQ_SQL_NULL, NULL). */
LQ_API const char *lq_rendered_sql_text(const lq_rendered_sql *rendered);
LQ_API size_t lq_rendered_sql_param_count(const lq_rendered_sql *rendered);
/* The parameter's lq_sql_type. */
LQ_API int lq_rendered_sql_param_type(const lq_rendered_sql *rendered, size_t index);
LQ_API int64_t lq_rendered_sql_param_int64(const lq_rendered_sql *rendered, size_t index);
LQ_API double lq_rendered_sql_param_double(const lq_rendered_sql *rendered, size_t index);
/* A text or bytes parameter: its bytes (followed by a NUL not counted in
 * the size), and its size; NULL and 0 for the other types. */
LQ_API const void *lq_rendered_sql_param_data(const lq_rendered_sql *rendered, size_t index);
LQ_API size_t lq_rendered_sql_param_size(const lq_rendered_sql *rendered, size_t index);
/* The byte offset in the text where the parameter's placeholder starts:
 * "?", or "$" and the parameter's number from 1 (SIZE_MAX past the end). */
LQ_API size_t lq_rendered_sql_param_offset(const lq_rendered_sql *rendered, size_t index);
/* 1 when the statement returns the new row's id as the first column of its
 * one row, else 0. */
LQ_API int lq_rendered_sql_returns_id(const lq_rendered_sql *rendered);

/* Takes row `id` out of its queue: into the dead letters where the table
 * declares them, else deleted. A queued row is never claimed after. A row in
 * work is cancelled too, in every form; its run sees lq_delivery_cancelled,
 * and its settlement gets LQ_CANCELLED and changes nothing. Lease form: the
 * lease goes with the row; the run hears of it at once when the cancel went
 * through its own broker, or on PostgreSQL when its broker listens, else at
 * its lease's next extension. Advisory form: the run holds the row's key,
 * not the row; the row is taken all the same, and the run finds out at its
 * settlement (one that writes, as an ack or a dead letter does; a plain
 * retry writes nothing there). Row lock form: the run's transaction holds
 * the row, so the cancel asks the run's process (table lq_cancel_requests,
 * made as a row lock subscription opens), which takes the row out in that
 * transaction. The cancel waits up to 5 s for a process to take its request,
 * then withdraws it: LQ_TIMEOUT, nothing changed (a batch's or a
 * transactional run is never entered: its settlement within those 5 s
 * decides). A request taken is carried out within 5 s more, or LQ_TIMEOUT
 * says it may still take effect. LQ_NOT_FOUND when no row of the id is
 * queued or in work, or its run finished it first. */
LQ_API int lq_cancel(lq_broker *broker, const lq_table *table, int64_t id);

/* ------------------------------------------------------------------------ */
/* Looking at a queue. Each count stops at `cap` rows (cap >= 1), so a count
 * of `cap` means "cap or more". Rows due are read through the claim-order
 * index that lq_table_create makes, so a deep backlog costs a bounded read;
 * delayed and leased rows, which that index does not order, are looked for
 * among the queue's rows until `cap` are found. The counts of one call are
 * read in one snapshot (a
 * REPEATABLE READ transaction that writes nothing; on SQLite it waits its
 * turn among the writers). A table with a group column is read one group
 * at a time: `group` names it (NULL otherwise). Thread-safe. */

typedef enum lq_queue_stat {
    LQ_QUEUE_DUE = 0,          /* due now and free to claim (in the row lock and
                                  advisory forms, rows in work too: only their
                                  runs' locks tell them apart) */
    LQ_QUEUE_DELAYED = 1,      /* due later (retry_after); 0 without the column */
    LQ_QUEUE_IN_WORK = 2,      /* leased now (lease form); -1 in the other forms */
    LQ_QUEUE_DEAD_LETTERS = 3, /* -1 where the table declares no destination */
    LQ_QUEUE_HEAD_AGE_MS = 4,  /* how long the next row in claim order has been
                                  due (retry_after); -1 when no row is due */
    LQ_QUEUE_STAT_COUNT = 5
} lq_queue_stat;

/* values_out[i] receives lq_queue_stat i, for each i below `count` (a caller
 * built against an older header passes fewer). */
LQ_API int lq_queue_stats(int64_t *values_out, size_t count, lq_broker *broker,
                          const lq_table *table, const char *group, int64_t cap);
/* The attempts of the queue's first `cap` rows in claim order (queued or in
 * work): counts_out[a] rows have attempt a, for a below buckets - 1, and
 * counts_out[buckets - 1] rows have buckets - 1 or more. Needs an attempt
 * column (LQ_SCHEMA without). */
LQ_API int lq_queue_attempts(int64_t *counts_out, size_t buckets, lq_broker *broker,
                             const lq_table *table, const char *group, int64_t cap);

/* Dead letters, in the table or the group the table declares
 * (lq_table_set_dead_letter; LQ_MISUSE without one). `group` is the queue's
 * group where the table has a group column, else NULL. Thread-safe. */

/* Up to `limit` (1 to 10000) dead letters of ids above `after_id`, in id
 * order, as a JSON array of objects: "id", and where the table has them
 * "attempt", "group", "partition_key", "priority", "headers" (an object),
 * and "payload" (a string when the payload is UTF-8, else "payload_base64").
 * Ownership: the caller frees *json_out with lq_free. */
LQ_API int lq_dead_letters_list(char **json_out, lq_broker *broker, const lq_table *table,
                                const char *group, int64_t after_id, int64_t limit);
/* Puts dead letters back in the queue, due now, counted from their first
 * attempt again: the `count` rows of `ids` in one transaction (all or none;
 * an id that is not a dead letter is passed over), or with ids NULL and
 * count 0 every one, a thousand to a transaction. *replayed_out (may be
 * NULL) receives how many went back. A row whose id the queue holds again
 * fails the call (LQ_BACKEND) and changes nothing of its transaction. */
LQ_API int lq_dead_letters_replay(int64_t *replayed_out, lq_broker *broker, const lq_table *table,
                                  const char *group, const int64_t *ids, size_t count);
/* Deletes dead letters: the rows of `ids`, or with ids NULL and count 0
 * every one, as lq_dead_letters_replay takes them. */
LQ_API int lq_dead_letters_purge(int64_t *purged_out, lq_broker *broker, const lq_table *table,
                                 const char *group, const int64_t *ids, size_t count);

/* Retention: rows deleted once older than `older_than_ms` (0 or more), that
 * is with their time before now - older_than_ms on the host's clock, the
 * clock acks and dead-lettering write it on (a host whose clock runs ahead
 * of the writers' prunes early by as much). A thousand rows to a DELETE,
 * each in autocommit (its own short transaction, never one long one), until
 * a DELETE finds fewer; claims and acks go on between them. Concurrent
 * pruners of one table are safe (on PostgreSQL each passes over the rows
 * another is deleting). *deleted_out (may be NULL) receives how many rows
 * went, also those of the batches before a failure. A missing table or
 * column fails with LQ_SCHEMA, before anything changes. Thread-safe. */

/* Deletes finished rows: those an ack marked processed (processed_at)
 * before the cut; rows queued or in work (processed_at NULL) are never
 * touched. `group` names one group of a table with a group column, NULL
 * every group. Needs a processed_at column (LQ_MISUSE without: such a
 * table's acks delete their rows). Finished rows are found through an index
 * on processed_at (<table>_processed, partial on processed_at IS NOT NULL
 * where the database has them), which lq_table_create makes with a table
 * and this call makes when it is missing (on PostgreSQL CONCURRENTLY, so
 * writers go on; a warning, and batches that read the table, where the role
 * may not create it). */
LQ_API int lq_queue_prune(int64_t *deleted_out, lq_broker *broker, const lq_table *table,
                          const char *group, int64_t older_than_ms);
/* Deletes dead letters, in the dead-letter table or group (LQ_MISUSE
 * without one), dead-lettered before the cut. Dead-lettering (an outcome,
 * max_attempts, lq_cancel) writes when into the dead letter's retry_after,
 * which a replay sets to now again, so this needs a retry_after column
 * (LQ_MISUSE without). Dead letters from before libqueue wrote this time
 * hold their last due time there, no later than their dead-lettering: they
 * are pruned as if dead-lettered then. In a dead-letter group of a
 * lease table, rows a lease holds now stay. `group` as
 * lq_dead_letters_purge takes it. */
LQ_API int lq_dead_letters_prune(int64_t *deleted_out, lq_broker *broker, const lq_table *table,
                                 const char *group, int64_t older_than_ms);

/* A queue table's health, from the database's own catalog and statistics:
 * a JSON object {"dialect", "table", "findings": [{"check", "level" ("ok",
 * "warning" or "problem"), "value" (a number or a string), "message" (what
 * was found), "advice" (what to do)}, ...]}. It reads and changes nothing
 * of the queue's rows. The checks, by database:
 *   every one: "claim_order_index", an index whose columns begin with the
 *     claim order (group, priority, retry_after, id, those the table has;
 *     the id may be left out), as lq_table_create makes it.
 *   PostgreSQL: "dead_tuples" (pg_stat_user_tables: dead and live row
 *     versions, last vacuum and autovacuum), "autovacuum" (off in the
 *     table's reloptions), "oldest_xmin" (pg_stat_activity: the session of
 *     this database whose snapshot, or transaction that wrote, is oldest,
 *     by pid, application_name, state and age; other roles' sessions need
 *     pg_read_all_stats to show),
 *     "prepared_xacts" (pg_prepared_xacts), "replication_slots"
 *     (pg_replication_slots holding xmin), "claim_plan" (EXPLAIN of the
 *     claim's candidate query; a table without groups is planned as it is,
 *     one with groups for a group of no rows), "fillfactor" (reloptions,
 *     against the share of HOT updates).
 *   MySQL and MariaDB: "history_length" (INNODB_METRICS
 *     trx_rseg_history_len), "oldest_transaction" (INNODB_TRX with
 *     PROCESSLIST: thread id, age, command); both need the PROCESS privilege,
 *     and a check the server refuses is a warning that says so.
 *   SQLite: "journal_mode", "wal_size" (the file "<database>-wal"),
 *     "freelist" (free pages).
 * Judged against the lq_doctor_limit values below. A table or a column of
 * the description that is not there fails with LQ_SCHEMA, naming it.
 * Ownership: the caller frees *json_out with lq_free. Thread-safe. */
typedef enum lq_doctor_limit {
    LQ_DOCTOR_DEAD_ROWS = 1000,             /* fewer dead row versions are never judged */
    LQ_DOCTOR_DEAD_PERCENT_WARNING = 20,    /* dead among live and dead: a warning */
    LQ_DOCTOR_DEAD_PERCENT_PROBLEM = 50,    /* and a problem */
    LQ_DOCTOR_IDLE_SNAPSHOT_S = 5,          /* a session idle in a transaction that holds
                                               a snapshot this long: a problem */
    LQ_DOCTOR_SNAPSHOT_WARNING_S = 60,      /* any snapshot (transaction) this old: a warning */
    LQ_DOCTOR_SNAPSHOT_PROBLEM_S = 600,     /* and a problem */
    LQ_DOCTOR_PREPARED_S = 60,              /* a prepared transaction this old: a problem */
    LQ_DOCTOR_PLAN_ROWS = 10000,            /* below (reltuples), a sequential scan is right */
    LQ_DOCTOR_HOT_UPDATES = 1000,           /* updates before their HOT share is judged */
    LQ_DOCTOR_HOT_PERCENT = 50,             /* HOT updates below this share, fillfactor 100:
                                               a warning */
    LQ_DOCTOR_HISTORY_WARNING = 100000,     /* InnoDB history list length: a warning */
    LQ_DOCTOR_HISTORY_PROBLEM = 1000000,    /* and a problem */
    LQ_DOCTOR_WAL_WARNING_MB = 64,          /* SQLite's -wal file (MiB): a warning; the log
                                               starts over at 16 MiB unless a reader holds it */
    LQ_DOCTOR_WAL_PROBLEM_MB = 1024,        /* and a problem */
    LQ_DOCTOR_FREE_PAGES = 1000,            /* fewer free pages are never judged */
    LQ_DOCTOR_FREE_PERCENT = 50             /* free pages among all: a warning */
} lq_doctor_limit;

LQ_API int lq_doctor(char **json_out, lq_broker *broker, const lq_table *table);

/* Pausing a queue: a paused queue's subscriptions claim nothing, in every
 * broker and process; deliveries in work finish, and rows claimed but not
 * yet handed out go back. A pause is a row in the control table
 * (lq_queue_control, in the table's schema, made at the first pause),
 * keyed by the table's name and the group: `group` pauses one group of a
 * table with a group column, NULL the whole table (every group). Each
 * subscription looks at the table once a poll interval (poll_interval_ms)
 * and at once when a pause or resume comes from its own broker, or from
 * any broker on PostgreSQL when it listens (listen_notify). Pausing a
 * paused queue and resuming a running one change nothing. A table that is
 * not there fails with LQ_SCHEMA. Thread-safe. */
LQ_API int lq_queue_pause(lq_broker *broker, const lq_table *table, const char *group);
/* Ends a pause of the table or the group, as lq_queue_pause named it: a
 * group paused on its own stays paused when its table resumes. */
LQ_API int lq_queue_resume(lq_broker *broker, const lq_table *table, const char *group);
/* *paused_out: 1 when the group's claims are paused (by a pause of its own
 * or of the whole table), else 0. */
LQ_API int lq_queue_paused(int *paused_out, lq_broker *broker, const lq_table *table,
                           const char *group);

/* ------------------------------------------------------------------------ */
/* Schedules: a message enqueued at each tick of a cron expression or an
 * interval, by whichever broker comes first: every broker and process that
 * adds the schedule takes part, and each tick enqueues exactly one row, as
 * the tick claims its row in the schedule's ticks table (lq_schedule_ticks,
 * in the table's schema, made on demand) in the transaction that writes the
 * message. Ticks are instants on the brokers' clocks; a row carries its
 * tick in the header "lq-scheduled-for" where the table has headers. A
 * schedule runs until lq_schedule_remove or the broker's close. */

/* Adds schedule `name` (unique in the table's schema) of `message` (copied:
 * payload, group, partition key, priority, delay, headers, dedup key, no
 * id) into `table`, timed by the options LQ_OPT_CRON or LQ_OPT_EVERY_MS,
 * LQ_OPT_TZ, LQ_OPT_CATCH_UP and LQ_OPT_CATCH_UP_MS. A message with a dedup
 * key enqueues nothing at a tick while a row holding the key is queued or
 * in work. LQ_MISUSE, naming the field, for a bad expression or zone, both
 * or neither timing, a name this broker schedules already; LQ_SCHEMA for a
 * field the table cannot hold. */
LQ_API int lq_schedule_add(lq_broker *broker, const lq_table *table, const char *name,
                           const lq_options *options, const lq_message *message);
/* Stops this broker's part in schedule `name`: no tick of it is enqueued
 * here once it returns. LQ_MISUSE when the broker has no such schedule. */
LQ_API int lq_schedule_remove(lq_broker *broker, const char *name);

/* ------------------------------------------------------------------------ */
/* Subscriptions and deliveries. */

typedef struct lq_subscription lq_subscription;
typedef struct lq_delivery lq_delivery;

/* A push handler. It runs on one of the subscription's threads with a
 * delivery it borrows for the call. It may settle the delivery; if it does
 * not, returning LQ_OK acks it and any other value retries it. A handle kept
 * past the call (or a pulled one past lq_delivery_free) is stale: used, it
 * fails with LQ_MISUSE and touches no other row, while the library still
 * keeps its memory for later deliveries, as it usually does; keep none. */
typedef int (*lq_handler_fn)(lq_delivery *delivery, void *userdata);

/* A push handler of a batch subscription (option batch = n): up to n
 * deliveries it borrows for the call. It may settle each; those it leaves
 * are acked when it returns LQ_OK and retried otherwise. In the row lock form
 * a batch shares one transaction, which commits when its last delivery
 * settles; a settlement that fails rolls the batch back and every row
 * returns (later settlements of the batch fail with LQ_BATCH_ROLLED_BACK). */
typedef int (*lq_batch_handler_fn)(lq_delivery *const *deliveries, size_t count, void *userdata);

/* Opens a subscription on `table`: builds and prepares its statements, so a
 * missing table or column fails here (LQ_SCHEMA, naming it), and a form the
 * database cannot serve fails with LQ_DIALECT. No row is claimed before
 * lq_subscription_run or lq_subscription_next. `options` may be NULL.
 * Ownership: the caller closes it with lq_subscription_close. Thread-safe
 * handle: next, stop and close may be called from any thread. */
LQ_API int lq_subscription_open(lq_subscription **out, lq_broker *broker,
                                const lq_table *table, const lq_options *options);
/* Push mode: starts `workers` threads that call `handler` for each delivery.
 * Returns at once. `userdata` must stay valid until lq_subscription_stop
 * returns. A subscription runs in one mode: push or pull. */
LQ_API int lq_subscription_run(lq_subscription *subscription, lq_handler_fn handler,
                               void *userdata);
/* Push mode for a batch subscription: as lq_subscription_run, with a batch
 * handler. */
LQ_API int lq_subscription_run_batch(lq_subscription *subscription, lq_batch_handler_fn handler,
                                     void *userdata);
/* Pull mode, batches: waits up to timeout_ms for at least one delivery, then
 * takes up to `capacity` waiting ones into out[]; *count_out says how many.
 * Each is the caller's, freed with lq_delivery_free. LQ_TIMEOUT, LQ_CLOSED as
 * lq_subscription_next. */
LQ_API int lq_subscription_next_batch(lq_delivery **out, size_t capacity, size_t *count_out,
                                      lq_subscription *subscription, int64_t timeout_ms);
/* Pull mode: waits up to timeout_ms (-1: no limit; 0: takes only what is
 * ready now; below -1: LQ_MISUSE) for the next claimed delivery. Returns
 * LQ_TIMEOUT when none came, LQ_CLOSED once stopped; when none came because
 * the claims have failed for the whole wait (the database is unreachable,
 * say), the last claim's failure instead (LQ_CONNECT, ...), so an outage does
 * not pass for an empty queue. While the caller holds the delivery the core
 * keeps its lease alive. Ownership: the caller frees *out with
 * lq_delivery_free. */
LQ_API int lq_subscription_next(lq_delivery **out, lq_subscription *subscription,
                                int64_t timeout_ms);
/* Pull mode for event loops: a descriptor to wait on, and a pull that never
 * waits. The first call of either starts the background claims, as
 * lq_subscription_next does. Both are thread-safe, as next is.
 *
 * lq_subscription_fd: *fd_out receives a descriptor (an eventfd on Linux, a
 * pipe's read end elsewhere) that is readable while a delivery is ready to
 * be taken, and for good once the subscription is stopped. Wait for it to
 * be readable (poll, epoll, an event loop's reader), then call
 * lq_subscription_try_next; never read it. It is level-triggered: it stays
 * readable while deliveries wait, and try_next empties it when it takes the
 * last one ready. Another taker (a second thread, lq_subscription_next) may
 * take the delivery first: readable and try_next finds none (LQ_TIMEOUT) is
 * a spurious wake-up, and the caller waits again. A stop or close makes it
 * readable, and try_next then returns LQ_CLOSED. Every call gives the same
 * descriptor. Ownership: the subscription's. lq_subscription_close closes
 * it, so a waiter stops waiting on it before the close (stop first: its
 * waiters wake and see LQ_CLOSED); the caller never closes it. A
 * subscription in push mode refuses it (LQ_MISUSE); one stopped before the
 * first call, LQ_CLOSED. */
LQ_API int lq_subscription_fd(int *fd_out, lq_subscription *subscription);
/* Pull mode, never waiting: takes the next delivery ready now into *out
 * (LQ_OK), or returns LQ_TIMEOUT with *out NULL when none is ready, and
 * LQ_CLOSED once stopped. Unlike lq_subscription_next it never reports a
 * failing claim in place of LQ_TIMEOUT: lq_subscription_health tells an
 * outage. In transactional mode it opens the delivery's transaction, which
 * takes a connection from the pool, as next does. Ownership: the caller
 * frees *out with lq_delivery_free. */
LQ_API int lq_subscription_try_next(lq_delivery **out, lq_subscription *subscription);
/* Pull mode, never waiting, several at once: takes up to `capacity`
 * deliveries ready now into out[] (LQ_OK, *count_out at least 1), or
 * returns LQ_TIMEOUT with *count_out 0 when none is ready, and LQ_CLOSED
 * once stopped; as lq_subscription_try_next otherwise, for an event loop to
 * serve every delivery ready at one wake-up with one call. In transactional
 * mode each opens its transaction: when one cannot, those before it are
 * the caller's and those from it go back to the queue with no attempt
 * spent (the call returns its failure when it was the first). Ownership:
 * the caller frees each with lq_delivery_free. */
LQ_API int lq_subscription_try_next_batch(lq_delivery **out, size_t capacity, size_t *count_out,
                                          lq_subscription *subscription);
/* Stops claiming, returns rows claimed but not handed out at once, and waits
 * for running push handlers to finish. Deliveries the caller holds stay
 * valid and may still be settled. Idempotent. Not from one of the
 * subscription's own handlers (LQ_MISUSE): stop waits for them. */
LQ_API int lq_subscription_stop(lq_subscription *subscription);
/* Stops and frees the subscription. Deliveries still held by the caller keep
 * what they need alive until freed. Not from one of its own handlers (it
 * logs an error and does nothing). Pull subscriptions claim in the
 * background from the first lq_subscription_next, up to `workers` rows
 * (counting their attempts in the lease and advisory forms); rows claimed
 * and never handed out go back, with no attempt spent, when it stops. */
LQ_API void lq_subscription_close(lq_subscription *subscription);

typedef enum lq_stat {
    LQ_STAT_CLAIMS = 1,         /* claim statements run */
    LQ_STAT_EMPTY_CLAIMS = 2,   /* claims that took no row */
    LQ_STAT_DELIVERED = 3,      /* deliveries handed out */
    LQ_STAT_SETTLED = 4,        /* deliveries settled (any outcome) */
    LQ_STAT_EXTENSIONS = 5,     /* lease extensions written */
    LQ_STAT_IN_WORK = 6,        /* deliveries handed out, not yet settled */
    LQ_STAT_WAITING = 7,        /* claimed rows waiting for a worker */
    LQ_STAT_POLL_INTERVAL_MS = 8, /* the poll interval now (LQ_OPT_POLL_CEILING_MS) */
    LQ_STAT_CONTENTION = 9,     /* claims that met a conflict the database reported */
    LQ_STAT_EXPIRED = 10,       /* runs that passed timeout_ms, their rows sent back */
    LQ_STAT_EXPIRED_UNSTARTED = 11, /* rows claimed past their expires_at, sent to the dead
                                    letters (or deleted) unread */
    LQ_STAT_PAUSED = 12,           /* 1 while the subscription found its queue paused
                                    (lq_queue_pause), else 0 */
    LQ_STAT_CLAIMED = 13,       /* rows claimed (a claim may take several) */
    LQ_STAT_ACKED = 14,         /* settlements that finished a row */
    LQ_STAT_RETRIED = 15,       /* rows sent back to run again: a retry, a retry after a
                                   delay, a run past timeout_ms */
    LQ_STAT_DEAD_LETTERED = 16, /* rows a settlement sent to the dead letters (max_attempts
                                   reached and oversized rows included; rows past their
                                   expiry count in LQ_STAT_EXPIRED_UNSTARTED alone) */
    LQ_STAT_LEASE_LOST = 17,    /* settlements refused as the lease had passed on, and rows
                                   waiting here given back unrun as their lease ran out */
    LQ_STAT_SETTLE_ERRORS = 18, /* settlements that failed otherwise (the row comes back) */
    LQ_STAT_POOL_IN_USE = 19,   /* the broker's connections lent out now */
    LQ_STAT_POOL_IDLE = 20      /* the broker's connections open and idle now */
} lq_stat;
/* A counter or gauge of the subscription's own, read from memory (no
 * statement). Thread-safe. */
LQ_API int64_t lq_subscription_stat(const lq_subscription *subscription, int stat);

/* Metrics: a snapshot of every stat and two histograms, read from memory,
 * costing no statement (for an exporter to poll as often as it likes). */
typedef enum lq_histogram {
    LQ_HISTOGRAM_CLAIM = 1, /* seconds each claim took, from taking a connection to the
                               rows in hand (LQ_STAT_CLAIMS of them) */
    LQ_HISTOGRAM_WAIT = 2   /* seconds each row claimed had waited since it was due to
                               start: its retry_after, or its created_at where later or
                               alone; empty for a table with neither column */
} lq_histogram;
/* Buckets of a histogram; the last has no upper bound. */
#define LQ_HISTOGRAM_BUCKETS 16
/* The upper bound of bucket `bucket` in seconds (0.001 up to 300), INFINITY
 * for the last; NAN outside 0..LQ_HISTOGRAM_BUCKETS-1. */
LQ_API double lq_histogram_bound(int bucket);
typedef struct lq_metrics lq_metrics;
/* Takes a snapshot of the subscription's metrics into *out, freed with
 * lq_metrics_free. Each value is read at one moment; counters only grow.
 * LQ_NOMEM, or LQ_MISUSE for a NULL argument. Thread-safe. */
LQ_API int lq_subscription_metrics(lq_metrics **out, const lq_subscription *subscription);
/* A stat (lq_stat) as the snapshot read it; 0 for an unknown one. */
LQ_API int64_t lq_metrics_stat(const lq_metrics *metrics, int stat);
/* How many observations fell in bucket `bucket` of a histogram (each in the
 * first bucket whose bound is at or above it: not cumulative); bucket -1:
 * all of them. 0 for an unknown histogram or bucket. */
LQ_API int64_t lq_metrics_count(const lq_metrics *metrics, int histogram, int bucket);
/* The sum of a histogram's observations, in seconds. */
LQ_API double lq_metrics_sum(const lq_metrics *metrics, int histogram);
LQ_API void lq_metrics_free(lq_metrics *metrics);
/* Whether the subscription's claims reach the database: LQ_OK while they
 * work (and before the first), else the status of the last claim's failure,
 * which lq_errmsg() then describes; *failing_ms_out (may be NULL) receives
 * how long claims have failed in a row (0 while they work). Claims that fail
 * are retried every second, and each failure is logged. Thread-safe. */
LQ_API int lq_subscription_health(const lq_subscription *subscription, int64_t *failing_ms_out);

/* A delivery: one claimed row. Getters return values valid until the delivery
 * is freed (pull) or the handler returns (push). Settle a delivery once: a
 * second settlement fails with LQ_MISUSE. A delivery is used by one thread at
 * a time. */
LQ_API int64_t lq_delivery_id(const lq_delivery *delivery);
LQ_API const void *lq_delivery_payload(const lq_delivery *delivery);
LQ_API size_t lq_delivery_payload_size(const lq_delivery *delivery);
/* The attempt as counted before this claim: the first delivery reads 1.
 * 0 when the table has no attempt column. */
LQ_API int lq_delivery_attempt(const lq_delivery *delivery);
/* The group and partition key, or NULL when the row has none. */
LQ_API const char *lq_delivery_group(const lq_delivery *delivery);
LQ_API const char *lq_delivery_partition_key(const lq_delivery *delivery);
/* Headers: a count, and the name and value at an index (LQ_MISUSE past the
 * end); lq_delivery_header returns the value of a name or NULL. */
LQ_API size_t lq_delivery_header_count(const lq_delivery *delivery);
LQ_API int lq_delivery_header_at(const char **name_out, const char **value_out,
                                 const lq_delivery *delivery, size_t index);
LQ_API const char *lq_delivery_header(const lq_delivery *delivery, const char *name);
/* The lease token: the expiry in milliseconds since the epoch (lease form),
 * or 0. It changes when the core extends the lease. */
LQ_API int64_t lq_delivery_lease_expiry_ms(const lq_delivery *delivery);
/* 1 once the delivery's run passed timeout_ms and its row went back: the
 * handler may give up, as its settlement will change nothing; else 0. */
LQ_API int lq_delivery_expired(const lq_delivery *delivery);
/* 1 once the delivery's row was found cancelled (lq_cancel): when heard of
 * or at a lease extension in the lease form, when taken out in the row lock
 * form, at the settlement in the advisory form. Its settlement changes
 * nothing. */
LQ_API int lq_delivery_cancelled(const lq_delivery *delivery);

/* Outcomes. Ack finishes the row (deletes it, or sets processed_at). Retry
 * returns it to the queue now; retry_after hides it for delay_ms (needs a
 * retry_after column; without one it is a plain retry and a logged warning;
 * delay_ms as in lq_message_set_delay_ms, LQ_MISUSE past what fits).
 * Dead letter moves it to the table's dead-letter destination. A failure
 * outcome of a delivery whose attempt has reached max_attempts dead-letters
 * it instead. LQ_LEASE_LOST: the lease ran out and another claim holds the
 * row; nothing changed. */
LQ_API int lq_delivery_ack(lq_delivery *delivery);
LQ_API int lq_delivery_retry(lq_delivery *delivery);
LQ_API int lq_delivery_retry_after(lq_delivery *delivery, int64_t delay_ms);
LQ_API int lq_delivery_dead_letter(lq_delivery *delivery);
/* Acks `count` deliveries of one subscription together: where they settle on
 * pool connections (the lease form, SQLite's advisory form) or in one row
 * lock batch's transaction, as one statement and one commit; the others one
 * by one. statuses[i] (NULL: not wanted) gets each one's outcome, as
 * lq_delivery_ack would return it; the call returns the first failure.
 * LQ_MISUSE, settling none, when one is settled already or they are of
 * several subscriptions. The deliveries stay the caller's to free. */
LQ_API int lq_deliveries_ack(int *statuses, lq_delivery *const *deliveries, size_t count);
/* Acks a pulled delivery behind the caller, who goes on at once: where
 * lq_subscription_acks_behind says so, the ack goes to the subscription's
 * acker thread (started at the first such call, ended by
 * lq_subscription_stop), which runs the acks gathered meanwhile as one
 * statement and one commit, as it does after push handlers. LQ_OK then
 * says the ack is queued, not done: until it commits the row is in work
 * (its lease kept alive), and an ack that fails (the lease was lost, the
 * database unreachable) is logged and counted (LQ_STAT_LEASE_LOST,
 * LQ_STAT_SETTLE_ERRORS), and the row comes back when its lease runs out.
 * Elsewhere (a form that holds a connection or a transaction, coalesce 0,
 * a push delivery, a stopped subscription) it acks on the calling thread
 * and returns the ack's outcome, as lq_delivery_ack. LQ_MISUSE when the
 * delivery is settled already. The delivery stays the caller's, freed with
 * lq_delivery_free before or after the ack is done (the acker keeps its own
 * reference); later settlements of it fail with LQ_MISUSE. Thread-safe
 * across deliveries. */
LQ_API int lq_delivery_ack_behind(lq_delivery *delivery);
/* lq_delivery_ack_behind of `count` pulled deliveries of one subscription
 * at once: one hand-over to the acker thread where the acks go behind,
 * where every statuses[i] (NULL: not wanted) gets LQ_OK; elsewhere they ack
 * on the calling thread as lq_deliveries_ack. LQ_MISUSE, settling none,
 * when one is settled already or they are of several subscriptions. The
 * deliveries stay the caller's to free. Thread-safe across deliveries. */
LQ_API int lq_deliveries_ack_behind(int *statuses, lq_delivery *const *deliveries, size_t count);
/* 1 where lq_delivery_ack_behind of the subscription's pulled deliveries
 * queues the ack for its acker thread, 0 where it acks on the calling
 * thread; 0 for NULL. Thread-safe. */
LQ_API int lq_subscription_acks_behind(const lq_subscription *subscription);
/* Runs one statement of the handler's own, with text parameters in the
 * database's own placeholders ($1 on PostgreSQL, ? on MySQL and SQLite; a
 * NULL entry is SQL NULL). In transactional mode it runs on the delivery's
 * transaction: an ack commits it with the settlement, every other outcome
 * rolls it back. Otherwise it commits on its own, on a connection of the
 * handler thread's own pool (on_threads) or of the broker's pool.
 * changes_out (may be NULL) receives the rows written. */
LQ_API int lq_delivery_exec(int64_t *changes_out, lq_delivery *delivery, const char *sql,
                            const char *const *params, size_t count);
/* Frees a pulled delivery. One never settled goes back to the queue at once,
 * with no attempt spent. Not for push deliveries, which the core frees. */
LQ_API void lq_delivery_free(lq_delivery *delivery);

/* ------------------------------------------------------------------------ */
/* For bindings. A program in C needs none of these: they let a binding that
 * runs handlers on threads of its own (Python's GIL, Lua's single state)
 * keep the core's accounting right. */

/* 1 on a thread running one of the subscription's push handlers (from which
 * stop and close cannot wait for the handlers), else 0. Thread-safe. */
LQ_API int lq_subscription_in_handler(const lq_subscription *subscription);
/* Tells the subscription that the delivery's handler is done and that its
 * settlement will follow, from another thread: a binding that hands its
 * settlements to threads of its own calls it at the hand-over. Where the
 * delivery holds no connection (the lease form, unless transactional), the
 * claims then count its worker free, as they do while a settlement runs. The
 * settlement still comes; without one the row is in work until it is
 * settled or its lease ends. Does nothing to a settled delivery. */
LQ_API void lq_delivery_handled(lq_delivery *delivery);

#ifdef __cplusplus
}
#endif

#endif /* LIBQUEUE_H */
