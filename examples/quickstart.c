#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* Opens a SQLite queue, publishes a few jobs, works them with four workers,
 * and closes everything. Usage: quickstart [path.db] [jobs] */
#include <libqueue.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int handled;

static int handle(lq_delivery *delivery, void *userdata) {
    (void)userdata;
    /* Returning LQ_OK acks the row; any other value retries it. */
    if (lq_delivery_payload_size(delivery) == 0) return LQ_ERROR;
    atomic_fetch_add(&handled, 1);
    return LQ_OK;
}

static int fail(const char *what) {
    fprintf(stderr, "%s: %s (%s)\n", what, lq_errmsg(), lq_status_name(lq_errcode()));
    return 1;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "quickstart.db";
    int jobs = argc > 2 ? atoi(argv[2]) : 100;
    char url[4096];
    snprintf(url, sizeof url, "sqlite:%s", path);

    lq_broker *broker;
    lq_table *table;
    lq_options *options;
    lq_subscription *sub;
    lq_message *message;
    if (lq_broker_open(&broker, url, NULL)) return fail("open");
    lq_table_new(&table, "jobs");
    lq_table_set_column(table, LQ_ROLE_PAYLOAD, "payload");
    lq_table_set_column(table, LQ_ROLE_ATTEMPT, "attempt");
    lq_table_set_column(table, LQ_ROLE_LOCKED_UNTIL, "locked_until");

    /* Creates the table if missing; one that exists is checked instead. */
    if (lq_table_create(broker, table, 0)) return fail("create table");

    lq_message_new(&message);
    for (int i = 0; i < jobs; i++) {
        char payload[64];
        int n = snprintf(payload, sizeof payload, "{\"job\": %d}", i);
        lq_message_set_payload(message, payload, (size_t)n);
        if (lq_publish(NULL, broker, table, &message, 1)) return fail("publish");
    }
    lq_message_free(message);

    lq_options_new(&options);
    lq_options_set_int(options, LQ_OPT_WORKERS, 4);
    lq_options_set_int(options, LQ_OPT_POLL_INTERVAL_MS, 50);
    if (lq_subscription_open(&sub, broker, table, options)) return fail("subscribe");
    if (lq_subscription_run(sub, handle, NULL)) return fail("run");
    while (atomic_load(&handled) < jobs) nanosleep(&(struct timespec){0, 10000000}, NULL);
    lq_subscription_close(sub);

    printf("handled %d jobs\n", atomic_load(&handled));
    lq_options_free(options);
    lq_table_free(table);
    lq_broker_close(broker);
    return 0;
}
