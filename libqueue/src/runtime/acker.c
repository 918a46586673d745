#include "runtime/acker.h"

#include "runtime/runtime.h"

#include "base/clock.h"

#include <errno.h>
#include <stdlib.h>

/* How long the acker leaves queued acks to a claim that carries them
 * (a.carried): a claim woken by their run's end takes them well within it;
 * one that does not come (the claims stopped, or met no room in the pool)
 * delays them by no more. */
#define CARRY_WAIT_MS 20

/* Acks queued at most: past it a worker waits, so a slow server bounds the
 * rows whose leases run on after their handlers returned (a take of several
 * may pass it by the rest of its set). */
#define ACKER_QUEUE_MAX 256

bool lq__acker_wanted(const lq_subscription *s) {
    bool holds_nothing = s->form == LQ_FORM_LEASE || (s->form == LQ_FORM_ADVISORY && !s->flow.holds);
    return holds_nothing && s->acks_behind && !s->transactional && !s->batch;
}

void lq__acker_init(lq__acker *a) {
    *a = (lq__acker){0};
    pthread_mutex_init(&a->mu, NULL);
    lq__cond_init(&a->arrived); /* monotonic: leave_to_claim waits on it with a deadline */
    pthread_cond_init(&a->room, NULL);
}

void lq__acker_destroy(lq__acker *a) {
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->arrived);
    pthread_cond_destroy(&a->room);
}

/* Acks what was taken, as one set where it can (a row whose ack failed is
 * logged, and its lease runs out and it comes back), and lets go of them. */
static void ack_taken(lq_delivery **dvs, size_t n) {
    lq__settle_acks(NULL, dvs, n, false);
    lq__deliveries_unref(dvs, n);
}

/* Takes up to `max` queued acks; a->mu held. */
static size_t take_queued(lq__acker *a, lq_delivery **out, size_t max) {
    size_t n = 0;
    while (a->head && n < max) {
        lq_delivery *d = a->head;
        a->head = d->queue_next;
        d->queue_next = NULL;
        out[n++] = d;
    }
    if (!a->head) a->tail = NULL;
    a->queued -= (int)n;
    if (n) pthread_cond_broadcast(&a->room);
    return n;
}

size_t lq__acker_hand_over(lq__acker *a, lq_delivery **out, size_t max) {
    pthread_mutex_lock(&a->mu);
    size_t n = take_queued(a, out, max);
    /* The acker's wait for a claim ends, so the next ack to come gets a
     * wait of its own. */
    if (n && !a->queued) pthread_cond_signal(&a->arrived);
    pthread_mutex_unlock(&a->mu);
    return n;
}

/* Leaves the queued acks to a claim that carries them, for a moment at
 * most; a->mu held. */
static void leave_to_claim(lq__acker *a) {
    if (!a->carried) return;
    struct timespec until = lq__deadline_in(CARRY_WAIT_MS);
    while (a->queued && !a->stopping && atomic_load(a->carried))
        if (pthread_cond_timedwait(&a->arrived, &a->mu, &until) == ETIMEDOUT) break;
}

static void *acker_main(void *arg) {
    lq__acker *a = arg;
    lq_delivery *taken[ACKER_QUEUE_MAX];
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->queued && (!a->stopping || a->arriving)) pthread_cond_wait(&a->arrived, &a->mu);
        if (!a->queued) break; /* stopping, and nothing left or coming */
        leave_to_claim(a);
        size_t n = take_queued(a, taken, ACKER_QUEUE_MAX);
        if (!n) continue; /* a claim carried them */
        pthread_mutex_unlock(&a->mu);
        ack_taken(taken, n);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* a->mu held. */
static int start_locked(lq__acker *a) {
    if (a->stopping) return lq__error(LQ_CLOSED, "the subscription is stopped");
    if (a->running) return LQ_OK;
    if (pthread_create(&a->thread, NULL, acker_main, a) != 0)
        return lq__error(LQ_ERROR, "cannot start the acker thread");
    a->running = true;
    return LQ_OK;
}

int lq__acker_start(lq__acker *a) {
    pthread_mutex_lock(&a->mu);
    int rc = start_locked(a);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

bool lq__acker_take(lq__acker *a, lq_delivery *const *dvs, size_t n, bool start) {
    if (n == 0) return true;
    pthread_mutex_lock(&a->mu);
    bool taken = start ? start_locked(a) == LQ_OK : a->running && !a->stopping;
    if (taken) a->arriving++; /* a stop waits for it */
    pthread_mutex_unlock(&a->mu);
    if (!taken) return false;
    lq_subscription *s = dvs[0]->sub;
    bool carried = a->carried != NULL;
    if (carried) atomic_fetch_add(&s->refs, 1); /* for the wake below: dvs may be gone by then */
    lq__subscription_settling(s, dvs, n); /* not under a->mu: s->mu comes first */
    pthread_mutex_lock(&a->mu);
    a->arriving--;
    while (a->queued >= ACKER_QUEUE_MAX && !a->stopping) pthread_cond_wait(&a->room, &a->mu);
    for (size_t i = 0; i < n; i++) {
        lq_delivery *d = dvs[i];
        d->queue_next = NULL;
        if (a->tail) a->tail->queue_next = d;
        else a->head = d;
        a->tail = d;
    }
    a->queued += (int)n;
    pthread_cond_signal(&a->arrived);
    pthread_mutex_unlock(&a->mu);
    if (carried) {
        lq__subscription_acks_queued(s);
        lq__subscription_unref(s);
    }
    return true;
}

void lq__acker_stop(lq__acker *a) {
    pthread_mutex_lock(&a->mu);
    a->stopping = true; /* for good: a later take finds it stopped */
    bool running = a->running;
    pthread_cond_broadcast(&a->arrived);
    pthread_cond_broadcast(&a->room);
    pthread_mutex_unlock(&a->mu);
    if (running) pthread_join(a->thread, NULL);
}
