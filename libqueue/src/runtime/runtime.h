/* The structures the subscription runtime, the forms and the settlements
 * share. Lock order: broker mu, then subscription mu, then the broker's
 * room_mu (nothing is taken under it); a delivery's mu is never taken while
 * holding the broker's or a subscription's. */
#ifndef LQ_RUNTIME_H
#define LQ_RUNTIME_H

#include "runtime/acker.h"
#include "runtime/coalesce.h"
#include "core/broker.h"
#include "runtime/flow.h"
#include "base/headers.h"
#include "runtime/holds.h"
#include "runtime/key_counts.h"
#include "runtime/lease_book.h"
#include "runtime/ready_fd.h"
#include "runtime/metrics.h"
#include "runtime/retention.h"
#include "runtime/run_cancels.h"

#include <pthread.h>
#include <stdatomic.h>


/* A row lock batch: the rows of one claim share its transaction, which
 * commits when the last of them settles, or rolls back, returning every row,
 * when a settlement fails. */
typedef struct lq__shared_tx {
    pthread_mutex_t mu;
    lq__conn *conn;
    int open;         /* deliveries not yet settled */
    bool rolled_back;
} lq__shared_tx;

typedef enum lq__outcome { LQ__ACK, LQ__RETRY, LQ__RETRY_AFTER, LQ__DEAD_LETTER, LQ__RELEASE } lq__outcome;

/* What a settlement let go of: at most one connection its deliveries (or
 * their batch) held, reported with them when they are settled. */
typedef struct lq__freed {
    lq__conn *conn; /* NULL: none */
    bool broken;    /* its link failed: closed, not pooled */
    bool chained;   /* in the transaction COMMIT AND CHAIN opened: it waits
                     * for this worker's next claim instead of going back */
    bool room_taken; /* the queue-wide room the rows freed went to the claim
                      * that settled them (lq__acks_carried): no claim is woken for it */
    lq_delivery *claimed; /* chained: the row the settlement claimed on conn
                           * (the advisory form), which the worker's claim takes */
    int pause_read; /* the read of the pause that settlement carried: 0 none,
                     * 1 read (`paused` its answer), -1 failed */
    bool paused;
} lq__freed;

struct lq_delivery {
    lq__book_entry entry; /* first: the lease book links deliveries through it */
    lq_subscription *sub;
    atomic_int refs;
    pthread_mutex_t mu; /* a settlement and an extension of this row take turns */
    int64_t id;
    unsigned char *payload; /* in the delivery's allocation, after it; ends in a NUL */
    size_t payload_size;
    size_t payload_room; /* what the allocation holds after the delivery, NUL included */
    int attempt;
    char *group, *partition_key;
    lq__headers headers;
    int64_t token; /* the lease expiry the row holds (lease form) */
    /* Past the subscription's size limits: the size read in its place. */
    int64_t oversize_payload, oversize_headers;
    bool past_expiry; /* claimed past its expires_at: it is never started */
    char *key;     /* the advisory key held (advisory form) */
    char *slot;    /* and the key of its concurrency slot, with concurrency set */
    char *key_slot; /* and of its partition key's slot, with partition_concurrency set */
    bool passed_over; /* claimed past its key's rate window: released unrun */
    /* Counted in its subscription's holds: given back once, when its run
     * ends (its handler returned, its settlement was asked for), or at the
     * latest when it is settled or freed (lq__holds_let_go). */
    atomic_bool holds_room;
    bool conn_broken; /* its connection may hold a lock it did not take: it ends at release */
    lq__conn *conn; /* a connection the delivery holds, if its form holds one */
    bool tx;       /* transactional mode: the handler's transaction is open on conn */
    bool reserved; /* transactional mode: counted as held from its claim, before it has conn */
    lq__shared_tx *shared; /* a row lock batch's transaction, instead of conn */
    int64_t priority;
    char *due;     /* retry_after as read: with priority, the claim order */
    int64_t ready_ms; /* epoch ms it became due to start: its retry_after, or its created_at
                         where later or alone; 0 when the table has neither */
    uint16_t generation; /* of its block's uses: in the handles given out (lq__handle_of) */
    bool settled;
    /* Its run passed timeout_ms: its row went back (lq__settle_expired), and
     * its settlement changes nothing. */
    bool expired;
    /* Its row was taken out in its run's transaction by a cancel (row lock
     * form, run_cancels.h): its settlement changes nothing. */
    bool taken_out;
    lq__freed freed_early; /* what an expiry or a cancel let go, reported at its settlement */
    bool cancelled; /* its row was cancelled while it ran (lq_cancel) */
    /* Lease form: an extension found another claim holding its row (its
     * lease ran out first): it is not handed out. */
    bool lease_lost;
    int64_t handed_ms; /* monotonic: when it was handed out */
    /* Its ack runs in a set (lq__settle_acks), which owns it until settled: no
     * other settlement and no lease extension touches it meanwhile, and the
     * set holds no delivery's mutex while its statement runs. */
    bool in_set;
    bool handed; /* counted in the subscription's in_work */
    bool let_go_early; /* handed, and counted in the subscription's let_go_early */
    /* Its run ended: its handler returned, or its settlement was asked for
     * (a settlement began, its ack went behind, lq_delivery_handled). The
     * time limit covers the run alone: from then on timeout_ms does not
     * send its row back, nor does a cancel take it out of its run; its
     * settlement decides. Set under mu (lq__delivery_end_run); read under mu
     * where it decides, and without as the keeper's hint. */
    atomic_bool run_ended;
    /* Its ack went to the acker (lq_delivery_ack_behind): the caller's
     * settlements refuse it, and its free lets go of its reference alone.
     * The caller's alone: the acker never reads it. */
    bool behind;
    bool key_counted; /* counted in the subscription's key_counts */
    bool settling; /* counted in its settling */
    int lane;    /* workers_by_key: the lane its partition key hashes to */
    lq_delivery *queue_next; /* waiting for a worker */
};

