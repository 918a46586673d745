/* A claim's haul: the deliveries one claim took, in claim order. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lq__claimed_add(lq__claimed *c, lq_delivery *d) {
    d->queue_next = NULL;
    if (c->tail) c->tail->queue_next = d;
    else c->head = d;
    c->tail = d;
    c->count++;
}

/* Frees deliveries nobody took (their rows come back by the form's rule). */
void lq__claimed_free(lq__claimed *c) {
    lq_delivery *d = c->head;
    while (d) {
        lq_delivery *next = d->queue_next;
        lq_delivery_free(d);
        d = next;
    }
    memset(c, 0, sizeof *c);
}

static int read_flag(void *ctx, const lq__value *cols, int count) {
    *(bool *)ctx = count > 0 && cols[0].type == LQ__V_INT && cols[0].i != 0;
    return LQ_OK;
}

int lq__fifo_guard(bool *taken, lq_subscription *s, lq__conn *conn) {
    *taken = true;
    if (!s->sql.guard.sql) return LQ_OK;
    char key[512];
    size_t n = strlen(lq__table_label(s->table, key, sizeof key));
    snprintf(key + n, sizeof key - n, ":%s", s->group);
    lq__value args[LQ__P_COUNT] = {0};
    args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = s->group, .n = strlen(s->group)};
    args[LQ__P_GUARD] = (lq__value){.type = LQ__V_TEXT, .p = key, .n = strlen(key)};
    *taken = false;
    return s->broker->dialect->exec(NULL, conn, &s->sql.guard, args, read_flag, taken);
}
