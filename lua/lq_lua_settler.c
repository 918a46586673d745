/* The settler of the Lua module (see lq_lua_settler.h).
 *
 * A delivery is used by one thread at a time (libqueue.h): once handed over
 * it is the settler's alone, and the Lua side keeps no pointer to it. A
 * delivery holds its subscription, and the subscription its broker, so a
 * settling thread never outlives what it touches, whatever Lua closes or
 * collects meanwhile. No thread here enters Lua: failures go to the log shim,
 * which Lua drains on its own thread. */
#include "lq_lua_settler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lq_lua_log.h"

/* Acks queued in a row that one thread settles together, at most. */
#define SETTLE_TOGETHER 64

typedef struct job {
    struct job *next;
    lq_delivery *delivery;
    int outcome;
    int64_t delay_ms;
} job;

struct lq_lua_settler {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* a job was queued, or closing */
    pthread_cond_t idle_cv; /* pending went down */
    job *head, *tail;
    size_t pending; /* queued or being settled */
    bool closing;
    bool together; /* acks queued in a row settle in one call */
    int64_t counts[LQ_LUA_SETTLED_ERRORS + 1];
    int thread_count;
    pthread_t *threads;
    char *label;
};

static const char *outcome_name(int outcome) {
    return outcome == LQ_LUA_SETTLE_ACK ? "ack" : "retry";
}

static int settle(const job *j) {
    switch (j->outcome) {
    case LQ_LUA_SETTLE_ACK: return lq_delivery_ack(j->delivery);
    case LQ_LUA_SETTLE_RETRY_AFTER: return lq_delivery_retry_after(j->delivery, j->delay_ms);
    default: return lq_delivery_retry(j->delivery);
    }
}

/* Worded as sub:run words a failed settlement of its own. */
static void report_failure(const lq_lua_settler *s, const job *j, int rc) {
    char message[1024];
    snprintf(message, sizeof message, "%s of row %lld of %s failed: %s (%s)",
             outcome_name(j->outcome), (long long)lq_delivery_id(j->delivery), s->label,
             rc == LQ_LEASE_LOST ? "its lease ran out and another claim holds it"
                                 : lq_errmsg(),
             lq_status_name(rc));
    lq_lua_log_post(LQ_LOG_WARNING, message);
}

/* Takes the next job, or the acks queued in a row from the head (up to
 * `most`), which settle together; 0 once closing with nothing queued. */
static size_t take(job **out, size_t most, lq_lua_settler *s) {
    pthread_mutex_lock(&s->mu);
    while (!s->head && !s->closing) pthread_cond_wait(&s->work_cv, &s->mu);
    size_t n = 0;
    while (s->head && n < most && (n == 0 || (out[0]->outcome == LQ_LUA_SETTLE_ACK &&
                                              s->head->outcome == LQ_LUA_SETTLE_ACK))) {
        out[n++] = s->head;
        s->head = s->head->next;
    }
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Settles what was taken: acks in one call (one statement and one commit
 * where the form allows, at once: it waits for no other delivery in work to
 * join), anything else on its own. */
static void settle_taken(int *rcs, job **jobs, lq_delivery **dvs, size_t n) {
    if (jobs[0]->outcome != LQ_LUA_SETTLE_ACK) {
        rcs[0] = settle(jobs[0]);
        return;
    }
    for (size_t i = 0; i < n; i++) dvs[i] = jobs[i]->delivery;
    lq_deliveries_ack(rcs, dvs, n);
}

static void *settler_main(void *arg) {
    lq_lua_settler *s = arg;
    job *jobs[SETTLE_TOGETHER];
    lq_delivery *dvs[SETTLE_TOGETHER];
    int rcs[SETTLE_TOGETHER];
    size_t n;
    /* Closing ends a thread only once the queue is empty. */
    while ((n = take(jobs, s->together ? SETTLE_TOGETHER : 1, s))) {
        settle_taken(rcs, jobs, dvs, n);
        int64_t counts[LQ_LUA_SETTLED_ERRORS + 1] = {0};
        for (size_t i = 0; i < n; i++) {
            if (rcs[i] != LQ_OK) report_failure(s, jobs[i], rcs[i]);
            lq_delivery_free(jobs[i]->delivery);
            counts[rcs[i] != LQ_OK ? LQ_LUA_SETTLED_ERRORS
                   : jobs[i]->outcome == LQ_LUA_SETTLE_ACK ? LQ_LUA_SETTLED_ACKED
                                                          : LQ_LUA_SETTLED_RETRIED]++;
            free(jobs[i]);
        }
        pthread_mutex_lock(&s->mu);
        for (int w = 0; w <= LQ_LUA_SETTLED_ERRORS; w++) s->counts[w] += counts[w];
        s->pending -= n;
        pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

/* Stops and joins the first `started` threads, then frees. */
static void shut_down(lq_lua_settler *s, int started) {
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < started; i++) pthread_join(s->threads[i], NULL);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->threads);
    free(s->label);
    free(s);
}

lq_lua_settler *lq_lua_settler_new(int threads, const char *label, bool together) {
    lq_lua_settler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->together = together;
    if (threads < 1) threads = 1;
    s->threads = calloc((size_t)threads, sizeof *s->threads);
    s->label = strdup(label ? label : "");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    if (!s->threads || !s->label) {
        shut_down(s, 0);
        return NULL;
    }
    for (; s->thread_count < threads; s->thread_count++) {
        if (pthread_create(&s->threads[s->thread_count], NULL, settler_main, s) != 0) {
            shut_down(s, s->thread_count);
            return NULL;
        }
    }
    return s;
}

bool lq_lua_settler_push(lq_lua_settler *s, lq_delivery *delivery, int outcome,
                         int64_t delay_ms) {
    job *j = malloc(sizeof *j);
    if (!s || !delivery || !j) {
        free(j);
        return false;
    }
    *j = (job){.delivery = delivery, .outcome = outcome, .delay_ms = delay_ms};
    lq_delivery_handled(delivery); /* its worker's next row may be claimed now */
    pthread_mutex_lock(&s->mu);
    if (s->tail) {
        s->tail->next = j;
    } else {
        s->head = j;
    }
    s->tail = j;
    s->pending++;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return true;
}

void lq_lua_settler_wait(lq_lua_settler *s, int most) {
    if (!s) return;
    size_t limit = most > 0 ? (size_t)most : 0;
    pthread_mutex_lock(&s->mu);
    while (s->pending > limit) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

int64_t lq_lua_settler_count(lq_lua_settler *s, int which) {
    if (!s || which < LQ_LUA_SETTLED_ACKED || which > LQ_LUA_SETTLED_ERRORS) return 0;
    pthread_mutex_lock(&s->mu);
    int64_t n = s->counts[which];
    pthread_mutex_unlock(&s->mu);
    return n;
}

void lq_lua_settler_free(lq_lua_settler *s) {
    if (s) shut_down(s, s->thread_count);
}
