/* A claim's haul: the deliveries one claim took, in claim order. */
#include "../runtime.h"

#include <stdlib.h>
#include <string.h>

void lq__claimed_add(lq_claimed *c, lq_delivery *d) {
    d->queue_next = NULL;
    if (c->tail) c->tail->queue_next = d;
    else c->head = d;
    c->tail = d;
    c->count++;
}

/* Frees deliveries nobody took (their rows come back by the form's rule). */
void lq__claimed_free(lq_claimed *c) {
    lq_delivery *d = c->head;
    while (d) {
        lq_delivery *next = d->queue_next;
        lq_delivery_free(d);
        d = next;
    }
    memset(c, 0, sizeof *c);
}
