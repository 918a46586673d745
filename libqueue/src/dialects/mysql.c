/* The MySQL and MariaDB dialect, over MariaDB Connector/C (libmariadb): every
 * form, on MySQL 8.0.1 and MariaDB 10.6 or later (FOR UPDATE SKIP LOCKED).
 *
 * A connection runs its session in UTC (time_zone '+00:00', so DATETIME and
 * TIMESTAMP columns both hold UTC), at READ COMMITTED, with utf8mb4, strict
 * writes, a server-side statement deadline and lock wait timeout, and client
 * read and write timeouts past them, so a server that stops answering becomes
 * an error, not a hang. Statements are prepared once per connection and run
 * with the binary protocol; identifiers are quoted with backticks.
 *
 * The lease claim is a locking read (SELECT .. FOR UPDATE SKIP LOCKED) that
 * the core follows with one stamp per row in the same READ COMMITTED
 * transaction; lease expiries fall on whole seconds, so a DATETIME without
 * fractions holds the token exactly. Advisory keys are GET_LOCK names: the
 * database's name and the rendered key, replaced by its SHA-256 when longer
 * than GET_LOCK's 64 characters. */
#include "base/clock.h"
#include "base/hash.h"
#include "sql/dialect.h"
#include "base/redact.h"
#include "sql/stmt_cache.h"

#include <errno.h>
#include <mysql.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MYSQL_FLOOR 80001   /* 8.0.1: SKIP LOCKED */
#define MARIADB_FLOOR 100600 /* 10.6: SKIP LOCKED */
#define NAME_LIMIT 64       /* characters in an identifier and in a GET_LOCK name */

/* Statements of the dialect's own, cached beside the core's (whose ids are
 * positive). */
enum { STMT_LOCK_KEY = -1, STMT_UNLOCK_KEY = -2, STMT_LOCK_QUEUE = -3, STMT_UNLOCK_QUEUE = -4,
       STMT_UNLOCK_KEYS = -5 };

/* ------------------------------------------------------------------------ */
/* The connector's per-process and per-thread initialisation. */

static pthread_once_t library_once = PTHREAD_ONCE_INIT;
static pthread_key_t thread_key;
static int library_failed;
static _Thread_local bool thread_ready;

static void thread_end(void *unused) {
    (void)unused;
    mysql_thread_end();
}

static bool library_started;

static void library_init(void) {
    library_failed = mysql_library_init(0, NULL, NULL) != 0;
    if (!library_failed) library_failed = pthread_key_create(&thread_key, thread_end) != 0;
    library_started = !library_failed;
}

/* When libqueue unloads or the process exits: what the connector holds for
 * this thread (the main thread runs no key destructor) and for the process
 * goes back. */
__attribute__((destructor)) static void library_end(void) {
    if (thread_ready) {
        mysql_thread_end();
        thread_ready = false;
    }
    if (library_started) mysql_library_end();
}

/* Every entry point that calls the connector runs this first: the library
 * once, then mysql_thread_init on each thread that uses a connection, ended
 * by the key's destructor when the thread exits. */
