/* `concurrency` counted by holds, where counting the queue's leased rows is
 * costly (MySQL: see runtime/forms/holds.c): what one subscription holds of
 * the queue's room, on the database and here. */
#ifndef LQ_RUNTIME_HOLDS_H
#define LQ_RUNTIME_HOLDS_H

#include "base/internal.h"
#include "sql/sql.h"

#include <pthread.h>

typedef struct lq__holds {
    bool on;
    char *queue;    /* the queue's name in the holds table */
    int64_t holder; /* this subscription's row: a random number, never 0 */
    lq__holds_sql sql;
    pthread_mutex_t mu; /* granted, in_use and until */
    int granted;    /* room the row holds for this subscription */
    int in_use;     /* of it, taken by claims and by their rows not yet let go */
    int64_t until;  /* epoch ms: the row counts until then, as last committed */
    bool growing;   /* a growth is being written: no room is taken in hand */
    bool found_none; /* the last claim found no row: the next asks first (probe) */
    /* The row's count is written by one thread at a time, so that the last
     * write is the newest count. */
    pthread_mutex_t write_mu;
} lq__holds;

#endif
