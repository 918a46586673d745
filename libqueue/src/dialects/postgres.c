/* The PostgreSQL dialect, over libpq: every form. Statements are prepared
 * once per connection and run with binary results; a connection carries a
 * connect timeout, a statement timeout and TCP keepalives, so a server that
 * stops answering becomes an error, not a hang. */
#include "base/clock.h"
#include "sql/dialect.h"
#include "sql/stmt_cache.h"

#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PG_FLOOR 90500          /* FOR UPDATE SKIP LOCKED */
#define PG_FLOOR_HASH 110000    /* hashtextextended: advisory keys, FIFO guard */
#define PG_EPOCH_OFFSET_MS 946684800000LL /* 2000-01-01 in Unix milliseconds */

/* Type OIDs of the columns the core reads (pg_type.h). */
enum { OID_BOOL = 16, OID_BYTEA = 17, OID_INT8 = 20, OID_INT2 = 21, OID_INT4 = 23,
       OID_TIMESTAMP = 1114, OID_TIMESTAMPTZ = 1184 };

struct lq__conn {
    PGconn *pg;
    bool borrowed;
    bool pooled;         /* through a transaction pooler: no named statements */
    bool broken;         /* a deadline passed mid-statement: never reuse */
    bool ended;          /* the server said, between statements, that it ends the session */
    int64_t deadline_ms; /* the client's own wait for any answer */
    lq__stmt_cache prepared; /* each statement's name on the server: lq_<id> */
};

/* Maps a failed result (or a dead connection) to a status and message. */
static int pg_error(lq__conn *c, PGresult *res, int status, const char *what) {
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : NULL;
    if (!msg || !*msg) msg = PQerrorMessage(c->pg);
    if (PQstatus(c->pg) == CONNECTION_BAD) status = LQ_CONNECT;
    else if (state && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
                       strcmp(state, "55P03") == 0))
        status = LQ_CONTENTION;
    else if (state && strcmp(state, "57014") == 0) status = LQ_TIMEOUT;
    else if (state && strcmp(state, "23505") == 0) status = LQ_DUPLICATE; /* unique_violation */
    else if (state && (strcmp(state, "42P01") == 0 || strcmp(state, "42703") == 0 ||
                       strcmp(state, "3F000") == 0) && status == LQ_BACKEND)
        status = LQ_SCHEMA;
    /* Drop libpq's trailing newline. */
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) n--;
    lq__error_db(status, state, 0, "postgresql: %s: %.*s", what, (int)n, msg);
    if (res) PQclear(res);
    return status;
}

/* Waits until the socket is ready or the deadline (monotonic ms) passes.
 * The first wait of a statement (*deadline 0) polls up to the connection's
 * deadline_ms (at most a second) before any clock reading, so an answer that
 * comes within it costs none; a later wait (*deadline -1: polled once) sets
 * the deadline from the clock less that first poll's bound, so a server that
 * answers in dribbles still meets one: at most a second early, which the
 * two seconds deadline_ms keeps over the statement timeout absorb. */
static bool wait_socket(lq__conn *c, short events, int64_t *deadline) {
    struct pollfd pfd = {.fd = PQsocket(c->pg), .events = events};
    if (pfd.fd < 0) return false;
    int64_t first = c->deadline_ms > 1000 ? 1000 : c->deadline_ms;
    if (*deadline == 0) {
        *deadline = -1;
        if (first > 0 && poll(&pfd, 1, (int)first) > 0) return true;
    }
    if (*deadline < 0) *deadline = lq__mono_ms() + c->deadline_ms - first;
    for (;;) {
        int64_t left = *deadline - lq__mono_ms();
        if (left <= 0) return false;
        if (poll(&pfd, 1, (int)(left > 1000 ? 1000 : left)) > 0) return true;
    }
}

/* The deadline passed with no answer. No cancel request: libpq before 17
 * sends one on a new connection and waits, with no deadline, for the server
 * to close it, which a frozen server or a half-open link never does. On a
 * connection of ours, a running server has ended the statement already (its
 * statement_timeout fires 2 s earlier); closing the connection ends the
 * session, and with it the transaction. Nor does the close wait: on a
 * nonblocking connection PQfinish sends only what the socket takes at once. */
static int no_answer(lq__conn *c) {
    c->broken = true;
    return lq__error(LQ_TIMEOUT, "postgresql: no answer within %lld ms; %s", (long long)c->deadline_ms,
                     c->borrowed ? "the caller's connection still runs the statement"
                                 : "the connection is closed");
}

/* The answer to what was just sent, within the connection's deadline: a
 * server that stops answering becomes an error, not a hang. On a passed
 * deadline the connection is marked broken, so the pool closes it. Returns
 * the first result (the caller clears it). */
static PGresult *await_result(lq__conn *c, int *status) {
    int64_t deadline = 0;
    PGresult *first = NULL, *res;
    int flushed;
    while ((flushed = PQflush(c->pg)) == 1) {
        if (!wait_socket(c, POLLIN | POLLOUT, &deadline)) goto timeout;
        if (!PQconsumeInput(c->pg)) goto broken;
    }
    if (flushed < 0) goto broken;
    for (;;) {
        while (PQisBusy(c->pg)) {
            if (!wait_socket(c, POLLIN, &deadline)) goto timeout;
            if (!PQconsumeInput(c->pg)) goto broken;
        }
        if (!(res = PQgetResult(c->pg))) break;
        if (first) PQclear(res);
        else first = res;
    }
    if (!first) goto broken;
    return first;
timeout:
    if (first) PQclear(first);
    *status = no_answer(c);
    return NULL;
broken:
    if (first) PQclear(first);
    c->broken = true;
    *status = pg_error(c, NULL, LQ_CONNECT, "the connection failed");
    return NULL;
}

/* Runs a query sent by `sent` (a PQsend* result) to its end. */
static PGresult *finish(lq__conn *c, int sent, int *status) {
    if (!sent) {
        if (PQstatus(c->pg) != CONNECTION_OK) c->broken = true; /* never unmarked */
        *status = pg_error(c, NULL, LQ_BACKEND, "cannot send a statement");
        return NULL;
    }
    return await_result(c, status);
}

/* Nothing is sent on a broken connection: its last statement may still be
 * in progress, and the pool closes it. */
static int not_broken(const lq__conn *c) {
    if (!c->broken) return LQ_OK;
    return lq__error(LQ_CONNECT, "postgresql: not sent: the connection broke in an earlier "
                                 "statement and takes no more");
}

static int pg_check_version(lq__conn *c, const lq_table *table);

/* The URL's query ('?' included), or NULL. It begins after the user info,
 * whose password may hold a '?': as libpq reads it, the user info ends at an
 * '@' before any '/'. */
static char *url_query(char *url) {
    char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    size_t info = strcspn(host, "@/");
    if (host[info] == '@') host += info + 1;
    return strchr(host, '?');
}

/* PgBouncer's transaction pooling, asked for in the URL as other PostgreSQL
 * clients spell it (?pgbouncer=transaction). libpq knows no such parameter,
 * so it leaves the URL before libpq reads it. */
static int take_pooler_parameter(lq__broker_target *t) {
    static const char name[] = "pgbouncer=";
    char *query = url_query(t->url);
    for (char *p = query ? query + 1 : NULL; p && *p;) {
        size_t len = strcspn(p, "&");
        char *next = p + len + (p[len] == '&');
        if (strncmp(p, name, sizeof name - 1) != 0) {
            p = next;
            continue;
        }
        const char *value = p + sizeof name - 1;
        int value_len = (int)(len - (sizeof name - 1));
        if (value_len != (int)strlen("transaction") || strncmp(value, "transaction", (size_t)value_len) != 0)
            return lq__error(LQ_MISUSE, "postgresql: the URL's pgbouncer=%.*s: libqueue knows "
                                        "pgbouncer=transaction, for PgBouncer's pool_mode "
                                        "transaction; a pooler in session mode needs no parameter",
                             value_len > 32 ? 32 : value_len, value);
        t->transaction_pooling = true;
        memmove(p, next, strlen(next) + 1);
    }
    /* A query left empty, or ending in '&', loses its separator. */
    size_t n = strlen(t->url);
    while (query && n && (t->url[n - 1] == '&' || t->url[n - 1] == '?')) t->url[--n] = '\0';
    return LQ_OK;
}

/* Whether libpq knows connection parameter `key` (of `len` bytes). "ssl" is
 * the one its URIs take beyond its keywords (ssl=true, sslmode=require). */
static bool known_parameter(const PQconninfoOption *keywords, const char *key, size_t len) {
    if (len == 3 && strncmp(key, "ssl", 3) == 0) return true;
    for (const PQconninfoOption *o = keywords; o->keyword; o++)
        if (strlen(o->keyword) == len && strncmp(o->keyword, key, len) == 0) return true;
    return false;
}

/* After libpq refused the URL: the error naming a query parameter it does
 * not know, or LQ_OK when each is known (or one is percent-encoded, which
 * this does not decode). Only the name is quoted, never a value: libpq's own
 * reason may quote the password, so it is not passed on. */