typedef enum lq__mode { LQ__MODE_NONE, LQ__MODE_PUSH, LQ__MODE_PULL } lq__mode;
typedef struct lq__lease_clock lq__lease_clock; /* forms/lease.c */

struct lq_subscription {
    atomic_int refs; /* the caller's, and one per live delivery */
    lq_broker *broker;
    lq_table *table;
    lq__sqlset sql;
    int row_at[LQ__COL_COUNT]; /* where each LQ_COL_* is in its statements' rows (lq__row_layout) */
    int form;
    char *group;
    int workers;
    int64_t poll_ms, lease_ms;
    int64_t timeout_ms;  /* a run's limit (lease form), or 0 */
    lq__retention retention; /* retain_ms, dead_letter_retain_ms (retention.h) */
    int64_t ceiling_ms;  /* the most interval_ms grows to under contention */
    double interval_ms;  /* the poll interval now: poll_ms, or more after contention */
    int max_attempts;
    int concurrency;        /* queue-wide limit, or 0 (sql.in_work counts it) */
    int worker_concurrency; /* this subscription's limit on rows it holds, or 0 */
    int rate_limit;         /* starts in any window of rate_period_ms, or 0 */
    int partition_concurrency; /* rows of one partition key in work, or 0 */
    int key_limit;             /* partition_worker_concurrency: rows of one key in work here */
    int key_rate_limit;        /* partition_rate_limit: starts of one key in a window, or 0 */
    int64_t key_rate_period_ms;
    bool key_rate_set_alone;   /* partition_rate_period_ms without partition_rate_limit */
    lq__key_counts key_counts; /* with key_limit: in work by key */
    int64_t rate_period_ms;
    bool rate_set_alone;    /* rate_period_ms given without rate_limit: refused */
    char *limit_key;        /* the lock of the queue-wide limits: "concurrency:<queue>" */
    char *starts_key;       /* the queue's name in the starts table */
    lq__holds holds;        /* concurrency counted by holds (forms/holds.c), where on */
    bool leases_counted;    /* a limit counts the queue's leased rows (lease form) */
    atomic_llong swept_at;  /* where leases are swept: the last sweep's lq__mono_ms, 0 before one */
    /* The lease form's: the last claim was cut short by the queue's
     * concurrency (where it counts at each claim: took all the room it
     * left), which its acker and holds read. A flag each claim writes is
     * the last claim's word; the wake-up of a claim that rests at the limit
     * goes by limit_rests. */
    atomic_bool at_limit;
    /* A claim cut by the queue-wide limit rests: the next settlement here
     * (or ack queued for a claim to carry) wakes a claim. room_events counts
     * those, so that a claim that came back cut while one passed (which
     * found no mark yet) does not rest. */
    atomic_bool limit_rests;
    atomic_ullong room_events;
    lq__lease_clock *lease_clock; /* the lease form's: the last expiry of its length (forms/lease.c) */
    bool key_space_held; /* the advisory form's, where keys live in the process: the file's
                            key space is this process's while it is open (hold_key_space) */
    bool carries_acks;      /* its claims carry the acks behind its handlers (lq__acks_carry) */
    /* Its claims run alone and carry those acks (forms/lease.c, exec_alone),
     * and come: the acker leaves the acks to them. False while the queue is
     * paused or the subscription stops, when no claim comes soon. */
    atomic_bool alone_carries;
    atomic_llong room_seen; /* the room its last count found under concurrency: where that
                               is ample, its claims leave the acks to the acker
                               (forms/lease.c) */
    atomic_llong rate_wait_ms; /* the last claim was cut short by the rate limit: when,
                                  from its claim, a start leaves the window (0: not cut) */
    bool transactional;
    lq__flow flow; /* claims in flight and their sizes (flow.h) */
    int held;     /* pool connections its deliveries hold */
    int claim_extra;   /* room a claim in flight took beyond its connection, for its rows */
    int room_counted;  /* what it holds, as counted in the broker's room */
    bool room_starved; /* counted among the room's starved */
    int batch;    /* rows per claim of a batch subscription, or 0 */
    lq_batch_handler_fn batch_handler;
    int lanes;    /* workers_by_key: lanes by partition key, or 0 */
    int on_threads;          /* handler threads with pools of their own, or 0 */
    bool coalesce;           /* settlements of concurrent deliveries commit together */
    lq__coalescer coalescer;
    bool acks_behind;        /* coalesce not 0: acks may go behind the handlers */
    lq__acker acker;          /* push mode, lease form: acks behind the handlers */
    int thread_connections;  /* each such pool's size */
    int *lane_busy; /* per lane: deliveries in work */

