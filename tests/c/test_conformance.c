#define _POSIX_C_SOURCE 200809L /* nanosleep, clock_gettime, getpid */
/* The C contract on every database and form, through the public ABI alone:
 * the outcomes of pulled and pushed deliveries, attempts, dead letters,
 * set acks, publish fields, lanes by key and a lost lease. SQLite always (a
 * file under argv[1]); PostgreSQL when LQ_TEST_PG_URL is set; MariaDB when
 * LQ_TEST_MARIADB_URL is set; with LQ_REQUIRE_SERVERS set, a server URL
 * missing is a failure. The same checks as tests/python and tests/lua, so the
 * C contract stands without a binding.
 *
 * State is read through the library (a pull that gets nothing, a pull from
 * the dead-letter table, the subscription's counters). The only SQL of the
 * test's own moves times into the past, so a delayed row comes due or a
 * lease runs out without a sleep; it runs through lq_delivery_exec of a
 * delivery held for the whole target (the "runner"), so no client library is
 * needed. Each run makes tables of its own, named after the pid and the start
 * time, and leaves them in the servers' test databases (scripts/test's
 * servers are throwaway); the SQLite file is removed at the end. */
#include "check.h"

#include <libqueue.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    WAIT_MS = 10000,  /* for a delivery that should come: spent only on a failure */
    NOTHING_MS = 250, /* for one that should not: a dozen claims at POLL_MS */
    POLL_MS = 20,
    HOUR_MS = 3600 * 1000
};

typedef struct target {
    const char *name; /* as printed: "sqlite", "postgresql", "mariadb" */
    const char *url;
    const char *past; /* a time long gone, as the dialect stores times */
    lq_broker *broker;
    lq_subscription *runner_sub;
    lq_delivery *runner; /* held for the target's run: its lq_delivery_exec runs the test's SQL */
} target;

static char run_tag[64];
static int table_count;