static int ensure_thread(void) {
    pthread_once(&library_once, library_init);
    if (library_failed)
        return lq__error(LQ_ERROR, "mysql: the client library failed to initialise");
    if (!thread_ready) {
        if (mysql_thread_init() != 0)
            return lq__error(LQ_ERROR, "mysql: the client library failed to initialise a thread");
        pthread_setspecific(thread_key, (void *)1);
        thread_ready = true;
    }
    return LQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Connections. */

struct lq__conn {
    MYSQL *my;
    bool borrowed; /* the caller's MYSQL *: never closed here */
    bool lost;     /* a call found the connection gone: never reused */
    unsigned long max_packet; /* the session's max_allowed_packet; 0: unknown (borrowed) */
    bool galera;              /* check_server found a Galera node (wsrep on, a provider) */
    lq__stmt_cache cache; /* MYSQL_STMT handles */
    /* The row lock form's slots this session holds (GET_LOCK names): given
     * back when its transaction ends. */
    struct held_slot *slots;
    int slots_held, slots_cap;
    /* A transaction COMMIT AND CHAIN opened for the next begin, empty yet
     * (my_commit_then_begin). */
    bool begun_ahead;
};

typedef struct held_slot {
    char name[NAME_LIMIT + 1];
    bool keyed; /* a partition key's slot, not the queue's */
} held_slot;

static bool is_connection_error(unsigned err) {
    switch (err) {
    case 1053: /* ER_SERVER_SHUTDOWN */
    case 1927: /* ER_CONNECTION_KILLED (MariaDB) */
    case 2002: /* CR_CONNECTION_ERROR */
    case 2003: /* CR_CONN_HOST_ERROR */
    case 2006: /* CR_SERVER_GONE_ERROR */
    case 2013: /* CR_SERVER_LOST */
    case 2055: /* CR_SERVER_LOST_EXTENDED */
    case 4031: /* ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+) */
        return true;
    default: return false;
    }
}

/* Errors after which the server has closed the connection, or will: the
 * connection is never lent again, whatever status the error maps to (1153,
 * a packet over max_allowed_packet, stays LQ_BACKEND). */
static bool drops_connection(unsigned err) {
    if (is_connection_error(err)) return true;
    if (err >= 1153 && err <= 1161) return true; /* ER_NET_*: packet too large, read, write */
    switch (err) {
    case 1184: /* ER_NEW_ABORTING_CONNECTION */
    case 5013: /* CR_ERR_NET_READ (Connector/C) */
    case 5014: /* CR_ERR_NET_WRITE */
    case 5015: /* CR_ERR_NET_UNCOMPRESS */
        return true;
    default: break;
    }
    if (err < 2000 || err > 2999) return false;
    /* Client errors: all but those of the statement API and its results,
     * which leave the link as it was. A link in doubt is closed. */
    switch (err) {
    case 2030: /* CR_NO_PREPARE_STMT */
    case 2031: /* CR_PARAMS_NOT_BOUND */
    case 2032: /* CR_DATA_TRUNCATED */
    case 2033: /* CR_NO_PARAMETERS_EXISTS */
    case 2034: /* CR_INVALID_PARAMETER_NO */
    case 2035: /* CR_INVALID_BUFFER_USE */
    case 2036: /* CR_UNSUPPORTED_PARAM_TYPE */
    case 2050: /* CR_FETCH_CANCELED */
    case 2051: /* CR_NO_DATA */
    case 2052: /* CR_NO_STMT_METADATA */
    case 2053: /* CR_NO_RESULT_SET */
    case 2054: /* CR_NOT_IMPLEMENTED */
    case 2057: /* CR_NEW_STMT_METADATA */
        return false;
    default: return true;
    }
}

/* Maps a server or client error to a status and sets the message, with the
 * SQLSTATE and the native errno. `status` is the default for the failure. */
static int error_of(int status, unsigned err, const char *state, const char *msg,
                    const char *what) {
    const char *hint = "";
    if (is_connection_error(err)) status = LQ_CONNECT;
    else if (err == 1205 || err == 1213 || err == 3572 || err == 1020)
        status = LQ_CONTENTION; /* lock wait timeout, deadlock (and a Galera certification
                                   conflict), NOWAIT, changed since read */
    else if (err == 1047 && msg && strstr(msg, "WSREP"))
        status = LQ_CONTENTION; /* a Galera node not in the primary component yet (joining,
                                   or cut off): it takes statements again once it is */
    else if (err == 1062 || err == 1586)
        status = LQ_DUPLICATE; /* ER_DUP_ENTRY, ER_DUP_ENTRY_WITH_KEY_NAME */
    else if (err == 1969 || err == 3024) {
        status = LQ_TIMEOUT; /* max_statement_time (MariaDB), max_execution_time (MySQL) */
        hint = " (statement_timeout_ms)";
    } else if (err == 1146 || err == 1054 || err == 1049 || err == 1109 || err == 1136)
        status = LQ_SCHEMA; /* no such table, column, database; column count */
    else if (err == 1665) {
        status = LQ_DIALECT;
        hint = " (the binary log records statements, binlog_format = STATEMENT: libqueue writes "
               "at READ COMMITTED, which needs binlog_format = ROW or MIXED)";
    }
    if (!msg || !*msg) msg = "unknown error";
    if (state && (!*state || strcmp(state, "00000") == 0)) state = NULL;
    return lq__error_db(status, state, (int)err, "mysql: %s: %s%s", what, msg, hint);
}

static int conn_error(lq__conn *c, int status, const char *what) {
    unsigned err = mysql_errno(c->my);
    status = error_of(status, err, mysql_sqlstate(c->my), mysql_error(c->my), what);
    if (status == LQ_CONNECT || drops_connection(err)) c->lost = true;
    return status;
}

/* Notes a lost connection after a statement's failure: the failure just set
 * this thread's error, whose native code is the connector's. */
static int noted(lq__conn *c, int rc) {
    if (rc == LQ_CONNECT || (rc != LQ_OK && drops_connection((unsigned)lq_errcode_native())))
        c->lost = true;
    return rc;
}

/* What a statement sends in one packet, near enough and never less: its
 * text (which the prepare sends), each value's bytes, and room for each
 * value's type and length. */
static size_t packet_need(const char *sql, const lq__value *values, int count, size_t *largest) {
    size_t need = strlen(sql) + 64;
    *largest = 0;
    for (int i = 0; i < count; i++) {
        size_t n = values[i].type == LQ__V_TEXT || values[i].type == LQ__V_BLOB ? values[i].n : 0;
        if (n > *largest) *largest = n;
        need += n + 16;
    }
    return need;
}

/* A statement over the session's max_allowed_packet is refused before it is
 * sent: the server would refuse it and close the connection. */
static int fits_packet(const lq__conn *c, const char *sql, const lq__value *values, int count) {
    size_t largest;
    size_t need = packet_need(sql, values, count, &largest);
    if (!c->max_packet || need <= c->max_packet) return LQ_OK;
    if (largest * 2 > need)
        return lq__error(LQ_MISUSE,
                         "mysql: a value of %zu bytes (%zu with the rest of the statement) passes "
                         "the server's max_allowed_packet (%lu bytes): raise max_allowed_packet "
                         "or send less",
                         largest, need, c->max_packet);
    return lq__error(LQ_MISUSE,
                     "mysql: a statement of %zu bytes with its values passes the server's "
                     "max_allowed_packet (%lu bytes): raise max_allowed_packet or send less",
                     need, c->max_packet);
}

static int stmt_error(MYSQL_STMT *st, int status, const char *what) {
    return error_of(status, mysql_stmt_errno(st), mysql_stmt_sqlstate(st), mysql_stmt_error(st),
                    what);
}

/* Runs SQL text of our own with no parameters, discarding any result. */
static int run_plain(lq__conn *c, const char *sql) {
    if (mysql_real_query(c->my, sql, (unsigned long)strlen(sql)) != 0)
        return conn_error(c, LQ_BACKEND, sql);
    do {
        MYSQL_RES *res = mysql_store_result(c->my);
        if (res) mysql_free_result(res);
        else if (mysql_field_count(c->my) != 0) return conn_error(c, LQ_BACKEND, sql);
    } while (mysql_next_result(c->my) == 0);
    if (mysql_errno(c->my)) return conn_error(c, LQ_BACKEND, sql);
    return LQ_OK;
}

/* One row of text from SQL of our own: copies of up to `n` columns (NULL
 * where SQL NULL or absent), which the caller frees; a failure says `what`
 * was being done. */
static int query_row_as(lq__conn *c, const char *sql, const char *what, char **out, unsigned n) {
    for (unsigned i = 0; i < n; i++) out[i] = NULL;
    if (mysql_real_query(c->my, sql, (unsigned long)strlen(sql)) != 0)
        return conn_error(c, LQ_BACKEND, what);
    MYSQL_RES *res = mysql_store_result(c->my);
    if (!res) return conn_error(c, LQ_BACKEND, what);
    MYSQL_ROW row = mysql_fetch_row(res);
    unsigned fields = mysql_num_fields(res);
    int rc = LQ_OK;
    if (!row) rc = lq__error(LQ_BACKEND, "mysql: %s returned no row", what);
    for (unsigned i = 0; rc == LQ_OK && i < n && i < fields; i++) {
        if (row[i] && !(out[i] = lq__strdup(row[i]))) rc = lq__error(LQ_NOMEM, "out of memory");
    }
    mysql_free_result(res);
    while (mysql_next_result(c->my) == 0) {
        MYSQL_RES *more = mysql_store_result(c->my);
        if (more) mysql_free_result(more);
    }
    if (rc != LQ_OK)
        for (unsigned i = 0; i < n; i++) {
            free(out[i]);
            out[i] = NULL;
        }
    return rc;
}

/* The same, saying the SQL it ran (short statements). */
static int query_row(lq__conn *c, const char *sql, char **out, unsigned n) {
    return query_row_as(c, sql, sql, out, n);
}

/* ------------------------------------------------------------------------ */
/* URLs: mysql://user:password@host:port/database?param=value&...
 * (mariadb:// alike). User, password, database and values are
 * percent-decoded; host may be [ipv6]. */

/* The URL as messages show it (lq__redact_url), cut to 511 bytes. */
static const char *shown(char out[512], const char *url) {
    char *redacted = lq__redact_url(url);
    snprintf(out, 512, "%s", redacted ? redacted : "(a URL)");
    free(redacted);
    return out;
}

static int hex_digit(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A NUL-terminated, percent-decoded copy of text[0..n); NULL with the error
 * set on a bad escape or no memory. `plus_space`: '+' means ' ' (query). */
static char *decode(const char *url, const char *text, size_t n, bool plus_space) {
    char buf[512];
    char *out = malloc(n + 1);
    if (!out) {
        lq__error(LQ_NOMEM, "out of memory");
        return NULL;
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '%') {
            int hi = i + 2 < n ? hex_digit(text[i + 1]) : -1;
            int lo = i + 2 < n ? hex_digit(text[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                free(out);
                lq__error(LQ_MISUSE, "\"%s\": a bad percent escape in the URL", shown(buf, url));
                return NULL;
            }
            out[j++] = (char)(hi * 16 + lo);
            i += 2;
        } else if (plus_space && text[i] == '+') {
            out[j++] = ' ';
        } else {
            out[j++] = text[i];
        }
    }
    out[j] = '\0';
    if (strlen(out) != j) { /* an escaped NUL */
        free(out);
        lq__error(LQ_MISUSE, "\"%s\": an escaped NUL in the URL", shown(buf, url));
        return NULL;
    }
    return out;
}

typedef enum ssl_mode { SSL_DEFAULT, SSL_DISABLED, SSL_PREFERRED, SSL_REQUIRED, SSL_VERIFY_CA,
                        SSL_VERIFY_IDENTITY } ssl_mode;

/* The query parameters a URL may carry. */
typedef struct url_params {
    ssl_mode ssl;
    char *socket, *ssl_ca, *ssl_capath, *ssl_cert, *ssl_key, *ssl_cipher, *ssl_crl, *ssl_crlpath,
        *tls_version, *tls_passphrase, *tls_peer_fp;
} url_params;

static void params_free(url_params *p) {
    char **all[] = {&p->socket,      &p->ssl_ca,     &p->ssl_capath,     &p->ssl_cert,
                    &p->ssl_key,     &p->ssl_cipher, &p->ssl_crl,        &p->ssl_crlpath,
                    &p->tls_version, &p->tls_passphrase, &p->tls_peer_fp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        free(*all[i]);
        *all[i] = NULL;
    }
}

static const char *const SSL_MODES[] = {"", "disabled", "preferred", "required", "verify_ca",
                                        "verify_identity"};

static int set_param(url_params *p, const char *url, const char *key, char *value) {
    char buf[512];
    struct {
        const char *name;
        char **slot;
    } const strings[] = {
        {"socket", &p->socket},           {"ssl_ca", &p->ssl_ca},
        {"ssl_capath", &p->ssl_capath},   {"ssl_cert", &p->ssl_cert},
        {"ssl_key", &p->ssl_key},         {"ssl_cipher", &p->ssl_cipher},
        {"ssl_crl", &p->ssl_crl},         {"ssl_crlpath", &p->ssl_crlpath},
        {"tls_version", &p->tls_version}, {"tls_passphrase", &p->tls_passphrase},
        {"tls_peer_fp", &p->tls_peer_fp},
    };
    if (strcmp(key, "ssl_mode") == 0 || strcmp(key, "ssl-mode") == 0 ||
        strcmp(key, "sslmode") == 0) {
        for (size_t i = 1; i < sizeof SSL_MODES / sizeof SSL_MODES[0]; i++) {
            if (strcasecmp(value, SSL_MODES[i]) == 0) {
                p->ssl = (ssl_mode)i;
                free(value);
                return LQ_OK;
            }
        }
        int rc = lq__error(LQ_MISUSE, "\"%s\": ssl_mode \"%s\": give DISABLED, PREFERRED, "
                                      "REQUIRED, VERIFY_CA or VERIFY_IDENTITY",
                           shown(buf, url), value);
        free(value);
        return rc;
    }
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (strcmp(key, strings[i].name) == 0) {
            free(*strings[i].slot);
            *strings[i].slot = value;
            return LQ_OK;
        }
    }
    free(value);
    return lq__error(LQ_MISUSE, "\"%s\": unknown parameter \"%s\"; a mysql URL takes socket, "
                                "ssl_mode, ssl_ca, ssl_capath, ssl_cert, ssl_key, ssl_cipher, "
                                "ssl_crl, ssl_crlpath, tls_version, tls_passphrase and tls_peer_fp",
                     shown(buf, url), key);
}

/* Reads the query string (after '?') of a URL. */
static int parse_params(url_params *p, const char *url, const char *query) {
    char buf[512];
    memset(p, 0, sizeof *p);
    while (query && *query) {
        size_t n = strcspn(query, "&");
        const char *eq = memchr(query, '=', n);
        if (n) {
            if (!eq || eq == query) {
                params_free(p);
                return lq__error(LQ_MISUSE, "\"%s\": a URL parameter needs a name and a value "
                                            "(name=value)",
                                 shown(buf, url));
            }
            char *key = decode(url, query, (size_t)(eq - query), true);
            char *value = key ? decode(url, eq + 1, n - (size_t)(eq - query) - 1, true) : NULL;
            int rc = key && value ? set_param(p, url, key, value) : lq_errcode();
            free(key);
            if (rc != LQ_OK) {
                params_free(p);
                return rc;
            }
        }
        query += n;
        if (*query == '&') query++;
    }
    return LQ_OK;
}

/* A URL names up to this many hosts (host1:port1,host2:port2,...). */
#define MY_MAX_HOSTS 16

typedef struct my_host {
    char *name; /* NULL: the client library's default (localhost) */
    unsigned port; /* 0: 3306 */
} my_host;

/* The URL's parts as Connector/C takes them (the password is the target's:
 * every dialect's messages are scrubbed of it). With several hosts, each
 * connect tries them in order and keeps the first that takes writes. */
typedef struct my_target {
    char *database, *user, *socket;
    my_host hosts[MY_MAX_HOSTS];
    int host_count;
} my_target;

static void my_free_target(void *own) {
    my_target *m = own;
    if (!m) return;
    free(m->database);
    for (int i = 0; i < m->host_count; i++) free(m->hosts[i].name);
    free(m->user);
    free(m->socket);
    free(m);
}

/* The part of a URL after its scheme. */
static const char *url_rest(const char *url) {
    const char *sep = strstr(url, "://");
    return sep ? sep + 3 : url;
}

/* One host of a URL's host list: host or [ipv6], with :port. */
static int parse_host(my_host *h, const char *url, const char *host, const char *host_end) {
    char buf[512];
    const char *port = NULL;
    const char *name = host, *name_end = host_end;
    if (host < host_end && *host == '[') {
        const char *close = memchr(host, ']', (size_t)(host_end - host));
        if (!close)
            return lq__error(LQ_MISUSE, "\"%s\": an IPv6 host needs its closing ]",
                             shown(buf, url));
        name = host + 1;
        name_end = close;
        if (close + 1 < host_end) {
            if (close[1] != ':') return lq__error(LQ_MISUSE, "\"%s\": a bad host", shown(buf, url));
            port = close + 2;
        }
    } else {
        const char *colon = memchr(host, ':', (size_t)(host_end - host));
        if (colon) {
            name_end = colon;
            port = colon + 1;
        }
    }
    if (name_end > name && !(h->name = decode(url, name, (size_t)(name_end - name), false)))
        return lq_errcode();
    if (port) {
        unsigned long value = 0;
        const char *q = port;
        for (; q < host_end && *q >= '0' && *q <= '9' && value <= 65535; q++)
            value = value * 10 + (unsigned long)(*q - '0');
        if (q == port || q != host_end || value == 0 || value > 65535)
            return lq__error(LQ_MISUSE, "\"%s\": the port is not a number from 1 to 65535",
                             shown(buf, url));
        h->port = (unsigned)value;
    }
    return LQ_OK;
}

static int my_parse_url(lq__broker_target *t, const char *url, const char *rest) {
    my_target *m = calloc(1, sizeof *m);
    if (!m) return lq__error(LQ_NOMEM, "out of memory");
    t->own = m;
    char buf[512];
    const char *query = strchr(rest, '?');
    size_t head = query ? (size_t)(query - rest) : strlen(rest);
    /* userinfo ends at the last '@' before the query, so a password may hold
     * '@', ':' or '/' (better percent-encoded all the same). */
    const char *at = NULL;
    for (const char *q = rest; q < rest + head; q++)
        if (*q == '@') at = q;
    const char *host = at ? at + 1 : rest;
    const char *path = memchr(host, '/', (size_t)(rest + head - host));
    const char *host_end = path ? path : rest + head;
    int rc = LQ_OK;
    if (at) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        const char *user_end = colon ? colon : at;
        if (user_end > rest && !(m->user = decode(url, rest, (size_t)(user_end - rest), false)))
            return lq_errcode();
        if (colon && !(t->password = decode(url, colon + 1, (size_t)(at - colon - 1), false)))
            return lq_errcode();
    }
    /* hosts, each host or [ipv6], with :port, separated by commas */
    const char *item = host;
    do {
        const char *item_end = item;
        bool bracket = false;
        while (item_end < host_end && (bracket || *item_end != ',')) {
            if (*item_end == '[') bracket = true;
            else if (*item_end == ']') bracket = false;
            item_end++;
        }
        if (m->host_count == MY_MAX_HOSTS)
            return lq__error(LQ_MISUSE, "\"%s\": more than %d hosts", shown(buf, url),
                             MY_MAX_HOSTS);
        if (item_end == item && (item != host || item_end != host_end))
            return lq__error(LQ_MISUSE, "\"%s\": an empty host in the host list",
                             shown(buf, url));
        rc = parse_host(&m->hosts[m->host_count++], url, item, item_end);
        if (rc != LQ_OK) return rc;
        item = item_end + 1;
    } while (item <= host_end);
    if (path && path + 1 < rest + head) {
        const char *db = path + 1;
        size_t n = (size_t)(rest + head - db);
        if (memchr(db, '/', n))
            return lq__error(LQ_MISUSE, "\"%s\": the path names one database, as /dbname",
                             shown(buf, url));
        if (!(m->database = decode(url, db, n, false))) return lq_errcode();
    }
    url_params p;
    rc = parse_params(&p, url, query ? query + 1 : NULL);
    if (rc != LQ_OK) return rc;
    if (p.socket) {
        m->socket = p.socket;
        p.socket = NULL;
    }
    if (m->socket && m->host_count > 1)
        rc = lq__error(LQ_MISUSE, "\"%s\": a socket with a list of hosts: give one or the other",
                       shown(buf, url));
    else if (p.ssl == SSL_DISABLED && (p.ssl_ca || p.ssl_cert || p.ssl_key || p.ssl_capath))
        rc = lq__error(LQ_MISUSE, "\"%s\": ssl_mode DISABLED with certificate options",
                       shown(buf, url));
    params_free(&p);
    if (rc == LQ_OK && !t->url && !(t->url = lq__strdup(url)))
        rc = lq__error(LQ_NOMEM, "out of memory");
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Connecting. */

static void close_stmt(void *stmt) { mysql_stmt_close(stmt); }

static void free_cache(lq__conn *c) { lq__cache_clear(&c->cache, close_stmt); }

static void my_disconnect(lq__conn *c) {
    if (!c) return;
    ensure_thread();
    free_cache(c);
    if (!c->borrowed && c->my) mysql_close(c->my);
    free(c->slots);
    free(c);
}

static unsigned whole_seconds(int64_t ms) {
    int64_t s = (ms + 999) / 1000;
    return s < 1 ? 1u : s > 86400 * 365 ? 86400u * 365 : (unsigned)s;
}

static bool server_is_mariadb(MYSQL *my) {
    const char *info = mysql_get_server_info(my);
    return info && strstr(info, "MariaDB");
}

/* TLS options from the URL's parameters. */
static int set_tls(MYSQL *my, const url_params *p) {
    my_bool yes = 1, no = 0;
    int failed = 0;
    if (p->ssl == SSL_DISABLED) return LQ_OK;
    struct {
        enum mysql_option option;
        const char *value;
    } const files[] = {
        {MYSQL_OPT_SSL_CA, p->ssl_ca},       {MYSQL_OPT_SSL_CAPATH, p->ssl_capath},
        {MYSQL_OPT_SSL_CERT, p->ssl_cert},   {MYSQL_OPT_SSL_KEY, p->ssl_key},
        {MYSQL_OPT_SSL_CIPHER, p->ssl_cipher}, {MYSQL_OPT_SSL_CRL, p->ssl_crl},
        {MYSQL_OPT_SSL_CRLPATH, p->ssl_crlpath}, {MARIADB_OPT_TLS_VERSION, p->tls_version},
        {MARIADB_OPT_TLS_PASSPHRASE, p->tls_passphrase}, {MARIADB_OPT_TLS_PEER_FP, p->tls_peer_fp},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (files[i].value) failed |= mysql_optionsv(my, files[i].option, files[i].value);
    switch (p->ssl) {
    case SSL_REQUIRED:
        /* Unverified, Connector/C logs in before it finds the server has no
         * TLS (the connection is refused after): no login that would send
         * the password itself may run then. */
        failed |= mysql_optionsv(my, MARIADB_OPT_RESTRICTED_AUTH,
                                 "mysql_native_password,caching_sha2_password,client_ed25519,"
                                 "sha256_password");
        /* fall through */
    case SSL_PREFERRED: /* TLS where the server offers it, unverified */
        failed |= mysql_optionsv(my, MYSQL_OPT_SSL_ENFORCE, &yes);
        failed |= mysql_optionsv(my, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &no);
        break;
    case SSL_VERIFY_CA:
    case SSL_VERIFY_IDENTITY:
        /* Connector/C checks the chain and the host name together. */
        failed |= mysql_optionsv(my, MYSQL_OPT_SSL_ENFORCE, &yes);
        failed |= mysql_optionsv(my, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &yes);
        break;
    default: break; /* unset: the client library's default (TLS when options ask for it) */
    }
    return failed ? lq__error(LQ_MISUSE, "mysql: the client library refused a TLS option") : LQ_OK;
}

/* The session every connection runs in. */
static int setup_session(lq__conn *c, const lq_options *o) {
    int64_t statement_ms = lq__opt_int(o, LQ_OPT_STATEMENT_TIMEOUT_MS);
    char sql[512];
    int rc = run_plain(c, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    if (rc != LQ_OK) return rc;
    /* time_zone: DATETIME and TIMESTAMP both mean UTC. STRICT_TRANS_TABLES:
     * a value the column cannot hold fails instead of being cut. A row lock
     * wait ends a second before the statement deadline (error 1205,
     * LQ_CONTENTION), any statement at the deadline (LQ_TIMEOUT), and both
     * before the client's read timeout, so the connection lives on. A
     * COMMIT ends its transaction whatever the server's completion_type
     * (a chained one would take in the statements meant to commit on their
     * own). MariaDB's idle transaction timeouts would end the session of a
     * worker whose transaction waits for its handler (the row lock form's
     * claim, an advisory settlement's begun ahead), and its row would run
     * twice. */
    unsigned lock_wait = whole_seconds(statement_ms);
    if (lock_wait > 1) lock_wait--;
    int n = snprintf(sql, sizeof sql,
                     "SET SESSION time_zone = '+00:00', sql_mode = CONCAT(@@SESSION.sql_mode, "
                     "IF(@@SESSION.sql_mode = '', '', ','), 'STRICT_TRANS_TABLES'), "
                     "innodb_lock_wait_timeout = %u, completion_type = 'NO_CHAIN'",
                     lock_wait);
    if (server_is_mariadb(c->my))
        snprintf(sql + n, sizeof sql - (size_t)n,
                 ", idle_transaction_timeout = 0, idle_readonly_transaction_timeout = 0, "
                 "idle_write_transaction_timeout = 0, max_statement_time = %lld.%03lld",
                 (long long)(statement_ms / 1000), (long long)(statement_ms % 1000));
    else
        snprintf(sql + n, sizeof sql - (size_t)n, ", max_execution_time = %lld",
                 (long long)statement_ms);
    if ((rc = run_plain(c, sql)) != LQ_OK) return rc;
    /* Read-only in a session: what it is now holds for the connection's
     * life. A server or proxy that does not know it leaves it unknown, and
     * statements go unchecked. */
    char *packet[1];
    rc = query_row(c, "SELECT @@SESSION.max_allowed_packet", packet, 1);
    if (rc != LQ_OK) {
        unsigned err = mysql_errno(c->my);
        if (err != 1193 && err != 1064) return rc; /* not an unknown variable */
        lq__error_clear();
        return LQ_OK;
    }
    c->max_packet = packet[0] ? strtoul(packet[0], NULL, 10) : 0;
    free(packet[0]);
    return LQ_OK;
}

/* Opens c->my on one host: the options, TLS and the login. */
static int open_host(lq__conn *c, const my_target *m, const my_host *h,
                     const lq__broker_target *t, const lq_options *o, const url_params *p) {
    if (!(c->my = mysql_init(NULL))) return lq__error(LQ_NOMEM, "out of memory");
    unsigned connect_s = whole_seconds(lq__opt_int(o, LQ_OPT_CONNECT_TIMEOUT_MS));
    /* The client's read deadline: a little past the server's own, which
     * fails the statement first and keeps the connection. */
    unsigned io_s = whole_seconds(lq__opt_int(o, LQ_OPT_STATEMENT_TIMEOUT_MS)) + 2;
    unsigned long packet = 1024UL * 1024 * 1024;
    unsigned protocol = MYSQL_PROTOCOL_DEFAULT;
    my_bool no = 0;
    unsigned int no_infile = 0;
    int failed = mysql_optionsv(c->my, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    failed |= mysql_optionsv(c->my, MYSQL_OPT_READ_TIMEOUT, &io_s);
    failed |= mysql_optionsv(c->my, MYSQL_OPT_WRITE_TIMEOUT, &io_s);
    failed |= mysql_optionsv(c->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    failed |= mysql_optionsv(c->my, MYSQL_OPT_MAX_ALLOWED_PACKET, &packet);
    failed |= mysql_optionsv(c->my, MYSQL_OPT_RECONNECT, &no); /* a reconnect loses locks */
    failed |= mysql_optionsv(c->my, MYSQL_OPT_LOCAL_INFILE, &no_infile);
    failed |= mysql_optionsv(c->my, MYSQL_OPT_PROTOCOL, &protocol);
    failed |= mysql_optionsv(c->my, MYSQL_OPT_CONNECT_ATTR_ADD, "program_name", "libqueue");
    int rc = failed ? lq__error(LQ_ERROR, "mysql: the client library refused an option") : LQ_OK;
    if (rc == LQ_OK) rc = set_tls(c->my, p);
    /* CLIENT_FOUND_ROWS: an UPDATE reports the rows it matched, as the core
     * reads them (a settlement that matched its row took effect). */
    if (rc == LQ_OK &&
        !mysql_real_connect(c->my, h->name, m->user, t->password, m->database, h->port, m->socket,
                            CLIENT_FOUND_ROWS)) {
        char where[300];
        if (m->socket) snprintf(where, sizeof where, "socket %s", m->socket);
        else
            snprintf(where, sizeof where, "%s:%u", h->name ? h->name : "localhost",
                     h->port ? h->port : 3306);
        char what[440];
        /* CR_PLUGIN_NOT_ALLOWED: under ssl_mode REQUIRED, a login that would
         * send the password itself, to a server that started no TLS. */
        bool plain_login = p->ssl == SSL_REQUIRED && mysql_errno(c->my) == 5010;
        snprintf(what, sizeof what, "cannot connect to %s%s", where,
                 plain_login ? " (ssl_mode REQUIRED: the server started no TLS and asked for a "
                               "login that sends the password; refused before sending it)"
                             : "");
        /* Whatever the error (an unknown database too), the database could
         * not be reached. */
        rc = error_of(LQ_CONNECT, mysql_errno(c->my), mysql_sqlstate(c->my), mysql_error(c->my),
                      what);
        if (rc != LQ_CONNECT && rc != LQ_NOMEM) rc = LQ_CONNECT;
    }
    /* The connector falls back to plain text when the server has no TLS
     * and nothing is verified: REQUIRED means TLS or nothing. */
    if (rc == LQ_OK && p->ssl >= SSL_REQUIRED && !mysql_get_ssl_cipher(c->my))
        rc = lq__error(LQ_CONNECT, "mysql: ssl_mode %s: the server did not start TLS",
                       SSL_MODES[p->ssl]);
    return rc;
}

/* A host of a list that does not take writes (read_only, as a replica is)
 * is passed over: after a failover the promoted replica is the one. */
static int takes_writes(lq__conn *c, const my_host *h) {
    char *value[1];
    int rc = query_row(c, "SELECT @@GLOBAL.read_only", value, 1);
    if (rc != LQ_OK) return rc == LQ_NOMEM ? rc : LQ_CONNECT;
    bool read_only = value[0] && strcmp(value[0], "0") != 0;
    free(value[0]);
    if (!read_only) return LQ_OK;
    return lq__error(LQ_CONNECT, "mysql: %s:%u is read-only (read_only = ON): passed over",
                     h->name ? h->name : "localhost", h->port ? h->port : 3306);
}

static int my_connect(lq__conn **out, const lq__broker_target *t, const lq_options *o) {
    int rc = ensure_thread();
    if (rc != LQ_OK) return rc;
    const my_target *m = t->own;
    url_params p;
    const char *query = t->url ? strchr(url_rest(t->url), '?') : NULL;
    rc = parse_params(&p, t->url ? t->url : "", query ? query + 1 : NULL);
    if (rc != LQ_OK) return rc;
    lq__conn *c = calloc(1, sizeof *c);
    if (!c) {
        params_free(&p);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    /* Each host in order; only a failed connection moves on to the next. */
    for (int i = 0; i < m->host_count; i++) {
        rc = open_host(c, m, &m->hosts[i], t, o, &p);
        if (rc == LQ_OK && m->host_count > 1) rc = takes_writes(c, &m->hosts[i]);
        if (rc != LQ_CONNECT || i + 1 == m->host_count) break;
        mysql_close(c->my);
        c->my = NULL;
    }
    params_free(&p);
    if (rc == LQ_CONNECT && m->host_count > 1)
        lq__error_prefix("mysql: none of the URL's %d hosts took the connection (each is tried "
                         "in order, a read-only one passed over); the last", m->host_count);
    if (rc == LQ_OK) {
        rc = setup_session(c, o);
        if (rc != LQ_OK && rc != LQ_NOMEM) {
            lq__error_prefix("mysql: setting up the session");
            if (rc == LQ_BACKEND) rc = LQ_CONNECT;
        }
    }
    if (rc != LQ_OK) {
        int native = lq_errcode_native();
        char state[6], msg[512];
        snprintf(state, sizeof state, "%s", lq_errcode_sqlstate());
        snprintf(msg, sizeof msg, "%s", lq_errmsg());
        my_disconnect(c);
        return lq__error_db(rc, *state ? state : NULL, native, "%s", msg);
    }
    *out = c;
    return LQ_OK;
}

/* Back to the pool only alive, out of any transaction (a handler's
 * statement may have opened one) and holding no slot. */
static bool my_reusable(lq__conn *c) {
    unsigned int status = 0;
    if (c->lost || c->slots_held || ensure_thread() != LQ_OK) return false;
    if (mariadb_get_infov(c->my, MARIADB_CONNECTION_SERVER_STATUS, &status) != 0) return false;
    return c->begun_ahead || !(status & SERVER_STATUS_IN_TRANS); /* begun ahead: empty */
}

/* An idle session is asked nothing, so anything on its socket is the
 * server's farewell (an error packet, then the close) or the close itself.
 * The close is seen whatever came before it (POLLRDHUP: over TLS the
 * farewell comes in records that may also be the protocol's own, so there
 * bytes alone do not count). */
static bool my_closed_while_idle(lq__conn *c) {
#ifdef POLLRDHUP
    short closed = POLLRDHUP | POLLHUP | POLLERR | POLLNVAL;
#else
    short closed = POLLHUP | POLLERR | POLLNVAL;
#endif
    struct pollfd p = {.fd = mysql_get_socket(c->my), .events = POLLIN | closed};
    int n = poll(&p, 1, 0);
    if (n < 0) return errno != EINTR && errno != EAGAIN;
    if (n == 0) return false;
    return (p.revents & closed) || mysql_get_ssl_cipher(c->my) == NULL;
}

static int my_borrow(lq__conn **out, void *native) {
    int rc = ensure_thread();
    if (rc != LQ_OK) return rc;
    lq__conn *c = calloc(1, sizeof *c);
    if (!c) return lq__error(LQ_NOMEM, "out of memory");
    c->my = native;
    c->borrowed = true;
    *out = c;
    return LQ_OK;
}

/* ------------------------------------------------------------------------ */
/* The version floor, the binary log, and what a table may declare. */

/* "8.0.36", "8.0.1-log", "10.11.19-MariaDB-0+deb12u1", "5.5.5-10.6.4-MariaDB"
 * (the replication prefix). Three numbers, or false. */
static bool parse_version(const char *v, bool *mariadb, int *number) {
    unsigned a, b, c;
    int used = 0;
    *mariadb = strstr(v, "MariaDB") || strstr(v, "mariadb");
    if (*mariadb && strncmp(v, "5.5.5-", 6) == 0) v += 6;
    if (sscanf(v, "%3u.%3u.%3u%n", &a, &b, &c, &used) != 3) return false;
    if (v[used] && v[used] != '-' && v[used] != '+' && v[used] != ' ') return false;
    if (b > 99 || c > 99 * 100) return false;
    *number = (int)(a * 10000 + b * 100 + (c > 99 ? 99 : c));
    return true;
}

/* A Galera node: wsrep on, with a provider loaded (MariaDB has both
 * variables without Galera too; MySQL has neither). */
static int check_galera(lq__conn *c) {
    char *row[1];
    int rc = query_row(c, "SELECT @@GLOBAL.wsrep_on AND @@GLOBAL.wsrep_provider <> 'none'", row,
                       1);
    if (rc != LQ_OK) {
        unsigned err = mysql_errno(c->my);
        if (err != 1193 && err != 1064) return rc; /* not an unknown variable */
        lq__error_clear();
        return LQ_OK;
    }
    c->galera = row[0] && strcmp(row[0], "1") == 0;
    free(row[0]);
    return LQ_OK;
}

static bool my_node_local_locks(lq__conn *c) { return c->galera; }

static int check_server(lq__conn *c) {
    char *row[1];
    int rc = query_row(c, "SELECT VERSION()", row, 1);
    if (rc != LQ_OK) return rc;
    bool mariadb = false;
    int number = 0;
    const char *reported = row[0] ? row[0] : "(null)";
    if (!row[0] || !parse_version(row[0], &mariadb, &number) ||
        number < (mariadb ? MARIADB_FLOOR : MYSQL_FLOOR))
        rc = lq__error(LQ_SERVER_TOO_OLD,
                       "mysql: the mysql dialect needs MySQL 8.0.1 or MariaDB 10.6 or later (FOR "
                       "UPDATE SKIP LOCKED); the server reports \"%s\"",
                       reported);
    free(row[0]);
    if (rc != LQ_OK) return rc;

    /* With the binary log on in STATEMENT format, InnoDB refuses writes at
     * READ COMMITTED (error 1665): say so now, not at the first settlement.
     * A server that no longer has these variables has no such format. */
    static const char binlog[] =
        "SELECT @@SESSION.binlog_format, @@GLOBAL.log_bin, @@SESSION.sql_log_bin";
    if (mysql_real_query(c->my, binlog, (unsigned long)strlen(binlog)) != 0) {
        unsigned err = mysql_errno(c->my);
        if (err == 1193 || err == 1064) return LQ_OK; /* unknown variable */
        return conn_error(c, LQ_BACKEND, "reading binlog_format");
    }
    MYSQL_RES *res = mysql_store_result(c->my);
    if (!res) return conn_error(c, LQ_BACKEND, "reading binlog_format");
    MYSQL_ROW r = mysql_fetch_row(res);
    unsigned fields = mysql_num_fields(res);
    bool statement = r && fields >= 1 && r[0] && strcasecmp(r[0], "STATEMENT") == 0;
    bool logging = !r || fields < 3 ||
                   ((!r[1] || strcmp(r[1], "0") != 0) && (!r[2] || strcmp(r[2], "0") != 0));
    mysql_free_result(res);
    if (statement && logging)
        return lq__error(LQ_DIALECT,
                         "mysql: the server's binary log records statements (binlog_format = "
                         "STATEMENT), and InnoDB refuses writes at READ COMMITTED with that "
                         "format; set binlog_format = ROW (or MIXED) on the server");
    return check_galera(c);
}

static int my_check_version(lq__conn *c, const lq_table *table) {
    int rc = ensure_thread();
    if (rc == LQ_OK) rc = check_server(c);
    if (rc != LQ_OK || !table) return rc;
    if (lq_table_form(table) == LQ_FORM_ROW_LOCK && table->fifo &&
        table->isolation == LQ_ISOLATION_SERIALIZABLE) {
        char label[256];
        return lq__error(LQ_DIALECT,
                         "mysql: table %s has FIFO groups in the row lock form at SERIALIZABLE: at "
                         "that level InnoDB locks every row a read touches, so a claim would wait "
                         "for the group's row in work; declare read committed (the default)",
                         lq__table_label(table, label, sizeof label));
    }
    return LQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Statement shapes. */

static void my_placeholder(lq__strbuf *sb, int position) {
    (void)position;
    lq__sb_addc(sb, '?');
}

/* A string literal that means the same whatever the server's sql_mode:
 * text with a backslash goes as hex (NO_BACKSLASH_ESCAPES decides what a
 * backslash means inside quotes). */
static void my_literal(lq__sql *b, const char *text) {
    if (!strchr(text, '\\')) {
        lq__sql_literal(b, text);
        return;
    }
    lq__sql_add(b, "CONVERT(X'");
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        lq__sb_addf(&b->sb, "%02X", *p);
    lq__sql_add(b, "' USING utf8mb4)");
}

/* The GET_LOCK name of a row: the database (the table's schema, or the
 * connection's), a dot and the rendered key; a NULL column renders as ''. */
static void lock_name(lq__sql *b, const lq_table *t) {
    lq__sql_add(b, "CONCAT_WS('', LOWER(");
    if (t->schema) my_literal(b, t->schema);
    else lq__sql_add(b, "DATABASE()");
    lq__sql_add(b, "), '.'");
    for (size_t i = 0; i < t->key.count; i++) {
        lq__sql_add(b, ", ");
        if (t->key.parts[i].is_column) {
            /* In the connection's character set, whatever the column's, so
             * a latin1 column mixes with the literals. */
            lq__sql_add(b, "CONVERT(");
            lq__sql_ident(b, t->key.parts[i].text);
            lq__sql_add(b, " USING utf8mb4)");
        } else {
            my_literal(b, t->key.parts[i].text);
        }
    }
    lq__sql_add(b, ")");
}

/* GET_LOCK takes names of 1 to 64 characters: a longer one is replaced by
 * its SHA-256 (64 hex digits). */
static void guarded_lock_name(lq__sql *b, const lq_table *t) {
    lq__sql_add(b, "IF(CHAR_LENGTH(");
    lock_name(b, t);
    lq__sql_add(b, ") BETWEEN 1 AND 64, ");
    lock_name(b, t);
    lq__sql_add(b, ", SHA2(");
    lock_name(b, t);
    lq__sql_add(b, ", 256))");
}

/* The FIFO group guard: the claim's transaction first locks the unfinished
 * rows of its group, without waiting. While another transaction holds one
 * of them (a claim of another broker, or a row lock delivery in work) the
 * guard fails at once (NOWAIT: 3572 on MySQL, 1205 on MariaDB), which is
 * LQ_CONTENTION: the claim is rolled back and retried after a back-off.
 * Once taken, the locks keep other claims of the group out until the
 * transaction ends: at its commit in the lease form, at the settlement in
 * the row lock form. The count it returns is 0 when the group has nothing
 * to take. */
static int build_fifo_guard(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->guard, &lq__mysql_dialect, t);
    lq__sql_add(&b, "SELECT COUNT(*) FROM ");
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    lq__sql_col(&b, LQ_ROLE_GROUP);
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_GROUP);
    if (lq__has(t, LQ_ROLE_PROCESSED_AT)) {
        lq__sql_add(&b, " AND ");
        lq__sql_col(&b, LQ_ROLE_PROCESSED_AT);
        lq__sql_add(&b, " IS NULL");
    }
    lq__sql_add(&b, " FOR UPDATE NOWAIT");
    return lq__sql_finish(&b);
}

/* Row lock and lease: a locking read that skips rows other claims hold. In
 * the lease form the core stamps each row it returns, in its transaction. */
static int build_locking_claim(lq__sqlset *set, const lq_table *t, bool lease) {
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__mysql_dialect, t);
    lq__sql_locking_read(&b, lease, NULL);
    return lq__sql_finish(&b);
}

/* partition_concurrency in the row lock form: slot i of a row's key is the
 * GET_LOCK name "lq-kslot-<hash of the table>-<MD5 of the key, 16 hex
 * digits>-<i>", rendered by the server from the key's column, so the claim's
 * filter and the try after it name the same locks. */
static void key_slot_name(lq__sql *b, int slot) { /* below 0: the slot is LQ__P_LIMIT */
    char label[512];
    lq__table_label(b->table, label, sizeof label);
    char prefix[48];
    snprintf(prefix, sizeof prefix, "'lq-kslot-%016llx-'", (unsigned long long)lq__fnv1a_str(label));
    lq__sql_add(b, "CONCAT(");
    lq__sql_add(b, prefix);
    lq__sql_add(b, ", LEFT(MD5(");
    lq__sql_col(b, LQ_ROLE_PARTITION_KEY);
    lq__sql_add(b, "), 16), '-', ");
    if (slot < 0) {
        lq__sql_param(b, LQ__P_LIMIT);
    } else {
        char text[16];
        snprintf(text, sizeof text, "%d", slot);
        lq__sql_add(b, text);
    }
    lq__sql_add(b, ")");
}

/* The row lock claim passes over rows whose key has every slot held (rows
 * without a key are not limited); with its row locked, the claim takes one
 * of them by key_slot. A name per slot in the filter: the limit is kept
 * small here. */
enum { KEY_SLOTS_MAX = 16 };

static int build_key_slot_claim(lq__sqlset *set, const lq_table *t) {
    if (t->partition_limit > KEY_SLOTS_MAX)
        return lq__error(LQ_MISUSE, "mysql: partition_concurrency in the row lock form is at most "
                                    "%d (its claim names each slot); use the lease form for more",
                         KEY_SLOTS_MAX);
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__mysql_dialect, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_row_columns(&b, NULL);
    lq__sql_from_claimable(&b, false);
    if (t->fifo) lq__sql_fifo_head(&b, false);
    lq__sql_add(&b, " AND (");
    lq__sql_col(&b, LQ_ROLE_PARTITION_KEY);
    lq__sql_add(&b, " IS NULL");
    for (int i = 0; i < t->partition_limit; i++) {
        lq__sql_add(&b, " OR IS_USED_LOCK(");
        key_slot_name(&b, i);
        lq__sql_add(&b, ") IS NULL");
    }
    lq__sql_add(&b, ")");
    lq__sql_claim_limit(&b);
    lq__sql_add(&b, " FOR UPDATE SKIP LOCKED");
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;
    lq__sql_start(&b, &set->key_slot, &lq__mysql_dialect, t);
    lq__sql_add(&b, "SELECT `lq_n`, IF(IS_USED_LOCK(`lq_n`) IS NULL, "
                    "CAST(COALESCE(GET_LOCK(`lq_n`, 0), 0) AS SIGNED), 0) FROM (SELECT ");
    key_slot_name(&b, -1);
    lq__sql_add(&b, " AS `lq_n` FROM ");
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    lq__sql_id(&b);
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_ID);
    lq__sql_add(&b, ") AS `lq_k`");
    return lq__sql_finish(&b);
}

/* Advisory candidates, after SELECT: "<id> AS lq_id, <key> AS lq_key[,
 * <partition key>] FROM t WHERE <claimable> AND <no session holds the
 * key>". */
static void advisory_candidates(lq__sql *b, const lq_table *t, bool with_pkey) {
    lq__sql_id(b);
    lq__sql_add(b, " AS `lq_id`, ");
    guarded_lock_name(b, t);
    lq__sql_add(b, " AS `lq_key`");
    if (with_pkey) lq__sql_candidate_pkey(b, true);
    lq__sql_add(b, " FROM ");
    lq__sql_table(b);
    lq__sql_add(b, " WHERE ");
    lq__sql_claim_where(b, false);
    lq__sql_candidate_filter(b);
    lq__sql_add(b, " AND IS_USED_LOCK(");
    guarded_lock_name(b, t);
    lq__sql_add(b, ") IS NULL");
}

/* Advisory, the claim a settlement carries, whose session holds the slot
 * already (lq__table_carries_claims: not under partition limits, so none is
 * built there): the first candidate whose key no session holds, past the
 * rows passed over (LQ__P_PASSED, "{id,..}"), the try of its key, and its
 * row as it is before the take, in one round trip where there were three.
 * The try is in the select list, so it runs once for the one row returned:
 * LIMIT keeps the candidate a derived table of one row (not merged), and
 * the row joins it by its id, after it (STRAIGHT_JOIN: the derived table
 * holds no payload, a column too large for a temporary table in memory).
 * IS_USED_LOCK first, as in my_try_lock_key: a name this session holds is
 * not counted twice. Returns 1 where the key was taken, the key, then the
 * row's columns; no row where no candidate is left. take_picked then
 * counts the attempt while the count is as read: a row taken since the
 * read is not taken on stale values (one settled fails the claimable
 * condition). */
static int build_advisory_pick(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->pick, &lq__mysql_dialect, t);
    lq__sql_add(&b, "SELECT IF(IS_USED_LOCK(`lq_pick`.`lq_key`) IS NULL, "
                    "CAST(COALESCE(GET_LOCK(`lq_pick`.`lq_key`, 0), 0) AS SIGNED), 0), `lq_pick`.`lq_key`, ");
    lq__sql_row_columns(&b, NULL);
    lq__sql_add(&b, " FROM (SELECT ");
    advisory_candidates(&b, t, false);
    lq__sql_add(&b, " AND NOT FIND_IN_SET(");
    lq__sql_id(&b);
    lq__sql_add(&b, ", TRIM(LEADING '{' FROM TRIM(TRAILING '}' FROM ");
    lq__sql_param(&b, LQ__P_PASSED);
    lq__sql_add(&b, "))) ORDER BY ");
    lq__sql_claim_order(&b);
    lq__sql_add(&b, " LIMIT 1) AS `lq_pick` STRAIGHT_JOIN ");
    lq__sql_table(&b);
    lq__sql_add(&b, " ON ");
    lq__sql_id(&b);
    lq__sql_add(&b, " = `lq_pick`.`lq_id`");
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;
    lq__sql_start(&b, &set->take_picked, &lq__mysql_dialect, t);
    lq__sql_take(&b, true, NULL);
    lq__sql_add(&b, " AND ");
    lq__sql_col(&b, LQ_ROLE_ATTEMPT);
    lq__sql_add(&b, " <=> ");
    lq__sql_param(&b, LQ__P_ATTEMPT);
    return lq__sql_finish(&b);
}

/* Advisory: candidates whose lock names no session holds; then, on the
 * connection that took the name, a take that counts the attempt and a read
 * of the row as it was (an UPDATE returns no rows here). */
static int build_advisory_claim(lq__sqlset *set, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &set->claim, &lq__mysql_dialect, t);
    lq__sql_add(&b, "SELECT ");
    advisory_candidates(&b, t, true);
    lq__sql_claim_limit(&b);
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;

    bool counts = lq__has(t, LQ_ROLE_ATTEMPT);
    lq__sql_start(&b, &set->take, &lq__mysql_dialect, t);
    lq__sql_take(&b, counts, NULL);
    rc = lq__sql_finish(&b);
    if (rc != LQ_OK || !counts) return rc;

    lq__sql_start(&b, &set->take_read, &lq__mysql_dialect, t);
    lq__sql_add(&b, "SELECT ");
    lq__sql_row_columns(&b, " - 1");
    lq__sql_add(&b, " FROM ");
    lq__sql_table(&b);
    lq__sql_add(&b, " WHERE ");
    lq__sql_id(&b);
    lq__sql_add(&b, " = ");
    lq__sql_param(&b, LQ__P_ID);
    rc = lq__sql_finish(&b);
    if (rc != LQ_OK || !lq__table_carries_claims(t)) return rc;
    return build_advisory_pick(set, t);
}

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) n++;
    return n;
}