static int unknown_parameter(char *url) {
    char *query = url_query(url);
    if (!query) return LQ_OK;
    PQconninfoOption *keywords = PQconndefaults();
    if (!keywords) return lq__error(LQ_NOMEM, "out of memory");
    int rc = LQ_OK;
    for (const char *p = query + 1; *p && rc == LQ_OK;) {
        size_t len = strcspn(p, "&");
        size_t key = strcspn(p, "=&");
        if (p[key] == '=' && key > 0 && !memchr(p, '%', key) && !known_parameter(keywords, p, key))
            rc = lq__error(LQ_MISUSE, "postgresql: the URL's parameter \"%.*s\" is not one libpq "
                                      "knows (its connection parameters, such as connect_timeout, "
                                      "sslmode or application_name, and pgbouncer=transaction)",
                           (int)(key > 64 ? 64 : key), p);
        p += len + (p[len] == '&');
    }
    PQconninfoFree(keywords);
    return rc;
}

static int pg_parse_url(lq__broker_target *t, const char *url, const char *rest) {
    (void)rest;
    /* libpq parses the URL itself, with its parameters and environment; the
     * password is kept only to scrub it from messages. */
    t->url = t->url ? t->url : lq__strdup(url);
    if (!t->url) return lq__error(LQ_NOMEM, "out of memory");
    int rc = take_pooler_parameter(t);
    if (rc != LQ_OK) return rc;
    char *why = NULL;
    PQconninfoOption *options = PQconninfoParse(t->url, &why);
    /* libpq's reason may quote the URL's password: it is not repeated. */
    if (why) PQfreemem(why);
    if (!options && (rc = unknown_parameter(t->url)) != LQ_OK) return rc;
    if (!options)
        return lq__error(LQ_MISUSE, "postgresql: the URL cannot be read (libpq's URI syntax: "
                                    "postgresql://user:password@host:port/database?parameters, "
                                    "with reserved characters percent-encoded)");
    for (PQconninfoOption *o = options; o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && *o->val) t->password = lq__strdup(o->val);
    PQconninfoFree(options);
    return LQ_OK;
}

static void pg_disconnect(lq__conn *c) {
    if (!c) return;
    if (!c->borrowed) PQfinish(c->pg);
    lq__cache_clear(&c->prepared, free);
    free(c);
}

/* The server's notices (CREATE .. IF NOT EXISTS of what exists) go to the
 * library's log, at debug level, rather than to stderr as libpq's do. An
 * error that comes between statements (a terminate, an idle timeout) is
 * passed here as a notice too: its FATAL marks the session ended. */
static void on_notice(void *ctx, const PGresult *notice) {
    lq__conn *c = ctx;
    const char *severity = PQresultErrorField(notice, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (!severity) severity = PQresultErrorField(notice, PG_DIAG_SEVERITY); /* 9.5: only this */
    if (severity && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0))
        c->ended = true;
    const char *message = PQresultErrorMessage(notice);
    size_t n = strlen(message);
    while (n && message[n - 1] == '\n') n--;
    lq__log(LQ_LOG_DEBUG, "postgresql: %.*s", (int)n, message);
}

/* The session's statement_timeout: the server ends a statement of ours
 * that runs longer. */
static int set_statement_timeout(lq__conn *c, int64_t statement_ms) {
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%lld", (long long)statement_ms);
    const char *params[1] = {timeout};
    int rc = LQ_OK;
    PGresult *res = finish(c, PQsendQueryParams(c->pg, "SELECT set_config('statement_timeout', $1, false)",
                                                1, NULL, params, NULL, NULL, 0), &rc);
    if (res && PQresultStatus(res) != PGRES_TUPLES_OK) return pg_error(c, res, LQ_CONNECT, "cannot set the statement timeout");
    if (res) PQclear(res);
    return rc;
}

static int pg_connect(lq__conn **out, const lq__broker_target *target, const lq_options *o) {
    char connect_timeout[32], user_timeout[32];
    int64_t connect_ms = lq__opt_int(o, LQ_OPT_CONNECT_TIMEOUT_MS);
    int64_t statement_ms = lq__opt_int(o, LQ_OPT_STATEMENT_TIMEOUT_MS);
    snprintf(connect_timeout, sizeof connect_timeout, "%lld", (long long)((connect_ms + 999) / 1000));
    snprintf(user_timeout, sizeof user_timeout, "%lld", (long long)statement_ms);
    /* Ours first: the URL's own parameters, expanded from dbname, override them. */
    const char *keys[] = {"connect_timeout", "keepalives", "keepalives_idle",
                          "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                          "application_name", "dbname", NULL};
    const char *values[] = {connect_timeout, "1", "10", "5", "3", user_timeout,
                            "libqueue", target->url, NULL};
    lq__conn *c = calloc(1, sizeof *c);
    if (!c) return lq__error(LQ_NOMEM, "out of memory");
    c->pooled = target->transaction_pooling;
    c->pg = PQconnectdbParams(keys, values, 1);
    if (!c->pg) {
        free(c);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    if (PQstatus(c->pg) != CONNECTION_OK) {
        pg_error(c, NULL, LQ_CONNECT, "cannot connect");
        pg_disconnect(c);
        return LQ_CONNECT;
    }
    /* A server below the floor gets no query at all. */
    int rc = pg_check_version(c, NULL);
    if (rc != LQ_OK) {
        pg_disconnect(c);
        return rc;
    }
    /* The server's deadline is set here, not through the URL's options
     * (which a URL may carry for its own settings, replacing ours); the
     * client waits a little longer, for a server that stops answering.
     * Through a transaction pooler a session's setting would stay with a
     * server connection other clients share: the server's own deadline is
     * then the role's or the database's (ALTER ROLE .. SET
     * statement_timeout), and the client's stands. */
    c->deadline_ms = statement_ms + 2000;
    PQsetnonblocking(c->pg, 1);
    PQsetNoticeReceiver(c->pg, on_notice, c);
    if (!c->pooled) rc = set_statement_timeout(c, statement_ms);
    if (rc != LQ_OK) {
        pg_disconnect(c);
        return rc;
    }
    *out = c;
    return LQ_OK;
}

/* Only an idle, healthy session goes back to the pool. */
static bool pg_reusable(lq__conn *c) {
    return !c->broken && !c->ended && PQstatus(c->pg) == CONNECTION_OK &&
           PQtransactionStatus(c->pg) == PQTRANS_IDLE;
}

/* A server that ends a session sends its reason (a FATAL error) and
 * closes. libpq's socket never blocks: a read takes what came into libpq's
 * buffer, and PQisBusy parses it, passing an error that came between
 * statements to the notice receiver, which marks the session ended; a
 * second read finds a close that came behind the reason, and libpq then
 * tells the connection bad. */
static bool pg_closed_while_idle(lq__conn *c) {
    if (!PQconsumeInput(c->pg)) return true;
    (void)PQisBusy(c->pg);
    return c->ended || !PQconsumeInput(c->pg) || PQstatus(c->pg) != CONNECTION_OK;
}

static int pg_borrow(lq__conn **out, void *native) {
    lq__conn *c = calloc(1, sizeof *c);
    if (!c) return lq__error(LQ_NOMEM, "out of memory");
    c->pg = native;
    c->borrowed = true;
    c->deadline_ms = 60000; /* the caller's connection keeps its own settings */
    *out = c;
    return LQ_OK;
}

static int pg_check_version(lq__conn *c, const lq_table *table) {
    int v = PQserverVersion(c->pg);
    char shown[32];
    snprintf(shown, sizeof shown, "%d.%d", v / 10000, v >= 100000 ? v % 10000 : (v / 100) % 100);
    if (v < PG_FLOOR)
        return lq__error(LQ_SERVER_TOO_OLD,
                         "postgresql: libqueue needs PostgreSQL 9.5 or later (SKIP LOCKED); the "
                         "server reports %s",
                         shown);
    bool hashes = table && (lq_table_form(table) == LQ_FORM_ADVISORY || table->fifo);
    if (hashes && v < PG_FLOOR_HASH)
        return lq__error(LQ_SERVER_TOO_OLD,
                         "postgresql: the %s needs PostgreSQL 11 or later (hashtextextended); "
                         "the server reports %s",
                         table->fifo ? "FIFO group guard" : "advisory lock form", shown);
    return LQ_OK;
}

static void pg_placeholder(lq__strbuf *sb, int position) { lq__sb_addf(sb, "$%d", position); }

/* " (<key> IS NULL OR <one of the key's slots taken>)": a slot of a
 * partition key is the two-key advisory lock (hash of the table and the key,
 * slot number), taken for the transaction without waiting. Rows without a
 * key take none. */
static void key_slot_taken(lq__sql *b, const char *key) {
    const lq_table *t = b->table;
    char label[256], prefix[300], last[LQ__INT_TEXT_SIZE];
    lq__table_label(t, label, sizeof label);
    snprintf(prefix, sizeof prefix, "partition:%s:", label);
    lq__int_text(last, t->partition_limit - 1);
    lq__sql_add(b, " (");
    lq__sql_ident(b, key);
    lq__sql_add(b, " IS NULL OR EXISTS (SELECT 1 FROM generate_series(0, ");
    lq__sql_add(b, last);
    lq__sql_add(b, ") AS \"lq_i\" WHERE pg_try_advisory_xact_lock(hashtext(");
    lq__sql_literal(b, prefix);
    lq__sql_add(b, " || ");
    lq__sql_ident(b, key);
    lq__sql_add(b, "), \"lq_i\")))");
}

/* Row lock with partition_concurrency: the candidates in claim order, each
 * taking a slot of its key as the scan reaches it (OFFSET 0 keeps the try
 * above a sort, so no slot is taken for a row the claim does not reach), and
 * for each the row locked, where no other transaction holds it. A candidate
 * another transaction holds is passed over, and a slot it took stays with
 * this transaction (a lock cannot be given back before the transaction
 * ends): a key may run below its limit while that lasts, never above. */
static int build_key_slot_claim(lq__sql *b) {
    lq__sql_add(b, "SELECT \"lq_row\".* FROM (SELECT ");
    lq__sql_id(b);
    lq__sql_add(b, " AS \"lq_id\", ");
    lq__sql_col(b, LQ_ROLE_PARTITION_KEY);
    lq__sql_add(b, "::text AS \"lq_pkey\"");
    lq__sql_from_claimable(b, false);
    if (b->table->fifo) lq__sql_fifo_head(b, false);
    lq__sql_add(b, " ORDER BY ");
    lq__sql_claim_order(b);
    lq__sql_add(b, " OFFSET 0) AS \"lq_candidates\" CROSS JOIN LATERAL (SELECT ");
    lq__sql_row_columns(b, NULL);
    lq__sql_from_claimable(b, false);
    lq__sql_add(b, " AND ");
    lq__sql_id(b);
    lq__sql_add(b, " = \"lq_candidates\".\"lq_id\" FOR UPDATE SKIP LOCKED) AS \"lq_row\" WHERE");
    key_slot_taken(b, "lq_pkey");
    lq__sql_add(b, " LIMIT ");
    lq__sql_param(b, LQ__P_LIMIT);
    return lq__sql_finish(b);
}

/* Row lock: the claim's transaction holds the row until the settlement. */
static int build_row_lock_claim(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__postgres_dialect, t);
    if (t->partition_limit) return build_key_slot_claim(&b);
    lq__sql_locking_read(&b, false, NULL);
    return lq__sql_finish(&b);
}

/* ", lq_stamped AS (UPDATE ..)": stamps the lease of the rows lq_claimed
 * locked and counts their attempt; `by_array` finds them by an array of
 * their ids, a plan on the primary key whatever the planner guesses of a
 * LIMIT it cannot read before the statement runs. */
static void stamp_leases(lq__sql *b, const lq_table *t, bool by_array) {
    lq__sql_add(b, ", \"lq_stamped\" AS (UPDATE ");
    lq__sql_table(b);
    lq__sql_add(b, " AS \"lq_row\" SET ");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " = ");
    lq__sql_param(b, LQ__P_LEASE);
    if (lq__has(t, LQ_ROLE_ATTEMPT)) {
        lq__sql_add(b, ", ");
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " = \"lq_row\".");
        lq__sql_col(b, LQ_ROLE_ATTEMPT);
        lq__sql_add(b, " + 1");
    }
    lq__sql_add(b, by_array ? " WHERE \"lq_row\"." : " FROM \"lq_claimed\" WHERE \"lq_row\".");
    lq__sql_id(b);
    lq__sql_add(b, by_array ? " = ANY(ARRAY(SELECT \"lq_c0\" FROM \"lq_claimed\")))"
                            : " = \"lq_claimed\".\"lq_c0\")");
}

