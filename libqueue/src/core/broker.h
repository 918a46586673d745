/* The broker as the layers above it see it: its database, pool and
 * interned statements, and the subscriptions it wakes. It knows a
 * subscription only as a member (a queue and two wake-ups), so nothing here
 * reaches up into the runtime. Lock order: broker mu, then a member's own
 * locks (taken inside its wake-ups), then room_mu, under which nothing is
 * taken. */
#ifndef LQ_BROKER_H
#define LQ_BROKER_H

#include "core/publish_cache.h"
#include "core/pool.h"
#include "core/room.h"

#include <pthread.h>
#include <stdatomic.h>

/* A subscription as its broker knows it. */
typedef struct lq__member {
    const lq_table *table;
    const char *group;
    int on_threads, thread_connections; /* handler threads with pools, each pool's size */
    /* A publish or a notification for its queue: its claimers look now. */
    void (*wake)(struct lq__member *m);
    /* Room came free in the pool: its claimers that wait for room look again. */
    void (*room_freed)(struct lq__member *m);
    /* Its queue was paused or resumed: it looks at the control table before
     * its next claim. */
    void (*control_changed)(struct lq__member *m);
    /* Row `id` of its table was cancelled while in work somewhere: a run of
     * it here learns so now (lease form), or the cancel's request is looked
     * at now (row lock form). */
    void (*cancel_heard)(struct lq__member *m, int64_t id);
    struct lq__member *next;
} lq__member;

struct lq_broker {
    atomic_int refs; /* the caller's, and one per open subscription */
    const lq__dialect *dialect;
    lq__broker_target target;
    lq__broker_target listen_target; /* listen_url's, when the options give one */
    lq_options *options;
    lq__pool pool;
    pthread_mutex_t mu;
    bool closed;
    lq__member *members;            /* its open subscriptions, for wake-ups */
    lq__stmt *statements;           /* interned, so prepared copies are reused */
    size_t statement_count;
    lq__publish_cache publish_statements; /* publishes' statements, per table */
    struct lq__listener *listener;  /* LISTEN/NOTIFY wake-ups, when switched on */
    int thread_connections;         /* the on_threads pools of its subscriptions */
    pthread_mutex_t room_mu;        /* guards room and room_wanted */
    lq__room room;                  /* the pool's room its subscriptions share */
    bool room_wanted;               /* a subscription was refused for want of room */
    struct lq__scheduler *scheduler; /* its schedules' thread, once it has one */
};

/* LQ_MISUSE where the table's form needs what the broker's connections
 * cannot keep: the advisory form's session locks through a pooler in
 * transaction mode. */
LQ__HIDDEN int lq__broker_check_form(const lq_broker *b, const lq_table *t);
/* LQ_OK while the broker takes calls, else LQ_CLOSED (and its message). */
LQ__HIDDEN int lq__broker_check_open(lq_broker *b);
LQ__HIDDEN void lq__broker_ref(lq_broker *b);
LQ__HIDDEN void lq__broker_unref(lq_broker *b);
/* Gives a freshly built statement the id of an identical one built before. */
LQ__HIDDEN int lq__broker_intern(lq_broker *b, lq__stmt *stmt);
LQ__HIDDEN int lq__broker_intern_set(lq_broker *b, lq__sqlset *set);
/* Takes a subscription in: refused on a closed broker, past the connection
 * limit, or for a queue (table and group) that has one here already. */
LQ__HIDDEN int lq__broker_attach(lq_broker *b, lq__member *m);
LQ__HIDDEN void lq__broker_detach(lq_broker *b, lq__member *m);
/* Wakes the members of a table (and group) after a publish. */
LQ__HIDDEN void lq__broker_wake(lq_broker *b, const lq_table *t, const char *group);
LQ__HIDDEN void lq__broker_wake_all(lq_broker *b);
/* Wakes the members whose table label is `channel` (and group). */
LQ__HIDDEN void lq__broker_wake_channel(lq_broker *b, const char *channel, const char *group);
/* The members of the table labelled `label` whose queue a pause of `group`
 * (NULL: the whole table) touches are told of it. */
LQ__HIDDEN void lq__broker_control_changed(lq_broker *b, const char *label, const char *group);
/* The members of the table labelled `label` are told that its row `id` was
 * cancelled while in work. */
LQ__HIDDEN void lq__broker_cancel_heard(lq_broker *b, const char *label, int64_t id);
/* Room came free in the pool: every member but `except` is told. Holds no
 * member's lock on entry. */
LQ__HIDDEN void lq__broker_wake_room(lq_broker *b, const lq__member *except);

/* LISTEN/NOTIFY (notify.c). The channel of a table is its qualified name. */
LQ__HIDDEN int lq__listener_start(lq_broker *b);
LQ__HIDDEN void lq__listener_stop(lq_broker *b);
/* Asks the listener to listen on a subscription's channel. */
LQ__HIDDEN int lq__listener_add(lq_broker *b, const lq_table *t);
/* After a publish: notifies each group's channel when the broker listens. */
LQ__HIDDEN int lq__notify_publish(lq_broker *b, lq__conn *conn, const lq_table *t,
                                  lq_message *const *messages, size_t count);

#endif