/* The rows of a settled set, from their JSON (JSON_TABLE: MySQL 8.0,
 * MariaDB 10.6; where the server lacks it the statement does not prepare and
 * acks run one by one). */
static void my_held_set_source(lq__sql *b, bool tokens) {
    lq__sql_add(b, "JSON_TABLE(");
    lq__sql_param(b, LQ__P_HELD_SET);
    lq__sql_add(b, tokens ? ", '$[*]' COLUMNS (`lq_id` BIGINT PATH '$[0]', `lq_held` DATETIME(6) PATH '$[1]'))"
                          : ", '$[*]' COLUMNS (`lq_id` BIGINT PATH '$'))");
}

static int my_build_claims(lq__sqlset *set, const lq_table *t) {
    const char *names[LQ__ROLE_COUNT + 3] = {t->name, t->schema, t->id};
    int count = 3;
    for (int role = 0; role < LQ__ROLE_COUNT; role++)
        if (t->columns[role]) names[count++] = t->columns[role];
    for (int i = 0; i < count; i++)
        if (names[i] && utf8_chars(names[i]) > NAME_LIMIT)
            return lq__error(LQ_DIALECT, "mysql: the name \"%s\" is over %d characters", names[i],
                             NAME_LIMIT);
    int rc = t->fifo ? build_fifo_guard(set, t) : LQ_OK;
    if (rc != LQ_OK) return rc;
    switch (lq_table_form(t)) {
    case LQ_FORM_LEASE: return build_locking_claim(set, t, true);
    case LQ_FORM_ADVISORY: return build_advisory_claim(set, t);
    default: return t->partition_limit ? build_key_slot_claim(set, t) : build_locking_claim(set, t, false);
    }
}

