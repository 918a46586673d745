/* The claim flow: how many claims a subscription keeps in flight and how many
 * rows each asks for. Pure arithmetic on the subscription's counts, so the
 * rules of seeds/lanes.txt are tested on their own (tests/c/test_flow.c):
 * - claims in flight for the free workers: one row each where a delivery
 *   holds a connection (each settles in its own transaction), else one claim
 *   for all the free workers (one commit for many rows);
 * - lease claims look ahead of the free workers while handlers outrun them;
 * - one claim at a time while probing (after a claim that took nothing or
 *   failed), and always on tables that keep one claim in flight;
 * - a claim beside another only while the pool has a connection to spare;
 * - never more held than the pool's size less one;
 * - the subscriptions of one broker hold no more than the pool's size less
 *   one together, and leave each other room (core/room.h). */
#ifndef LQ_FLOW_H
#define LQ_FLOW_H

#include "base/internal.h"

typedef struct lq__flow {
    int workers;        /* deliveries in work at once */
    int budget;         /* connections the subscription may hold: the pool less one */
    bool holds;         /* deliveries in work hold connections */
    bool one_claim;     /* one claim in flight at a time */
    bool one_row;       /* a claim takes one row (the row lock form's, but a batch's) */
    bool claim_seen;    /* a claim asks a row for every worker seen (lease form) */
    int batch;          /* rows per claim of a batch subscription, or 0 */
    bool probing;       /* after an empty or failed claim */
    int running;        /* claims in flight */
    int asked;          /* rows the claims in flight asked for */
    int seen;           /* the most workers seen busy at once */
    int ahead;          /* rows a claim asks for beyond the free workers */
    int ahead_max;      /* its bound (0: claims never look ahead) */
    bool ran_dry;       /* a worker waited for a row since the last claim that took rows */
} lq__flow;

LQ__HIDDEN void lq__flow_init(lq__flow *f, int workers, int budget);
/* Workers with nothing to do and no claim coming for them. */
LQ__HIDDEN int lq__flow_free(const lq__flow *f, int in_work, int waiting);
/* Whether another claim may start; `held` is the connections the
 * subscription's deliveries hold, `spare` the pool's idle connections plus
 * its room for new ones. */
LQ__HIDDEN bool lq__flow_may_start(const lq__flow *f, int in_work, int waiting, int held, int spare);
/* Rows the next claim asks for. */
LQ__HIDDEN int lq__flow_claim_size(const lq__flow *f, int in_work, int waiting);
/* A claim finished: it took `got` rows (0 or a failure: probe again). */
LQ__HIDDEN void lq__flow_claimed(lq__flow *f, int got, bool failed);
/* A worker found no row waiting: while the claims take rows, the claims are
 * slower than the handlers. */
LQ__HIDDEN void lq__flow_waited(lq__flow *f);
/* Where claims look ahead (the lease form, whose waiting rows hold no
 * connection): after a claim that took every row it asked for, asks for
 * more rows ahead when a worker ran dry since the claim before (double, up
 * to ahead_max), else for slowly fewer; after a short claim, none. So fast
 * handlers get many rows per claim's commit, slow ones keep few waiting. */
LQ__HIDDEN void lq__flow_look_ahead(lq__flow *f, bool full);
/* A delivery went into work, `in_work` now busy. */
LQ__HIDDEN void lq__flow_handed(lq__flow *f, int in_work);

#endif
