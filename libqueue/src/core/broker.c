/* The broker: picks the dialect from the URL, owns the pool, keeps the open
 * subscriptions for in-process wake-ups, and interns statements so every
 * connection prepares each text once. */
#include "core/broker.h"

#include "core/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A dialect left out of the build (LQ_WITH_POSTGRESQL, LQ_WITH_MYSQL) keeps
 * its schemes, so that their URLs are refused with the reason. */
#ifdef LQ_WITH_POSTGRESQL
#define LQ__POSTGRES (&lq__postgres_dialect)
#else
#define LQ__POSTGRES NULL
#endif
#ifdef LQ_WITH_MYSQL
#define LQ__MYSQL (&lq__mysql_dialect)
#else
#define LQ__MYSQL NULL
#endif

static const struct {
    const char *scheme;
    const lq__dialect *dialect;
    const char *option; /* the build option that brings it, when left out */
} schemes[] = {
    {"sqlite:", &lq__sqlite_dialect, NULL},
    {"postgresql://", LQ__POSTGRES, "LQ_WITH_POSTGRESQL"},
    {"postgres://", LQ__POSTGRES, "LQ_WITH_POSTGRESQL"},
    {"mysql://", LQ__MYSQL, "LQ_WITH_MYSQL"},
    {"mariadb://", LQ__MYSQL, "LQ_WITH_MYSQL"},
};

/* The build option a URL's scheme needs, when its dialect was left out. */
static const char *left_out_by(const char *url) {
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (!schemes[i].dialect && strncmp(url, schemes[i].scheme, strlen(schemes[i].scheme)) == 0)
            return schemes[i].option;
    return NULL;
}

#define TAKEN_URLS "libqueue takes sqlite:, postgresql://, postgres://, mysql:// and mariadb:// URLs"

/* Why a URL names no dialect, quoting no more of it than its scheme: the
 * rest may hold a password, and so may a string with no scheme at all
 * (libpq's "host=.. password=.." strings). */
static int refuse_scheme(const char *url) {
    size_t n = strcspn(url, ":=@/ \t");
    if (url[n] != ':')
        return lq__error(LQ_DIALECT, "the URL has no scheme (key=value connection strings are not "
                                     "taken); " TAKEN_URLS ", as postgresql://user@host:5432/db?sslmode=require");
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (strncasecmp(url, schemes[i].scheme, n + 1) == 0)
            return lq__error(LQ_DIALECT, "\"%.*s\": its URLs begin %s, written so", (int)n + 1, url,
                             schemes[i].scheme);
    return lq__error(LQ_DIALECT, "\"%.*s\": unknown scheme; " TAKEN_URLS, (int)n + 1, url);
}

const lq__dialect *lq__dialect_for_url(const char *url, const char **rest) {
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        size_t n = strlen(schemes[i].scheme);
        if (schemes[i].dialect && strncmp(url, schemes[i].scheme, n) == 0) {
            *rest = url + n;
            return schemes[i].dialect;
        }
    }
    return NULL;
}

const lq__dialect *lq__dialect_named(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (schemes[i].dialect && n && strncmp(schemes[i].scheme, name, n) == 0 &&
            schemes[i].scheme[n] == ':')
            return schemes[i].dialect;
    return NULL;
}

static void target_free(const lq__dialect *d, lq__broker_target *t) {
    free(t->url);
    free(t->password);
    if (d->free_target) d->free_target(t->own);
}

static void broker_free(lq_broker *b) {
    lq__scheduler_stop(b);
    lq__listener_stop(b);
    lq__pool_destroy(&b->pool);
    for (size_t i = 0; i < b->statement_count; i++) free(b->statements[i].sql);
    free(b->statements);
    lq__publish_cache_free(&b->publish_statements);
    target_free(b->dialect, &b->target);
    target_free(b->dialect, &b->listen_target);
    lq_options_free(b->options);
    pthread_mutex_destroy(&b->mu);
    pthread_mutex_destroy(&b->room_mu);
    free(b);
}

/* A pooler in transaction mode (option pgbouncer, or the URL's parameter)
 * and the direct URL the LISTEN connection takes past it (listen_url). */
