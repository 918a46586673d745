#include "dialects/write_turns.h"

#include "base/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct lq__turns {
    lq__turns *next;
    char *path;
    int opens;
    pthread_mutex_t mu;
    pthread_cond_t ended_cv;
    atomic_uint_fast64_t ended;
    atomic_int waiting; /* read without mu: a writer with no one waiting wakes no one */
};

/* The files this process has open, a few at most: a list. */
static pthread_mutex_t files_mu = PTHREAD_MUTEX_INITIALIZER;
static lq__turns *files;

static lq__turns *turns_new(const char *path) {
    lq__turns *t = calloc(1, sizeof *t);
    if (!t || !(t->path = lq__strdup(path))) {
        free(t);
        return NULL;
    }
    lq__cond_init(&t->ended_cv);
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

lq__turns *lq__turns_open(const char *path) {
    pthread_mutex_lock(&files_mu);
    lq__turns *t = files;
    while (t && strcmp(t->path, path) != 0) t = t->next;
    if (!t && (t = turns_new(path))) {
        t->next = files;
        files = t;
    }
    if (t) t->opens++;
    pthread_mutex_unlock(&files_mu);
    return t;
}

void lq__turns_close(lq__turns *t) {
    if (!t) return;
    pthread_mutex_lock(&files_mu);
    bool last = --t->opens == 0;
    if (last) {
        lq__turns **p = &files;
        while (*p != t) p = &(*p)->next;
        *p = t->next;
    }
    pthread_mutex_unlock(&files_mu);
    if (!last) return;
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->ended_cv);
    free(t->path);
    free(t);
}

uint64_t lq__turns_ended_count(lq__turns *t) { return atomic_load(&t->ended); }

void lq__turns_wait(lq__turns *t, uint64_t *seen, long us) {
    struct timespec until = lq__deadline_in_us(us);
    pthread_mutex_lock(&t->mu);
    atomic_fetch_add(&t->waiting, 1);
    if (atomic_load(&t->ended) == *seen) pthread_cond_timedwait(&t->ended_cv, &t->mu, &until);
    atomic_fetch_sub(&t->waiting, 1);
    *seen = atomic_load(&t->ended);
    pthread_mutex_unlock(&t->mu);
}

void lq__turns_ended(lq__turns *t) {
    atomic_fetch_add(&t->ended, 1);
    if (atomic_load(&t->waiting) == 0) return;
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->ended_cv);
    pthread_mutex_unlock(&t->mu);
}