    pthread_mutex_t mu;
    pthread_cond_t claim_cv; /* the claimers: a worker came free, a wake-up, stop */
    pthread_cond_t ready_cv; /* workers and next(): a delivery is waiting, stop */
    bool workers_claim;      /* push workers make their own claims: no claim threads */
    pthread_cond_t keeper_cv;
    lq__mode mode;
    bool started, stopping, stopped, closing, woken;
    bool stop_ended;        /* the stop's last step done: a stop beside it waits for it (stop_cv) */
    pthread_cond_t stop_cv;
    lq_delivery *queue_head, *queue_tail;
    /* Pull mode for event loops (lq_subscription_fd): raised while a
     * delivery is ready to be taken, and once stopping; closed at close. */
    lq__ready_fd ready;
    int waiting; /* claimed, not yet handed out */
    int in_work; /* handed out, not yet settled */
    int carried; /* claimed by workers' settlements, not yet taken by their claims */
    /* Of in_work, the rows whose expiry or cancel let their row (and its
     * concurrency slot) go while their handlers still run. */
    int let_go_early;
    int settling; /* of those, settling now: their workers' next rows may be claimed */
    unsigned jitter_seed;
    int64_t rest_until;    /* monotonic ms: no claim before, unless woken */
    /* Pauses (core/pause.h): the control table's answer, looked at again
     * once a poll interval, or at once when a pause or resume is heard of. */
    lq__stmt pause_check;
    bool paused, pause_due;
    bool pause_known, pause_reading; /* a first answer came; a read is in flight */
    int64_t pause_looked_at; /* monotonic ms; 0: never */
    /* Claims failing in a row (contention aside): since when (monotonic ms;
     * 0 while they work), and the last failure. A pull that would time out
     * reports it instead (an outage is not an empty queue), and
     * lq_subscription_health tells it. */
    int64_t failing_since;
    lq__error_copy last_failure;
    lq__lease_book book;    /* the deliveries the keeper watches: their leases (lease form),
                               their runs' timeout_ms and cancels (run_cancels.h) */
    lq__run_cancels cancels;