static int read_pooler_options(lq_broker *b) {
    const lq__dialect *d = b->dialect;
    const char *pooler = lq__opt_str(b->options, LQ_OPT_PGBOUNCER);
    const char *listen_url = lq__opt_str(b->options, LQ_OPT_LISTEN_URL);
    bool listens = lq__opt_int(b->options, LQ_OPT_LISTEN_NOTIFY) != 0;
    if (pooler && (!d->transaction_pooling || strcmp(pooler, "transaction") != 0))
        return lq__error(LQ_MISUSE, d->transaction_pooling
                                        ? "pgbouncer \"%.32s\": libqueue knows \"transaction\", for "
                                          "PgBouncer's pool_mode transaction; a pooler in session mode "
                                          "needs no option"
                                        : "pgbouncer \"%.32s\": %s takes no pooler option",
                         pooler, d->name);
    if (pooler) b->target.transaction_pooling = true;
    if (listen_url && !listens)
        return lq__error(LQ_MISUSE, "listen_url is the connection of listen_notify, which is off");
    if (listens && b->target.transaction_pooling && !listen_url)
        return lq__error(LQ_MISUSE,
                         "listen_notify through a pooler in transaction mode: LISTEN lives in a server "
                         "session, which the pooler hands to other clients; give listen_url, a URL "
                         "of the server itself, or leave listen_notify off (subscriptions poll)");
    if (!listen_url) return LQ_OK;
    const char *rest = NULL;
    if (lq__dialect_for_url(listen_url, &rest) != d)
        return lq__error(LQ_MISUSE, "listen_url must be a %s URL of the broker's database", d->name);
    if (!(b->listen_target.url = lq__strdup(listen_url))) return lq__error(LQ_NOMEM, "out of memory");
    int rc = d->parse_url(&b->listen_target, listen_url, rest);
    if (rc == LQ_OK && b->listen_target.transaction_pooling)
        return lq__error(LQ_MISUSE, "listen_url leads to a pooler in transaction mode too: "
                                    "it must reach the server itself");
    return rc;
}

int lq_broker_open(lq_broker **out, const char *url, const lq_options *options) {
    lq__error_clear();
    LQ__CHECK_ARG(out, "out is NULL");
    *out = NULL; /* a failure leaves no dangling handle behind */
    LQ__CHECK_ARG(url && *url, "the URL is empty");
    const char *rest;
    const lq__dialect *d = lq__dialect_for_url(url, &rest);
    const char *option = d ? NULL : left_out_by(url);
    if (option)
        return lq__error(LQ_DIALECT, "\"%.*s\": this libqueue was built without that database "
                                     "(build it with %s=ON)",
                         (int)(strcspn(url, ":") + 1), url, option);
    if (!d) return refuse_scheme(url);
    int64_t pool_size = lq__opt_int(options, LQ_OPT_POOL_SIZE);
    int64_t limit = lq__opt_int(options, LQ_OPT_CONNECTION_LIMIT);
    if (limit > 0 && pool_size > limit)
        return lq__error(LQ_CONNECTION_LIMIT,
                         "a pool of %lld connections passes connection_limit %lld",
                         (long long)pool_size, (long long)limit);
    if (lq__opt_int(options, LQ_OPT_LISTEN_NOTIFY) && !d->listen_notify)
        return lq__error(LQ_DIALECT,
                         "listen_notify needs a database that notifies (PostgreSQL); %s wakes "
                         "subscriptions when this process publishes, and polls otherwise",
                         d->name);
    lq_broker *b = calloc(1, sizeof *b);
    if (!b) return lq__error(LQ_NOMEM, "out of memory");
    atomic_init(&b->refs, 1);
    b->dialect = d;
    pthread_mutex_init(&b->mu, NULL);
    pthread_mutex_init(&b->room_mu, NULL);
    int rc = lq__options_copy(&b->options, options);
    if (rc == LQ_OK) rc = (b->target.url = lq__strdup(url)) ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
    if (rc == LQ_OK) rc = d->parse_url(&b->target, url, rest);
    if (rc == LQ_OK) rc = read_pooler_options(b);
    if (rc == LQ_OK) rc = lq__pool_init(&b->pool, d, &b->target, b->options);
    if (rc == LQ_OK) b->room.budget = b->pool.size > 1 ? b->pool.size - 1 : 1;
    if (rc != LQ_OK) {
        if (b->pool.idle) broker_free(b);
        else {
            target_free(b->dialect, &b->target);
            target_free(b->dialect, &b->listen_target);
            lq_options_free(b->options);
            pthread_mutex_destroy(&b->mu);
            pthread_mutex_destroy(&b->room_mu);
            free(b);
        }
        return rc;
    }
    /* One connection now: the database is reachable, new enough, and named. */
    lq__conn *conn;
    rc = lq__pool_acquire(&conn, &b->pool);
    if (rc == LQ_OK) {
        rc = d->check_version(conn, NULL);
        lq__pool_release(&b->pool, conn, rc != LQ_OK);
    }
    if (rc == LQ_OK && lq__opt_int(b->options, LQ_OPT_LISTEN_NOTIFY)) rc = lq__listener_start(b);
    if (rc != LQ_OK) {
        broker_free(b);
        return rc;
    }
    *out = b;
    return LQ_OK;
}

