#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* The readiness descriptor of a pulled subscription, through the public ABI
 * on a SQLite file: readable exactly while a delivery is ready (level, and
 * emptied by the try_next that takes the last), a spurious wake-up when
 * another taker came first, readable for good once stopped (try_next:
 * LQ_CLOSED, also for a waiter on another thread), one descriptor per
 * subscription, the refusals of push mode and of a stopped one, and
 * lq_subscription_try_next_batch, which takes every ready one at once. */
#include "check.h"

#include <fcntl.h>
#include <libqueue.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Whether fd turns readable within ms. */
static int readable(int fd, int ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void publish(lq_broker *b, const lq_table *t, int n) {
    for (int i = 0; i < n; i++) {
        lq_message *m;
        lq_message_new(&m);
        lq_message_set_payload(m, "x", 1);
        CHECK(lq_publish(NULL, b, t, &m, 1) == LQ_OK);
        lq_message_free(m);
    }
}

static lq_subscription *open_sub(lq_broker *b, const lq_table *t, int workers) {
    lq_options *o;
    lq_options_new(&o);
    lq_options_set_int(o, LQ_OPT_WORKERS, workers);
    lq_options_set_int(o, LQ_OPT_POLL_INTERVAL_MS, 20);
    lq_subscription *s = NULL;
    CHECK(lq_subscription_open(&s, b, t, o) == LQ_OK);
    lq_options_free(o);
    return s;
}

/* Waits up to 5 s for `n` deliveries claimed and waiting. */
static void await_waiting(lq_subscription *s, int n) {
    for (int i = 0; i < 500 && lq_subscription_stat(s, LQ_STAT_WAITING) < n; i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    CHECK(lq_subscription_stat(s, LQ_STAT_WAITING) == n);
}

static void level(lq_broker *b, const lq_table *t) {
    lq_subscription *s = open_sub(b, t, 2);
    int fd = -1, again = -2;
    CHECK(lq_subscription_fd(&fd, s) == LQ_OK && fd >= 0);
    CHECK(lq_subscription_fd(&again, s) == LQ_OK && again == fd);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK);
    CHECK(!readable(fd, 100)); /* an empty queue */
    lq_delivery *d = (lq_delivery *)&fd; /* not NULL: a refusal must clear it */
    CHECK(lq_subscription_try_next(&d, s) == LQ_TIMEOUT && d == NULL);

    publish(b, t, 2);
    await_waiting(s, 2);
    CHECK(readable(fd, 0));
    lq_delivery *first, *second;
    CHECK(lq_subscription_try_next(&first, s) == LQ_OK && first);
    CHECK(readable(fd, 0)); /* level: one more waits */
    CHECK(lq_subscription_try_next(&second, s) == LQ_OK && second);
    CHECK(!readable(fd, 0)); /* emptied by the take of the last */
    CHECK(lq_subscription_try_next(&d, s) == LQ_TIMEOUT && d == NULL);
    CHECK(lq_delivery_ack(first) == LQ_OK && lq_delivery_ack(second) == LQ_OK);
    lq_delivery_free(first);
    lq_delivery_free(second);

    /* Another taker first: readable, then nothing for try_next. */
    publish(b, t, 1);
    CHECK(readable(fd, 5000));
    CHECK(lq_subscription_next(&d, s, 1000) == LQ_OK && d);
    CHECK(!readable(fd, 0));
    lq_delivery *none = NULL;
    CHECK(lq_subscription_try_next(&none, s) == LQ_TIMEOUT && none == NULL);
    CHECK(lq_delivery_ack(d) == LQ_OK);
    lq_delivery_free(d);

    /* Stopped: readable for good, and LQ_CLOSED. */
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(readable(fd, 0));
    CHECK(lq_subscription_try_next(&d, s) == LQ_CLOSED && d == NULL);
    CHECK(readable(fd, 0));
    CHECK(lq_subscription_fd(&again, s) == LQ_OK && again == fd);
    lq_subscription_close(s);
}

/* try_next_batch: what is ready, up to the capacity, the descriptor emptied
 * with the last; LQ_TIMEOUT and a count of 0 when none; LQ_CLOSED stopped. */
static void batch_take(lq_broker *b, const lq_table *t) {
    lq_subscription *s = open_sub(b, t, 4);
    int fd = -1;
    CHECK(lq_subscription_fd(&fd, s) == LQ_OK);
    lq_delivery *out[4] = {NULL};
    size_t count = 9;
    CHECK(lq_subscription_try_next_batch(out, 4, &count, s) == LQ_TIMEOUT && count == 0);
    CHECK(lq_subscription_try_next_batch(NULL, 4, &count, s) == LQ_MISUSE && count == 0);
    CHECK(lq_subscription_try_next_batch(out, 0, &count, s) == LQ_MISUSE);
    CHECK(lq_subscription_try_next_batch(out, 4, NULL, s) == LQ_MISUSE);

    publish(b, t, 3);
    await_waiting(s, 3);
    CHECK(readable(fd, 0));
    CHECK(lq_subscription_try_next_batch(out, 2, &count, s) == LQ_OK && count == 2);
    CHECK(out[0] && out[1] && lq_delivery_id(out[0]) != lq_delivery_id(out[1]));
    CHECK(readable(fd, 0)); /* one more waits */
    CHECK(lq_subscription_try_next_batch(out + 2, 2, &count, s) == LQ_OK && count == 1);
    CHECK(out[2] && !readable(fd, 0));
    CHECK(lq_subscription_stat(s, LQ_STAT_IN_WORK) == 3);
    CHECK(lq_subscription_try_next_batch(out + 3, 1, &count, s) == LQ_TIMEOUT && count == 0);
    for (int i = 0; i < 3; i++) {
        CHECK(lq_delivery_ack(out[i]) == LQ_OK);
        lq_delivery_free(out[i]);
    }
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(lq_subscription_try_next_batch(out, 4, &count, s) == LQ_CLOSED && count == 0);
    lq_subscription_close(s);
}

typedef struct waiter {
    lq_subscription *s;
    int fd;
    int woke, status;
} waiter;

/* An event loop's turn: waits on the descriptor (10 s at most), then takes. */
static void *wait_then_take(void *arg) {
    waiter *w = arg;
    w->woke = readable(w->fd, 10000);
    lq_delivery *d = NULL;
    w->status = lq_subscription_try_next(&d, w->s);
    lq_delivery_free(d);
    return NULL;
}

static void stop_while_waiting(lq_broker *b, const lq_table *t) {
    waiter w = {.s = open_sub(b, t, 1)};
    CHECK(lq_subscription_fd(&w.fd, w.s) == LQ_OK);
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, wait_then_take, &w) == 0);
    nanosleep(&(struct timespec){0, 100000000L}, NULL); /* it waits */
    CHECK(lq_subscription_stop(w.s) == LQ_OK);
    pthread_join(thread, NULL);
    CHECK(w.woke && w.status == LQ_CLOSED);
    lq_subscription_close(w.s);
}