    pthread_t *claimers, keeper;
    int claimer_count;
    int claimers_idle; /* waiting on claim_cv: for room, or resting (or for a row) */
    atomic_bool waits_abandoned; /* stopped: its claims' lock waits end (lq__lock_wait_abandoned) */
    lq_delivery *left_head, *left_tail; /* rows a stop left to go back at close */
    int left_count;
    bool has_keeper;
    pthread_t *threads;
    int thread_count;
    lq_handler_fn handler;
    void *userdata;

    atomic_llong stats[LQ_STAT_SETTLE_ERRORS + 1]; /* the counters; gauges are read live */
    lq__histogram claim_seconds, wait_seconds;
    lq__member member; /* as its broker knows it */
    /* Blocks of deliveries let go, for the next claims (delivery.c). */
    pthread_mutex_t spares_mu;
    lq_delivery *spares;
    int spare_count;
    int live, live_peak; /* deliveries made and not yet freed; their most at once */
};

/* Subscriptions. */
/* Handles: a delivery as callers see it carries its block's generation in
 * the pointer's top 16 bits (user space addresses fit in 48), so a handle
 * kept past its delivery's life is told from the row its block serves next
 * (lq__delivery_of gives NULL for it), as long as the block is kept for
 * deliveries. Where addresses do not fit, handles are the plain pointers,
 * unchecked. */
LQ__HIDDEN lq_delivery *lq__handle_of(lq_delivery *d);
LQ__HIDDEN lq_delivery *lq__delivery_of(const lq_delivery *handle);
/* The size limits a claim's statements bind, into args. */
LQ__HIDDEN void lq__claim_limits(const lq_subscription *s, lq__value *args);

/* The pool of the handler thread running now, when it runs a handler of `s`
 * under on_threads; else NULL. */
LQ__HIDDEN lq__pool *lq__thread_pool(const lq_subscription *s);

/* On one node of a multi-primary cluster (MariaDB Galera), refuses what
 * rests on locks, which hold on that node alone (multi_primary.c). */
LQ__HIDDEN int lq__multi_primary_check(const lq_subscription *s, lq__conn *conn);

/* Deliveries. */
/* Makes a delivery from a row of a claim statement (lq__row_layout). */
LQ__HIDDEN int lq__delivery_from_row(lq_delivery **out, lq_subscription *s, const lq__value *cols,
                                    int count);
LQ__HIDDEN void lq__delivery_unref(lq_delivery *d);
/* Marks a delivery's run ended (its run_ended): its handler returned, or
 * its settlement is on its way. d->mu not held. */
LQ__HIDDEN void lq__delivery_end_run(lq_delivery *d);
/* Lets go of deliveries of one subscription, as many at once as it can. */
LQ__HIDDEN void lq__deliveries_unref(lq_delivery *const *dvs, size_t n);
/* Frees the blocks a subscription kept of deliveries let go. */
LQ__HIDDEN void lq__delivery_spares_free(lq_subscription *s);
/* Runs an outcome's statements; `delay_ms` is for LQ__RETRY_AFTER. */
LQ__HIDDEN int lq__settle(lq_delivery *d, lq__outcome outcome, int64_t delay_ms);
/* A delivery whose run passed timeout_ms: its row goes back as a failure
 * would send it (a retry, or the dead letters at max_attempts), with the
 * token it holds, and the delivery is marked expired; its own settlement
 * later only counts it out. */
LQ__HIDDEN int lq__settle_expired(lq_delivery *d);
/* Acks deliveries of one subscription together (a batch handler's return,
 * the acker, lq_deliveries_ack): one statement over their rows where they
 * settle on pool connections or in one batch's transaction, the others one
 * by one; those settled before are passed over. Each failure goes in
 * statuses[i], or to the log where statuses is NULL; returns the first. With `gather`, a set on
 * pool connections waits for other settlements to commit with it (the
 * coalescer), else commits at once. Every delivery is settled on return,
 * even out of memory. */