/* Lease: one statement locks the claimable rows, stamps their lease and
 * counts their attempt, and returns them as they were. */
static int build_lease_claim(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__postgres_dialect, t);
    lq__sql_add(&b, "WITH \"lq_claimed\" AS (");
    lq__sql_locking_read(&b, true, NULL);
    lq__sql_add(&b, ")");
    stamp_leases(&b, t, false);
    lq__sql_add(&b, " SELECT * FROM \"lq_claimed\" ORDER BY ");
    /* The claim order, of the columns the table has: priority, due, id. */
    if (lq__has(t, LQ_ROLE_PRIORITY)) lq__sql_add(&b, "\"lq_c6\", ");
    if (lq__has(t, LQ_ROLE_RETRY_AFTER)) lq__sql_add(&b, "\"lq_c7\", ");
    lq__sql_add(&b, "\"lq_c0\"");
    return lq__sql_finish(&b);
}

static void room_counted(lq__sql *b) { lq__sql_add(b, "(SELECT \"lq_n\" FROM \"lq_room\")"); }

/* The rest of a lease claim that counts something beside its rows, after a
 * first table `counted` of one row, lq_n: the claim (of no more rows than
 * `bound` writes, where given), its stamps, and its rows each with that
 * count one more column, or one row of the count alone where it claims none. */
static void claim_with_count(lq__sql *b, const char *counted, void (*bound)(lq__sql *b), bool by_array) {
    lq__sql_add(b, ", \"lq_claimed\" AS (");
    lq__sql_locking_read(b, true, bound);
    lq__sql_add(b, ")");
    stamp_leases(b, b->table, by_array);
    lq__sql_add(b, " SELECT \"lq_claimed\".*, ");
    lq__sql_ident(b, counted);
    lq__sql_add(b, ".\"lq_n\" FROM ");
    lq__sql_ident(b, counted);
    lq__sql_add(b, " LEFT JOIN \"lq_claimed\" ON true");
}

/* The claim that counts its room itself: sent with the queue's lock and the
 * commit in one round trip, it runs after the lock is taken and so counts
 * what every claim before it committed. Its rows are the claim's, in no
 * order, each with the room it counted as one more column; where it claimed
 * none, one row of that room alone. */
static int pg_build_claim_in_room(lq__stmt *out, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, &lq__postgres_dialect, t);
    lq__sql_add(&b, "WITH \"lq_room\" AS (SELECT ");
    lq__sql_room_left(&b);
    lq__sql_add(&b, " AS \"lq_n\")");
    claim_with_count(&b, "lq_room", room_counted, true);
    return lq__sql_finish(&b);
}

/* The rendered advisory key: concat() reads NULL as ''. */
static void key_expression(lq__sql *b, const lq_table *t) {
    lq__sql_add(b, "concat(''");
    for (size_t i = 0; i < t->key.count; i++) {
        lq__sql_add(b, ", ");
        if (t->key.parts[i].is_column) lq__sql_ident(b, t->key.parts[i].text);
        else lq__sql_literal(b, t->key.parts[i].text);
    }
    lq__sql_add(b, ")");
}

/* "(SELECT <id> AS lq_id, <key> AS lq_key[, <pkey>] FROM t WHERE
 * <claimable> ORDER BY <claim order> OFFSET 0) AS lq_candidates": OFFSET 0
 * keeps a filter on them above the sort, so it is tried on the rows in
 * claim order and only as far as the claim reads. */
static void advisory_candidates(lq__sql *b, const lq_table *t, bool passing) {
    lq__sql_add(b, " FROM (SELECT ");
    lq__sql_id(b);
    lq__sql_add(b, "::bigint AS \"lq_id\", ");
    key_expression(b, t);
    lq__sql_add(b, " AS \"lq_key\"");
    lq__sql_candidate_pkey(b, true);
    lq__sql_from_claimable(b, false);
    lq__sql_candidate_filter(b);
    if (passing) { /* " AND NOT (id = ANY(<the rows passed over>))" */
        lq__sql_add(b, " AND NOT (");
        lq__sql_id(b);
        lq__sql_add(b, " = ANY(");
        lq__sql_param(b, LQ__P_PASSED);
        lq__sql_add(b, "::bigint[]))");
    }
    lq__sql_add(b, " ORDER BY ");
    lq__sql_claim_order(b);
    lq__sql_add(b, " OFFSET 0) AS \"lq_candidates\"");
}

/* "((lq_i + <first>) % <n>)": the slot a try reaches, from the first. */
static void slot_reached(lq__sql *b) {
    lq__sql_add(b, "((\"lq_i\" + ");
    lq__sql_param(b, LQ__P_FIRST_SLOT);
    lq__sql_add(b, "::int) % ");
    lq__sql_param(b, LQ__P_CONCURRENCY);
    lq__sql_add(b, "::int)");
}

/* "<no slot asked for> OR <one taken>". */
static void slot_held(lq__sql *b) {
    lq__sql_param(b, LQ__P_CONCURRENCY);
    lq__sql_add(b, "::int = 0 OR EXISTS (SELECT 1 FROM \"lq_slot\")");
}

static void picked_id(lq__sql *b) { lq__sql_add(b, " = (SELECT \"lq_id\" FROM \"lq_key\")"); }

/* Advisory, one row in one statement, as the claim would take it in three
 * round trips (runtime/forms/advisory.c): lq_slot takes the first free of
 * the LQ__P_CONCURRENCY slots (none asked where that is 0), lq_key then the
 * key of the first candidate whose key no session holds (tried in claim
 * order, and only once a slot is held or none is asked: CASE orders the
 * two), lq_taken counts the attempt of that row if it is still claimable.
 * A row settled since the statement's snapshot is not taken: the UPDATE
 * reads its newest version (the caller tries again past it, LQ__P_PASSED).
 * A slot taken with no key is let go before the statement ends; a key whose
 * row was not taken is the caller's to let go.
 * Returns lq_s, lq_id, lq_key, the release, then the row's columns (NULL
 * where nothing was taken). Session locks: each stays with the connection. */