/* ------------------------------------------------------------------------ */
/* Prepared statements, cached per connection by statement id. */

/* A server-side statement of the text. */
static int prepare_stmt(MYSQL_STMT **out, lq__conn *c, const char *sql) {
    MYSQL_STMT *st = mysql_stmt_init(c->my);
    if (!st) return conn_error(c, LQ_NOMEM, "cannot make a statement");
    if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql)) != 0) {
        /* A missing table or column, named in the server's message. */
        int rc = stmt_error(st, LQ_SCHEMA, "cannot prepare a statement");
        mysql_stmt_close(st);
        return rc;
    }
    my_bool yes = 1;
    mysql_stmt_attr_set(st, STMT_ATTR_UPDATE_MAX_LENGTH, &yes);
    *out = st;
    return LQ_OK;
}

static int cached(MYSQL_STMT **out, lq__conn *c, int id, const char *sql) {
    if ((*out = lq__cache_find(&c->cache, id))) return LQ_OK;
    MYSQL_STMT *st;
    int rc = prepare_stmt(&st, c, sql);
    if (rc != LQ_OK) return rc;
    if ((rc = lq__cache_add(&c->cache, id, st)) != LQ_OK) {
        mysql_stmt_close(st);
        return rc;
    }
    *out = st;
    return LQ_OK;
}