LQ__HIDDEN int lq__settle_acks(int *statuses, lq_delivery *const *dvs, size_t n, bool gather);
/* Acks a claim carries in its transaction (forms/lease.c, under a
 * queue-wide concurrency counted at each claim): the acks queued behind
 * the subscription's handlers, run before the claim counts the queue's rows
 * in work, so that a slot whose run ended here goes to the claim's rows in
 * the one commit, with no commit of its own to wait for. */
#define LQ__CARRY_MAX 64
typedef struct lq__carried {
    lq_delivery *set[LQ__CARRY_MAX]; /* acked by the claim's step */
    size_t n;
    lq_delivery *rest[LQ__CARRY_MAX]; /* not fit for a set: acked after the claim */
    size_t rest_n;
    lq__value args[LQ__P_COUNT];
    char *json;
    int64_t changes; /* the rows the step acked */
} lq__carried;
/* Takes the acks queued behind s's handlers; *step acks them in the claim's
 * transaction (its stmt NULL: none to carry), with `whole` by a statement
 * that fails unless it acks them all (sqlset.ack_set_whole; `changes` is
 * then the caller's to set). Out of memory, they are acked after the
 * claim. */
LQ__HIDDEN int lq__acks_carry(lq__carried *c, lq_subscription *s, lq__step *step, bool whole);
/* How long the carried rows' leases have left, at the least (ms; 0 when
 * none is carried): the claim waits for the queue's lock no more than half
 * of it, so that no carried row's lease runs out while its ack waits. */
LQ__HIDDEN int64_t lq__acks_lease_left(const lq__carried *c);
/* Whether the step acked every row it carried (else a lease was lost: the
 * claim's transaction rolls back, and the acks go on their own, to learn
 * which). */
LQ__HIDDEN bool lq__acks_whole(const lq__carried *c);
/* After the claim's transaction: its rows acked where it `committed`, else
 * acked on their own, as the acker would; the rest too. Lets go of them. */
LQ__HIDDEN void lq__acks_carried(lq__carried *c, bool committed);
LQ__HIDDEN void lq__subscription_unref(lq_subscription *s);
/* Whether a settlement on this thread may chain the worker's next claim
 * (a row lock's COMMIT AND CHAIN, an advisory settlement's claim): it is
 * s's push worker's, after the handler, and the worker claims next. */
LQ__HIDDEN bool lq__subscription_chains(lq_subscription *s);
/* Whether the read of the pause that s's claims make once a poll interval
 * (or at once after a pause was heard of) is due; if so, the caller's
 * settlement makes it, no other read starts meanwhile, and
 * lq__subscription_settled takes its answer (lq__freed.pause_read, which
 * the caller must set, failed or not). */
LQ__HIDDEN bool lq__subscription_pause_read_carried(lq_subscription *s);
/* The connection this thread chained for s's claim, in its transaction
 * (NULL: none); the claim owns it now. */
LQ__HIDDEN lq__conn *lq__subscription_take_chained(lq_subscription *s);
/* The row this thread's settlement claimed for s's claim (NULL: none),
 * holding the chained connection; the claim owns it now. */
LQ__HIDDEN lq_delivery *lq__subscription_take_claimed(lq_subscription *s);
/* A delivery took a connection to hold (a transactional delivery's, unless
 * it was reserved at its claim). */
LQ__HIDDEN void lq__subscription_hold(lq_subscription *s);
/* Handed-out deliveries' settlements began: where they hold no connection,
 * the claims of their workers' next rows may go beside them. */
LQ__HIDDEN void lq__subscription_settling(lq_subscription *s, lq_delivery *const *dvs, size_t n);
/* An expiry or a cancel let a handed-out delivery's row go while its
 * handler runs: in the row lock and advisory forms its concurrency slot is
 * free, and a claim may take it now. */
LQ__HIDDEN void lq__subscription_let_go_early(lq_subscription *s, lq_delivery *d);
/* Acks went to the acker: at the queue's limit, where claims carry them,
 * a claim goes now (it carries them, and their rows' slots are its). */