static int build_advisory_claim_one(lq__stmt *out, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, &lq__postgres_dialect, t);
    lq__sql_add(&b, "WITH \"lq_slot\" AS (SELECT ");
    slot_reached(&b);
    lq__sql_add(&b, " AS \"lq_s\" FROM generate_series(0, ");
    lq__sql_param(&b, LQ__P_CONCURRENCY);
    lq__sql_add(&b, "::int - 1) AS \"lq_i\" WHERE pg_try_advisory_lock(hashtextextended(");
    lq__sql_param(&b, LQ__P_SLOTS);
    lq__sql_add(&b, "::text || ");
    slot_reached(&b);
    lq__sql_add(&b, "::text, 0)) LIMIT 1), \"lq_key\" AS (SELECT \"lq_id\", \"lq_key\"");
    advisory_candidates(&b, t, true);
    /* The first condition, on no column, is one test before the scan, so a
     * claim that got no slot reads no candidate; CASE keeps the key's try
     * behind it whatever order the planner gives the two. */
    lq__sql_add(&b, " WHERE (");
    slot_held(&b);
    lq__sql_add(&b, ") AND CASE WHEN ");
    slot_held(&b);
    lq__sql_add(&b, " THEN pg_try_advisory_lock(hashtextextended(\"lq_key\", 0)) ELSE false END LIMIT 1), "
                    "\"lq_taken\" AS (");
    lq__sql_take_returning(&b, picked_id);
    /* A read (no attempt to count) locks the row, so it too reads the newest
     * version: one settled since the snapshot is not read. */
    if (!lq__has(t, LQ_ROLE_ATTEMPT)) lq__sql_add(&b, " FOR NO KEY UPDATE");
    lq__sql_add(&b, ") SELECT \"lq_slot\".\"lq_s\", \"lq_key\".\"lq_id\", \"lq_key\".\"lq_key\", "
                    "CASE WHEN \"lq_key\".\"lq_id\" IS NULL THEN pg_advisory_unlock(hashtextextended(");
    lq__sql_param(&b, LQ__P_SLOTS);
    lq__sql_add(&b, "::text || \"lq_slot\".\"lq_s\"::text, 0)) END, \"lq_taken\".* FROM (SELECT 1) AS \"lq_one\" "
                    "LEFT JOIN \"lq_slot\" ON true LEFT JOIN \"lq_key\" ON true LEFT JOIN \"lq_taken\" ON true");
    return lq__sql_finish(&b);
}

/* Advisory: candidates whose keys no other session holds (a shared
 * transaction-level try conflicts with another session's lock), then a take
 * per row on the connection that holds its key; where no partition key
 * counts, each row in one statement instead. */
static int build_advisory_claim(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__postgres_dialect, t);
    lq__sql_add(&b, "SELECT \"lq_id\", \"lq_key\"");
    lq__sql_candidate_pkey(&b, false);
    advisory_candidates(&b, t, false);
    lq__sql_add(&b, " WHERE pg_try_advisory_xact_lock_shared(hashtextextended(\"lq_key\", 0)) LIMIT ");
    lq__sql_param(&b, LQ__P_LIMIT);
    int rc = lq__sql_finish(&b);
    if (rc == LQ_OK && lq__table_carries_claims(t)) rc = build_advisory_claim_one(&set->claim_one, t);
    if (rc != LQ_OK) return rc;

    return lq__sql_build_take_returning(&set->take, &lq__postgres_dialect, t);
}

/* FIFO: the claim's transaction first takes a lock on the hash of the table
 * and group, held until it ends, so claims of one group on other brokers take
 * nothing meanwhile. */
static int build_fifo_guard(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->guard, &lq__postgres_dialect, t);
    lq__sql_add(&b, "SELECT pg_try_advisory_xact_lock(hashtextextended(");
    lq__sql_param(&b, LQ__P_GUARD);
    lq__sql_add(&b, ", 0))::int");
    return lq__sql_finish(&b);
}

/* A set comes as a bigint[], which costs the server less to read than JSON
 * elements and timestamp text: ids, or in the lease form pairs of id and
 * token (epoch milliseconds, exact through to_timestamp's microseconds). */
static void pg_held_set_source(lq__sql *b, bool tokens) {
    if (!tokens) {
        lq__sql_add(b, "(SELECT unnest(");
        lq__sql_param(b, LQ__P_HELD_SET);
        lq__sql_add(b, "::bigint[]) AS \"lq_id\")");
        return;
    }
    lq__sql_add(b, "(SELECT \"lq_a\"[2 * \"lq_i\" - 1] AS \"lq_id\", "
                   "to_timestamp(\"lq_a\"[2 * \"lq_i\"] / 1000.0) AS \"lq_held\" FROM (SELECT ");
    lq__sql_param(b, LQ__P_HELD_SET);
    lq__sql_add(b, "::bigint[] AS \"lq_a\") AS \"lq_v\", "
                   "generate_series(1, cardinality(\"lq_a\") / 2) AS \"lq_i\")");
}

/* Where leases are swept (lq_table.leases_swept): the leases run out, up
 * to LQ__SWEEP_MAX, cleared, so that the claims (which read the rows whose
 * lease is NULL) find their rows again; a late settlement of one then finds
 * its token gone, as after another claim. Rows another transaction holds
 * wait for the next sweep. The rows are found by an array of ids, so that
 * even a generic plan reads <table>_leased rather than joining the whole
 * table. */
static void sweep_leases(lq__sql *b) {
    lq__sql_add(b, "UPDATE ");
    lq__sql_table(b);
    lq__sql_add(b, " SET ");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " = NULL WHERE ");
    lq__sql_id(b);
    lq__sql_add(b, " = ANY(ARRAY(SELECT ");
    lq__sql_id(b);
    lq__sql_add(b, " FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " WHERE ");
    lq__sql_col(b, LQ_ROLE_LOCKED_UNTIL);
    lq__sql_add(b, " <= ");
    lq__sql_param(b, LQ__P_LEASE_NOW);
    char limit[48];
    snprintf(limit, sizeof limit, " LIMIT %d FOR UPDATE SKIP LOCKED))", LQ__SWEEP_MAX);
    lq__sql_add(b, limit);
}

/* The sweep on its own, and the lease claim with the sweep before it in
 * one statement, so that an idle subscription sends one statement a poll
 * rather than one more at every sweep. The claim reads the statement's
 * snapshot, without the sweep's changes (the two lock rows apart: leased
 * ones and free ones): the rows swept are the next claim's (forms/lease.c
 * sends it at once). */
static int build_sweeps(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->sweep, &lq__postgres_dialect, t);
    sweep_leases(&b);
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;
    lq__sql_start(&b, &set->claim_swept, &lq__postgres_dialect, t);
    lq__sql_add(&b, "WITH \"lq_swept\" AS (");
    sweep_leases(&b);
    lq__sql_add(&b, " RETURNING 1), \"lq_sweep\" AS (SELECT count(*) AS \"lq_n\" FROM \"lq_swept\")");
    claim_with_count(&b, "lq_sweep", NULL, false);
    return lq__sql_finish(&b);
}

static int pg_build_claims(lq__sqlset *set, const lq_table *t) {
    int rc = t->fifo ? build_fifo_guard(set, t) : LQ_OK;
    if (rc == LQ_OK && t->leases_swept) rc = build_sweeps(set, t);
    if (rc != LQ_OK) return rc;
    switch (lq_table_form(t)) {
    case LQ_FORM_LEASE: return build_lease_claim(set, t);
    case LQ_FORM_ADVISORY: return build_advisory_claim(set, t);
    default: return build_row_lock_claim(set, t);
    }
}

/* Prepares a statement on the connection at its first use; *name is its
 * server-side name, lq_<its id>, which lives as long as the connection. */
static int ensure_prepared(const char **name, lq__conn *c, const lq__stmt *st) {
    if ((*name = lq__cache_find(&c->prepared, st->id))) return LQ_OK;
    char *made = malloc(4 + LQ__INT_TEXT_SIZE);
    if (!made) return lq__error(LQ_NOMEM, "out of memory");
    memcpy(made, "lq_", 3);
    lq__int_text(made + 3, st->id);
    int rc = LQ_OK;
    PGresult *res = finish(c, PQsendPrepare(c->pg, made, st->sql, 0, NULL), &rc);
    if (res && PQresultStatus(res) != PGRES_COMMAND_OK) rc = pg_error(c, res, LQ_SCHEMA, "cannot prepare");
    else if (res) PQclear(res);
    if (rc == LQ_OK) rc = lq__cache_add(&c->prepared, st->id, made);
    if (rc != LQ_OK) {
        free(made);
        return rc;
    }
    *name = made;
    return LQ_OK;
}

/* Through a transaction pooler, the next transaction may find another
 * server session, without the statements this one prepared: a statement is
 * then prepared unnamed, which checks it (its table, its columns) and
 * keeps nothing, and every run sends its text. */
static int pg_prepare(lq__conn *c, const lq__stmt *st) {
    const char *name;
    int rc = not_broken(c);
    if (rc != LQ_OK) return rc;
    if (!c->pooled) return ensure_prepared(&name, c, st);
    PGresult *res = finish(c, PQsendPrepare(c->pg, "", st->sql, 0, NULL), &rc);
    if (res && PQresultStatus(res) != PGRES_COMMAND_OK) return pg_error(c, res, LQ_SCHEMA, "cannot prepare");
    if (res) PQclear(res);
    return rc;
}

/* A big-endian integer of a binary result; written out byte by byte so the
 * compiler turns it into one load and swap. */
static uint64_t read_be64(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (uint64_t)u[0] << 56 | (uint64_t)u[1] << 48 | (uint64_t)u[2] << 40 | (uint64_t)u[3] << 32 |
           (uint64_t)u[4] << 24 | (uint64_t)u[5] << 16 | (uint64_t)u[6] << 8 | u[7];
}

