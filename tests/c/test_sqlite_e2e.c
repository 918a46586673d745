#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* End to end on a real SQLite file through the public ABI: publish, pull,
 * settle, a lost lease, push workers, and a clean close. */
#include "check.h"
#include "sqlite_file.h"
#include "runtime/runtime.h" /* the broker's interned statements */

#include <libqueue.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Waits until the table is empty and the subscription has counted every
 * settlement (it counts one after its commit returns), then checks both. */
static void drain(lq_subscription *s, int64_t settled) {
    for (int i = 0; i < 500 && (count_rows("SELECT count(*) FROM jobs") > 0 ||
                                lq_subscription_stat(s, LQ_STAT_SETTLED) < settled);
         i++)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    CHECK(count_rows("SELECT count(*) FROM jobs") == 0);
    CHECK(lq_subscription_stat(s, LQ_STAT_SETTLED) == settled);
}

static atomic_int handled, handled_inside;

/* userdata: the subscription, or NULL. */
static int handler(lq_delivery *d, void *userdata) {
    atomic_fetch_add(&handled, 1);
    if (userdata && lq_subscription_in_handler(userdata)) atomic_fetch_add(&handled_inside, 1);
    return lq_delivery_attempt(d) >= 1 ? LQ_OK : LQ_ERROR;
}

/* Counts the rows of every batch whose payload reads as published, NUL
 * after it. */
/* A handler that keeps its delivery's handle past its call (a misuse), and
 * the next handler's try to ack through it. */
static lq_delivery *_Atomic kept;
static atomic_int stale_ack = -1, kept_calls;
static _Atomic uintptr_t first_block, second_block;

static int keeping_handler(lq_delivery *d, void *userdata) {
    (void)userdata;
    if (atomic_fetch_add(&kept_calls, 1) == 0) {
        atomic_store(&kept, d);
        atomic_store(&first_block, (uintptr_t)d & (((uintptr_t)1 << 48) - 1));
    } else {
        atomic_store(&second_block, (uintptr_t)d & (((uintptr_t)1 << 48) - 1));
        atomic_store(&stale_ack, lq_delivery_ack(atomic_load(&kept)));
    }
    return LQ_OK;
}

