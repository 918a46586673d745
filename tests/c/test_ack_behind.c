#define _POSIX_C_SOURCE 200809L
/* lq_delivery_ack_behind on a real SQLite file, through the public ABI:
 * pulled acks queued for the acker thread commit, by lq_subscription_stop
 * at the latest; the delivery may be freed before or after its ack is done;
 * a lost lease is logged and counted, not returned; where acks cannot go
 * behind (coalesce 0, a stopped subscription) the call acks at once.
 * lq_deliveries_ack_behind does the same for a set in one call, and
 * refuses a set with one settled already, settling none. */
#include "check.h"
#include "sqlite_file.h"

#include <libqueue.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static long long rows(void) { return count_rows("SELECT count(*) FROM jobs"); }

/* The warnings logged, from any thread (the acker's among them). */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int lease_warnings;

static void on_log(int level, const char *message, void *userdata) {
    (void)userdata;
    pthread_mutex_lock(&log_mu);
    if (level >= LQ_LOG_WARNING && strstr(message, "lease")) lease_warnings++;
    pthread_mutex_unlock(&log_mu);
}

static void publish(lq_broker *b, const lq_table *t, int n) {
    lq_message *m;
    lq_message_new(&m);
    lq_message_set_payload(m, "x", 1);
    for (int i = 0; i < n; i++) CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
    lq_message_free(m);
}

static lq_subscription *subscribe(lq_broker *b, const lq_table *t, int coalesce) {
    lq_options *o;
    lq_options_new(&o);
    lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, 20);
    lq_options_set_int(o, LQ_OPT_WORKERS, 8);
    lq_options_set_int(o, LQ_OPT_COALESCE, coalesce);
    lq_subscription *s = NULL;
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    lq_options_free(o);
    return s;
}

enum { MANY = 40 };

int main(int argc, char **argv) {
    lq_set_log(on_log, NULL);
    lq_table *t;
    lq_broker *b = open_lease_file(&t, argc > 1 ? argv[1] : ".", "ack-behind");
    CHECK(lq_delivery_ack_behind(NULL) == LQ_MISUSE);
    CHECK(lq_subscription_acks_behind(NULL) == 0);

    /* Every ack queued commits by the stop; half the deliveries are freed
     * at once (before their acks ran), half after the stop. */
    publish(b, t, MANY);
    lq_subscription *s = subscribe(b, t, 1);
    CHECK(lq_subscription_acks_behind(s) == 1);
    lq_delivery *kept[MANY / 2];
    for (int i = 0; i < MANY; i++) {
        lq_delivery *d = NULL;
        CHECK(lq_subscription_next(&d, s, 5000) == LQ_OK);
        CHECK(lq_delivery_ack_behind(d) == LQ_OK);
        if (i % 2) {
            lq_delivery_free(d);
            continue;
        }
        /* Settled once: the caller's own settlements are refused now. */
        CHECK(lq_delivery_ack_behind(d) == LQ_MISUSE);
        CHECK(lq_delivery_ack(d) == LQ_MISUSE);
        CHECK(lq_delivery_retry(d) == LQ_MISUSE);
        CHECK(lq_deliveries_ack(NULL, &d, 1) == LQ_MISUSE);
        kept[i / 2] = d;
    }
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(rows() == 0);
    CHECK(lq_subscription_stat(s, LQ_STAT_ACKED) == MANY);
    CHECK(lq_subscription_stat(s, LQ_STAT_IN_WORK) == 0);
    for (int i = 0; i < MANY / 2; i++) lq_delivery_free(kept[i]);
    lq_subscription_close(s);

    /* A set in one call: each status LQ_OK, every ack committed by the
     * stop; a set with one settled already is refused whole. */
    publish(b, t, 4);
    s = subscribe(b, t, 1);
    lq_delivery *set[4];
    for (int i = 0; i < 4; i++) CHECK(lq_subscription_next(&set[i], s, 5000) == LQ_OK);
    CHECK(lq_delivery_ack_behind(set[3]) == LQ_OK);
    int statuses[4] = {-1, -1, -1, -1};
    CHECK(lq_deliveries_ack_behind(statuses, set, 4) == LQ_MISUSE);
    CHECK(statuses[0] == -1 && statuses[1] == -1 && statuses[2] == -1);
    CHECK(lq_deliveries_ack_behind(NULL, NULL, 1) == LQ_MISUSE);
    CHECK(lq_deliveries_ack_behind(NULL, set, 0) == LQ_OK);
    CHECK(lq_deliveries_ack_behind(statuses, set, 3) == LQ_OK);
    CHECK(statuses[0] == LQ_OK && statuses[1] == LQ_OK && statuses[2] == LQ_OK);
    CHECK(lq_delivery_ack(set[0]) == LQ_MISUSE);
    for (int i = 0; i < 2; i++) lq_delivery_free(set[i]); /* before their acks ran */
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(rows() == 0);
    CHECK(lq_subscription_stat(s, LQ_STAT_ACKED) == 4);
    CHECK(lq_subscription_stat(s, LQ_STAT_IN_WORK) == 0);
    for (int i = 2; i < 4; i++) lq_delivery_free(set[i]);
    lq_subscription_close(s);

    /* A lease lost before the acker's turn: logged and counted, the row
     * left to its new claim; after the stop, the call acks at once. */
    publish(b, t, 1);
    s = subscribe(b, t, 1);
    lq_delivery *lost = NULL, *again = NULL;
    CHECK(lq_subscription_next(&lost, s, 5000) == LQ_OK);
    sql("UPDATE jobs SET locked_until = '2000-01-01T00:00:00.000+00:00'");
    CHECK(lq_subscription_next(&again, s, 5000) == LQ_OK);
    CHECK(lq_delivery_attempt(again) == 2);
    CHECK(lq_delivery_ack_behind(lost) == LQ_OK);
    lq_delivery_free(lost);
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(rows() == 1);
    CHECK(lq_subscription_stat(s, LQ_STAT_LEASE_LOST) == 1);
    pthread_mutex_lock(&log_mu);
    CHECK(lease_warnings >= 1);
    pthread_mutex_unlock(&log_mu);
    CHECK(lq_delivery_ack_behind(again) == LQ_OK);
    CHECK(rows() == 0);
    CHECK(lq_delivery_ack(again) == LQ_MISUSE);
    lq_delivery_free(again);
    lq_subscription_close(s);

    /* coalesce 0: no ack goes behind; the call acks on this thread, and
     * so does the call for a set. */
    publish(b, t, 3);
    s = subscribe(b, t, 0);
    CHECK(lq_subscription_acks_behind(s) == 0);
    lq_delivery *d = NULL;
    CHECK(lq_subscription_next(&d, s, 5000) == LQ_OK);
    CHECK(lq_delivery_ack_behind(d) == LQ_OK);
    CHECK(rows() == 2);
    CHECK(lq_delivery_ack_behind(d) == LQ_MISUSE);
    lq_delivery_free(d);
    for (int i = 0; i < 2; i++) CHECK(lq_subscription_next(&set[i], s, 5000) == LQ_OK);
    CHECK(lq_deliveries_ack_behind(statuses, set, 2) == LQ_OK);
    CHECK(statuses[0] == LQ_OK && statuses[1] == LQ_OK);
    CHECK(rows() == 0);
    for (int i = 0; i < 2; i++) lq_delivery_free(set[i]);
    lq_subscription_close(s);

    lq_broker_close(b);
    lq_table_free(t);
    unlink(path);
    CHECK_DONE();
}