int lq__broker_check_form(const lq_broker *b, const lq_table *t) {
    if (lq_table_form(t) != LQ_FORM_ADVISORY || !b->target.transaction_pooling) return LQ_OK;
    char label[256];
    return lq__error(LQ_MISUSE, "table %s: the advisory form holds each row's lock in a server "
                                "session, which a pooler in transaction mode hands to other clients "
                                "between transactions; use the lease or row lock form through the "
                                "pooler, or connect to the server itself",
                     lq__table_label(t, label, sizeof label));
}

int lq__broker_check_open(lq_broker *b) {
    pthread_mutex_lock(&b->mu);
    bool closed = b->closed;
    pthread_mutex_unlock(&b->mu);
    return closed ? lq__error(LQ_CLOSED, "the broker is closed") : LQ_OK;
}

void lq__broker_ref(lq_broker *b) { atomic_fetch_add(&b->refs, 1); }

void lq__broker_unref(lq_broker *b) {
    if (b && atomic_fetch_sub(&b->refs, 1) == 1) broker_free(b);
}

void lq_broker_close(lq_broker *b) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->closed = true;
    pthread_mutex_unlock(&b->mu);
    lq__scheduler_stop(b); /* no tick is enqueued after the close */
    lq__broker_unref(b);
}

const char *lq_broker_dialect(const lq_broker *b) { return b ? b->dialect->name : ""; }