LQ__HIDDEN void lq__subscription_acks_queued(lq_subscription *s);
/* Handed-out deliveries settled: the connection they freed goes back (or
 * waits, chained), and their workers, lanes and keys are free again. A
 * settlement reports here once, so a set's settlement wakes a claimer once. */
LQ__HIDDEN void lq__subscription_settled(lq_subscription *s, lq_delivery *const *dvs, size_t n,
                                         const lq__freed *freed);

/* The forms: each claims up to `limit` rows, taking the connections it needs
 * from the pool, and appends the deliveries to `out` in claim order. */
typedef struct lq__claimed {
    lq_delivery *head, *tail;
    int count;
    bool cut; /* the queue-wide limit cut the claim: a settlement here should wake the next */
} lq__claimed;
LQ__HIDDEN int lq__row_lock_claim(lq__claimed *out, lq_subscription *s, int limit);
LQ__HIDDEN int lq__lease_claim(lq__claimed *out, lq_subscription *s, int limit);
/* Whether s's claims run alone in their statement (the lease form with no
 * queue-wide limit, FIFO guard or holds): only those carry a due sweep
 * (sqlset.claim_swept). */
LQ__HIDDEN bool lq__lease_claims_alone(const lq_subscription *s);
LQ__HIDDEN int lq__lease_extend(lq_subscription *s);
/* The lease form's clock of s->lease_ms, shared with the process's other
 * subscriptions of that length; dropped when s is freed. */
LQ__HIDDEN int lq__lease_clock_take(lq_subscription *s);
LQ__HIDDEN void lq__lease_clock_drop(lq_subscription *s);

/* concurrency counted by holds (forms/holds.c). Open: the table, the
 * queue's row, this subscription's number; LQ_MISUSE and the rest as
 * lq_subscribe reports them. */
LQ__HIDDEN int lq__holds_open(lq_subscription *s);
LQ__HIDDEN void lq__holds_free(lq__holds *h);
/* Takes up to `want` rows' room for a claim on conn (in no transaction):
 * what the subscription holds in hand, or where it has none, a growth from
 * the queue's; *drawn is how much (0: the queue is at its limit, or, after
 * a claim that found no row, it has no row to claim: `claim_args` are the
 * claim's, for the look); *cut when the limit left less than `want`. */
LQ__HIDDEN int lq__holds_draw(int *drawn, bool *cut, lq_subscription *s, lq__conn *conn, int want,
                              const lq__value *claim_args);
/* After a claim that drew `drawn`: its rows are counted until let go, the
 * room it did not use is back in hand, and `covered` (from lq__holds_cover,
 * committed with the leases) is the row's time. */
LQ__HIDDEN void lq__holds_claimed(lq_subscription *s, const lq__claimed *c, int drawn,
                                  int64_t covered, bool found_none);
/* Gives back the room of a row whose run ended, once. */
LQ__HIDDEN void lq__holds_let_go(lq_delivery *d);
/* Makes the subscription's row count until after lease `token`, on conn:
 * `in_claim`, in the claim's transaction writing the lease (which fails
 * where the row's time ended since its room was taken), else before the
 * lease is written; *pending is the time written (0: none needed), for
 * lq__holds_covered once it has committed. */
LQ__HIDDEN int lq__holds_cover(int64_t *pending, lq_subscription *s, lq__conn *conn,
                               int64_t token, bool in_claim);
LQ__HIDDEN void lq__holds_covered(lq_subscription *s, int64_t until);
/* Gives back to the queue the room held beyond what is in use (a claim found
 * no row, the subscription stops); `closing`, its row goes where nothing is
 * in use. */
LQ__HIDDEN int lq__holds_trim(lq_subscription *s, lq__conn *conn, bool closing);
/* The book's deliveries, each with a reference taken (the caller lets go of
 * each, then frees the array); s->mu not held. */
LQ__HIDDEN int lq__book_refs(lq_delivery ***out, size_t *n, lq_subscription *s);
/* Sends back the rows of deliveries whose runs passed timeout_ms; returns
 * when the next one will (monotonic ms), or 0 when none is in work. */