static uint32_t read_be32(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

/* Reads one binary column into a value the core understands. */
static void read_column(lq__value *v, const PGresult *res, int row, int col, char *time_buf) {
    memset(v, 0, sizeof *v);
    if (PQgetisnull(res, row, col)) return;
    const char *p = PQgetvalue(res, row, col);
    int n = PQgetlength(res, row, col);
    switch (PQftype(res, col)) {
    case OID_INT8: v->type = LQ__V_INT; v->i = (int64_t)read_be64(p); break;
    case OID_INT4: v->type = LQ__V_INT; v->i = (int32_t)read_be32(p); break;
    case OID_INT2: v->type = LQ__V_INT; v->i = (int16_t)(((unsigned char)p[0] << 8) | (unsigned char)p[1]); break;
    case OID_BOOL: v->type = LQ__V_INT; v->i = p[0] != 0; break;
    case OID_TIMESTAMP:
    case OID_TIMESTAMPTZ: {
        int64_t ms = (int64_t)read_be64(p) / 1000 + PG_EPOCH_OFFSET_MS;
        lq__time_text(time_buf, ms);
        v->type = LQ__V_TEXT;
        v->p = time_buf;
        v->n = strlen(time_buf);
        break;
    }
    case OID_BYTEA: v->type = LQ__V_BLOB; v->p = p; v->n = (size_t)n; break;
    default: /* text, varchar, json (a cast to text), jsonb after ::text */
        v->type = LQ__V_TEXT;
        v->p = p;
        v->n = (size_t)n;
    }
}

/* The bound values of one statement in libpq's arrays; a statement's own
 * parameters fit in place, a multi-row insert's are allocated. */
typedef struct pg_args {
    const char **values;
    int *lengths, *formats;
    char (*numbers)[32];
    const char *values_in[LQ__MAX_PARAMS];
    int lengths_in[LQ__MAX_PARAMS], formats_in[LQ__MAX_PARAMS];
    char numbers_in[LQ__MAX_PARAMS][32];
    void *block;
} pg_args;

static int pg_args_make(pg_args *a, int count) {
    a->block = NULL;
    a->values = a->values_in;
    a->lengths = a->lengths_in;
    a->formats = a->formats_in;
    a->numbers = a->numbers_in;
    if (count <= LQ__MAX_PARAMS) return LQ_OK;
    size_t n = (size_t)count;
    char *block = malloc(n * (sizeof *a->values + 2 * sizeof(int) + sizeof *a->numbers));
    if (!block) return lq__error(LQ_NOMEM, "out of memory");
    a->block = block;
    a->numbers = (char(*)[32])block;
    a->values = (const char **)(block + n * sizeof *a->numbers);
    a->lengths = (int *)(block + n * (sizeof *a->numbers + sizeof *a->values));
    a->formats = a->lengths + n;
    return LQ_OK;
}

static void pg_args_bind(pg_args *a, int i, const lq__value *v) {
    a->lengths[i] = 0;
    a->formats[i] = 0;
    switch (v->type) {
    case LQ__V_INT:
        lq__int_text(a->numbers[i], v->i);
        a->values[i] = a->numbers[i];
        break;
    case LQ__V_TIME: lq__time_text(a->numbers[i], v->i); a->values[i] = a->numbers[i]; break;
    case LQ__V_TEXT: a->values[i] = v->p; break; /* NUL-terminated: text format */
    case LQ__V_BLOB:
        a->values[i] = v->p ? v->p : "";
        a->lengths[i] = (int)v->n;
        a->formats[i] = 1;
        break;
    default: a->values[i] = NULL;
    }
}

/* Runs a statement of ours to its result (NULL, with *status, on failure):
 * prepared on the connection at first use, or where a caller's own
 * connection keeps no statements of ours (it could not tell our names from
 * its own), a pooler's may lose them, or the statement runs once (id 0),
 * sent as unnamed text. */
static PGresult *run_stmt(lq__conn *c, const lq__stmt *st, int count, const char *const *values,
                          const int *lengths, const int *formats, int result_format, int *status) {
    bool once = c->borrowed || c->pooled || st->id == 0;
    const char *name = NULL;
    if ((*status = not_broken(c)) != LQ_OK) return NULL;
    if (!once && (*status = ensure_prepared(&name, c, st)) != LQ_OK) return NULL;
    int sent = once ? PQsendQueryParams(c->pg, st->sql, count, NULL, values, lengths, formats, result_format)
                    : PQsendQueryPrepared(c->pg, name, count, values, lengths, formats, result_format);
    return finish(c, sent, status);
}

/* Gives each row of a result to on_row (which may be NULL). */
static int read_rows(const PGresult *res, lq__row_fn on_row, void *ctx) {
    int rows = PQntuples(res), cols = PQnfields(res), rc = LQ_OK;
    lq__value row[LQ__COL_COUNT + 8]; /* a row, and the columns a claim adds (sqlset.claim_one: 4) */
    char times[LQ__COL_COUNT + 8][LQ__TIME_TEXT_SIZE];
    if (cols > (int)(sizeof row / sizeof row[0])) cols = (int)(sizeof row / sizeof row[0]);
    for (int r = 0; r < rows && rc == LQ_OK && on_row; r++) {
        for (int i = 0; i < cols; i++) read_column(&row[i], res, r, i, times[i]);
        rc = on_row(ctx, row, cols);
    }
    return rc;
}

static int pg_exec(int64_t *changes, lq__conn *c, const lq__stmt *st, const lq__value *args,
                   lq__row_fn on_row, void *ctx) {
    int count = lq__stmt_values(st);
    pg_args a;
    int rc = pg_args_make(&a, count);
    if (rc != LQ_OK) return rc;
    for (int i = 0; i < count; i++) pg_args_bind(&a, i, lq__stmt_arg(st, args, i));
    PGresult *res = run_stmt(c, st, count, a.values, a.lengths, a.formats, 1, &rc);
    free(a.block);
    if (!res) return rc;
    ExecStatusType status = PQresultStatus(res);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK)
        return pg_error(c, res, LQ_BACKEND, "a statement failed");
    if (changes) *changes = atoll(PQcmdTuples(res));
    rc = read_rows(res, on_row, ctx);
    PQclear(res);
    return rc;
}

static int pg_execute(int64_t *changes, lq__conn *c, const char *sql, const char *const *params,
                      int count) {
    int rc = not_broken(c);
    if (rc != LQ_OK) return rc;
    PGresult *res = finish(c, PQsendQueryParams(c->pg, sql, count, NULL, params, NULL, NULL, 0), &rc);
    if (!res) return rc;
    ExecStatusType status = PQresultStatus(res);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK)
        return pg_error(c, res, LQ_BACKEND, "the statement failed");
    if (changes) *changes = atoll(PQcmdTuples(res));
    PQclear(res);
    return LQ_OK;
}

/* A statement of ours with no parameters (BEGIN, COMMIT, LISTEN): the
 * simple protocol sends it in one message, where the extended one takes a
 * parse, bind, describe, execute and sync. */
static int run_plain(lq__conn *c, const char *sql) {
    int rc = not_broken(c);
    if (rc != LQ_OK) return rc;
    PGresult *res = finish(c, PQsendQuery(c->pg, sql), &rc);
    if (!res) return rc;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) return pg_error(c, res, LQ_BACKEND, "the statement failed");
    PQclear(res);
    return LQ_OK;
}

