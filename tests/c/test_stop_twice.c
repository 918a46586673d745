#define _POSIX_C_SOURCE 200809L
/* Two threads stop one subscription at once: the second stop returns only
 * once the first has ended (its handlers returned, its rows given back), so
 * that its caller may close and free the subscription. Before, the second
 * returned at once, and a close after it freed what the first stop and the
 * running handlers still used. */
#include "check.h"
#include "sqlite_file.h"

#include <libqueue.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static atomic_int running, released, returned;

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int handle(lq_delivery *d, void *userdata) {
    (void)d;
    (void)userdata;
    atomic_store(&running, 1);
    while (!atomic_load(&released)) pause_ms(1);
    atomic_store(&returned, 1);
    return LQ_OK;
}

static void *stop_first(void *s) {
    lq_subscription_stop(s);
    return NULL;
}

static void *release_later(void *unused) {
    (void)unused;
    pause_ms(300); /* well after both stops began */
    atomic_store(&released, 1);
    return NULL;
}

int main(int argc, char **argv) {
    lq_table *t;
    lq_broker *b = open_lease_file(&t, argc > 1 ? argv[1] : ".", "stop-twice");
    lq_message *m;
    CHECK(lq_message_new(&m) == LQ_OK);
    CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
    lq_message_free(m);

    lq_options *o;
    lq_options_new(&o);
    lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, 20);
    lq_subscription *s = NULL;
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    lq_options_free(o);
    CHECK(s && lq_subscription_run(s, handle, NULL) == LQ_OK);
    for (int waited = 0; !atomic_load(&running) && waited < 10000; waited++) pause_ms(1);
    CHECK(atomic_load(&running));

    pthread_t first, releaser;
    CHECK(pthread_create(&first, NULL, stop_first, s) == 0);
    pause_ms(50); /* the first stop is under way, waiting for the handler */
    CHECK(pthread_create(&releaser, NULL, release_later, NULL) == 0);
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(atomic_load(&returned)); /* not before the handler returned */
    pthread_join(first, NULL);
    pthread_join(releaser, NULL);
    lq_subscription_close(s);
    CHECK(count_rows("SELECT count(*) FROM jobs") == 0);

    lq_broker_close(b);
    lq_table_free(t);
    unlink(path);
    CHECK_DONE();
}
