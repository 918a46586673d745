/* The keeper's references to the lease book's deliveries (lq__book_refs):
 * a delivery whose last reference was let go stays in the book until the
 * thread freeing it takes the subscription's lock to remove it. The keeper
 * must pass it over then: a reference taken on it would outlive its free
 * (a use after free, then a second free of its block and one unref of the
 * subscription too many). */
#include "check.h"
#include "runtime/runtime.h"

#include <stdlib.h>

int main(void) {
    lq_subscription *s = calloc(1, sizeof *s);
    lq_delivery *live = calloc(1, sizeof *live), *going = calloc(1, sizeof *going);
    if (!s || !live || !going) return 1;
    pthread_mutex_init(&s->mu, NULL);
    lq__book_init(&s->book);
    atomic_init(&live->refs, 1);
    atomic_init(&going->refs, 0); /* its last unref happened; its free has not taken s->mu yet */
    lq__book_add(&s->book, &going->entry);
    lq__book_add(&s->book, &live->entry);

    lq_delivery **got = NULL;
    size_t n = 0;
    CHECK(lq__book_refs(&got, &n, s) == LQ_OK);
    CHECK(n == 1);
    CHECK(n >= 1 && got[0] == live);
    CHECK(atomic_load(&live->refs) == 2);
    CHECK(atomic_load(&going->refs) == 0);
    free(got);

    /* Once removed, as its free does, the book hands out the live one alone. */
    lq__book_remove(&s->book, &going->entry);
    CHECK(lq__book_refs(&got, &n, s) == LQ_OK);
    CHECK(n == 1 && got[0] == live && atomic_load(&live->refs) == 3);
    free(got);

    pthread_mutex_destroy(&s->mu);
    free(going);
    free(live);
    free(s);
    CHECK_DONE();
}