static int my_prepare(lq__conn *c, const lq__stmt *st) {
    int rc = ensure_thread();
    MYSQL_STMT *stmt;
    return rc == LQ_OK ? noted(c, cached(&stmt, c, st->id, st->sql)) : rc;
}

static void to_mysql_time(MYSQL_TIME *out, int64_t epoch_ms) {
    time_t secs = (time_t)(epoch_ms / 1000);
    int ms = (int)(epoch_ms % 1000);
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    struct tm tm;
    gmtime_r(&secs, &tm);
    memset(out, 0, sizeof *out);
    out->year = (unsigned)(tm.tm_year + 1900);
    out->month = (unsigned)tm.tm_mon + 1;
    out->day = (unsigned)tm.tm_mday;
    out->hour = (unsigned)tm.tm_hour;
    out->minute = (unsigned)tm.tm_min;
    out->second = (unsigned)tm.tm_sec;
    out->second_part = (unsigned long)ms * 1000;
    out->time_type = MYSQL_TIMESTAMP_DATETIME;
}

/* A time as a DATETIME reads it from text: UTC, as the session runs (a
 * token of JSON_TABLE, a rendered statement's parameter). */
static void my_held_time_text(char out[LQ__TIME_TEXT_SIZE], int64_t epoch_ms) {
    MYSQL_TIME t;
    to_mysql_time(&t, epoch_ms);
    snprintf(out, LQ__TIME_TEXT_SIZE, "%04u-%02u-%02u %02u:%02u:%02u.%06lu", t.year % 10000,
             t.month % 100, t.day % 100, t.hour % 100, t.minute % 100, t.second % 100,
             t.second_part % 1000000);
}

/* A DATETIME read back, in the core's text form. */
static void time_text(char out[LQ__TIME_TEXT_SIZE], const MYSQL_TIME *t) {
    char text[64];
    int64_t ms = 0;
    snprintf(text, sizeof text, "%04u-%02u-%02u %02u:%02u:%02u.%06lu", t->year % 10000,
             t->month % 100, t->day % 100, t->hour % 100, t->minute % 100, t->second % 100,
             t->second_part % 1000000);
    if (!lq__time_parse(&ms, text)) ms = 0;
    lq__time_text(out, ms);
}

/* The bound values of one statement: a statement's own parameters fit in
 * place, a multi-row insert's are allocated. */
