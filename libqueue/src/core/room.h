#ifndef LQ_ROOM_H
#define LQ_ROOM_H

#include "base/internal.h"

/* The room of a broker's pool that its subscriptions share. What a
 * subscription holds (its claims in flight, and the connections its
 * deliveries keep where they keep one) counts against one budget, the pool's
 * size less one, for all of them together. The rule that keeps one
 * subscription from starving another: a subscription that holds nothing may
 * take any room left; one that holds something leaves a room free for each
 * other subscription that holds nothing and was refused for want of room. */
typedef struct lq__room {
    int budget;  /* the pool less one */
    int taken;   /* held by every subscription of the broker */
    int starved; /* subscriptions holding nothing, refused for want of room */
} lq__room;

/* Connections a subscription that holds `mine` may take now (0 or less:
 * none); `starved` tells whether it is one of the room's starved. */
LQ__HIDDEN int lq__room_share(const lq__room *r, int mine, bool starved);

#endif