LQ__HIDDEN int64_t lq__lease_expire_overdue(lq_subscription *s);
LQ__HIDDEN int64_t lq__lease_expiry(const lq_subscription *s, int64_t now_ms);
/* A lease delivery's holder settles its row, naming its token (not one sent
 * back by timeout_ms): where tokens are kept per row, claims of the row wait
 * for the settlement (begin, true when they will), and once it has changed
 * the row the token may be written again (end, `settled`). */
LQ__HIDDEN bool lq__lease_give_back_begin(const lq_subscription *s, int64_t id, int64_t token);
LQ__HIDDEN void lq__lease_give_back_end(const lq_subscription *s, int64_t id, int64_t token,
                                        bool settled);
/* Whether a delivery about to be handed out still holds its lease (true in
 * the other forms). One whose lease has run out, or nearly (its extensions
 * came late), is extended first: its token fences the row, so the extension
 * fails where another claim took it meanwhile, and then it does not. s->mu
 * not held. */
LQ__HIDDEN bool lq__lease_holds(lq_delivery *d);
/* Whether its lease has a quarter or more left, and is not lost: it may be
 * handed out as it is. d->mu held. */
LQ__HIDDEN bool lq__lease_fresh(const lq_delivery *d);
LQ__HIDDEN int lq__advisory_claim(lq__claimed *out, lq_subscription *s, int limit);
/* Transactional mode: opens the handler's transaction on the delivery's
 * connection (taking one from the pool where the form holds none). */
LQ__HIDDEN int lq__delivery_begin(lq_delivery *d);
/* Lets go of the key an advisory delivery holds; its connection goes into
 * `freed`. */
LQ__HIDDEN void lq__advisory_release(lq_delivery *d, lq__freed *freed);
/* Whether a worker's settlement claims its next row in its own transaction
 * (lq__advisory_settle_exec): in one round trip where the dialect pipelines
 * (exec_unlock, with sqlset.claim_one), statement by statement where it
 * has no pipeline and keys live in sessions; not under partition limits. */
LQ__HIDDEN bool lq__advisory_carries(const lq_subscription *s);
/* A run of the advisory form ended: its concurrency slots (the queue's,
 * its partition key's) are let go on its session before its settlement,
 * so a claim beside it may take them while the settlement commits; its
 * key stays held until then. False when it held no slot. */
LQ__HIDDEN bool lq__advisory_slots_first(lq_delivery *d);
/* Whether a worker's settlement hands its slot to the row it claims in the
 * same round trip (`chains`, where the dialect pipelines): then its slot
 * never goes first, that claim takes it over sooner. Elsewhere a slot that
 * went first is not carried (lq__advisory_settle_exec). */
LQ__HIDDEN bool lq__advisory_hands_slot_over(const lq_subscription *s, bool chains);
/* A row a worker's settlement claimed (the advisory form) that the worker
 * will not run: back unrun, its attempt unspent, its keys let go, and its
 * connection in `freed`. Counted nowhere: it was never handed out. */
LQ__HIDDEN void lq__settle_give_back(lq_delivery *d, lq__freed *freed);
/* A settlement's statement on the session that holds an advisory
 * delivery's keys, and their release once it committed, in one round trip
 * where the dialect pipelines them (exec_unlock); lq__advisory_release then
 * has no key left to give back. With claim_next (its worker claims next),
 * the same transaction claims a row too, which `freed` hands to that claim
 * on the same session (freed->claimed): one commit for the two. */
LQ__HIDDEN int lq__advisory_settle_exec(int64_t *changes, lq__freed *freed, lq_delivery *d,
                                        const lq__stmt *stmt, const lq__value *args, bool claim_next);
/* Lease form: whether the delivery's row left its queue (deleted, moved to
 * another group, marked processed) rather than to another claim, asked on
 * conn or a pool connection; false when that cannot be told. */
LQ__HIDDEN bool lq__lease_row_left(lq_subscription *s, lq__conn *conn, const lq_delivery *d);
LQ__HIDDEN void lq__claimed_add(lq__claimed *c, lq_delivery *d);
/* FIFO: takes the subscription's group for the transaction open on `conn`
 * (*taken false when another claim holds it); true at once without a guard. */
LQ__HIDDEN int lq__fifo_guard(bool *taken, lq_subscription *s, lq__conn *conn);
LQ__HIDDEN void lq__claimed_free(lq__claimed *c);