typedef struct param_buf {
    MYSQL_BIND *bind;
    MYSQL_TIME *times;
    unsigned long *lengths;
    MYSQL_BIND bind_in[LQ__MAX_PARAMS];
    MYSQL_TIME times_in[LQ__MAX_PARAMS];
    unsigned long lengths_in[LQ__MAX_PARAMS];
    void *block;
} param_buf;

static int param_buf_make(param_buf *pb, int count) {
    pb->block = NULL;
    pb->bind = pb->bind_in;
    pb->times = pb->times_in;
    pb->lengths = pb->lengths_in;
    if (count <= LQ__MAX_PARAMS) return LQ_OK;
    size_t n = (size_t)count;
    char *block = malloc(n * (sizeof *pb->bind + sizeof *pb->times + sizeof *pb->lengths));
    if (!block) return lq__error(LQ_NOMEM, "out of memory");
    pb->block = block;
    pb->bind = (MYSQL_BIND *)block;
    pb->times = (MYSQL_TIME *)(block + n * sizeof *pb->bind);
    pb->lengths = (unsigned long *)(block + n * (sizeof *pb->bind + sizeof *pb->times));
    return LQ_OK;
}

static void bind_value(param_buf *pb, int i, const lq__value *v) {
    MYSQL_BIND *b = &pb->bind[i];
    memset(b, 0, sizeof *b);
    switch (v->type) {
    case LQ__V_INT:
        b->buffer_type = MYSQL_TYPE_LONGLONG;
        b->buffer = (void *)&v->i;
        break;
    case LQ__V_TEXT:
    case LQ__V_BLOB:
        b->buffer_type = v->type == LQ__V_TEXT ? MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
        b->buffer = (void *)(v->p ? v->p : "");
        pb->lengths[i] = (unsigned long)v->n;
        b->buffer_length = (unsigned long)v->n;
        b->length = &pb->lengths[i];
        break;
    case LQ__V_TIME:
        to_mysql_time(&pb->times[i], v->i);
        b->buffer_type = MYSQL_TYPE_DATETIME;
        b->buffer = &pb->times[i];
        break;
    default: b->buffer_type = MYSQL_TYPE_NULL;
    }
}

/* One result column: its buffer, and how it reads into an lq__value. */
typedef enum col_kind { COL_INT, COL_TIME, COL_TEXT, COL_BLOB, COL_NUMBER } col_kind;

typedef struct result_col {
    col_kind kind;
    int64_t i;
    MYSQL_TIME time;
    char *data;
    unsigned long length;
    my_bool is_null, error;
    char text[LQ__TIME_TEXT_SIZE];
} result_col;

static col_kind kind_of(const MYSQL_FIELD *f) {
    switch (f->type) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_YEAR: return COL_INT;
    case MYSQL_TYPE_DATETIME:
    case MYSQL_TYPE_TIMESTAMP:
    case MYSQL_TYPE_DATE: return COL_TIME;
    case MYSQL_TYPE_DECIMAL:
    case MYSQL_TYPE_NEWDECIMAL:
    case MYSQL_TYPE_FLOAT:
    case MYSQL_TYPE_DOUBLE: return COL_NUMBER;
    case MYSQL_TYPE_TINY_BLOB:
    case MYSQL_TYPE_MEDIUM_BLOB:
    case MYSQL_TYPE_LONG_BLOB:
    case MYSQL_TYPE_BLOB:
    case MYSQL_TYPE_STRING:
    case MYSQL_TYPE_VAR_STRING:
    case MYSQL_TYPE_VARCHAR: return f->charsetnr == 63 ? COL_BLOB : COL_TEXT; /* 63: binary */
    default: return COL_TEXT;
    }
}

/* Reads a stored result row by row into the callback. */
static int read_rows(MYSQL_STMT *st, MYSQL_RES *meta, lq__row_fn on_row, void *ctx) {
    unsigned n = mysql_num_fields(meta);
    MYSQL_FIELD *fields = mysql_fetch_fields(meta);
    MYSQL_BIND *binds = calloc(n ? n : 1, sizeof *binds);
    result_col *cols = calloc(n ? n : 1, sizeof *cols);
    lq__value *values = calloc(n ? n : 1, sizeof *values);
    int rc = binds && cols && values ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
    for (unsigned i = 0; rc == LQ_OK && i < n; i++) {
        MYSQL_BIND *b = &binds[i];
        result_col *col = &cols[i];
        col->kind = kind_of(&fields[i]);
        b->is_null = &col->is_null;
        b->error = &col->error;
        b->length = &col->length;
        if (col->kind == COL_INT) {
            b->buffer_type = MYSQL_TYPE_LONGLONG;
            b->buffer = &col->i;
            b->is_unsigned = (fields[i].flags & UNSIGNED_FLAG) != 0;
        } else if (col->kind == COL_TIME) {
            b->buffer_type = MYSQL_TYPE_DATETIME;
            b->buffer = &col->time;
        } else {
            /* max_length: the longest value of the stored result. */
            unsigned long size = fields[i].max_length + 1;
            if (!(col->data = malloc(size))) rc = lq__error(LQ_NOMEM, "out of memory");
            b->buffer_type = col->kind == COL_BLOB ? MYSQL_TYPE_BLOB : MYSQL_TYPE_STRING;
            b->buffer = col->data;
            b->buffer_length = size;
        }
    }
    if (rc == LQ_OK && mysql_stmt_bind_result(st, binds) != 0)
        rc = stmt_error(st, LQ_BACKEND, "cannot bind a result");
    while (rc == LQ_OK) {
        int f = mysql_stmt_fetch(st);
        if (f == MYSQL_NO_DATA) break;
        if (f == 1) {
            rc = stmt_error(st, LQ_BACKEND, "reading a row");
            break;
        }
        for (unsigned i = 0; i < n; i++) {
            result_col *col = &cols[i];
            lq__value *v = &values[i];
            memset(v, 0, sizeof *v);
            if (col->is_null) continue;
            switch (col->kind) {
            case COL_INT:
                v->type = LQ__V_INT;
                v->i = col->i;
                break;
            case COL_TIME:
                time_text(col->text, &col->time);
                v->type = LQ__V_TEXT;
                v->p = col->text;
                v->n = strlen(col->text);
                break;
            default: {
                unsigned long room = binds[i].buffer_length - 1;
                unsigned long len = col->length < room ? col->length : room;
                col->data[len] = '\0';
                v->type = col->kind == COL_BLOB ? LQ__V_BLOB : LQ__V_TEXT;
                v->p = col->data;
                v->n = len;
                if (col->kind == COL_NUMBER) v->i = (int64_t)strtod(col->data, NULL);
            }
            }
        }
        if (on_row) rc = on_row(ctx, values, (int)n);
    }
    for (unsigned i = 0; cols && i < n; i++) free(cols[i].data);
    free(binds);
    free(cols);
    free(values);
    return rc;
}

/* Runs a prepared statement with bound values; rows go to on_row. */
static int run_stmt(int64_t *changes, MYSQL_STMT *st, const lq__value *values, int count,
                    lq__row_fn on_row, void *ctx, int64_t *insert_id) {
    param_buf pb;
    int rc = param_buf_make(&pb, count);
    if (rc != LQ_OK) return rc;
    for (int i = 0; i < count; i++) bind_value(&pb, i, &values[i]);
    if (count && mysql_stmt_bind_param(st, pb.bind) != 0) rc = stmt_error(st, LQ_BACKEND, "cannot bind a value");
    else if (mysql_stmt_execute(st) != 0) rc = stmt_error(st, LQ_BACKEND, "a statement failed");
    free(pb.block);
    if (rc != LQ_OK) return rc;
    MYSQL_RES *meta = mysql_stmt_result_metadata(st);
    if (meta) {
        /* The whole result first: a statement that fails part way fails
         * before any row reaches the caller. */
        bool failed = mysql_stmt_store_result(st) != 0;
        if (failed) rc = stmt_error(st, LQ_BACKEND, "a statement failed");
        if (rc == LQ_OK) rc = read_rows(st, meta, on_row, ctx);
        mysql_free_result(meta);
        if (changes) *changes = (int64_t)mysql_stmt_num_rows(st);
        mysql_stmt_free_result(st);
        /* A result that ended in an error (a lock wait in a locking read)
         * leaves the statement waiting for rows that never come: its next
         * execution would wait out the read timeout. A reset clears it. */
        if (failed && rc != LQ_CONNECT) mysql_stmt_reset(st);
    } else {
        if (changes) *changes = (int64_t)mysql_stmt_affected_rows(st);
        if (insert_id) *insert_id = (int64_t)mysql_stmt_insert_id(st);
    }
    return rc;
}

/* A transaction begun ahead that the caller did not begin in ends first:
 * it is empty, and a statement out of any begin is to commit on its own. */
static int end_begun_ahead(lq__conn *c) {
    if (!c->begun_ahead) return LQ_OK;
    c->begun_ahead = false;
    return run_plain(c, "COMMIT");
}

static int my_exec(int64_t *changes, lq__conn *c, const lq__stmt *st, const lq__value *args,
                   lq__row_fn on_row, void *ctx) {
    int rc = ensure_thread();
    if (rc == LQ_OK) rc = end_begun_ahead(c);
    if (rc != LQ_OK) return rc;
    int count = lq__stmt_values(st);
    lq__value in_place[LQ__MAX_PARAMS];
    lq__value *values = count <= LQ__MAX_PARAMS ? in_place : malloc((size_t)count * sizeof *values);
    bool given_id = false;
    if (!values) rc = lq__error(LQ_NOMEM, "out of memory");
    for (int i = 0; rc == LQ_OK && i < count; i++) {
        values[i] = *lq__stmt_arg(st, args, i);
        if (st->params[i % st->nparams] == LQ__P_ID) given_id = true;
    }
    /* Checked before the prepare too, so a refused statement sends nothing. */
    if (rc == LQ_OK) rc = fits_packet(c, st->sql, count ? values : NULL, count);
    MYSQL_STMT *stmt = NULL;
    /* A statement that runs once (id 0) is prepared for this call only. */
    bool once = st->id == 0;
    if (rc == LQ_OK) rc = noted(c, once ? prepare_stmt(&stmt, c, st->sql) : cached(&stmt, c, st->id, st->sql));
    bool insert = st->insert;
    int64_t id = 0;
    if (rc == LQ_OK) rc = noted(c, run_stmt(changes, stmt, values, count, on_row, ctx, &id));
    /* No INSERT .. RETURNING: the new row's id comes as a one-column row,
     * the id the message carried or the one the database generated. */
    if (rc == LQ_OK && insert && on_row && mysql_stmt_field_count(stmt) == 0) {
        lq__value v = {.type = LQ__V_INT, .i = given_id ? args[LQ__P_ID].i : id};
        rc = on_row(ctx, &v, 1);
    }
    if (values != in_place) free(values);
    if (once && stmt) mysql_stmt_close(stmt);
    return rc;
}

