#define _POSIX_C_SOURCE 200809L
/* The keeper beside deliveries being let go, on a real SQLite file, through
 * the public ABI: a lease subscription in push mode whose keeper looks at
 * its book every few milliseconds (timeout_ms), while its workers and its
 * acker let go of deliveries as fast as they can, and which is closed with
 * handlers and acks in flight. A reference the keeper took on a delivery
 * being freed outlived the free (a use after free, then the block and the
 * subscription let go once too often): AddressSanitizer and
 * ThreadSanitizer runs of this test catch it. Every row is handled, and
 * none is left. */
#include "check.h"
#include "sqlite_file.h"

#include <libqueue.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

enum { ROUNDS = 30, ROWS = 300 };

static atomic_int handled;

static int handle(lq_delivery *d, void *userdata) {
    (void)d;
    (void)userdata;
    atomic_fetch_add(&handled, 1);
    return LQ_OK;
}

/* Runs past timeout_ms are told of in the log, one line each: kept out of
 * the test's output. */
static void quiet(int level, const char *message, void *userdata) {
    (void)level;
    (void)message;
    (void)userdata;
}

static void publish(lq_broker *b, const lq_table *t, int n) {
    lq_message *m[ROWS];
    for (int i = 0; i < n; i++) {
        lq_message_new(&m[i]);
        lq_message_set_payload(m[i], "x", 1);
    }
    CHECK(lq_publish(NULL, b, t, m, (size_t)n) == LQ_OK);
    for (int i = 0; i < n; i++) lq_message_free(m[i]);
}

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static lq_subscription *run(lq_broker *b, const lq_table *t) {
    lq_options *o;
    lq_options_new(&o);
    lq_options_set_int(o, LQ_OPT_WORKERS, 8);
    lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, 5);
    /* The keeper looks for runs past it every quarter of it: a look at the
     * book every few ms. A run that passes it goes back and comes again. */
    lq_options_set_int(o, LQ_OPT_TIMEOUT_MS, 20);
    lq_subscription *s = NULL;
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    lq_options_free(o);
    CHECK(s && lq_subscription_run(s, handle, NULL) == LQ_OK);
    return s;
}

int main(int argc, char **argv) {
    lq_set_log(quiet, NULL);
    lq_table *t;
    lq_broker *b = open_lease_file(&t, argc > 1 ? argv[1] : ".", "keeper-race");

    /* Each round closes its subscription halfway through its rows, with
     * handlers and acks in flight; the next round takes what is left. */
    for (int round = 0; round < ROUNDS; round++) {
        publish(b, t, ROWS);
        int before = atomic_load(&handled);
        lq_subscription *s = run(b, t);
        for (int waited = 0; atomic_load(&handled) - before < ROWS / 2 && waited < 30000; waited++)
            pause_ms(1);
        lq_subscription_close(s);
    }
    /* The rest, to the end: leases given back at close are claimable. */
    lq_subscription *s = run(b, t);
    for (int waited = 0; count_rows("SELECT count(*) FROM jobs") > 0 && waited < 3000; waited++)
        pause_ms(10);
    lq_subscription_close(s);
    CHECK(count_rows("SELECT count(*) FROM jobs") == 0);
    CHECK(atomic_load(&handled) >= ROUNDS * ROWS);

    lq_broker_close(b);
    lq_table_free(t);
    unlink(path);
    CHECK_DONE();
}
