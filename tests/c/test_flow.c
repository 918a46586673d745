/* The claim flow's rules, one by one. */
#include "check.h"
#include "runtime/flow.h"
#include "core/room.h"

int main(void) {
    lq__flow f;
    lq__flow_init(&f, 4, 7); /* workers(4), a pool of 8, row locks */
    f.holds = true;

    /* Probing at first: one claim of one row, even with four free workers. */
    CHECK(lq__flow_may_start(&f, 0, 0, 0, 8));
    f.running = f.asked = 1;
    CHECK(!lq__flow_may_start(&f, 0, 0, 0, 8));
    lq__flow_claimed(&f, 1, false);
    /* Rows came: a claim in flight for each free worker, one row each. */
    CHECK(lq__flow_may_start(&f, 0, 0, 0, 8));
    f.running = f.asked = 4;
    CHECK(!lq__flow_may_start(&f, 0, 0, 0, 8));
    f.running = f.asked = 2;
    CHECK(lq__flow_may_start(&f, 0, 0, 0, 8));
    CHECK(!lq__flow_may_start(&f, 2, 0, 2, 8)); /* two in work, two claims coming */
    CHECK(lq__flow_claim_size(&f, 0, 0) == 1);
    /* Where deliveries hold nothing, one claim asks for every free worker. */
    f.holds = false;
    f.running = f.asked = 0;
    CHECK(lq__flow_claim_size(&f, 1, 0) == 3);
    f.running = 1;
    f.asked = 3;
    CHECK(!lq__flow_may_start(&f, 1, 0, 0, 8)); /* all asked for */
    f.holds = true;

    /* An empty claim: one claim per wait until rows come again. */
    f.running = f.asked = 0;
    lq__flow_claimed(&f, 0, false);
    CHECK(lq__flow_may_start(&f, 0, 0, 0, 8));
    f.running = 1;
    CHECK(!lq__flow_may_start(&f, 0, 0, 0, 8));
    f.running = f.asked = 0;
    lq__flow_claimed(&f, 0, true); /* a failure probes too */
    CHECK(f.probing);
    lq__flow_claimed(&f, 2, false);

    /* A claim beside another needs a connection to spare. */
    f.running = 1;
    CHECK(!lq__flow_may_start(&f, 0, 0, 0, 1));
    CHECK(lq__flow_may_start(&f, 0, 0, 0, 2));

    /* Where deliveries hold connections: never more than the pool less one. */
    lq__flow_init(&f, 8, 3); /* workers(8), a pool of 4 */
    f.holds = true;
    lq__flow_claimed(&f, 1, false);
    CHECK(lq__flow_may_start(&f, 2, 0, 2, 4));
    CHECK(!lq__flow_may_start(&f, 3, 0, 3, 4));
    CHECK(!lq__flow_may_start(&f, 2, 1, 3, 4));
    f.running = 1;
    CHECK(!lq__flow_may_start(&f, 2, 0, 2, 4));
    /* Leases hold nothing between statements; claims still stop one short. */
    f.holds = false;
    f.running = 3;
    CHECK(!lq__flow_may_start(&f, 0, 0, 0, 4));

    /* One claim in flight: single-writer tables ask a row for every worker seen. */
    lq__flow_init(&f, 4, 7);
    f.one_claim = true;
    f.claim_seen = true;
    lq__flow_claimed(&f, 1, false);
    for (int i = 0; i < 4; i++) lq__flow_handed(&f, i);
    CHECK(f.seen == 4);
    CHECK(lq__flow_claim_size(&f, 3, 0) == 4);
    f.running = 1;
    CHECK(!lq__flow_may_start(&f, 0, 0, 0, 8));
    f.running = 0;
    f.claim_seen = false; /* FIFO and partition-key tables: the free workers */
    CHECK(lq__flow_claim_size(&f, 1, 0) == 3);
    CHECK(!lq__flow_may_start(&f, 2, 2, 4, 8)); /* nobody free */
    f.one_row = true; /* a row lock claim takes one row, FIFO or not */
    CHECK(lq__flow_claim_size(&f, 1, 0) == 1);
    f.one_row = false;

    /* Lease claims look ahead while a worker runs dry during a claim: the
     * rows asked beyond the free workers double up to the bound, shrink
     * slowly while none runs dry, and vanish after a short claim. */
    lq__flow_init(&f, 4, 7);
    f.one_claim = f.claim_seen = true;
    f.ahead_max = 32;
    lq__flow_claimed(&f, 4, false);
    CHECK(lq__flow_claim_size(&f, 0, 0) == 4);
    f.ran_dry = true;
    lq__flow_look_ahead(&f, true);
    CHECK(f.ahead == 4 && !f.ran_dry);
    CHECK(lq__flow_claim_size(&f, 0, 0) == 8);
    CHECK(lq__flow_may_start(&f, 4, 3, 0, 8)); /* rows waiting, still room ahead */
    CHECK(!lq__flow_may_start(&f, 4, 4, 0, 8)); /* a full look-ahead waits */
    /* A row waits for every worker: a claim waits for half the look-ahead. */
    f.ahead = 16;
    CHECK(!lq__flow_may_start(&f, 4, 13, 0, 8)); /* 3 free */
    CHECK(!lq__flow_may_start(&f, 4, 9, 0, 8));  /* 7 free */
    CHECK(lq__flow_may_start(&f, 4, 8, 0, 8));   /* 8 free */
    CHECK(lq__flow_may_start(&f, 15, 3, 0, 8));  /* 2 free, but a worker may run dry */
    f.ahead = 4;
    for (int i = 0; i < 4; i++) {
        f.ran_dry = true;
        lq__flow_look_ahead(&f, true);
    }
    CHECK(f.ahead == 32);
    lq__flow_look_ahead(&f, true); /* nobody ran dry */
    CHECK(f.ahead == 28);
    lq__flow_look_ahead(&f, false); /* the table ran short */
    CHECK(f.ahead == 0);
    f.ahead_max = 0; /* other forms never look ahead */
    f.ran_dry = true;
    lq__flow_look_ahead(&f, true);
    CHECK(f.ahead == 0);

    /* A row lock batch shares one connection: what counts is what is held. */
    lq__flow_init(&f, 20, 3);
    f.holds = true;
    lq__flow_claimed(&f, 10, false);
    CHECK(lq__flow_may_start(&f, 10, 0, 1, 4));
    CHECK(!lq__flow_may_start(&f, 10, 0, 3, 4));

    /* A batch subscription claims its batch. */
    f.batch = 10;
    CHECK(lq__flow_claim_size(&f, 0, 0) == 10);

    /* Subscriptions of one broker share its pool's room: a pool of 4. */
    lq__room r = {.budget = 3};
    CHECK(lq__room_share(&r, 0, false) == 3);
    r.taken = 3; /* one subscription holds all three */
    CHECK(lq__room_share(&r, 0, false) == 0);
    CHECK(lq__room_share(&r, 3, false) <= 0);
    /* Another that holds nothing was refused: the first leaves it the next
     * room that comes free. */
    r.starved = 1;
    r.taken = 2;
    CHECK(lq__room_share(&r, 2, false) == 0);
    CHECK(lq__room_share(&r, 0, true) == 1);
    r.taken = 3; /* the starved one took it */
    r.starved = 0;
    CHECK(lq__room_share(&r, 1, false) == 0);
    CHECK(lq__room_share(&r, 2, false) == 0);
    r.taken = 2; /* one gave back: whoever holds something may take it now */
    CHECK(lq__room_share(&r, 1, false) == 1);
    CHECK(lq__room_share(&r, 1, false) == 1);
    /* Two starved subscriptions: a holder leaves a room for each. */
    r = (lq__room){.budget = 7, .taken = 4, .starved = 2};
    CHECK(lq__room_share(&r, 4, false) == 1);
    CHECK(lq__room_share(&r, 0, true) == 3);
    r.taken = 6;
    CHECK(lq__room_share(&r, 6, false) <= 0);
    CHECK(lq__room_share(&r, 0, true) == 1);
    /* A holder counted starved by a stale flag does not leave room for itself. */
    r = (lq__room){.budget = 3, .taken = 1, .starved = 1};
    CHECK(lq__room_share(&r, 1, true) == 2);
    /* Nothing left: nobody takes one, starved or not. */
    r = (lq__room){.budget = 3, .taken = 3, .starved = 1};
    CHECK(lq__room_share(&r, 0, true) == 0);
    CHECK_DONE();
}
