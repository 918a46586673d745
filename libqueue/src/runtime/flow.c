#include "runtime/flow.h"

void lq__flow_init(lq__flow *f, int workers, int budget) {
    *f = (lq__flow){.workers = workers, .budget = budget > 0 ? budget : 1, .probing = true,
                   .seen = 1};
}

int lq__flow_free(const lq__flow *f, int in_work, int waiting) {
    int free_workers = f->workers + f->ahead - in_work - waiting - f->asked;
    return free_workers > 0 ? free_workers : 0;
}

bool lq__flow_may_start(const lq__flow *f, int in_work, int waiting, int held, int spare) {
    int most = f->probing || f->one_claim ? 1 : f->workers;
    int free_rows = lq__flow_free(f, in_work, waiting);
    if (f->running >= most || free_rows == 0) return false;
    /* A claim only ahead (a row waits for every worker) waits for half the
     * look-ahead's room, rather than a claim of a few rows at every take. */
    if (waiting >= f->workers && free_rows < f->ahead / 2) return false;
    /* What the subscription holds: a connection per claim in flight, and
     * those its deliveries keep (a row lock's transaction, an advisory
     * key's session, a transactional delivery's transaction). */
    if (f->running + (f->holds ? held : 0) >= f->budget) return false;
    /* A claim beside another leaves a connection free next to it. */
    return f->running == 0 || spare >= 2;
}

int lq__flow_claim_size(const lq__flow *f, int in_work, int waiting) {
    if (f->batch) return f->batch;
    if (f->one_row) return 1; /* asking for more would make every claim look short */
    int free_workers = lq__flow_free(f, in_work, waiting);
    if (!f->one_claim && f->holds) return 1; /* claims in flight for the other free workers */
    if (f->claim_seen && f->seen > free_workers) return f->seen;
    return free_workers > 0 ? free_workers : 1;
}

void lq__flow_claimed(lq__flow *f, int got, bool failed) {
    f->probing = failed || got == 0;
}

void lq__flow_waited(lq__flow *f) {
    if (!f->probing) f->ran_dry = true;
}

void lq__flow_look_ahead(lq__flow *f, bool full) {
    if (!f->ahead_max) {
        f->ran_dry = false;
        return;
    }
    if (!full) {
        f->ahead = 0;
    } else if (f->ran_dry) {
        int grown = f->ahead ? 2 * f->ahead : f->workers;
        f->ahead = grown < f->ahead_max ? grown : f->ahead_max;
    } else {
        f->ahead -= (f->ahead + 7) / 8;
    }
    f->ran_dry = false;
}

void lq__flow_handed(lq__flow *f, int in_work) {
    int busy = in_work + 1 > f->workers ? f->workers : in_work + 1;
    if (busy > f->seen) f->seen = busy;
}