static void wait_for(atomic_int *value, int at_least) {
    for (int i = 0; i < 1000 && atomic_load(value) < at_least; i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
}

static atomic_int batched_rows;

static int batch_handler(lq_delivery *const *deliveries, size_t count, void *userdata) {
    (void)userdata;
    for (size_t i = 0; i < count; i++) {
        const char *p = lq_delivery_payload(deliveries[i]);
        if (lq_delivery_payload_size(deliveries[i]) == 7 && strcmp(p, "batched") == 0)
            atomic_fetch_add(&batched_rows, 1);
    }
    return LQ_OK;
}

int main(int argc, char **argv) {
    snprintf(path, sizeof path, "%s/e2e-%d.db", argc > 1 ? argv[1] : ".", (int)getpid());
    char url[4200];
    snprintf(url, sizeof url, "sqlite:%s", path);

    lq_table *t;
    lq_table_new(&t, "jobs");
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload");
    lq_table_set_column(t, LQ_ROLE_ATTEMPT, "attempt");
    lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    lq_broker *b = (lq_broker *)&t; /* a failed open leaves NULL, not what was there */
    CHECK(lq_broker_open(&b, "oracle://nowhere", NULL) == LQ_DIALECT && b == NULL);
    CHECK(lq_broker_open(&b, url, NULL) == LQ_OK);
    CHECK_STR(lq_broker_dialect(b), "sqlite");

    /* The library creates the table; after that, it checks it. */
    CHECK(lq_table_create(b, t, LQ_CREATE_VERIFY_ONLY) == LQ_SCHEMA);
    CHECK(lq_table_create(b, t, 0) == LQ_OK);
    CHECK(lq_table_create(b, t, LQ_CREATE_VERIFY_ONLY) == LQ_OK);
    lq_table *wider;
    lq_table_new(&wider, "jobs");
    lq_table_set_column(wider, LQ_ROLE_PRIORITY, "priority");
    CHECK(lq_table_create(b, wider, 0) == LQ_SCHEMA);
    CHECK(strstr(lq_errmsg(), "column \"priority\" (priority) is missing") != NULL);
    CHECK(lq_table_create(b, wider, 4) == LQ_MISUSE);
    CHECK(lq_table_create(NULL, wider, 0) == LQ_MISUSE);
    lq_table_free(wider);

    lq_message *m;
    lq_message_new(&m);
    lq_message_set_payload(m, "hello", 5);
    int64_t id = 0;
    CHECK(lq_publish(&id, b, t, &m, 1) == LQ_OK);
    CHECK(id == 1);

    lq_options *o;
    lq_options_new(&o);
    lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, 20);
    lq_options_set_int(o, LQ_OPT_WORKERS, 2); /* room for the second claim below */
    lq_subscription *s;
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);

    /* Pull, then lose the lease to a second claim before settling. */
    lq_delivery *d;
    CHECK(lq_subscription_next(&d, s, 5000) == LQ_OK);
    CHECK(lq_delivery_id(d) == 1);
    CHECK(lq_delivery_attempt(d) == 1);
    CHECK(lq_delivery_payload_size(d) == 5);
    CHECK(lq_delivery_lease_expiry_ms(d) > (int64_t)time(NULL) * 1000);
    sql("UPDATE jobs SET locked_until = '2000-01-01T00:00:00.000+00:00'");
    lq_delivery *again;
    CHECK(lq_subscription_next(&again, s, 5000) == LQ_OK);
    CHECK(lq_delivery_attempt(again) == 2);
    CHECK(lq_delivery_ack(d) == LQ_LEASE_LOST);
    CHECK_CONTAINS(lq_errmsg(), "lease");
    CHECK(count_rows("SELECT count(*) FROM jobs") == 1);
    CHECK(lq_delivery_ack(d) == LQ_MISUSE); /* settled once, even when lost */
    CHECK(lq_delivery_ack(again) == LQ_OK);
    CHECK(count_rows("SELECT count(*) FROM jobs") == 0);
    lq_delivery_free(d);
    lq_delivery_free(again);
    CHECK(lq_subscription_next(&d, s, 50) == LQ_TIMEOUT);
    CHECK(lq_subscription_next(&d, s, -2) == LQ_MISUSE && d == NULL);
    CHECK(lq_subscription_run(s, handler, NULL) == LQ_MISUSE);
    lq_subscription_close(s);

    /* Push: four workers drain fifty rows. */
    lq_message *batch[50];
    for (int i = 0; i < 50; i++) {
        lq_message_new(&batch[i]);
        lq_message_set_payload(batch[i], "x", 1);
    }
    CHECK(lq_publish(NULL, b, t, batch, 50) == LQ_OK);
    for (int i = 0; i < 50; i++) lq_message_free(batch[i]);
    lq_options_set_int(o, LQ_OPT_WORKERS, 4);
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    lq_subscription *twice;
    CHECK(lq_subscription_open(&twice, b, t, o) == LQ_ALREADY_SUBSCRIBED);
    atomic_store(&handled, 0);
    CHECK(lq_subscription_run(s, handler, s) == LQ_OK);
    drain(s, 50);
    /* Every handler ran knowing it was inside; this thread is not. */
    CHECK(atomic_load(&handled) == 50 && atomic_load(&handled_inside) == 50);
    CHECK(lq_subscription_in_handler(s) == 0);
    CHECK(lq_subscription_in_handler(NULL) == 0);
    lq_subscription_close(s);

    /* A batch handler: batches of a hundred, every row acked and let go
     * (more rows at once than the deliveries let go under one lock). */
    enum { BATCHED = 150 };
    lq_message *rows[BATCHED];
    for (int i = 0; i < BATCHED; i++) {
        lq_message_new(&rows[i]);
        lq_message_set_payload(rows[i], "batched", 7);
    }
    CHECK(lq_publish(NULL, b, t, rows, BATCHED) == LQ_OK);
    for (int i = 0; i < BATCHED; i++) lq_message_free(rows[i]);
    lq_options_set_int(o, LQ_OPT_WORKERS, 2);
    lq_options_set_int(o, LQ_OPT_BATCH, 100);
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    atomic_store(&batched_rows, 0);
    CHECK(lq_subscription_run_batch(s, batch_handler, NULL) == LQ_OK);
    drain(s, BATCHED);
    lq_subscription_close(s);
    CHECK(atomic_load(&batched_rows) == BATCHED);
    lq_options_set_int(o, LQ_OPT_BATCH, 0);

    /* Acks together: one statement for the pulled deliveries, each with its
     * own status; the one whose lease another holder took alone fails. */
    enum { TOGETHER = 6 };
    for (int i = 0; i < TOGETHER; i++) {
        lq_message_new(&batch[i]);
        lq_message_set_payload(batch[i], "y", 1);
    }
    CHECK(lq_publish(NULL, b, t, batch, TOGETHER) == LQ_OK);
    for (int i = 0; i < TOGETHER; i++) lq_message_free(batch[i]);
    lq_options_set_int(o, LQ_OPT_WORKERS, TOGETHER);
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    lq_delivery *pulled[TOGETHER];
    for (int i = 0; i < TOGETHER; i++) CHECK(lq_subscription_next(&pulled[i], s, 5000) == LQ_OK);
    char steal[256];
    snprintf(steal, sizeof steal,
             "UPDATE jobs SET locked_until = '2100-01-01T00:00:00.000+00:00' WHERE id = %lld",
             (long long)lq_delivery_id(pulled[2]));
    sql(steal);
    int statuses[TOGETHER];
    CHECK(lq_deliveries_ack(statuses, pulled, TOGETHER) == LQ_LEASE_LOST);
    for (int i = 0; i < TOGETHER; i++) CHECK(statuses[i] == (i == 2 ? LQ_LEASE_LOST : LQ_OK));
    CHECK(count_rows("SELECT count(*) FROM jobs") == 1);
    CHECK(lq_deliveries_ack(statuses, pulled, TOGETHER) == LQ_MISUSE); /* settled once */
    for (int i = 0; i < TOGETHER; i++) lq_delivery_free(pulled[i]);
    lq_subscription_close(s);
    sql("DELETE FROM jobs");

    /* A delivery handed to a binding's settler thread counts as settling
     * from the hand-over (lq_delivery_handled), so the claims count its
     * worker free before the settlement runs; once, and not after it. */
    CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
    lq_options_set_int(o, LQ_OPT_WORKERS, 1);
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    CHECK(lq_subscription_next(&d, s, 5000) == LQ_OK);
    CHECK(s->settling == 0);
    lq_delivery_handled(d);
    lq_delivery_handled(d);
    CHECK(s->settling == 1);
    CHECK(lq_delivery_ack(d) == LQ_OK);
    CHECK(s->settling == 0);
    lq_delivery_handled(d);
    CHECK(s->settling == 0);
    lq_delivery_free(d);
    lq_subscription_close(s);
    lq_delivery_handled(NULL);

    /* Bulk publishes: a full chunk of 1000 and a remainder, ids in message
     * order; remainders of every size leave the broker's statements as
     * they were (only the full chunk's statement is interned). */
    enum { MANY = 1000 + 37, SMALLEST = 2, LARGEST = 60 };
    lq_message **many = calloc(MANY, sizeof *many);
    int64_t *ids = calloc(MANY, sizeof *ids);
    for (int i = 0; i < MANY; i++) {
        lq_message_new(&many[i]);
        lq_message_set_payload(many[i], "y", 1);
    }
    CHECK(lq_publish(ids, b, t, many, MANY) == LQ_OK);
    size_t interned = b->statement_count;
    for (size_t k = SMALLEST; k <= LARGEST; k++) CHECK(lq_publish(ids, b, t, many, k) == LQ_OK);
    CHECK(lq_publish(ids, b, t, many, MANY) == LQ_OK);
    CHECK(b->statement_count == interned);
    int in_order = 0;
    for (int i = 0; i < MANY; i++) in_order += ids[i] == ids[0] + i;
    CHECK(in_order == MANY);
    long long smaller = (SMALLEST + LARGEST) * (LARGEST - SMALLEST + 1) / 2;
    CHECK(count_rows("SELECT count(*) FROM jobs") == 2 * MANY + smaller);
    sql("DELETE FROM jobs");
    for (int i = 0; i < MANY; i++) lq_message_free(many[i]);
    free(many);
    free(ids);

    /* The broker keeps each description's insert: a description changed
     * after a publish writes through its new columns, and a new description
     * of the same table is told apart from the old one. */
    sql("ALTER TABLE jobs ADD COLUMN body BLOB");
    CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "body");
    CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
    CHECK(count_rows("SELECT count(*) FROM jobs WHERE body = CAST('hello' AS BLOB)") == 1);
    lq_table *other;
    lq_table_new(&other, "jobs");
    lq_table_set_column(other, LQ_ROLE_PAYLOAD, "payload");
    CHECK(lq_publish(NULL, b, other, &m, 1) == LQ_OK);
    lq_table_free(other);
    CHECK(count_rows("SELECT count(*) FROM jobs WHERE payload = CAST('hello' AS BLOB)") == 2);
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload");
    sql("DELETE FROM jobs");

    /* SQLite keeps advisory keys in the process, so rows claimed ahead of
     * the workers hold no connection, and the claims look ahead as lease
     * claims do; a transactional delivery holds its connection, so then
     * they do not. */
    lq_table *keyed;
    lq_table_new(&keyed, "keyed");
    lq_table_set_column(keyed, LQ_ROLE_PAYLOAD, "payload");
    lq_table_set_advisory_lock(keyed, "job-{id}");
    char *create;
    CHECK(lq_table_create_sql(&create, keyed, "sqlite") == LQ_OK);
    sql(create);
    lq_free(create);
    lq_options *ko;
    lq_options_new(&ko);
    lq_options_set_int(ko, LQ_OPT_WORKERS, 4);
    CHECK(lq_subscription_open(&s, b, keyed, ko) == LQ_OK);
    CHECK(!s->flow.holds && s->flow.ahead_max == 64 && s->sql.take_set.sql);
    lq_subscription_close(s);
    lq_options_set_int(ko, LQ_OPT_TRANSACTIONAL, 1);
    CHECK(lq_subscription_open(&s, b, keyed, ko) == LQ_OK);
    CHECK(s->flow.holds && s->flow.ahead_max == 0);
    lq_subscription_close(s);
    lq_options_free(ko);
    lq_table_free(keyed);

    /* Misdescribed tables fail when a subscription opens, naming what is wrong. */
    lq_table *bad;
    lq_table_new(&bad, "nope");
    lq_table_set_column(bad, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    CHECK(lq_subscription_open(&s, b, bad, NULL) == LQ_SCHEMA);
    CHECK_CONTAINS(lq_errmsg(), "nope");
    lq_table_free(bad);

    /* A pushed delivery's handle kept past its handler is stale: acking it
     * from the next row's handler, whose delivery took over its block, is
     * refused and changes nothing (that row is acked by its own return). */
    sql("DELETE FROM jobs");
    lq_options *keep_opts;
    lq_options_new(&keep_opts);
    lq_options_set_int(keep_opts, LQ_OPT_COALESCE, 0); /* settled at once: the block comes back */
    lq_options_set_int(keep_opts, LQ_OPT_POLL_INTERVAL_MS, 20);
    CHECK(lq_subscription_open(&s, b, t, keep_opts) == LQ_OK);
    CHECK(lq_subscription_run(s, keeping_handler, NULL) == LQ_OK);
    lq_message_set_payload(m, "first!", 6); /* as long as the second: one block fits both */
    CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
    wait_for(&kept_calls, 1);
    for (int i = 0; i < 1000 && lq_subscription_stat(s, LQ_STAT_IN_WORK) > 0; i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    nanosleep(&(struct timespec){0, 50000000}, NULL); /* its block back among the spares */
    lq_message_set_payload(m, "second", 6);
    CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
    wait_for(&kept_calls, 2);
    for (int i = 0; i < 1000 && count_rows("SELECT count(*) FROM jobs") > 0; i++)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    CHECK(atomic_load(&second_block) == atomic_load(&first_block)); /* the block was reused */
    CHECK(atomic_load(&stale_ack) == LQ_MISUSE);
    CHECK(count_rows("SELECT count(*) FROM jobs") == 0);
    CHECK(lq_delivery_id(atomic_load(&kept)) == 0); /* getters read nothing through it */
    lq_subscription_close(s);
    lq_options_free(keep_opts);

    /* Broker options that cannot hold are refused, with the numbers. */
    lq_broker *refused;
    lq_options *bo;
    lq_options_new(&bo);
    lq_options_set_int(bo, LQ_OPT_POOL_SIZE, 8);
    lq_options_set_int(bo, LQ_OPT_CONNECTION_LIMIT, 4);
    CHECK(lq_broker_open(&refused, url, bo) == LQ_CONNECTION_LIMIT);
    CHECK_CONTAINS(lq_errmsg(), "8");
    lq_options_set_int(bo, LQ_OPT_CONNECTION_LIMIT, 0);
    lq_options_set_int(bo, LQ_OPT_LISTEN_NOTIFY, 1);
    CHECK(lq_broker_open(&refused, url, bo) == LQ_DIALECT);
    lq_options_free(bo);

    lq_message_free(m);
    lq_options_free(o);
    lq_table_free(t);
    lq_broker_close(b);
    unlink(path);
    CHECK_DONE();
}
