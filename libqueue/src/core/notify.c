/* LISTEN/NOTIFY wake-ups. With listen_notify on, a publish notifies its
 * table's channel (the qualified table name) with its group as payload, and
 * the broker keeps one dedicated connection that listens on the channels of
 * its subscriptions and wakes them. That connection reconnects after a
 * failure and then wakes every subscription once, since notifications sent
 * while it was down are lost; the poll interval stays the floor. It also
 * listens on the control channel, where pauses and resumes are told, and on
 * the cancel channel, where cancels of rows in work are. */
#include "base/clock.h"
#include "core/message.h"
#include "core/cancel.h"
#include "core/pause.h"
#include "base/redact.h"

#include <stdlib.h>
#include <string.h>

#define RECONNECT_WAIT_MS 1000
#define LISTEN_SLICE_MS 200

typedef struct lq__listener {
    lq_broker *broker;
    pthread_t thread;
    pthread_mutex_t mu;
    bool stopping;
    char **channels;
    size_t count, listened; /* channels[listened..count) await their LISTEN */
} lq__listener;

static bool listens(const lq_broker *b) { return b->listener != NULL; }
static int add_channel(lq__listener *l, const char *channel);

int lq__notify_publish(lq_broker *b, lq__conn *conn, const lq_table *t, lq_message *const *messages,
                       size_t count) {
    if (!listens(b)) return LQ_OK;
    char channel[256];
    lq__table_label(t, channel, sizeof channel);
    for (size_t i = 0; i < count; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) {
            const char *a = messages[i]->group, *g = messages[j]->group;
            seen = (!a && !g) || (a && g && strcmp(a, g) == 0);
        }
        if (seen) continue;
        int rc = b->dialect->notify(conn, channel, messages[i]->group ? messages[i]->group : "");
        if (rc != LQ_OK) return rc;
    }
    return LQ_OK;
}

static void on_note(void *ctx, const char *channel, const char *payload) {
    if (strcmp(channel, LQ__CONTROL_CHANNEL) == 0) lq__pause_heard(ctx, payload ? payload : "");
    else if (strcmp(channel, LQ__CANCEL_CHANNEL) == 0) lq__cancel_heard(ctx, payload ? payload : "");
    else lq__broker_wake_channel(ctx, channel, payload && *payload ? payload : NULL);
}

/* LISTENs on the channels added since the last call; false on failure. */
static bool listen_new(lq__listener *l, lq__conn *conn) {
    for (;;) {
        pthread_mutex_lock(&l->mu);
        char *channel = l->listened < l->count ? lq__strdup(l->channels[l->listened]) : NULL;
        pthread_mutex_unlock(&l->mu);
        if (!channel) return true;
        int rc = l->broker->dialect->listen(conn, channel);
        free(channel);
        if (rc != LQ_OK) {
            lq__log_error(LQ_LOG_WARNING, "LISTEN");
            return false;
        }
        pthread_mutex_lock(&l->mu);
        l->listened++;
        pthread_mutex_unlock(&l->mu);
    }
}

static bool stopping(lq__listener *l) {
    pthread_mutex_lock(&l->mu);
    bool stop = l->stopping;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

static void sleep_unless_stopping(lq__listener *l, int64_t ms) {
    for (int64_t end = lq__mono_ms() + ms; !stopping(l) && lq__mono_ms() < end;)
        lq__sleep_us(50 * 1000); /* a slice, so a stop is seen soon */
}

static void *listener_main(void *arg) {
    lq__listener *l = arg;
    lq_broker *b = l->broker;
    lq__conn *conn = NULL;
    while (!stopping(l)) {
        if (!conn) {
            const lq__broker_target *target = b->listen_target.url ? &b->listen_target : &b->target;
            if (b->dialect->connect(&conn, target, b->options) != LQ_OK) {
                lq__error_redact(target->password);
                lq__log_error(LQ_LOG_WARNING, "the LISTEN connection");
                conn = NULL;
                sleep_unless_stopping(l, RECONNECT_WAIT_MS);
                continue;
            }
            pthread_mutex_lock(&l->mu);
            l->listened = 0; /* a new session listens to nothing yet */
            pthread_mutex_unlock(&l->mu);
            lq__broker_wake_all(b); /* what was sent while no one listened is lost */
        }
        if (!listen_new(l, conn) || b->dialect->wait_notes(conn, LISTEN_SLICE_MS, on_note, b) != LQ_OK) {
            lq__log_error(LQ_LOG_WARNING, "the LISTEN connection failed; reconnecting");
            b->dialect->disconnect(conn);
            conn = NULL;
            sleep_unless_stopping(l, RECONNECT_WAIT_MS);
        }
    }
    if (conn) b->dialect->disconnect(conn);
    return NULL;
}

int lq__listener_start(lq_broker *b) {
    lq__listener *l = calloc(1, sizeof *l);
    if (!l) return lq__error(LQ_NOMEM, "out of memory");
    l->broker = b;
    pthread_mutex_init(&l->mu, NULL);
    if (pthread_create(&l->thread, NULL, listener_main, l) != 0) {
        pthread_mutex_destroy(&l->mu);
        free(l);
        return lq__error(LQ_ERROR, "cannot start the LISTEN thread");
    }
    b->listener = l;
    int rc = add_channel(l, LQ__CONTROL_CHANNEL);
    if (rc == LQ_OK) rc = add_channel(l, LQ__CANCEL_CHANNEL);
    if (rc != LQ_OK) lq__listener_stop(b);
    return rc;
}

void lq__listener_stop(lq_broker *b) {
    lq__listener *l = b->listener;
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    for (size_t i = 0; i < l->count; i++) free(l->channels[i]);
    free(l->channels);
    pthread_mutex_destroy(&l->mu);
    free(l);
    b->listener = NULL;
}

/* Adds a channel to listen on, once. */
static int add_channel(lq__listener *l, const char *channel) {
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->count; i++) {
        if (strcmp(l->channels[i], channel) == 0) {
            pthread_mutex_unlock(&l->mu);
            return LQ_OK;
        }
    }
    char **grown = realloc(l->channels, (l->count + 1) * sizeof *grown);
    char *copy = lq__strdup(channel);
    if (grown) l->channels = grown;
    if (!grown || !copy) {
        free(copy);
        pthread_mutex_unlock(&l->mu);
        return lq__error(LQ_NOMEM, "out of memory");
    }
    l->channels[l->count++] = copy;
    pthread_mutex_unlock(&l->mu);
    return LQ_OK;
}

int lq__listener_add(lq_broker *b, const lq_table *t) {
    lq__listener *l = b->listener;
    if (!l) return LQ_OK;
    char channel[256];
    lq__table_label(t, channel, sizeof channel);
    if (strlen(channel) > 63)
        return lq__error(LQ_MISUSE,
                         "the table's qualified name is %zu bytes, and a notification channel "
                         "holds at most 63: switch listen_notify off for it",
                         strlen(channel));
    return add_channel(l, channel);
}