static void sleep_ms(long ms) {
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *form_name(int form) {
    return form == LQ_FORM_ROW_LOCK ? "row_lock" : form == LQ_FORM_LEASE ? "lease" : "advisory";
}

/* A table name no earlier run used: the servers keep what runs leave, and a
 * pid comes round again. */
static void table_name(char *out, size_t size, const char *what) {
    snprintf(out, size, "%s_%d_%s", run_tag, ++table_count, what);
}

enum {
    WITH_DEAD_TABLE = 1, /* dead letters go to "<name>_dead" */
    WITH_FIELDS = 2,     /* group, priority, headers, partition key; dead letters to group "dead" */
    WITH_KEY = 4         /* partition key */
};

/* Every table has a payload, an attempt and a retry_after column; the form
 * adds locked_until (lease) or a key template (advisory). */
static lq_table *describe(const char *name, int form, int extras) {
    lq_table *t = NULL;
    if (lq_table_new(&t, name) != LQ_OK) {
        fprintf(stderr, "lq_table_new(%s): %s\n", name, lq_errmsg());
        check_failures++;
        return NULL;
    }
    CHECK(lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload") == LQ_OK);
    CHECK(lq_table_set_column(t, LQ_ROLE_ATTEMPT, "attempt") == LQ_OK);
    CHECK(lq_table_set_column(t, LQ_ROLE_RETRY_AFTER, "retry_after") == LQ_OK);
    if (form == LQ_FORM_LEASE) CHECK(lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until") == LQ_OK);
    if (form == LQ_FORM_ADVISORY) {
        /* Keys named after the table: the tables of one database share one
         * key space, and every table's ids start at 1. */
        char key[160];
        snprintf(key, sizeof key, "%s-{id}", name);
        CHECK(lq_table_set_advisory_lock(t, key) == LQ_OK);
    }
    if (extras & WITH_FIELDS) {
        CHECK(lq_table_set_column(t, LQ_ROLE_GROUP, "grp") == LQ_OK);
        CHECK(lq_table_set_column(t, LQ_ROLE_PRIORITY, "priority") == LQ_OK);
        CHECK(lq_table_set_column(t, LQ_ROLE_HEADERS, "headers") == LQ_OK);
        CHECK(lq_table_set_dead_letter(t, "dead") == LQ_OK);
    }
    if (extras & (WITH_FIELDS | WITH_KEY))
        CHECK(lq_table_set_column(t, LQ_ROLE_PARTITION_KEY, "pkey") == LQ_OK);
    if (extras & WITH_DEAD_TABLE) {
        char dead[160];
        snprintf(dead, sizeof dead, "%s_dead", name);
        CHECK(lq_table_set_dead_letter(t, dead) == LQ_OK);
    }
    CHECK(lq_table_form(t) == form);
    return t;
}

/* Creates the table (and its dead-letter table) and checks what was made. */
static void create(lq_broker *b, const lq_table *t) {
    int rc = lq_table_create(b, t, 0);
    if (rc != LQ_OK) fprintf(stderr, "lq_table_create: %s %s\n", lq_status_name(rc), lq_errmsg());
    CHECK(rc == LQ_OK);
    CHECK(lq_table_create(b, t, LQ_CREATE_VERIFY_ONLY) == LQ_OK);
}

/* A subscription polling every POLL_MS; group may be NULL, max_attempts and
 * by_key 0. NULL (a failure counted) when it does not open. */
static lq_subscription *subscribe(lq_broker *b, const lq_table *t, int workers, int max_attempts,
                                  int by_key, const char *group) {
    lq_options *o = NULL;
    lq_subscription *s = NULL;
    if (lq_options_new(&o) != LQ_OK) {
        check_failures++;
        return NULL;
    }
    CHECK(lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, POLL_MS) == LQ_OK);
    CHECK(lq_options_set_int(o, LQ_OPT_WORKERS, workers) == LQ_OK);
    if (max_attempts) CHECK(lq_options_set_int(o, LQ_OPT_MAX_ATTEMPTS, max_attempts) == LQ_OK);
    if (by_key) CHECK(lq_options_set_int(o, LQ_OPT_WORKERS_BY_KEY, by_key) == LQ_OK);
    if (group) CHECK(lq_options_set_str(o, LQ_OPT_GROUP, group) == LQ_OK);
    int rc = lq_subscription_open(&s, b, t, o);
    if (rc != LQ_OK) {
        fprintf(stderr, "lq_subscription_open: %s %s\n", lq_status_name(rc), lq_errmsg());
        check_failures++;
    }
    lq_options_free(o);
    return s;
}

/* Publishes one message of payload `text`; its id, or -1. */
static int64_t publish_text(lq_broker *b, const lq_table *t, const char *text) {
    lq_message *m = NULL;
    int64_t id = -1;
    if (lq_message_new(&m) != LQ_OK) {
        check_failures++;
        return -1;
    }
    CHECK(lq_message_set_payload(m, text, strlen(text)) == LQ_OK);
    int rc = lq_publish(&id, b, t, &m, 1);
    if (rc != LQ_OK) {
        fprintf(stderr, "lq_publish(%s): %s %s\n", text, lq_status_name(rc), lq_errmsg());
        check_failures++;
        id = -1;
    }
    lq_message_free(m);
    return id;
}

static int payload_is(const lq_delivery *d, const char *text) {
    size_t n = strlen(text);
    return lq_delivery_payload_size(d) == n && (n == 0 || memcmp(lq_delivery_payload(d), text, n) == 0);
}

/* The next delivery, which must come; NULL (a failure counted) when none did. */
#define PULL(s) pull_at((s), __LINE__)
static lq_delivery *pull_at(lq_subscription *s, int line) {
    lq_delivery *d = NULL;
    int rc = s ? lq_subscription_next(&d, s, WAIT_MS) : LQ_MISUSE;
    if (rc != LQ_OK) {
        fprintf(stderr, "%s:%d: no delivery within %d ms: %s %s\n", __FILE__, line, WAIT_MS,
                lq_status_name(rc), s ? lq_errmsg() : "no subscription");
        check_failures++;
        return NULL;
    }
    return d;
}

/* A pull within NOTHING_MS must time out: nothing is due. */
#define NOTHING(s) nothing_at((s), __LINE__)
static void nothing_at(lq_subscription *s, int line) {
    lq_delivery *d = NULL;
    int rc = s ? lq_subscription_next(&d, s, NOTHING_MS) : LQ_TIMEOUT;
    if (rc != LQ_TIMEOUT) {
        fprintf(stderr, "%s:%d: expected LQ_TIMEOUT, got %s (row %lld, attempt %d)\n", __FILE__, line,
                lq_status_name(rc), d ? (long long)lq_delivery_id(d) : -1LL,
                d ? lq_delivery_attempt(d) : -1);
        check_failures++;
    }
    lq_delivery_free(d); /* unsettled: back to the queue */
}

/* Runs one statement of the test's own; the rows it wrote, or -1. */
__attribute__((format(printf, 2, 3))) static int64_t run_sql(target *tg, const char *format, ...) {
    char sql[512];
    va_list ap;
    va_start(ap, format);
    vsnprintf(sql, sizeof sql, format, ap);
    va_end(ap);
    int64_t changes = -1;
    int rc = tg->runner ? lq_delivery_exec(&changes, tg->runner, sql, NULL, 0) : LQ_MISUSE;
    if (rc != LQ_OK) {
        fprintf(stderr, "%s: %s %s\n", sql, lq_status_name(rc), tg->runner ? lq_errmsg() : "no runner");
        check_failures++;
        return -1;
    }
    return changes;
}

/* Makes row `id` of `table` due now (retry_after in the past). */
static void make_due(target *tg, const char *table, int64_t id) {
    CHECK(run_sql(tg, "UPDATE %s SET retry_after = %s WHERE id = %lld", table, tg->past, (long long)id) == 1);
}

/* The dead-letter table holds exactly these rows (ids and payloads); each is
 * acked there, which leaves it empty. */
static void expect_dead(lq_broker *b, const lq_table *dead, const int64_t *ids, const char *const *payloads,
                        int n) {
    enum { MOST = 4 };
    lq_subscription *s = subscribe(b, dead, n, 0, 0, NULL);
    if (!s) return;
    int found[MOST] = {0};
    for (int i = 0; i < n && i < MOST; i++) {
        lq_delivery *d = PULL(s);
        if (!d) break;
        int match = 0;
        for (int j = 0; j < n; j++) {
            if (lq_delivery_id(d) == ids[j] && payload_is(d, payloads[j])) {
                found[j]++;
                match = 1;
            }
        }
        if (!match)
            fprintf(stderr, "dead letter %lld of %zu bytes was not expected\n", (long long)lq_delivery_id(d),
                    lq_delivery_payload_size(d));
        CHECK(match);
        CHECK(lq_delivery_ack(d) == LQ_OK);
        lq_delivery_free(d);
    }
    for (int j = 0; j < n && j < MOST; j++) CHECK(found[j] == 1);
    NOTHING(s);
    lq_subscription_close(s);
}

/* ------------------------------------------------------------------------ */
/* Pulled deliveries: every outcome, on a table with a dead-letter table. */

static void pull_outcomes(target *tg, const lq_table *t, const char *name, const lq_table *dead) {
    lq_broker *b = tg->broker;
    lq_subscription *s = subscribe(b, t, 1, 0, 0, NULL);
    if (!s) return;
    lq_delivery *d;
    int64_t id;

    /* Ack removes the row. A delivery settles once: every later outcome is
     * LQ_MISUSE. */
    id = publish_text(b, t, "ack");
    if ((d = PULL(s))) {
        CHECK(lq_delivery_id(d) == id);
        CHECK(lq_delivery_attempt(d) == 1);
        CHECK(payload_is(d, "ack"));
        CHECK(lq_subscription_stat(s, LQ_STAT_IN_WORK) == 1);
        CHECK(lq_delivery_ack(d) == LQ_OK);
        CHECK(lq_delivery_ack(d) == LQ_MISUSE);
        CHECK(lq_delivery_retry(d) == LQ_MISUSE);
        CHECK(lq_delivery_retry_after(d, 1000) == LQ_MISUSE);
        CHECK(lq_delivery_dead_letter(d) == LQ_MISUSE);
        lq_delivery_free(d);
    }
    NOTHING(s);

    /* Retry gives the row back now, one attempt on. */
    id = publish_text(b, t, "retry");
    for (int attempt = 1; attempt <= 3; attempt++) {
        if (!(d = PULL(s))) break;
        CHECK(lq_delivery_id(d) == id);
        CHECK(lq_delivery_attempt(d) == attempt);
        CHECK((attempt < 3 ? lq_delivery_retry(d) : lq_delivery_ack(d)) == LQ_OK);
        lq_delivery_free(d);
    }
    NOTHING(s);

    /* retry_after hides the row until due: due in an hour, it stays hidden;
     * backdated, it comes at once. */
    id = publish_text(b, t, "later");
    if ((d = PULL(s))) {
        CHECK(lq_delivery_retry_after(d, HOUR_MS) == LQ_OK);
        lq_delivery_free(d);
        NOTHING(s);
        make_due(tg, name, id);
        if ((d = PULL(s))) {
            CHECK(lq_delivery_id(d) == id);
            CHECK(lq_delivery_attempt(d) == 2);
            CHECK(lq_delivery_ack(d) == LQ_OK);
            lq_delivery_free(d);
        }
    }
    NOTHING(s);

    /* A delivery freed unsettled goes back at once (the lease is 30 s, far
     * beyond WAIT_MS), with no attempt spent. */
    id = publish_text(b, t, "freed");
    if ((d = PULL(s))) {
        CHECK(lq_delivery_attempt(d) == 1);
        lq_delivery_free(d);
        if ((d = PULL(s))) {
            CHECK(lq_delivery_id(d) == id);
            CHECK(lq_delivery_attempt(d) == 1);
            CHECK(lq_delivery_ack(d) == LQ_OK);
            lq_delivery_free(d);
        }
    }
    NOTHING(s);

    /* Dead letter moves the row to the dead-letter table. Each dead letter
     * is read there at once, which empties that table: on SQLite the ids of
     * deleted rows come round again, and the copy keeps the row's id. */
    int64_t dead_ids[3];
    const char *dead_payloads[3] = {"dead", "poison", "poison-later"};
    dead_ids[0] = publish_text(b, t, dead_payloads[0]);
    if ((d = PULL(s))) {
        CHECK(lq_delivery_dead_letter(d) == LQ_OK);
        CHECK(lq_delivery_ack(d) == LQ_MISUSE);
        lq_delivery_free(d);
    }
    NOTHING(s);
    expect_dead(b, dead, &dead_ids[0], &dead_payloads[0], 1);
    CHECK(lq_subscription_stat(s, LQ_STAT_IN_WORK) == 0);
    lq_subscription_close(s);

    /* max_attempts 2: a failure of the second attempt dead-letters, by retry
     * or by retry_after. */
    s = subscribe(b, t, 1, 2, 0, NULL);
    for (int k = 1; k <= 2 && s; k++) {
        dead_ids[k] = publish_text(b, t, dead_payloads[k]);
        for (int attempt = 1; attempt <= 2; attempt++) {
            if (!(d = PULL(s))) break;
            CHECK(lq_delivery_id(d) == dead_ids[k]);
            CHECK(lq_delivery_attempt(d) == attempt);
            int rc = k == 1 ? lq_delivery_retry(d) : lq_delivery_retry_after(d, 0);
            if (rc != LQ_OK)
                fprintf(stderr, "failure at attempt %d: %s %s\n", attempt, lq_status_name(rc), lq_errmsg());
            CHECK(rc == LQ_OK);
            lq_delivery_free(d);
        }
        NOTHING(s);
        expect_dead(b, dead, &dead_ids[k], &dead_payloads[k], 1);
    }
    lq_subscription_close(s);

    /* lq_deliveries_ack settles a set, each with its status; once. */
    enum { SET = 3 };
    s = subscribe(b, t, SET, 0, 0, NULL);
    lq_message *m[SET];
    for (int i = 0; i < SET; i++) {
        m[i] = NULL;
        CHECK(lq_message_new(&m[i]) == LQ_OK);
        CHECK(lq_message_set_payload(m[i], "set", 3) == LQ_OK);
    }
    CHECK(lq_publish(NULL, b, t, m, SET) == LQ_OK);
    for (int i = 0; i < SET; i++) lq_message_free(m[i]);
    lq_delivery *set[SET];
    size_t got = 0;
    while (s && got < SET && (set[got] = PULL(s))) got++;
    if (got == SET) {
        int statuses[SET] = {-1, -1, -1};
        CHECK(lq_deliveries_ack(statuses, set, SET) == LQ_OK);
        for (int i = 0; i < SET; i++) CHECK(statuses[i] == LQ_OK);
        CHECK(lq_deliveries_ack(statuses, set, SET) == LQ_MISUSE);
    }
    for (size_t i = 0; i < got; i++) lq_delivery_free(set[i]);
    if (s) NOTHING(s);
    lq_subscription_close(s);
}

/* ------------------------------------------------------------------------ */
/* Pushed deliveries: the handler's return and its own settlements. */

enum { P_ACK, P_FAIL, P_RETRY, P_TWICE, P_DEAD, P_POISON, P_KINDS };
static const char *const push_payloads[P_KINDS] = {"push-ack",   "push-fail", "push-retry",
                                                   "push-twice", "push-dead", "push-poison"};
/* Handler calls of each kind: a failed or retried first attempt comes back
 * once; the poison fails every time, and max_attempts 3 dead-letters it. */
static const int push_calls[P_KINDS] = {1, 2, 2, 1, 1, 3};
/* Settlements of each kind (the second ack of P_TWICE settles nothing). */
enum { PUSH_SETTLEMENTS = 1 + 2 + 2 + 1 + 1 + 3, PUSH_MAX_ATTEMPTS = 3 };

typedef struct push_state {
    atomic_int calls[P_KINDS];
    atomic_int attempts[P_KINDS]; /* bit n: attempt n was seen */
    atomic_int unknown;           /* deliveries of no kind published here */
    atomic_int wrong;             /* settlements in the handler that did not return what they should */
} push_state;

static int push_handler(lq_delivery *d, void *userdata) {
    push_state *ps = userdata;
    int kind = -1;
    for (int k = 0; k < P_KINDS; k++)
        if (payload_is(d, push_payloads[k])) kind = k;
    if (kind < 0) {
        atomic_fetch_add(&ps->unknown, 1);
        return LQ_OK;
    }
    int attempt = lq_delivery_attempt(d);
    if (attempt >= 1 && attempt < 31) atomic_fetch_or(&ps->attempts[kind], 1 << attempt);
    int rc = LQ_OK;
    switch (kind) {
    case P_FAIL: /* any status but LQ_OK retries */
        rc = attempt == 1 ? LQ_ERROR : LQ_OK;
        break;
    case P_RETRY: /* settled here: the LQ_OK returned does not ack it */
        if (attempt == 1 && lq_delivery_retry(d) != LQ_OK) atomic_fetch_add(&ps->wrong, 1);
        break;
    case P_TWICE:
        if (lq_delivery_ack(d) != LQ_OK) atomic_fetch_add(&ps->wrong, 1);
        if (lq_delivery_ack(d) != LQ_MISUSE) atomic_fetch_add(&ps->wrong, 1);
        break;
    case P_DEAD:
        if (lq_delivery_dead_letter(d) != LQ_OK) atomic_fetch_add(&ps->wrong, 1);
        break;
    case P_POISON:
        rc = LQ_ERROR;
        break;
    default:
        break;
    }
    /* Counted last: a waiter that sees the count sees the settlements. */
    atomic_fetch_add(&ps->calls[kind], 1);
    return rc;
}

static int push_total(push_state *ps) {
    int n = 0;
    for (int k = 0; k < P_KINDS; k++) n += atomic_load(&ps->calls[k]);
    return n;
}

static void push_outcomes(target *tg, const lq_table *t, const lq_table *dead) {
    lq_broker *b = tg->broker;
    static push_state ps; /* outlives the subscription's threads: stopped before it is reset */
    for (int k = 0; k < P_KINDS; k++) {
        atomic_store(&ps.calls[k], 0);
        atomic_store(&ps.attempts[k], 0);
    }
    atomic_store(&ps.unknown, 0);
    atomic_store(&ps.wrong, 0);

    lq_message *m[P_KINDS];
    for (int k = 0; k < P_KINDS; k++) {
        m[k] = NULL;
        CHECK(lq_message_new(&m[k]) == LQ_OK);
        CHECK(lq_message_set_payload(m[k], push_payloads[k], strlen(push_payloads[k])) == LQ_OK);
    }
    int64_t ids[P_KINDS] = {0};
    CHECK(lq_publish(ids, b, t, m, P_KINDS) == LQ_OK);
    for (int k = 0; k < P_KINDS; k++) lq_message_free(m[k]);

    lq_subscription *s = subscribe(b, t, 2, PUSH_MAX_ATTEMPTS, 0, NULL);
    if (!s) return;
    CHECK(lq_subscription_run(s, push_handler, &ps) == LQ_OK);
    /* Bounded: every call made and every settlement written, or 15 s. */
    int expected = 0;
    for (int k = 0; k < P_KINDS; k++) expected += push_calls[k];
    for (int i = 0; i < 1500; i++) {
        if (push_total(&ps) >= expected && lq_subscription_stat(s, LQ_STAT_SETTLED) >= PUSH_SETTLEMENTS)
            break;
        sleep_ms(10);
    }
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(lq_subscription_stat(s, LQ_STAT_SETTLED) == PUSH_SETTLEMENTS);
    CHECK(lq_subscription_stat(s, LQ_STAT_IN_WORK) == 0);
    lq_subscription_close(s);

    for (int k = 0; k < P_KINDS; k++) {
        int calls = atomic_load(&ps.calls[k]);
        int seen = atomic_load(&ps.attempts[k]);
        int want = (1 << (push_calls[k] + 1)) - 2; /* attempts 1 .. push_calls[k] */
        if (calls != push_calls[k] || seen != want)
            fprintf(stderr, "%s: %d call(s), attempts seen 0x%x, expected %d and 0x%x\n", push_payloads[k],
                    calls, (unsigned)seen, push_calls[k], (unsigned)want);
        CHECK(calls == push_calls[k]);
        CHECK(seen == want);
    }
    CHECK(atomic_load(&ps.unknown) == 0);
    CHECK(atomic_load(&ps.wrong) == 0);

    /* Nothing left in the table; the dead letter and the poison moved. */
    s = subscribe(b, t, 1, 0, 0, NULL);
    if (s) NOTHING(s);
    lq_subscription_close(s);
    int64_t dead_ids[2] = {ids[P_DEAD], ids[P_POISON]};
    const char *dead_payloads[2] = {push_payloads[P_DEAD], push_payloads[P_POISON]};
    expect_dead(b, dead, dead_ids, dead_payloads, 2);
}

/* ------------------------------------------------------------------------ */
/* The lease form: a lease that ran out and was taken by another claim. */

static void lease_lost(target *tg, const lq_table *t, const char *name) {
    lq_broker *other = NULL;
    CHECK(lq_broker_open(&other, tg->url, NULL) == LQ_OK); /* a second process, as it were */
    if (!other) return;
    lq_subscription *first = subscribe(tg->broker, t, 1, 0, 0, NULL);
    lq_subscription *second = subscribe(other, t, 1, 0, 0, NULL);
    int64_t id = publish_text(tg->broker, t, "leased");
    lq_delivery *mine = first ? PULL(first) : NULL, *theirs = NULL;
    if (mine) {
        CHECK(lq_delivery_id(mine) == id);
        CHECK(lq_delivery_lease_expiry_ms(mine) > now_ms());
        /* Stopped, the first cannot claim the row back itself (lease claims
         * look ahead); its delivery stays valid. */
        CHECK(lq_subscription_stop(first) == LQ_OK);
        CHECK(run_sql(tg, "UPDATE %s SET locked_until = %s WHERE id = %lld", name, tg->past, (long long)id) ==
              1);
        theirs = second ? PULL(second) : NULL;
    }
    if (theirs) {
        CHECK(lq_delivery_id(theirs) == id);
        CHECK(lq_delivery_attempt(theirs) == 2);
        CHECK(lq_delivery_ack(mine) == LQ_LEASE_LOST);
        CHECK_CONTAINS(lq_errmsg(), "lease");
        CHECK(lq_delivery_ack(mine) == LQ_MISUSE); /* settled once, even when lost */
        /* The lost ack changed nothing: the row is still the second's to ack. */
        CHECK(lq_delivery_ack(theirs) == LQ_OK);
        NOTHING(second);
    }
    lq_delivery_free(mine);
    lq_delivery_free(theirs);
    lq_subscription_close(first);
    lq_subscription_close(second);
    lq_broker_close(other);
}

/* ------------------------------------------------------------------------ */
/* Publish fields: group, priority, delay, headers, partition key; dead
 * letters to a group. */

static void publish_fields(target *tg, const lq_table *t, const char *name) {
    lq_broker *b = tg->broker;
    enum { N = 5 };
    lq_message *m[N];
    for (int i = 0; i < N; i++) {
        m[i] = NULL;
        CHECK(lq_message_new(&m[i]) == LQ_OK);
    }
    const char *payloads[N] = {"p3", "p1", "p2", "other", "delayed"};
    const char *groups[N] = {"g1", "g1", "g1", "g2", "g1"};
    const int64_t priorities[N] = {3, 1, 2, 0, 0};
    for (int i = 0; i < N; i++) {
        CHECK(lq_message_set_payload(m[i], payloads[i], strlen(payloads[i])) == LQ_OK);
        CHECK(lq_message_set_group(m[i], groups[i]) == LQ_OK);
        CHECK(lq_message_set_priority(m[i], priorities[i]) == LQ_OK);
    }
    CHECK(lq_message_set_header(m[0], "trace-id", "abc 123") == LQ_OK);
    CHECK(lq_message_set_header(m[0], "empty", "") == LQ_OK);
    CHECK(lq_message_set_header(m[0], "trace-id", "abc \"123\"") == LQ_OK); /* replaces */
    CHECK(lq_message_set_partition_key(m[0], "acct-7") == LQ_OK);
    CHECK(lq_message_set_delay_ms(m[4], HOUR_MS) == LQ_OK); /* first by priority, were it due */
    int64_t ids[N] = {0};
    CHECK(lq_publish(ids, b, t, m, N) == LQ_OK);
    for (int i = 0; i < N; i++) lq_message_free(m[i]);

    lq_subscription *s = subscribe(b, t, 1, 0, 0, "g1");
    if (!s) return;
    lq_delivery *d;
    /* Smaller priority first; the other group's row and the delayed one
     * are not delivered. */
    const int order[3] = {1, 2, 0};
    for (int i = 0; i < 3; i++) {
        if (!(d = PULL(s))) break;
        int want = order[i];
        if (!payload_is(d, payloads[want]))
            fprintf(stderr, "delivery %d: row %lld, expected %lld (%s)\n", i, (long long)lq_delivery_id(d),
                    (long long)ids[want], payloads[want]);
        CHECK(payload_is(d, payloads[want]));
        CHECK(lq_delivery_id(d) == ids[want]);
        CHECK_STR(lq_delivery_group(d), "g1");
        if (want == 0) {
            CHECK(lq_delivery_header_count(d) == 2);
            CHECK_STR(lq_delivery_header(d, "trace-id"), "abc \"123\"");
            CHECK_STR(lq_delivery_header(d, "empty"), "");
            CHECK(lq_delivery_header(d, "missing") == NULL);
            int named = 0;
            for (size_t h = 0; h < 2; h++) {
                const char *hname = NULL, *hvalue = NULL;
                CHECK(lq_delivery_header_at(&hname, &hvalue, d, h) == LQ_OK);
                if (hname && hvalue && strcmp(hname, "trace-id") == 0)
                    named += strcmp(hvalue, "abc \"123\"") == 0;
                if (hname && hvalue && strcmp(hname, "empty") == 0) named += strcmp(hvalue, "") == 0;
            }
            CHECK(named == 2);
            const char *hname = NULL, *hvalue = NULL;
            CHECK(lq_delivery_header_at(&hname, &hvalue, d, 2) == LQ_MISUSE);
            CHECK_STR(lq_delivery_partition_key(d), "acct-7");
        } else {
            CHECK(lq_delivery_header_count(d) == 0);
            CHECK(lq_delivery_header(d, "trace-id") == NULL);
            CHECK(lq_delivery_partition_key(d) == NULL);
        }
        CHECK(lq_delivery_ack(d) == LQ_OK);
        lq_delivery_free(d);
    }
    NOTHING(s);
    /* The delayed row, backdated, comes due. */
    make_due(tg, name, ids[4]);
    if ((d = PULL(s))) {
        CHECK(lq_delivery_id(d) == ids[4]);
        CHECK(payload_is(d, "delayed"));
        CHECK(lq_delivery_ack(d) == LQ_OK);
        lq_delivery_free(d);
    }
    NOTHING(s);
    lq_subscription_close(s);

    /* The other group's row; dead-lettered, it moves to group "dead". */
    s = subscribe(b, t, 1, 0, 0, "g2");
    if ((d = PULL(s))) {
        CHECK(lq_delivery_id(d) == ids[3]);
        CHECK_STR(lq_delivery_group(d), "g2");
        CHECK(lq_delivery_dead_letter(d) == LQ_OK);
        lq_delivery_free(d);
    }
    if (s) NOTHING(s);
    lq_subscription_close(s);
    s = subscribe(b, t, 1, 0, 0, "dead");
    if ((d = PULL(s))) {
        CHECK(lq_delivery_id(d) == ids[3]);
        CHECK_STR(lq_delivery_group(d), "dead");
        CHECK(payload_is(d, "other"));
        CHECK(lq_delivery_ack(d) == LQ_OK);
        lq_delivery_free(d);
    }
    if (s) NOTHING(s);
    lq_subscription_close(s);
}

/* ------------------------------------------------------------------------ */
/* workers_by_key: one key's rows one at a time, in claim (publish) order. */

enum { KEYS = 4, PER_KEY = 6, LANES = 4 };

typedef struct lanes_state {
    atomic_int in_work[KEYS];
    atomic_int next[KEYS]; /* the sequence number due next */
    atomic_int overlaps;   /* a row began while another of its key was in work */
    atomic_int disorder;   /* a row came before an earlier one of its key */
    atomic_int unknown;
    atomic_int done;
} lanes_state;

static int lanes_handler(lq_delivery *d, void *userdata) {
    lanes_state *ls = userdata;
    char text[32] = "";
    size_t n = lq_delivery_payload_size(d);
    if (n < sizeof text) memcpy(text, lq_delivery_payload(d), n);
    int key = -1, seq = -1;
    if (sscanf(text, "k%d:%d", &key, &seq) != 2 || key < 0 || key >= KEYS) {
        atomic_fetch_add(&ls->unknown, 1);
        atomic_fetch_add(&ls->done, 1);
        return LQ_OK;
    }
    const char *pkey = lq_delivery_partition_key(d);
    char want[8];
    snprintf(want, sizeof want, "k%d", key);
    if (!pkey || strcmp(pkey, want) != 0) atomic_fetch_add(&ls->unknown, 1);
    if (atomic_fetch_add(&ls->in_work[key], 1) != 0) atomic_fetch_add(&ls->overlaps, 1);
    if (atomic_exchange(&ls->next[key], seq + 1) != seq) atomic_fetch_add(&ls->disorder, 1);
    sleep_ms(2); /* long enough for another lane to start a row of this key, were it allowed */
    atomic_fetch_sub(&ls->in_work[key], 1);
    atomic_fetch_add(&ls->done, 1);
    return LQ_OK;
}

static void workers_by_key(target *tg, const lq_table *t) {
    lq_broker *b = tg->broker;
    static lanes_state ls;
    for (int k = 0; k < KEYS; k++) {
        atomic_store(&ls.in_work[k], 0);
        atomic_store(&ls.next[k], 0);
    }
    atomic_store(&ls.overlaps, 0);
    atomic_store(&ls.disorder, 0);
    atomic_store(&ls.unknown, 0);
    atomic_store(&ls.done, 0);

    /* max_attempts needs a dead-letter destination, which this table lacks. */
    lq_options *o = NULL;
    lq_subscription *refused = NULL;
    CHECK(lq_options_new(&o) == LQ_OK);
    CHECK(lq_options_set_int(o, LQ_OPT_MAX_ATTEMPTS, 3) == LQ_OK);
    CHECK(lq_subscription_open(&refused, b, t, o) == LQ_MISUSE && refused == NULL);
    lq_options_free(o);

    /* Keys interleaved, so ids interleave: k0:0 k1:0 ... k0:1 k1:1 ... */
    lq_message *m[KEYS * PER_KEY];
    for (int i = 0; i < KEYS * PER_KEY; i++) {
        char text[32], key[8];
        snprintf(text, sizeof text, "k%d:%d", i % KEYS, i / KEYS);
        snprintf(key, sizeof key, "k%d", i % KEYS);
        m[i] = NULL;
        CHECK(lq_message_new(&m[i]) == LQ_OK);
        CHECK(lq_message_set_payload(m[i], text, strlen(text)) == LQ_OK);
        CHECK(lq_message_set_partition_key(m[i], key) == LQ_OK);
    }
    CHECK(lq_publish(NULL, b, t, m, KEYS * PER_KEY) == LQ_OK);
    for (int i = 0; i < KEYS * PER_KEY; i++) lq_message_free(m[i]);

    lq_subscription *s = subscribe(b, t, 1, 0, LANES, NULL);
    if (!s) return;
    CHECK(lq_subscription_run(s, lanes_handler, &ls) == LQ_OK);
    for (int i = 0; i < 1500; i++) {
        if (atomic_load(&ls.done) >= KEYS * PER_KEY &&
            lq_subscription_stat(s, LQ_STAT_SETTLED) >= KEYS * PER_KEY)
            break;
        sleep_ms(10);
    }
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(lq_subscription_stat(s, LQ_STAT_SETTLED) == KEYS * PER_KEY);
    lq_subscription_close(s);
    CHECK(atomic_load(&ls.done) == KEYS * PER_KEY);
    CHECK(atomic_load(&ls.overlaps) == 0);
    CHECK(atomic_load(&ls.disorder) == 0);
    CHECK(atomic_load(&ls.unknown) == 0);
    for (int k = 0; k < KEYS; k++) CHECK(atomic_load(&ls.next[k]) == PER_KEY);
    s = subscribe(b, t, 1, 0, 0, NULL);
    if (s) NOTHING(s);
    lq_subscription_close(s);
}

/* ------------------------------------------------------------------------ */
/* concurrency (and a rate limit that never binds) in the lease form: the
 * claim counts the queue's leased rows under the queue's lock, in a
 * transaction that PostgreSQL sends in two round trips (a pipeline). */

enum { LIMITED_ROWS = 40, LIMIT = 2 };

typedef struct limit_state {
    atomic_int running, most, done;
} limit_state;

static int limit_handler(lq_delivery *d, void *userdata) {
    (void)d;
    limit_state *ls = userdata;
    int now = atomic_fetch_add(&ls->running, 1) + 1;
    for (int most = atomic_load(&ls->most); now > most && !atomic_compare_exchange_weak(&ls->most, &most, now);)
        ;
    sleep_ms(3);
    atomic_fetch_sub(&ls->running, 1);
    atomic_fetch_add(&ls->done, 1);
    return LQ_OK;
}

/* Rows of two partition keys, taking turns. */
static void publish_keyed(lq_broker *b, const lq_table *t, int count) {
    for (int i = 0; i < count; i++) {
        lq_message *m = NULL;
        char key[8];
        snprintf(key, sizeof key, "k%d", i % 2);
        CHECK(lq_message_new(&m) == LQ_OK);
        CHECK(lq_message_set_payload(m, "limited", 7) == LQ_OK);
        CHECK(lq_message_set_partition_key(m, key) == LQ_OK);
        CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
        lq_message_free(m);
    }
}

/* concurrency (with a rate limit too, or per partition key on a keyed
 * table): the rows all run, never more than the limit at once. */
static void queue_limit(target *tg, const lq_table *t, bool rate_too, bool keyed) {
    static limit_state ls;
    atomic_store(&ls.running, 0);
    atomic_store(&ls.most, 0);
    atomic_store(&ls.done, 0);
    if (keyed) publish_keyed(tg->broker, t, LIMITED_ROWS);
    for (int i = 0; !keyed && i < LIMITED_ROWS; i++) publish_text(tg->broker, t, "limited");
    lq_options *o = NULL;
    lq_subscription *s = NULL;
    CHECK(lq_options_new(&o) == LQ_OK);
    CHECK(lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, POLL_MS) == LQ_OK);
    CHECK(lq_options_set_int(o, LQ_OPT_WORKERS, 6) == LQ_OK);
    CHECK(lq_options_set_int(o, LQ_OPT_CONCURRENCY, LIMIT) == LQ_OK);
    if (rate_too) CHECK(lq_options_set_int(o, LQ_OPT_RATE_LIMIT, 100000) == LQ_OK);
    if (keyed) {
        CHECK(lq_options_set_int(o, LQ_OPT_PARTITION_CONCURRENCY, 1) == LQ_OK);
        CHECK(lq_options_set_int(o, LQ_OPT_PARTITION_RATE_LIMIT, 100000) == LQ_OK);
    }
    int rc = lq_subscription_open(&s, tg->broker, t, o);
    lq_options_free(o);
    if (rc != LQ_OK) fprintf(stderr, "lq_subscription_open: %s %s\n", lq_status_name(rc), lq_errmsg());
    CHECK(rc == LQ_OK);
    if (rc != LQ_OK) return;
    CHECK(lq_subscription_run(s, limit_handler, &ls) == LQ_OK);
    for (int i = 0; i < 1500 && lq_subscription_stat(s, LQ_STAT_SETTLED) < LIMITED_ROWS; i++) sleep_ms(10);
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(lq_subscription_stat(s, LQ_STAT_SETTLED) == LIMITED_ROWS);
    lq_subscription_close(s);
    CHECK(atomic_load(&ls.done) == LIMITED_ROWS);
    CHECK(atomic_load(&ls.most) >= 1 && atomic_load(&ls.most) <= LIMIT);
    s = subscribe(tg->broker, t, 1, 0, 0, NULL);
    if (s) NOTHING(s);
    lq_subscription_close(s);
}

/* ------------------------------------------------------------------------ */

/* lq_queue_stats and lq_queue_attempts on a table with dead letters: rows
 * due, within a cap, one dead-lettered, then the queue drained. */
static void queue_stats(target *tg, const lq_table *t, int form) {
    int64_t v[LQ_QUEUE_STAT_COUNT], attempts[4];
    for (int i = 0; i < 3; i++) publish_text(tg->broker, t, "counted");
    CHECK(lq_queue_stats(v, LQ_QUEUE_STAT_COUNT, tg->broker, t, NULL, 100) == LQ_OK);
    CHECK(v[LQ_QUEUE_DUE] == 3 && v[LQ_QUEUE_DELAYED] == 0 && v[LQ_QUEUE_DEAD_LETTERS] == 0);
    CHECK(v[LQ_QUEUE_IN_WORK] == (form == LQ_FORM_LEASE ? 0 : -1));
    CHECK(v[LQ_QUEUE_HEAD_AGE_MS] >= 0);
    CHECK(lq_queue_stats(v, 1, tg->broker, t, NULL, 2) == LQ_OK && v[0] == 2); /* the cap */
    CHECK(lq_queue_attempts(attempts, 4, tg->broker, t, NULL, 100) == LQ_OK);
    CHECK(attempts[0] == 0 && attempts[1] == 3 && attempts[2] == 0 && attempts[3] == 0);
    lq_subscription *s = subscribe(tg->broker, t, 1, 0, 0, NULL);
    lq_delivery *d = PULL(s);
    if (d) CHECK(lq_delivery_dead_letter(d) == LQ_OK);
    lq_delivery_free(d);
    for (int i = 0; i < 2; i++) {
        d = PULL(s);
        if (d) CHECK(lq_delivery_ack(d) == LQ_OK);
        lq_delivery_free(d);
    }
    lq_subscription_close(s);
    CHECK(lq_queue_stats(v, LQ_QUEUE_STAT_COUNT, tg->broker, t, NULL, 100) == LQ_OK);
    CHECK(v[LQ_QUEUE_DUE] == 0 && v[LQ_QUEUE_DEAD_LETTERS] == 1 && v[LQ_QUEUE_HEAD_AGE_MS] == -1);
    CHECK(lq_queue_stats(v, 1, tg->broker, t, "g", 100) == LQ_MISUSE); /* no group column */
}

static void run_form(target *tg, int form) {
    int before = check_failures;
    int64_t started = now_ms();
    char plain[128], plain_dead[160], fields[128], keyed[128], counted[128];
    table_name(plain, sizeof plain, "plain");
    table_name(counted, sizeof counted, "counted");
    snprintf(plain_dead, sizeof plain_dead, "%s_dead", plain);
    table_name(fields, sizeof fields, "fields");
    table_name(keyed, sizeof keyed, "keyed");
    lq_table *t = describe(plain, form, WITH_DEAD_TABLE);
    lq_table *dead = describe(plain_dead, form, 0);
    lq_table *ft = describe(fields, form, WITH_FIELDS);
    lq_table *kt = describe(keyed, form, WITH_KEY);
    lq_table *ct = describe(counted, form, WITH_DEAD_TABLE);
    if (t && dead && ft && kt && ct) {
        create(tg->broker, t); /* makes plain_dead too */
        CHECK(lq_table_create(tg->broker, dead, LQ_CREATE_VERIFY_ONLY) == LQ_OK);
        create(tg->broker, ft);
        create(tg->broker, kt);
        pull_outcomes(tg, t, plain, dead);
        push_outcomes(tg, t, dead);
        if (form == LQ_FORM_LEASE) lease_lost(tg, t, plain);
        publish_fields(tg, ft, fields);
        workers_by_key(tg, kt);
        create(tg->broker, ct);
        queue_stats(tg, ct, form);
        queue_limit(tg, ct, false, false);
        queue_limit(tg, ct, true, false);
        queue_limit(tg, kt, false, true);
    }
    lq_table_free(t);
    lq_table_free(dead);
    lq_table_free(ft);
    lq_table_free(kt);
    lq_table_free(ct);
    printf("%-10s %-9s %s (%.1f s)\n", tg->name, form_name(form), check_failures == before ? "ok" : "FAILED",
           (double)(now_ms() - started) / 1000);
}

/* SQLite has no row locks: the row lock form is refused when a subscription
 * opens, with LQ_DIALECT, though its table can be made. */
static void sqlite_refuses_row_locks(target *tg) {
    int before = check_failures;
    char name[128];
    table_name(name, sizeof name, "rowlock");
    lq_table *t = describe(name, LQ_FORM_ROW_LOCK, 0);
    if (t) {
        create(tg->broker, t);
        CHECK(lq_table_check_form(t, "sqlite") == LQ_DIALECT); /* said before any open */
        CHECK_CONTAINS(lq_errmsg(), "no row locks");
        CHECK(lq_table_check_form(t, "postgresql") == LQ_OK);
        lq_subscription *s = (lq_subscription *)&t; /* a failed open leaves NULL */
        CHECK(lq_subscription_open(&s, tg->broker, t, NULL) == LQ_DIALECT);
        CHECK(s == NULL);
        CHECK_CONTAINS(lq_errmsg(), "row lock");
        lq_table_free(t);
    }
    printf("%-10s %-9s %s\n", tg->name, form_name(LQ_FORM_ROW_LOCK),
           check_failures == before ? "ok (refused: LQ_DIALECT)" : "FAILED");
}

/* The runner: a delivery of a lease table of its own, held until the end. */
static void start_runner(target *tg) {
    char name[128];
    table_name(name, sizeof name, "runner");
    lq_table *t = describe(name, LQ_FORM_LEASE, 0);
    if (!t) return;
    create(tg->broker, t);
    publish_text(tg->broker, t, "runner");
    tg->runner_sub = subscribe(tg->broker, t, 1, 0, 0, NULL);
    tg->runner = tg->runner_sub ? PULL(tg->runner_sub) : NULL;
    lq_table_free(t);
}

static void stop_runner(target *tg) {
    if (tg->runner) CHECK(lq_delivery_ack(tg->runner) == LQ_OK);
    lq_delivery_free(tg->runner);
    lq_subscription_close(tg->runner_sub);
    tg->runner = NULL;
    tg->runner_sub = NULL;
}

static void run_target(target *tg) {
    int rc = lq_broker_open(&tg->broker, tg->url, NULL);
    if (rc != LQ_OK) {
        fprintf(stderr, "%s: lq_broker_open: %s %s\n", tg->name, lq_status_name(rc), lq_errmsg());
        check_failures++;
        printf("%-10s %-9s FAILED (no broker)\n", tg->name, "-");
        return;
    }
    start_runner(tg);
    int sqlite = strcmp(lq_broker_dialect(tg->broker), "sqlite") == 0;
    if (sqlite)
        sqlite_refuses_row_locks(tg);
    else
        run_form(tg, LQ_FORM_ROW_LOCK);
    run_form(tg, LQ_FORM_LEASE);
    run_form(tg, LQ_FORM_ADVISORY);
    stop_runner(tg);
    lq_broker_close(tg->broker);
    tg->broker = NULL;
}

/* A server target: its URL from the environment, or a failure when servers
 * are required. */
static int server_target(target *tg, const char *name, const char *variable, const char *past) {
    const char *url = getenv(variable);
    if (!url || !*url) {
        const char *required = getenv("LQ_REQUIRE_SERVERS");
        if (required && *required) {
            fprintf(stderr, "LQ_REQUIRE_SERVERS is set but %s is not\n", variable);
            check_failures++;
        } else {
            printf("%-10s %-9s skipped (%s not set)\n", name, "-", variable);
        }
        return 0;
    }
    *tg = (target){.name = name, .url = url, .past = past};
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with the failures on stderr */
    const char *dir = argc > 1 ? argv[1] : ".";
    snprintf(run_tag, sizeof run_tag, "lqc_%d_%lld", (int)getpid(), (long long)time(NULL));

    char path[4096], url[4200];
    snprintf(path, sizeof path, "%s/conformance-%d.db", dir, (int)getpid());
    snprintf(url, sizeof url, "sqlite:%s", path);

    target targets[3];
    int n = 0;
    targets[n++] = (target){.name = "sqlite", .url = url, .past = "'2000-01-01T00:00:00.000+00:00'"};
    n += server_target(&targets[n], "postgresql", "LQ_TEST_PG_URL", "'2000-01-01T00:00:00+00:00'");
    n += server_target(&targets[n], "mariadb", "LQ_TEST_MARIADB_URL", "'2000-01-01 00:00:00'");
    for (int i = 0; i < n; i++) run_target(&targets[i]);

    const char *suffixes[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char file[4200];
        snprintf(file, sizeof file, "%s%s", path, suffixes[i]);
        unlink(file);
    }
    printf("conformance: %d target(s), tables %s_*\n", n, run_tag);
    CHECK_DONE();
}