/* The per-key limits kept after a claim has its rows (forms/key_limits.c).
 * A key's room under a limit: `mine` of the claim's rows have the key, which
 * args bind (LQ__P_PKEY). */
typedef int (*lq__key_room_fn)(int64_t *room, lq_subscription *s, lq__conn *conn,
                               const lq__value *args, int64_t mine);
/* Gives back one row the claim may not keep. */
typedef int (*lq__give_back_fn)(lq_subscription *s, lq__conn *conn, lq_delivery *d, void *ctx);
/* Under the queue's lock, in a transaction on conn: gives back the claim's
 * rows past each key's room, the last in claim order. A failure leaves
 * every row in `out`, for the rollback. */
LQ__HIDDEN int lq__trim_keys(lq__claimed *out, lq_subscription *s, lq__conn *conn, lq__value *args,
                             lq__key_room_fn room_of, lq__give_back_fn give_back, void *ctx);
/* partition_rate_limit: the same with each key's window, then a start of
 * its key recorded for each row kept. */
LQ__HIDDEN int lq__limit_key_rates(lq__claimed *out, lq_subscription *s, lq__conn *conn,
                                   const lq__value *claim_args, lq__give_back_fn give_back,
                                   void *ctx);
/* lq__limit_key_rates in a transaction of its own on conn, under the
 * queue's lock, for a claim whose rows are held elsewhere (the advisory
 * form's keys, the row lock form's transactions). On a failure no start was
 * recorded. *broken when the queue's lock was not given back. */
LQ__HIDDEN int lq__key_rates_counted(lq__claimed *out, bool *broken, lq_subscription *s,
                                     lq__conn *conn, const lq__value *args,
                                     lq__give_back_fn give_back, void *ctx);

/* A rate limit's window (forms/starts.c): its starts, the oldest, and the
 * database's clock now, as its `starts` statements read them. */
typedef struct lq__window {
    int64_t count, oldest, now;
} lq__window;
LQ__HIDDEN int lq__read_window(void *ctx, const lq__value *cols, int count);
/* The rows of `want` the window leaves room for; sets s->rate_wait_ms to
 * when the oldest start leaves where it cuts, else to 0. */
LQ__HIDDEN int lq__rate_room(lq_subscription *s, const lq__window *w, int want);
/* A limited claim's transaction (forms/locked.c): opens it (READ
 * COMMITTED), takes the queue's lock (s->limit_key) and runs the steps,
 * and with `committed` commits too (*committed: the commit ran); *locked
 * once a lock that must be given back (unlock_queue) is held. The lock is
 * waited for up to the statement's deadline, or wait_ms where the dialect
 * pipelines the claim (begin_locked) and wait_ms is not 0. On failure the
 * transaction is left for a rollback, unless *committed. */
LQ__HIDDEN int lq__begin_locked(bool *locked, lq_subscription *s, lq__conn *conn, int64_t wait_ms,
                                const lq__step *steps, int count, bool *committed);
/* Runs the steps and commits; on failure the transaction is left for a
 * rollback, unless *committed: where the dialect pipelines, a step's row
 * reader that fails (out of memory) does so after the commit was sent, and
 * the rows it read are the claim's all the same. */
LQ__HIDDEN int lq__exec_commit(bool *committed, lq_subscription *s, lq__conn *conn,
                               const lq__step *steps, int count);
/* Starts a row lock or advisory claim reserved, at the database's time `at`. */
typedef struct lq__reserved {
    int count;
    int64_t at;
} lq__reserved;
/* Reserves up to `want` starts in a transaction of its own on `conn` (not in
 * one): *broken when the queue's lock was not given back. */
LQ__HIDDEN int lq__starts_reserve(lq__reserved *r, bool *broken, lq_subscription *s,
                                  lq__conn *conn, int want);
/* Takes back the reserved starts beyond the `used` ones, outside a
 * transaction or in one that commits; returns `rc`, the claim's status (a
 * failure here is logged: the starts err low until they leave the window). */
LQ__HIDDEN int lq__starts_unreserve(lq_subscription *s, lq__conn *conn, const lq__reserved *r,
                                    int used, int rc);

#endif