/* The first try_next starts the claims, as next does. */
static void try_next_starts(lq_broker *b, const lq_table *t) {
    lq_subscription *s = open_sub(b, t, 1);
    publish(b, t, 1);
    lq_delivery *d = NULL;
    CHECK(lq_subscription_try_next(&d, s) == LQ_TIMEOUT);
    await_waiting(s, 1);
    CHECK(lq_subscription_try_next(&d, s) == LQ_OK && d);
    CHECK(lq_delivery_ack(d) == LQ_OK);
    lq_delivery_free(d);
    lq_subscription_close(s);
}

static int handler(lq_delivery *d, void *userdata) {
    (void)d;
    (void)userdata;
    return LQ_OK;
}

static void refusals(lq_broker *b, const lq_table *t) {
    int fd = 7;
    lq_subscription *s = open_sub(b, t, 1);
    CHECK(lq_subscription_run(s, handler, NULL) == LQ_OK);
    CHECK(lq_subscription_fd(&fd, s) == LQ_MISUSE && fd == -1);
    lq_delivery *d = NULL;
    CHECK(lq_subscription_try_next(&d, s) == LQ_MISUSE && d == NULL);
    size_t count = 9;
    CHECK(lq_subscription_try_next_batch(&d, 1, &count, s) == LQ_MISUSE && count == 0);
    lq_subscription_close(s);

    s = open_sub(b, t, 1);
    CHECK(lq_subscription_stop(s) == LQ_OK);
    CHECK(lq_subscription_fd(&fd, s) == LQ_CLOSED && fd == -1);
    CHECK(lq_subscription_try_next(&d, s) == LQ_CLOSED);
    lq_subscription_close(s);
}

int main(int argc, char **argv) {
    char path[4096], url[4200];
    snprintf(path, sizeof path, "%s/ready-fd-%d.db", argc > 1 ? argv[1] : ".", (int)getpid());
    snprintf(url, sizeof url, "sqlite:%s", path);
    lq_table *t;
    lq_table_new(&t, "jobs");
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload");
    lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    lq_broker *b;
    CHECK(lq_broker_open(&b, url, NULL) == LQ_OK);
    CHECK(lq_table_create(b, t, 0) == LQ_OK);
    level(b, t);
    batch_take(b, t);
    stop_while_waiting(b, t);
    try_next_starts(b, t);
    refusals(b, t);
    lq_broker_close(b);
    lq_table_free(t);
    const char *suffixes[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char file[4300];
        snprintf(file, sizeof file, "%s%s", path, suffixes[i]);
        unlink(file);
    }
    CHECK_DONE();
}