static int pg_begin(lq__conn *c, int isolation) {
    switch (isolation) {
    case LQ_ISOLATION_READ_COMMITTED: return run_plain(c, "BEGIN ISOLATION LEVEL READ COMMITTED");
    case LQ_ISOLATION_REPEATABLE_READ: return run_plain(c, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    case LQ_ISOLATION_SERIALIZABLE: return run_plain(c, "BEGIN ISOLATION LEVEL SERIALIZABLE");
    default: return run_plain(c, "BEGIN");
    }
}

static int pg_commit(lq__conn *c) { return run_plain(c, "COMMIT"); }

/* COMMIT AND CHAIN came with PostgreSQL 12; before it, a plain commit. */
static int pg_commit_chain(bool *chained, lq__conn *c) {
    *chained = false;
    if (PQserverVersion(c->pg) < 120000) return pg_commit(c);
    int rc = run_plain(c, "COMMIT AND CHAIN");
    *chained = rc == LQ_OK && PQtransactionStatus(c->pg) == PQTRANS_INTRANS;
    return rc;
}

/* A broken connection's transaction ends with its session, when the pool
 * closes it: nothing to send, and the failure that broke it stays the
 * thread's error. */
static int pg_rollback(lq__conn *c) {
    if (c->broken || PQtransactionStatus(c->pg) == PQTRANS_IDLE) return LQ_OK;
    return run_plain(c, "ROLLBACK");
}

static int pg_notify(lq__conn *c, const char *channel, const char *payload) {
    const char *params[2] = {channel, payload};
    return pg_execute(NULL, c, "SELECT pg_notify($1, $2)", params, 2);
}

static void pg_notify_call(lq__sql *b) {
    lq__sql_add(b, "pg_notify(");
    lq__sql_param(b, LQ__P_CHANNEL);
    lq__sql_add(b, ", COALESCE(");
    lq__sql_param(b, LQ__P_MSG_GROUP);
    lq__sql_add(b, ", ''))");
}

static int pg_listen(lq__conn *c, const char *channel) {
    lq__strbuf sb = {0};
    lq__sb_add(&sb, "LISTEN ");
    lq__sb_add_quoted(&sb, channel, '"');
    char *sql = lq__sb_take(&sb);
    if (!sql) return lq__error(LQ_NOMEM, "out of memory");
    int rc = run_plain(c, sql);
    free(sql);
    return rc;
}

static int pg_wait_notes(lq__conn *c, int64_t timeout_ms,
                         void (*on_note)(void *ctx, const char *channel, const char *payload),
                         void *ctx) {
    struct pollfd pfd = {.fd = PQsocket(c->pg), .events = POLLIN};
    if (pfd.fd < 0) return pg_error(c, NULL, LQ_CONNECT, "the LISTEN connection is closed");
    int ready = poll(&pfd, 1, (int)timeout_ms);
    if (ready < 0) return LQ_OK; /* interrupted: the caller waits again */
    if (ready > 0 && !PQconsumeInput(c->pg)) return pg_error(c, NULL, LQ_CONNECT, "LISTEN");
    PGnotify *note;
    while ((note = PQnotifies(c->pg))) {
        on_note(ctx, note->relname, note->extra);
        PQfreemem(note);
    }
    return PQstatus(c->pg) == CONNECTION_OK ? LQ_OK : pg_error(c, NULL, LQ_CONNECT, "LISTEN");
}

/* The advisory lock calls, prepared on a connection at first use like the
 * statements of a subscription: negative ids, which no built statement has. */
static const lq__stmt try_lock_stmt = {.sql = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", .id = -1};
static const lq__stmt unlock_stmt = {.sql = "SELECT pg_advisory_unlock(hashtextextended($1, 0))", .id = -2};
/* A queue-wide limit's lock waits, and ends with the claim's transaction.
 * The wait ends before the statement's deadline (a second before, or at
 * half a deadline of two seconds or less) as LQ_CONTENTION (55P03), so the
 * claim backs off rather than fails: lock_timeout, for this transaction,
 * set before the lock is asked for (the lock's key reads the setting's
 * result, an empty string, so the setting comes first). */
static const lq__stmt lock_queue_stmt = {
    .sql = "SELECT true FROM (SELECT set_config('lock_timeout', $2, true) AS \"s\") AS \"lq_wait\", "
           "LATERAL pg_advisory_xact_lock(hashtextextended($1 || left(\"lq_wait\".\"s\", 0), 0))",
    .id = -3};

/* A 0/1 answer from an advisory lock function. */
static int lock_call(bool *result, lq__conn *c, const lq__stmt *st, const char *key) {
    const char *params[1] = {key};
    int rc = LQ_OK;
    PGresult *res = run_stmt(c, st, 1, params, NULL, NULL, 0, &rc);
    if (!res) return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return pg_error(c, res, LQ_BACKEND, "an advisory lock call failed");
    *result = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    return LQ_OK;
}

static int pg_try_lock_key(bool *taken, lq__conn *c, const lq__broker_target *target, const char *key) {
    (void)target;
    return lock_call(taken, c, &try_lock_stmt, key);
}

static bool pg_unlock_key(lq__conn *c, const lq__broker_target *target, const char *key) {
    (void)target;
    bool released = false;
    if (!c || lock_call(&released, c, &unlock_stmt, key) != LQ_OK)
        return false;
    return released;
}

/* The tries stop at the first key taken (the LIMIT), so no other is held;
 * `then` is tried once, on that one row (a subquery with a LIMIT is not
 * merged into the query around it), and a NULL one gives NULL. */
static const lq__stmt try_lock_any_stmt = {
    .sql = "SELECT \"lq_slot\", pg_try_advisory_lock(hashtextextended($4, 0)) FROM "
           "(SELECT (\"lq_i\" + $3::int) % $2::int AS \"lq_slot\" FROM generate_series(0, $2::int - 1) AS \"lq_i\" "
           "WHERE pg_try_advisory_lock(hashtextextended($1 || ((\"lq_i\" + $3::int) % $2::int)::text, 0)) "
           "LIMIT 1) AS \"lq_first\"",
    .id = -5};
/* Every release is asked for (a column each, where an AND would stop at
 * the first false); a NULL key gives NULL, as the functions are strict. */
static const lq__stmt unlock_keys_stmt = {
    .sql = "SELECT pg_advisory_unlock(hashtextextended($1, 0)), pg_advisory_unlock(hashtextextended($2, 0)), "
           "pg_advisory_unlock(hashtextextended($3, 0))",
    .id = -6};

static int pg_try_lock_any(int *taken, bool *then_taken, lq__conn *c, const char *prefix, int n, int first,
                           const char *then) {
    char n_text[16], first_text[16];
    snprintf(n_text, sizeof n_text, "%d", n);
    snprintf(first_text, sizeof first_text, "%d", first);
    const char *params[4] = {prefix, n_text, first_text, then};
    int rc = LQ_OK;
    *taken = -1;
    *then_taken = false;
    PGresult *res = run_stmt(c, &try_lock_any_stmt, 4, params, NULL, NULL, 0, &rc);
    if (!res) return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) > 1)
        return pg_error(c, res, LQ_BACKEND, "an advisory lock call failed");
    if (PQntuples(res) == 1) {
        *taken = atoi(PQgetvalue(res, 0, 0));
        *then_taken = !PQgetisnull(res, 0, 1) && PQgetvalue(res, 0, 1)[0] == 't';
    }
    PQclear(res);
    return LQ_OK;
}

static bool pg_unlock_keys(lq__conn *c, const char *const keys[3]) {
    int rc = LQ_OK;
    if (!c) return false;
    PGresult *res = run_stmt(c, &unlock_keys_stmt, 3, keys, NULL, NULL, 0, &rc);
    if (!res) return false;
    bool confirmed = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
    for (int i = 0; confirmed && i < 3; i++)
        confirmed = PQgetisnull(res, 0, i) || PQgetvalue(res, 0, i)[0] == 't';
    PQclear(res);
    return confirmed;
}

/* A slot is the two-key advisory lock (hash of the queue, slot number), a
 * space apart from the one-key locks of the advisory form. The LIMIT stops
 * the tries once `want` are taken. */
static const lq__stmt take_slots_stmt = {
    .sql = "SELECT count(*) FROM (SELECT 1 FROM generate_series(0, $2::int - 1) AS \"lq_i\" "
           "WHERE pg_try_advisory_xact_lock(hashtext($1), \"lq_i\") LIMIT $3::int) AS \"lq_slots\"",
    .id = -4};

static int pg_take_slots(int *taken, lq__conn *c, const char *key, int limit, int want) {
    char limit_text[16], want_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    snprintf(want_text, sizeof want_text, "%d", want);
    const char *params[3] = {key, limit_text, want_text};
    int rc = LQ_OK;
    *taken = 0;
    PGresult *res = run_stmt(c, &take_slots_stmt, 3, params, NULL, NULL, 0, &rc);
    if (!res) return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return pg_error(c, res, LQ_BACKEND, "a queue's slots could not be counted");
    *taken = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    return LQ_OK;
}

/* lock_timeout for the queue's lock: a second before the statement's
 * deadline, or half a deadline of two seconds or less. */
/* The lock wait: a second short of the statement's deadline, or `most`
 * where that is shorter (0: no such bound). */
static void lock_wait_text(const lq__conn *c, int64_t most, char out[32]) {
    int64_t statement_ms = c->deadline_ms - 2000;
    int64_t wait = statement_ms > 2000 ? statement_ms - 1000 : statement_ms / 2;
    if (most > 0 && most < wait) wait = most;
    snprintf(out, 32, "%lld", (long long)(wait > 0 ? wait : 1)); /* 0 would wait without end */
}

static int pg_lock_queue(lq__conn *c, const char *key) {
    char wait[32];
    lock_wait_text(c, 0, wait);
    const char *params[2] = {key, wait};
    int rc = LQ_OK;
    PGresult *res = run_stmt(c, &lock_queue_stmt, 2, params, NULL, NULL, 0, &rc);
    if (!res) return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        return pg_error(c, res, LQ_BACKEND, "a queue's lock could not be taken");
    PQclear(res);
    return LQ_OK;
}

/* ---- pipelines: a limited claim's transaction in one or two round trips ---- */
#ifdef LIBPQ_HAS_PIPELINING /* libpq 14 and later; before it, one statement at a time */

/* One statement of a pipeline: text without parameters (BEGIN, COMMIT), a
 * statement of the dialect's own with text values, or the core's with its
 * arguments; its rows, in binary as read_rows reads them, go to on_row. */
typedef struct pg_piece {
    const char *text;
    const lq__stmt *stmt;
    const char *const *params;
    int nparams;
    const lq__value *args;
    lq__row_fn on_row;
    void *ctx;
    bool *done; /* set when the server ran it (may be NULL) */
    int64_t *changes; /* the rows it changed (may be NULL) */
    bool own_tx; /* a sync ends its implicit transaction: the pieces after it run whatever it did */
    int *own_rc; /* where not NULL, its result (the last piece's, after a sync): not the pipeline's;
                  * sent with its text, as a statement it cannot prepare must fail alone */
} pg_piece;

/* The most steps a pipeline of the core's takes, past its BEGIN, lock or COMMIT. */
#define PG_PIPE_STEPS 4

/* A statement's name on the server, where it is prepared there (prepare
 * comes before the pipeline: its answer is awaited on its own). */
static int piece_name(const char **name, lq__conn *c, const lq__stmt *st) {
    *name = NULL;
    if (!st || c->borrowed || c->pooled || st->id == 0) return LQ_OK;
    return ensure_prepared(name, c, st);
}