int lq__broker_intern(lq_broker *b, lq__stmt *stmt) {
    if (!stmt->sql) return LQ_OK;
    pthread_mutex_lock(&b->mu);
    for (size_t i = 0; i < b->statement_count; i++) {
        if (strcmp(b->statements[i].sql, stmt->sql) == 0) {
            stmt->id = b->statements[i].id;
            pthread_mutex_unlock(&b->mu);
            return LQ_OK;
        }
    }
    lq__stmt *grown = realloc(b->statements, (b->statement_count + 1) * sizeof *grown);
    char *copy = lq__strdup(stmt->sql);
    if (!grown || !copy) {
        if (grown) b->statements = grown;
        free(copy);
        pthread_mutex_unlock(&b->mu);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    b->statements = grown;
    b->statements[b->statement_count] = *stmt;
    b->statements[b->statement_count].sql = copy;
    b->statement_count++;
    pthread_mutex_unlock(&b->mu);
    return LQ_OK;
}

int lq__broker_intern_set(lq_broker *b, lq__sqlset *set) {
    lq__stmt *all[LQ__SQLSET_STATEMENTS];
    for (size_t i = 0, n = lq__sqlset_each(set, all); i < n; i++) {
        int rc = lq__broker_intern(b, all[i]);
        if (rc != LQ_OK) return rc;
    }
    return LQ_OK;
}

/* Two optional names: both absent, or both the same. */
static bool same_name(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same_queue(const lq_table *a, const lq_table *b) {
    return same_name(a->schema, b->schema) && strcmp(a->name, b->name) == 0;
}

int lq__broker_attach(lq_broker *b, lq__member *m) {
    pthread_mutex_lock(&b->mu);
    if (b->closed) {
        pthread_mutex_unlock(&b->mu);
        return lq__error(LQ_CLOSED, "the broker is closed");
    }
    /* The pool plus every handler thread's connections within the limit. */
    int64_t limit = lq__opt_int(b->options, LQ_OPT_CONNECTION_LIMIT);
    int threads = m->on_threads * m->thread_connections;
    if (limit > 0 && b->pool.size + b->thread_connections + threads > limit) {
        int pool = b->pool.size, others = b->thread_connections;
        pthread_mutex_unlock(&b->mu);
        return lq__error(LQ_CONNECTION_LIMIT,
                         "connection_limit %lld: a pool of %d, %d connections of other "
                         "subscriptions' threads and %d threads x %d connections of this one "
                         "make %d",
                         (long long)limit, pool, others, m->on_threads, m->thread_connections,
                         pool + others + threads);
    }
    for (lq__member *o = b->members; o; o = o->next) {
        if (same_queue(o->table, m->table) && same_name(o->group, m->group)) {
            char label[256];
            pthread_mutex_unlock(&b->mu);
            return lq__error(LQ_ALREADY_SUBSCRIBED,
                             "table %s%s%s already has a subscription on this broker: one queue "
                             "takes one subscription per process; raise its workers instead",
                             lq__table_label(m->table, label, sizeof label),
                             m->group ? ", group " : "", m->group ? m->group : "");
        }
    }
    int rc = lq__listener_add(b, m->table);
    if (rc == LQ_OK) {
        m->next = b->members;
        b->members = m;
        b->thread_connections += threads;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void lq__broker_detach(lq_broker *b, lq__member *m) {
    pthread_mutex_lock(&b->mu);
    for (lq__member **p = &b->members; *p; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            b->thread_connections -= m->on_threads * m->thread_connections;
            break;
        }
    }
    pthread_mutex_unlock(&b->mu);
}

void lq__broker_wake_room(lq_broker *b, const lq__member *except) {
    pthread_mutex_lock(&b->mu);
    for (lq__member *m = b->members; m; m = m->next)
        if (m != except) m->room_freed(m);
    pthread_mutex_unlock(&b->mu);
}

void lq__broker_wake_all(lq_broker *b) {
    pthread_mutex_lock(&b->mu);
    for (lq__member *m = b->members; m; m = m->next) m->wake(m);
    pthread_mutex_unlock(&b->mu);
}

/* A wake-up for `group` reaches a member of that group, or of every group. */
static bool wakes(const lq__member *m, const char *group) {
    return !group || !m->group || strcmp(group, m->group) == 0;
}

void lq__broker_wake_channel(lq_broker *b, const char *channel, const char *group) {
    char label[256];
    pthread_mutex_lock(&b->mu);
    for (lq__member *m = b->members; m; m = m->next)
        if (strcmp(lq__table_label(m->table, label, sizeof label), channel) == 0 && wakes(m, group))
            m->wake(m);
    pthread_mutex_unlock(&b->mu);
}

void lq__broker_control_changed(lq_broker *b, const char *label, const char *group) {
    char own[256];
    pthread_mutex_lock(&b->mu);
    for (lq__member *m = b->members; m; m = m->next)
        if (strcmp(lq__table_label(m->table, own, sizeof own), label) == 0 && wakes(m, group))
            m->control_changed(m);
    pthread_mutex_unlock(&b->mu);
}

void lq__broker_cancel_heard(lq_broker *b, const char *label, int64_t id) {
    char own[256];
    pthread_mutex_lock(&b->mu);
    for (lq__member *m = b->members; m; m = m->next)
        if (strcmp(lq__table_label(m->table, own, sizeof own), label) == 0) m->cancel_heard(m, id);
    pthread_mutex_unlock(&b->mu);
}

void lq__broker_wake(lq_broker *b, const lq_table *t, const char *group) {
    pthread_mutex_lock(&b->mu);
    for (lq__member *m = b->members; m; m = m->next)
        if (same_queue(m->table, t) && wakes(m, group)) m->wake(m);
    pthread_mutex_unlock(&b->mu);
}