static int my_execute(int64_t *changes, lq__conn *c, const char *sql, const char *const *params,
                      int count) {
    int rc = ensure_thread();
    if (rc == LQ_OK) rc = end_begun_ahead(c);
    if (rc != LQ_OK) return rc;
    if (changes) *changes = 0;
    if (count > LQ__MAX_PARAMS)
        return lq__error(LQ_MISUSE, "a statement takes at most %d parameters here", LQ__MAX_PARAMS);
    lq__value values[LQ__MAX_PARAMS];
    for (int i = 0; i < count; i++)
        values[i] = params[i]
                        ? (lq__value){.type = LQ__V_TEXT, .p = params[i], .n = strlen(params[i])}
                        : (lq__value){.type = LQ__V_NULL};
    if ((rc = fits_packet(c, sql, count ? values : NULL, count)) != LQ_OK) return rc;
    if (count == 0) {
        /* Text protocol: any statement (SAVEPOINT too), one result or more. */
        if (mysql_real_query(c->my, sql, (unsigned long)strlen(sql)) != 0)
            return conn_error(c, LQ_BACKEND, "the statement failed");
        do {
            MYSQL_RES *res = mysql_store_result(c->my);
            if (res) {
                if (changes) *changes = (int64_t)mysql_num_rows(res);
                mysql_free_result(res);
            } else if (mysql_field_count(c->my) != 0) {
                return conn_error(c, LQ_BACKEND, "the statement failed");
            } else if (changes) {
                *changes = (int64_t)mysql_affected_rows(c->my);
            }
        } while (mysql_next_result(c->my) == 0);
        return mysql_errno(c->my) ? conn_error(c, LQ_BACKEND, "the statement failed") : LQ_OK;
    }
    MYSQL_STMT *st = mysql_stmt_init(c->my);
    if (!st) return conn_error(c, LQ_NOMEM, "cannot make a statement");
    if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql)) != 0) {
        rc = noted(c, stmt_error(st, LQ_BACKEND, "cannot prepare the statement"));
        mysql_stmt_close(st);
        return rc;
    }
    if (mysql_stmt_param_count(st) != (unsigned long)count) {
        rc = lq__error(LQ_MISUSE, "mysql: the statement has %lu placeholders and %d parameters",
                       mysql_stmt_param_count(st), count);
        mysql_stmt_close(st);
        return rc;
    }
    rc = noted(c, run_stmt(changes, st, values, count, NULL, NULL, NULL));
    mysql_stmt_close(st);
    return rc;
}

static int my_begin(lq__conn *c, int isolation) {
    int rc = ensure_thread();
    if (rc != LQ_OK) return rc;
    if (c->begun_ahead && isolation == LQ_ISOLATION_DEFAULT) {
        c->begun_ahead = false; /* the session's own isolation, as START TRANSACTION's */
        return LQ_OK;
    }
    if ((rc = end_begun_ahead(c)) != LQ_OK) return rc;
    /* The session runs at READ COMMITTED; another level is set for the next
     * transaction only. */
    const char *level = NULL;
    switch (isolation) {
    case LQ_ISOLATION_READ_UNCOMMITTED:
        level = "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED";
        break;
    case LQ_ISOLATION_REPEATABLE_READ:
        level = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ";
        break;
    case LQ_ISOLATION_SERIALIZABLE: level = "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"; break;
    default: break;
    }
    if (level && (rc = run_plain(c, level)) != LQ_OK) return rc;
    return run_plain(c, "START TRANSACTION");
}

static void give_back(lq__conn *c, bool keyed_only);

static int my_commit(lq__conn *c) {
    int rc = ensure_thread();
    c->begun_ahead = false;
    if (rc == LQ_OK) rc = run_plain(c, "COMMIT");
    give_back(c, false);
    return rc;
}

/* COMMIT AND CHAIN; *open tells whether the next transaction is open now. */
static int commit_and_chain(bool *open, lq__conn *c) {
    unsigned int status = 0;
    *open = false;
    c->begun_ahead = false;
    int rc = ensure_thread();
    if (rc == LQ_OK) rc = run_plain(c, "COMMIT AND CHAIN");
    if (rc == LQ_OK && mariadb_get_infov(c->my, MARIADB_CONNECTION_SERVER_STATUS, &status) == 0)
        *open = status & SERVER_STATUS_IN_TRANS;
    return rc;
}

/* The transaction begun ahead is the next one the worker's settlement runs
 * in (an advisory run that carried its claim): a START TRANSACTION less a
 * row. */
static int my_commit_then_begin(lq__conn *c) {
    bool open;
    int rc = commit_and_chain(&open, c);
    c->begun_ahead = open;
    give_back(c, false);
    return rc;
}

/* The chained transaction keeps the queue's slots: the claim that follows
 * in it counts them as its own (my_take_slots). A key's slot goes back, as
 * the next row may be of another key. */
static int my_commit_chain(bool *chained, lq__conn *c) {
    int rc = commit_and_chain(chained, c);
    give_back(c, *chained);
    return rc;
}

static int my_rollback(lq__conn *c) {
    /* A lost connection's transaction ends with its session, when the pool
     * closes it: nothing to send, and the failure that lost it stays the
     * thread's error. */
    c->begun_ahead = false;
    if (c->lost) return LQ_OK;
    int rc = ensure_thread();
    if (rc != LQ_OK) return rc;
    /* Also after a deadlock (1213), which rolled back the transaction
     * already: ROLLBACK is then harmless. */
    rc = run_plain(c, "ROLLBACK");
    give_back(c, false);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Advisory keys. The key is the lock name the candidate query rendered. */

typedef struct int_answer {
    int64_t value;
    bool seen;
} int_answer;

static int on_int_answer(void *ctx, const lq__value *cols, int count) {
    int_answer *a = ctx;
    if (count >= 1 && cols[0].type == LQ__V_INT) {
        a->value = cols[0].i;
        a->seen = true;
    }
    return LQ_OK;
}

static int ask(int64_t *answer, lq__conn *c, int id, const char *sql, const char *key) {
    MYSQL_STMT *st;
    int rc = ensure_thread();
    if (rc == LQ_OK) rc = noted(c, cached(&st, c, id, sql));
    if (rc != LQ_OK) return rc;
    lq__value v[2] = {{.type = LQ__V_TEXT, .p = key, .n = strlen(key)},
                     {.type = LQ__V_TEXT, .p = key, .n = strlen(key)}};
    int_answer a = {0, false};
    rc = noted(c, run_stmt(NULL, st, v, (int)mysql_stmt_param_count(st), on_int_answer, &a, NULL));
    if (rc == LQ_OK && !a.seen) rc = lq__error(LQ_BACKEND, "mysql: a lock call returned no answer");
    *answer = a.value;
    return rc;
}

/* GET_LOCK is re-entrant within a session: taking a name this session holds
 * already would count it twice, and one release would leave it held. So a
 * name held by anyone, this session included, is not taken. */
static int my_try_lock_key(bool *taken, lq__conn *c, const lq__broker_target *target,
                           const char *key) {
    (void)target;
    int64_t answer = 0;
    *taken = false;
    int rc = ask(&answer, c, STMT_LOCK_KEY,
                 "SELECT IF(IS_USED_LOCK(?) IS NULL, "
                 "CAST(COALESCE(GET_LOCK(?, 0), 0) AS SIGNED), 0)",
                 key);
    if (rc == LQ_OK) *taken = answer == 1;
    return rc;
}

/* Confirmed when the release freed the name for other sessions: released,
 * and no longer held by this one (a count left over is not a release). */
static bool my_unlock_key(lq__conn *c, const lq__broker_target *target, const char *key) {
    (void)target;
    int64_t answer = 0;
    if (!c) return false;
    int rc = ask(&answer, c, STMT_UNLOCK_KEY,
                 "SELECT IF(COALESCE(RELEASE_LOCK(?), 0) = 1, "
                 "IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 0, 1), 0)",
                 key);
    return rc == LQ_OK && answer == 1;
}

/* A lock name as SQL text: CONVERT(X'<its bytes in hex>' USING utf8mb4),
 * the very string a bound parameter gives (the session is utf8mb4), with no
 * escaping for sql_mode or charset to get wrong. */
static void add_name(lq__strbuf *sb, const char *name) {
    lq__sb_add(sb, "CONVERT(X'");
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) lq__sb_addf(sb, "%02x", *p);
    lq__sb_add(sb, "' USING utf8mb4)");
}

/* "(IS_USED_LOCK(<name>) IS NULL AND COALESCE(GET_LOCK(<name>, 0), 0) = 1)":
 * my_try_lock_key's try. */
static void add_try(lq__strbuf *sb, const char *name) {
    lq__sb_add(sb, "(IS_USED_LOCK(");
    add_name(sb, name);
    lq__sb_add(sb, ") IS NULL AND COALESCE(GET_LOCK(");
    add_name(sb, name);
    lq__sb_add(sb, ", 0), 0) = 1)");
}

enum { TRIES_A_STATEMENT = 16 }; /* slots one statement tries: its size stays bounded */

/* Slots "<prefix><i>" for `count` i from `from` (round the n), tried in turn
 * in one statement: CASE stops at its first true branch and AND at its first
 * false, so no name past the first free one is tried, and `then` is tried
 * once, in that branch. The answer is 2 * the slot, plus 1 where `then` was
 * taken; NULL when every slot tried is held. */
static int try_slots(int *taken, bool *then_taken, lq__conn *c, const char *prefix, int n, int from,
                     int count, const char *then) {
    lq__strbuf sql = {0};
    lq__sb_add(&sql, "SELECT CASE");
    for (int i = 0; i < count; i++) {
        int slot = (from + i) % n;
        char name[NAME_LIMIT + 16];
        snprintf(name, sizeof name, "%s%d", prefix, slot);
        lq__sb_add(&sql, " WHEN ");
        add_try(&sql, name);
        lq__sb_addf(&sql, " THEN %d", 2 * slot);
        if (then) {
            lq__sb_add(&sql, " + IF(");
            add_try(&sql, then);
            lq__sb_add(&sql, ", 1, 0)");
        }
    }
    lq__sb_add(&sql, " END");
    char *text = lq__sb_take(&sql);
    if (!text) return lq__error(LQ_NOMEM, "out of memory");
    char *answer = NULL;
    int rc = noted(c, query_row_as(c, text, "trying the concurrency slots", &answer, 1));
    free(text);
    if (rc == LQ_OK && answer) {
        int got = atoi(answer);
        *taken = got / 2;
        *then_taken = got % 2 == 1;
    }
    free(answer);
    return rc;
}

/* The n slots from `first`, a statement for each TRIES_A_STATEMENT of them,
 * until one is taken. */
static int my_try_lock_any(int *taken, bool *then_taken, lq__conn *c, const char *prefix, int n, int first,
                           const char *then) {
    *taken = -1;
    *then_taken = false;
    int rc = ensure_thread();
    for (int from = 0; rc == LQ_OK && *taken < 0 && from < n; from += TRIES_A_STATEMENT) {
        int count = n - from < TRIES_A_STATEMENT ? n - from : TRIES_A_STATEMENT;
        rc = try_slots(taken, then_taken, c, prefix, n, first + from, count, then);
    }
    return rc;
}

/* One release as my_unlock_key confirms it, 1 when confirmed; a NULL name
 * is skipped (1). */
#define RELEASED "IF(? IS NULL, 1, IF(COALESCE(RELEASE_LOCK(?), 0) = 1, " \
                 "IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 0, 1), 0))"

/* Up to three releases in one statement; every one is asked for (a sum,
 * where an AND would stop at the first false). */
static bool my_unlock_keys(lq__conn *c, const char *const keys[3]) {
    MYSQL_STMT *st;
    if (!c || ensure_thread() != LQ_OK ||
        noted(c, cached(&st, c, STMT_UNLOCK_KEYS,
                        "SELECT CAST(" RELEASED " + 2 * " RELEASED " + 4 * " RELEASED " AS SIGNED)")) != LQ_OK)
        return false;
    lq__value v[9];
    for (int i = 0; i < 9; i++) {
        const char *key = keys[i / 3];
        v[i] = key ? (lq__value){.type = LQ__V_TEXT, .p = key, .n = strlen(key)} : (lq__value){.type = LQ__V_NULL};
    }
    int_answer a = {0, false};
    int rc = noted(c, run_stmt(NULL, st, v, 9, on_int_answer, &a, NULL));
    return rc == LQ_OK && a.seen && a.value == 7;
}

/* The row lock form's slots. MySQL has no lock that ends with the
 * transaction, so a slot is a GET_LOCK name which the session notes and
 * gives back once the transaction has ended. Between the two it is held a
 * moment longer than the row: the queue (or the key) runs below its limit
 * then, never above. A session that dies lets its slots go at once. */
static bool holds_slot(const lq__conn *c, const char *name) {
    for (int i = 0; i < c->slots_held; i++)
        if (strcmp(c->slots[i].name, name) == 0) return true;
    return false;
}