/* LQ_OK once queued for sending; LQ_NOMEM, or LQ_BACKEND (libpq's message). */
static int send_piece(lq__conn *c, const pg_piece *p, const char *name) {
    if (p->text) return PQsendQueryParams(c->pg, p->text, 0, NULL, NULL, NULL, NULL, 0) ? LQ_OK : LQ_BACKEND;
    const lq__stmt *st = p->stmt;
    int sent;
    if (p->params) {
        sent = name ? PQsendQueryPrepared(c->pg, name, p->nparams, p->params, NULL, NULL, 1)
                    : PQsendQueryParams(c->pg, st->sql, p->nparams, NULL, p->params, NULL, NULL, 1);
        return sent ? LQ_OK : LQ_BACKEND;
    }
    int count = lq__stmt_values(st);
    pg_args a;
    int rc = pg_args_make(&a, count);
    if (rc != LQ_OK) return rc;
    for (int i = 0; i < count; i++) pg_args_bind(&a, i, lq__stmt_arg(st, p->args, i));
    sent = name ? PQsendQueryPrepared(c->pg, name, count, a.values, a.lengths, a.formats, 1)
                : PQsendQueryParams(c->pg, st->sql, count, NULL, a.values, a.lengths, a.formats, 1);
    free(a.block);
    return sent ? LQ_OK : LQ_BACKEND;
}

/* Until a result can be read without blocking, within the deadline. */
static int await_ready(lq__conn *c, int64_t *deadline) {
    while (PQisBusy(c->pg)) {
        if (!wait_socket(c, POLLIN, deadline)) return no_answer(c);
        if (!PQconsumeInput(c->pg)) {
            c->broken = true;
            return pg_error(c, NULL, LQ_CONNECT, "the connection failed");
        }
    }
    return LQ_OK;
}

/* Reads one statement's answer: its result, then the NULL that ends it.
 * `*first` keeps the first failure of the pipeline; after it the server
 * skips the statements (PGRES_PIPELINE_ABORTED), which are only read. */
static int read_piece(int *first, lq__conn *c, const pg_piece *p, int64_t *deadline) {
    int rc = await_ready(c, deadline);
    PGresult *res = rc == LQ_OK ? PQgetResult(c->pg) : NULL;
    if (rc == LQ_OK && !res) {
        c->broken = true;
        return pg_error(c, NULL, LQ_CONNECT, "a pipeline's answer is missing");
    }
    if (rc != LQ_OK) return rc;
    ExecStatusType status = PQresultStatus(res);
    bool ran = status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK;
    if (p->done) *p->done = ran;
    if (p->changes && ran) *p->changes = atoll(PQcmdTuples(res));
    if (*first != LQ_OK || status == PGRES_PIPELINE_ABORTED) {
        PQclear(res);
    } else if (ran) {
        *first = read_rows(res, p->on_row, p->ctx);
        PQclear(res);
    } else {
        *first = pg_error(c, res, LQ_BACKEND, "a statement failed");
    }
    rc = await_ready(c, deadline);
    if (rc == LQ_OK && (res = PQgetResult(c->pg))) {
        PQclear(res);
        c->broken = true;
        return pg_error(c, NULL, LQ_CONNECT, "a pipeline's answer has more than it should");
    }
    return rc;
}

/* Reads a sync's answer, and leaves pipeline mode after the last one. */
static int read_sync(lq__conn *c, bool last) {
    int64_t deadline = 0;
    PGresult *sync = NULL;
    int rc = await_ready(c, &deadline);
    if (rc == LQ_OK) sync = PQgetResult(c->pg);
    if (rc == LQ_OK && (!sync || PQresultStatus(sync) != PGRES_PIPELINE_SYNC || (last && !PQexitPipelineMode(c->pg)))) {
        c->broken = true;
        rc = pg_error(c, NULL, LQ_CONNECT, "a pipeline did not end as sent");
    }
    if (sync) PQclear(sync);
    return rc;
}

/* Sends every piece, then a sync, at once, and reads the answers in order:
 * one round trip. The first failure is the result; the server skips what
 * follows it up to the sync, and a transaction it was in stays open, failed,
 * for the caller's rollback. */
static int run_pieces(lq__conn *c, const pg_piece *pieces, int count) {
    const char *names[PG_PIPE_STEPS + 3];
    int rc = not_broken(c);
    for (int i = 0; rc == LQ_OK && i < count; i++)
        rc = piece_name(&names[i], c, pieces[i].own_rc ? NULL : pieces[i].stmt);
    if (rc != LQ_OK) return rc;
    if (!PQenterPipelineMode(c->pg)) return pg_error(c, NULL, LQ_BACKEND, "cannot start a pipeline");
    for (int i = 0; rc == LQ_OK && i < count; i++) {
        rc = send_piece(c, &pieces[i], names[i]);
        if (rc == LQ_OK && pieces[i].own_tx && i < count - 1 && !PQpipelineSync(c->pg)) rc = LQ_BACKEND;
    }
    if (rc == LQ_OK && !PQpipelineSync(c->pg)) rc = LQ_BACKEND;
    if (rc != LQ_OK) {
        c->broken = true; /* what was sent of it is unknown: the pool closes it */
        return rc == LQ_NOMEM ? rc : pg_error(c, NULL, LQ_BACKEND, "cannot send a pipeline");
    }
    int64_t deadline = 0;
    int flushed;
    while ((flushed = PQflush(c->pg)) == 1) {
        if (!wait_socket(c, POLLIN | POLLOUT, &deadline)) return no_answer(c);
        if (!PQconsumeInput(c->pg)) flushed = -1;
    }
    if (flushed < 0) {
        c->broken = true;
        return pg_error(c, NULL, LQ_CONNECT, "the connection failed");
    }
    /* Each statement has the connection's deadline of its own, as when sent
     * alone: the server's statement_timeout is per statement too. A failure
     * skips the statements up to the next sync (`failed`, within it). */
    int first = LQ_OK, failed = LQ_OK;
    lq__error_copy first_error = {0}; /* what later failures (after a sync) would say over */
    for (int i = 0; rc == LQ_OK && i < count; i++) {
        deadline = 0;
        int *into = pieces[i].own_rc ? pieces[i].own_rc : &failed;
        rc = read_piece(into, c, &pieces[i], &deadline);
        if (first == LQ_OK && failed != LQ_OK) {
            first = failed;
            lq__error_save(&first_error);
        }
        if (rc == LQ_OK && pieces[i].own_tx && i < count - 1) {
            rc = read_sync(c, false);
            failed = LQ_OK;
        }
    }
    if (rc == LQ_OK) rc = read_sync(c, true);
    if (rc == LQ_OK && first != LQ_OK) lq__error_restore(&first_error);
    return rc != LQ_OK ? rc : first;
}

/* The pieces of the core's steps, after `at` pieces of the dialect's. */
static int add_steps(pg_piece *pieces, int at, const lq__step *steps, int count) {
    if (count > PG_PIPE_STEPS) return lq__error(LQ_ERROR, "postgresql: a pipeline of %d steps", count);
    for (int i = 0; i < count; i++)
        pieces[at + i] = (pg_piece){.stmt = steps[i].stmt, .args = steps[i].args,
                                    .on_row = steps[i].on_row, .ctx = steps[i].ctx,
                                    .changes = steps[i].changes};
    return LQ_OK;
}

static int pg_begin_locked(lq__conn *c, const char *key, int64_t wait_ms, const lq__step *steps,
                           int count, bool *committed) {
    pg_piece pieces[PG_PIPE_STEPS + 3];
    char wait[32];
    lock_wait_text(c, wait_ms, wait);
    const char *params[2] = {key, wait};
    pieces[0] = (pg_piece){.text = "BEGIN ISOLATION LEVEL READ COMMITTED"};
    pieces[1] = (pg_piece){.stmt = &lock_queue_stmt, .params = params, .nparams = 2};
    int rc = add_steps(pieces, 2, steps, count);
    if (rc != LQ_OK) return rc;
    int n = count + 2;
    if (committed) {
        *committed = false;
        pieces[n++] = (pg_piece){.text = "COMMIT", .done = committed};
    }
    return run_pieces(c, pieces, n);
}

static int pg_exec_commit(bool *committed, lq__conn *c, const lq__step *steps, int count) {
    pg_piece pieces[PG_PIPE_STEPS + 1];
    *committed = false;
    int rc = add_steps(pieces, 0, steps, count);
    if (rc != LQ_OK) return rc;
    pieces[count] = (pg_piece){.text = "COMMIT", .done = committed};
    return run_pieces(c, pieces, count + 1);
}

/* One sync at the end: the steps run in the implicit transaction it ends,
 * which commits them all at once or, after a failure, none. */
static int pg_exec_together(bool *committed, lq__conn *c, const lq__step *steps, int count) {
    pg_piece pieces[PG_PIPE_STEPS];
    int rc = add_steps(pieces, 0, steps, count);
    if (rc == LQ_OK) rc = run_pieces(c, pieces, count);
    *committed = rc == LQ_OK;
    return rc;
}

static int on_unlocked(void *arg, const lq__value *cols, int count) {
    bool *confirmed = arg;
    *confirmed = count == 3;
    for (int i = 0; i < count; i++)
        if (cols[i].type != LQ__V_NULL && !lq__value_int(&cols[i])) *confirmed = false;
    return LQ_OK;
}