static int note_slot(lq__conn *c, const char *name, bool keyed) {
    void *slots = c->slots;
    int rc = lq__room_for_one(&slots, &c->slots_cap, c->slots_held, sizeof *c->slots, 4);
    c->slots = slots;
    if (rc != LQ_OK) return rc;
    held_slot *h = &c->slots[c->slots_held++];
    snprintf(h->name, sizeof h->name, "%s", name);
    h->keyed = keyed;
    return LQ_OK;
}

/* The slots held (all, or the keys' only), each given back; a release not
 * confirmed leaves the session to be closed (its end frees the name): the
 * connection is never lent again. */
static void give_back(lq__conn *c, bool keyed_only) {
    int kept = 0;
    for (int i = 0; i < c->slots_held; i++) {
        if (keyed_only && !c->slots[i].keyed) c->slots[kept++] = c->slots[i];
        else if (!c->lost && !my_unlock_key(c, NULL, c->slots[i].name)) c->lost = true;
    }
    c->slots_held = kept;
}

#define SLOT_PREFIX "lq-slot-%016llx-" /* the queue's hash; the slot number follows */

static void slot_name(char out[NAME_LIMIT + 1], uint64_t queue, int slot) {
    snprintf(out, NAME_LIMIT + 1, SLOT_PREFIX "%d", (unsigned long long)queue, slot);
}

static int first_slot(const lq__conn *c, int limit) {
    unsigned seed = (unsigned)lq__mono_us() ^ (unsigned)(uintptr_t)c;
    return rand_r(&seed) % limit;
}

/* Queue-wide concurrency: the advisory form's slot names,
 * "lq-slot-<hash of the queue>-<i>". Those a chained transaction kept count
 * first; the others are tried from a random one, so claims beside each other
 * seldom meet. */
static int my_take_slots(int *taken, lq__conn *c, const char *key, int limit, int want) {
    uint64_t queue = lq__fnv1a_str(key);
    char name[NAME_LIMIT + 1], prefix[NAME_LIMIT + 1];
    int n = snprintf(prefix, sizeof prefix, SLOT_PREFIX, (unsigned long long)queue);
    int held = 0;
    for (int i = 0; i < c->slots_held; i++)
        held += !c->slots[i].keyed && strncmp(c->slots[i].name, prefix, (size_t)n) == 0;
    int first = first_slot(c, limit);
    for (int i = 0; i < limit && held < want; i++) {
        slot_name(name, queue, (first + i) % limit);
        if (holds_slot(c, name)) continue;
        bool got;
        int rc = my_try_lock_key(&got, c, NULL, name);
        if (rc == LQ_OK && got && (rc = note_slot(c, name, false)) != LQ_OK)
            my_unlock_key(c, NULL, name);
        if (rc != LQ_OK) return rc;
        held += got;
    }
    *taken = held < want ? held : want;
    return LQ_OK;
}

typedef struct key_slot_answer {
    char name[NAME_LIMIT + 1];
    bool taken;
} key_slot_answer;

static int on_key_slot(void *ctx, const lq__value *cols, int count) {
    key_slot_answer *a = ctx;
    if (count < 2 || cols[0].type != LQ__V_TEXT || cols[0].n > NAME_LIMIT)
        return lq__error(LQ_BACKEND, "mysql: a key slot's try returned no name");
    memcpy(a->name, cols[0].p, cols[0].n);
    a->name[cols[0].n] = '\0';
    a->taken = cols[1].type == LQ__V_INT && cols[1].i == 1;
    return LQ_OK;
}

/* partition_concurrency: one of the `limit` slots of the key of row `id`
 * (locked by this transaction), named by the server from the key's column
 * as the claim's filter names them (sqlset.key_slot). */
static int my_take_key_slot(bool *taken, lq__conn *c, const lq__stmt *try_slot, int64_t id,
                            int limit) {
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_ID] = (lq__value){.type = LQ__V_INT, .i = id};
    int first = first_slot(c, limit);
    *taken = false;
    for (int i = 0; i < limit && !*taken; i++) {
        key_slot_answer a = {.taken = false};
        args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = (first + i) % limit};
        int rc = my_exec(NULL, c, try_slot, args, on_key_slot, &a);
        if (rc == LQ_OK && a.taken && (rc = note_slot(c, a.name, true)) != LQ_OK)
            my_unlock_key(c, NULL, a.name);
        if (rc != LQ_OK) return rc;
        *taken = a.taken;
    }
    return LQ_OK;
}

/* A queue-wide limit's lock: a GET_LOCK name of its own, waiting as long as
 * a row lock would (innodb_lock_wait_timeout). GET_LOCK outlives
 * transactions, so it is given back after the claim's; a session that ends
 * gives it back too. A name over GET_LOCK's 64 characters is hashed (two
 * queues sharing a lock only take turns more often). */
static void queue_lock_name(char out[NAME_LIMIT + 1], const char *key) {
    size_t n = strlen(key);
    if (n <= NAME_LIMIT) {
        memcpy(out, key, n + 1);
        return;
    }
    uint64_t h = lq__fnv1a(LQ__FNV_OFFSET, key, n);
    snprintf(out, NAME_LIMIT + 1, "%.40s#%016llx", key, (unsigned long long)h);
}

static int my_lock_queue(lq__conn *c, const char *key) {
    char name[NAME_LIMIT + 1];
    queue_lock_name(name, key);
    int64_t answer = 0;
    /* Held by this session already (a give-back that failed): not taken twice. */
    int rc = ask(&answer, c, STMT_LOCK_QUEUE,
                 "SELECT IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 1, "
                 "CAST(COALESCE(GET_LOCK(?, @@SESSION.innodb_lock_wait_timeout), 0) AS SIGNED))",
                 name);
    if (rc == LQ_OK && answer != 1)
        rc = lq__error(LQ_CONTENTION, "mysql: the lock of queue %s was not free in time", key);
    return rc;
}

static bool my_unlock_queue(lq__conn *c, const char *key) {
    char name[NAME_LIMIT + 1];
    queue_lock_name(name, key);
    int64_t answer = 0;
    return c && ask(&answer, c, STMT_UNLOCK_QUEUE, "SELECT COALESCE(RELEASE_LOCK(?), 0)", name) ==
                    LQ_OK && answer == 1;
}

/* ---- tables ---- */

/* No CREATE INDEX IF NOT EXISTS in MySQL: the index is part of the table's
 * CREATE TABLE IF NOT EXISTS, which is also atomic. */
static const lq__ddl_types my_ddl = {
    .id_generated = "BIGINT AUTO_INCREMENT PRIMARY KEY",
    .id_plain = "BIGINT PRIMARY KEY",
    .bytes = "LONGBLOB NOT NULL",
    .integer = "INT NOT NULL DEFAULT",
    .time = "DATETIME(3)",
    .time_due = "DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)",
    .text = "VARCHAR(255)",
    .key_text = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    .json = "JSON",
    .index_in_table = true,
    .duplicate_index = 1061, /* ER_DUP_KEYNAME */
};

static void my_schema_query(lq__sql *b) {
    lq__sql_add(b, "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ");
    lq__sql_param(b, LQ__P_SCHEMA);
}

static void my_columns_query(lq__sql *b) {
    lq__sql_add(b, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
                   "WHERE TABLE_SCHEMA = COALESCE(");
    lq__sql_param(b, LQ__P_SCHEMA);
    lq__sql_add(b, ", DATABASE()) AND TABLE_NAME = ");
    lq__sql_param(b, LQ__P_NAME);
    lq__sql_add(b, " ORDER BY ORDINAL_POSITION");
}

static void my_view_query(lq__sql *b) {
    lq__sql_add(b, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_TYPE = 'VIEW' "
                   "AND TABLE_SCHEMA = COALESCE(");
    lq__sql_param(b, LQ__P_SCHEMA);
    lq__sql_add(b, ", DATABASE()) AND TABLE_NAME = ");
    lq__sql_param(b, LQ__P_NAME);
}

static void my_byte_length(lq__sql *b, int role) {
    lq__sql_add(b, "LENGTH(");
    lq__sql_col(b, role);
    lq__sql_add(b, ")");
}

static bool type_in(const char *type, const char *const *names) {
    for (; *names; names++)
        if (strcasecmp(type, *names) == 0) return true;
    return false;
}

/* MariaDB's JSON is LONGTEXT with a check: text types hold JSON there. */
static unsigned my_type_kinds(const char *type) {
    static const char *const integers[] = {"tinyint", "smallint", "mediumint", "int", "bigint", NULL};
    static const char *const bytes[] = {"tinyblob", "blob", "mediumblob", "longblob", "binary",
                                        "varbinary", NULL};
    static const char *const texts[] = {"char", "varchar", "tinytext", "text", "mediumtext",
                                        "longtext", NULL};
    static const char *const times[] = {"datetime", "timestamp", NULL};
    if (type_in(type, integers)) return LQ__KIND_INTEGER;
    if (type_in(type, bytes)) return LQ__KIND_BYTES;
    if (type_in(type, texts)) return LQ__KIND_TEXT | LQ__KIND_JSON;
    if (type_in(type, times)) return LQ__KIND_TIME;
    if (strcasecmp(type, "json") == 0) return LQ__KIND_JSON;
    return 0;
}

/* MariaDB has INSERT .. RETURNING (10.5; its floor here is 10.6); MySQL has
 * none, and its LAST_INSERT_ID names only a multi-row insert's first row. */
static bool my_insert_rows_returning(lq__conn *c) { return server_is_mariadb(c->my); }

static void my_now_ms_sql(lq__sql *b) {
    lq__sql_add(b, "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)");
}

static void my_advisory_key(lq__sql *b) { guarded_lock_name(b, b->table); }

const lq__dialect lq__mysql_dialect = {
    .name = "mysql",
    .forms = (1u << LQ_FORM_ROW_LOCK) | (1u << LQ_FORM_LEASE) | (1u << LQ_FORM_ADVISORY),
    .single_writer = false,
    .advisory_holds_connection = true,
    .whole_second_leases = true,
    .read_uncommitted = true,
    .insert_defaults = " () VALUES ()", /* MySQL has no DEFAULT VALUES */
    .listen_notify = false,
    .claim_writes_lease = false,
    .counts_by_holds = true,
    .insert_returning = false,
    .last_insert_id = true,
    .max_params = 65535, /* the protocol's 16-bit parameter count */
    .insert_rows_returning = my_insert_rows_returning,
    .parse_url = my_parse_url,
    .free_target = my_free_target,
    .connect = my_connect,
    .disconnect = my_disconnect,
    .reusable = my_reusable,
    .closed_while_idle = my_closed_while_idle,
    .check_version = my_check_version,
    .node_local_locks = my_node_local_locks,
    .quote = '\x60',
    .placeholder = my_placeholder,
    .rendered_placeholder = my_placeholder,
    .rendered_time_text = my_held_time_text,
    .build_claims = my_build_claims,
    .held_set_source = my_held_set_source,
    .held_time_text = my_held_time_text,
    .held_set_joins = true,
    .prepare = my_prepare,
    .exec = my_exec,
    .execute = my_execute,
    .borrow = my_borrow,
    .release_borrowed = my_disconnect,
    .begin = my_begin,
    .commit = my_commit,
    .commit_chain = my_commit_chain,
    .commit_then_begin = my_commit_then_begin,
    .rollback = my_rollback,
    .ddl = &my_ddl,
    .schema_query = my_schema_query,
    .columns_query = my_columns_query,
    .view_query = my_view_query,
    .columns_fold_case = true,
    .type_kinds = my_type_kinds,
    .byte_length = my_byte_length,
    .now_ms_sql = my_now_ms_sql,
    .lock_queue = my_lock_queue,
    .unlock_queue = my_unlock_queue,
    .take_slots = my_take_slots,
    .take_key_slot = my_take_key_slot,
    .advisory_key = my_advisory_key,
    .try_lock_key = my_try_lock_key,
    .unlock_key = my_unlock_key,
    .try_lock_any = my_try_lock_any,
    .unlock_keys = my_unlock_keys,
};