/* The steps commit before the keys go: no claim can take a key while its
 * row is as it was before. A failed step leaves the transaction aborted
 * through the sync, so the release after it fails too and the keys stay
 * held (the caller ends the session). */
static int pg_exec_unlock(bool *committed, bool *confirmed, lq__conn *c, const lq__step *steps,
                          int count, const char *const keys[3], const lq__step *after, int *after_rc) {
    pg_piece pieces[PG_PIPE_STEPS + 3];
    *committed = *confirmed = false;
    if (after) *after_rc = LQ_BACKEND; /* until it has run */
    if (count > PG_PIPE_STEPS - (after != NULL))
        return lq__error(LQ_ERROR, "postgresql: a pipeline of %d steps", count + (after != NULL));
    pieces[0] = (pg_piece){.text = "BEGIN ISOLATION LEVEL READ COMMITTED"};
    int rc = add_steps(pieces, 1, steps, count);
    if (rc != LQ_OK) return rc;
    int n = count + 1;
    pieces[n++] = (pg_piece){.text = "COMMIT", .done = committed, .own_tx = true};
    pieces[n++] = (pg_piece){.stmt = &unlock_keys_stmt, .params = keys, .nparams = 3,
                             .on_row = on_unlocked, .ctx = confirmed, .own_tx = after != NULL};
    bool after_ran = false;
    if (after) {
        *after_rc = LQ_OK;
        pieces[n++] = (pg_piece){.stmt = after->stmt, .args = after->args, .on_row = after->on_row,
                                 .ctx = after->ctx, .changes = after->changes, .done = &after_ran,
                                 .own_rc = after_rc};
    }
    rc = run_pieces(c, pieces, n);
    if (after && !after_ran && *after_rc == LQ_OK) *after_rc = rc != LQ_OK ? rc : LQ_BACKEND; /* never read */
    return rc;
}
#endif

/* ---- tables ---- */

static const lq__ddl_types pg_ddl = {
    .id_generated = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    .id_plain = "BIGINT PRIMARY KEY",
    .bytes = "BYTEA NOT NULL DEFAULT ''",
    .integer = "INTEGER NOT NULL DEFAULT",
    .time = "TIMESTAMPTZ",
    .time_due = "TIMESTAMPTZ NOT NULL DEFAULT now()",
    .text = "TEXT",
    .key_text = "TEXT",
    .json = "JSONB",
    .partial_index = true,
    .concurrent_index = true,
};

static void pg_schema_query(lq__sql *b) {
    lq__sql_add(b, "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = ");
    lq__sql_param(b, LQ__P_SCHEMA);
}

/* The table an unqualified name resolves to is the first on the search path
 * (pg_table_is_visible), as in the statements that use it. */
/* " c.relname = <LQ__P_NAME> AND <c in LQ__P_SCHEMA, or visible>" for
 * pg_class c and pg_namespace n: the relation an unqualified name resolves
 * to is the first on the search path, as in every statement that names it. */
static void pg_named_table(lq__sql *b) {
    lq__sql_add(b, " c.relname = ");
    lq__sql_param(b, LQ__P_NAME);
    lq__sql_add(b, " AND CASE WHEN ");
    lq__sql_param(b, LQ__P_SCHEMA);
    lq__sql_add(b, "::text IS NULL THEN pg_catalog.pg_table_is_visible(c.oid) ELSE n.nspname = ");
    lq__sql_param(b, LQ__P_SCHEMA);
    lq__sql_add(b, " END");
}

static void pg_columns_query(lq__sql *b) {
    lq__sql_add(b, "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, NULL) "
                   "FROM pg_catalog.pg_attribute a "
                   "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
                   "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND");
    pg_named_table(b);
    lq__sql_add(b, " ORDER BY a.attnum");
}

/* Materialized views too: neither takes a queue's updates. */
static void pg_view_query(lq__sql *b) {
    lq__sql_add(b, "SELECT 1 FROM pg_catalog.pg_class c "
                   "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE c.relkind IN ('v', 'm') AND");
    pg_named_table(b);
}

static void pg_index_query(lq__sql *b, const char *index) {
    lq__sql_add(b, "SELECT 1 FROM pg_catalog.pg_index x "
                   "JOIN pg_catalog.pg_class c ON c.oid = x.indrelid "
                   "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                   "JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid "
                   "WHERE x.indisvalid AND i.relname = ");
    lq__sql_literal(b, index);
    lq__sql_add(b, " AND");
    pg_named_table(b);
}

/* jsonb has no octet_length of its own: its text's. */
static void pg_byte_length(lq__sql *b, int role) {
    lq__sql_add(b, "octet_length(");
    lq__sql_col(b, role);
    lq__sql_add(b, role == LQ_ROLE_HEADERS ? "::text)" : ")");
}

static bool type_is(const char *type, const char *const *names) {
    for (; *names; names++)
        if (strcmp(type, *names) == 0) return true;
    return false;
}

static unsigned pg_type_kinds(const char *type) {
    static const char *const integers[] = {"smallint", "integer", "bigint", NULL};
    static const char *const texts[] = {"text", "character varying", "character", "citext", NULL};
    static const char *const times[] = {"timestamp with time zone", "timestamp without time zone", NULL};
    static const char *const jsons[] = {"json", "jsonb", NULL};
    if (type_is(type, integers)) return LQ__KIND_INTEGER;
    if (type_is(type, texts)) return LQ__KIND_TEXT;
    if (type_is(type, times)) return LQ__KIND_TIME;
    if (type_is(type, jsons)) return LQ__KIND_JSON;
    if (strcmp(type, "bytea") == 0) return LQ__KIND_BYTES;
    return 0;
}

/* Concurrent CREATE TABLE IF NOT EXISTS of one name can fail on the catalog's
 * unique index: creators take turns on a transaction lock. */
static void pg_ddl_lock_query(lq__sql *b) {
    lq__sql_add(b, "SELECT pg_advisory_xact_lock(hashtext(");
    lq__sql_param(b, LQ__P_NAME);
    lq__sql_add(b, "))");
}

static void pg_now_ms_sql(lq__sql *b) {
    lq__sql_add(b, "(extract(epoch from clock_timestamp()) * 1000)::bigint");
}

static void pg_advisory_key(lq__sql *b) { key_expression(b, b->table); }

const lq__dialect lq__postgres_dialect = {
    .name = "postgresql",
    .max_name = 63, /* NAMEDATALEN - 1 */
    .forms = (1u << LQ_FORM_ROW_LOCK) | (1u << LQ_FORM_LEASE) | (1u << LQ_FORM_ADVISORY),
    .single_writer = false,
    .advisory_holds_connection = true,
    .whole_second_leases = false,
    .listen_notify = true,
    .transaction_pooling = true,
    .claim_writes_lease = true,
    .insert_returning = true,
    .row_address = "ctid",
    .on_conflict_do_nothing = true,
    .max_params = 65535, /* the protocol's 16-bit parameter count */
    .parse_url = pg_parse_url,
    .connect = pg_connect,
    .disconnect = pg_disconnect,
    .reusable = pg_reusable,
    .closed_while_idle = pg_closed_while_idle,
    .check_version = pg_check_version,
    .quote = '"',
    .placeholder = pg_placeholder,
    .rendered_placeholder = pg_placeholder,
    .rendered_time_text = lq__time_text,
    .row_casts = {[LQ__COL_ID] = "::bigint", [LQ__COL_ATTEMPT] = "::bigint",
                  [LQ__COL_GROUP] = "::text", [LQ__COL_PKEY] = "::text",
                  [LQ__COL_HEADERS] = "::text", [LQ__COL_PRIORITY] = "::bigint",
                  [LQ__COL_PAYLOAD_SIZE] = "::bigint", [LQ__COL_HEADERS_SIZE] = "::bigint",
                  [LQ__COL_EXPIRED] = "::bigint"},
    .build_claims = pg_build_claims,
    .build_claim_in_room = pg_build_claim_in_room,
    .held_set_source = pg_held_set_source,
    .held_set_array = true,
    .prepare = pg_prepare,
    .exec = pg_exec,
    .execute = pg_execute,
    .borrow = pg_borrow,
    .release_borrowed = pg_disconnect,
    .begin = pg_begin,
    .commit = pg_commit,
    .commit_chain = pg_commit_chain,
    .rollback = pg_rollback,
    .notify = pg_notify,
    .notify_call = pg_notify_call,
    .listen = pg_listen,
    .wait_notes = pg_wait_notes,
    .ddl = &pg_ddl,
    .schema_query = pg_schema_query,
    .columns_query = pg_columns_query,
    .view_query = pg_view_query,
    .index_query = pg_index_query,
    .type_kinds = pg_type_kinds,
    .byte_length = pg_byte_length,
    .ddl_lock_query = pg_ddl_lock_query,
    .now_ms_sql = pg_now_ms_sql,
    .lock_queue = pg_lock_queue,
#ifdef LIBPQ_HAS_PIPELINING
    .begin_locked = pg_begin_locked,
    .exec_commit = pg_exec_commit,
    .exec_together = pg_exec_together,
    .exec_unlock = pg_exec_unlock,
#endif
    .take_slots = pg_take_slots,
    .row_lock_key_slots = true,
    .advisory_key = pg_advisory_key,
    .try_lock_key = pg_try_lock_key,
    .unlock_key = pg_unlock_key,
    .try_lock_any = pg_try_lock_any,
    .unlock_keys = pg_unlock_keys,
};
