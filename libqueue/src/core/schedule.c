/* Schedules (core/schedule.h): their timing, the catch-up of ticks no broker
 * was up for, and the thread that enqueues each tick as it comes.
 *
 * A tick is an instant. Whichever broker reaches it first claims it in the
 * ticks table, so the ticks are exactly once however many brokers take
 * part, and however their clocks differ within the time the table keeps a
 * tick (KEEP_TICKS_MS). A tick "comes while the broker runs" when it falls
 * after the schedule was added here; the others, found due when the
 * schedule is added (or when the thread fell behind, for an outage of the
 * database), follow the schedule's catch-up. */
#include "core/schedule.h"

#include "base/clock.h"
#include "base/cron.h"
#include "core/message.h"
#include "core/publish.h"
#include "core/ticks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum catch_up { CATCH_UP_SKIP, CATCH_UP_ONCE, CATCH_UP_ALL };

/* How long the ticks table keeps a tick: a broker whose clock is behind the
 * others' by less than this finds the tick claimed. */
#define KEEP_TICKS_MS INT64_C(3600000)
/* The longest the thread sleeps: a clock set forward or back is seen within it. */
#define LONGEST_SLEEP_MS 1000
/* After a failure the next attempt waits this long, doubling to the most. */
#define RETRY_FIRST_MS 250
#define RETRY_MOST_MS 30000
/* The longest name, within the ticks table's column on every database. */
#define NAME_MAX_BYTES 200
/* The most ticks one turn of the thread enqueues (a catch-up of "all"):
 * the other schedules, a remove and a stop come between turns. */
#define TICKS_PER_TURN 64

typedef struct schedule {
    char *name;
    lq_table *table;
    lq_message *message;
    lq__ticks ticks;
    bool is_cron;
    lq__cron cron;
    lq__tz *zone;
    int64_t every_ms;
    int catch_up;
    int64_t catch_up_ms;
    int64_t next;         /* the first tick neither enqueued nor passed over here */
    int64_t watched_from; /* ticks after this came while this broker ran */
    int64_t retry_at;     /* after a failure: when to try again (wall ms); 0 none */
    int failures;         /* in a row */
    bool firing;          /* the thread is enqueuing its ticks */
    bool removed;         /* lq_schedule_remove waits for its firing to end */
    struct schedule *next_schedule;
} schedule;

typedef struct lq__scheduler {
    lq_broker *broker;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a schedule added, a stop, a schedule's firing ended */
    pthread_t thread;
    bool stopping;
    schedule *schedules;
} lq__scheduler;

static void schedule_free(schedule *s) {
    if (!s) return;
    free(s->name);
    lq_table_free(s->table);
    lq_message_free(s->message);
    lq__ticks_free(&s->ticks);
    lq__tz_free(s->zone);
    free(s);
}

/* The first tick strictly after `after`; INT64_MAX when none comes. */
static int64_t tick_after(const schedule *s, int64_t after) {
    if (!s->is_cron) return after < 0 ? 0 : (after / s->every_ms + 1) * s->every_ms;
    int64_t at;
    return lq__cron_next(&at, &s->cron, s->zone, after) == LQ_OK ? at : INT64_MAX;
}

/* ---- enqueuing ----------------------------------------------------------- */

static int fire(lq_broker *b, schedule *s, int64_t tick) {
    lq_message *m = s->message;
    if (lq__has(s->table, LQ_ROLE_HEADERS)) {
        char when[LQ__TIME_TEXT_SIZE];
        lq__time_text(when, tick);
        int rc = lq__headers_set(&m->headers, "lq-scheduled-for", when);
        if (rc != LQ_OK) return rc;
    }
    bool fired;
    return lq__ticks_fire(&fired, b, &s->ticks, s->table, s->name, tick, KEEP_TICKS_MS, m);
}

/* Enqueues the ticks of `s` due by `now`: the latest where it came while
 * this broker ran, and before it the missed ones the catch-up takes, within
 * catch_up_ms; at most TICKS_PER_TURN of them, s->next then the first left.
 * On a failure s->next is the tick that failed. */
static int fire_due(lq_broker *b, schedule *s, int64_t now) {
    int64_t t = s->next, lower = now - s->catch_up_ms;
    if (t < lower) t = tick_after(s, lower - 1);
    /* Missed ticks to enqueue: none at or before the latest any broker
     * enqueued, which the ticks table may have forgotten the ticks before. */
    if (s->catch_up != CATCH_UP_SKIP && t <= now && tick_after(s, t) <= now) {
        int64_t last;
        bool found;
        int rc = lq__ticks_last(&last, &found, b, &s->ticks, s->name);
        if (rc != LQ_OK) return rc;
        if (found && last >= t) t = tick_after(s, last);
    }
    int64_t missed = -1; /* the latest missed tick not enqueued */
    int fired = 0;
    for (int64_t after; t <= now && fired < TICKS_PER_TURN; t = after) {
        after = tick_after(s, t);
        bool latest = after > now, on_time = latest && t > s->watched_from;
        int rc = LQ_OK;
        if (on_time && s->catch_up == CATCH_UP_ONCE && missed >= 0) {
            rc = fire(b, s, missed);
            fired++;
            if (rc != LQ_OK) {
                s->next = missed;
                return rc;
            }
        }
        if (on_time || s->catch_up == CATCH_UP_ALL || (latest && s->catch_up == CATCH_UP_ONCE)) {
            rc = fire(b, s, t);
            fired++;
        } else {
            missed = t;
        }
        if (rc != LQ_OK) {
            s->next = t;
            return rc;
        }
    }
    s->next = t;
    return LQ_OK;
}

/* The schedule whose tick or retry is due first, when one is due by `now`,
 * else NULL with *wake_at the time to look again. The earliest goes first,
 * so a schedule always due (its writes slower than its interval) leaves the
 * others their turns. */
static schedule *first_due(lq__scheduler *sc, int64_t now, int64_t *wake_at) {
    schedule *first = NULL;
    int64_t first_at = 0;
    for (schedule *s = sc->schedules; s; s = s->next_schedule) {
        int64_t at = s->retry_at ? s->retry_at : s->next;
        if (!s->removed && (!first || at < first_at)) {
            first = s;
            first_at = at;
        }
    }
    *wake_at = now + LONGEST_SLEEP_MS;
    if (first && first_at <= now) return first;
    if (first && first_at < *wake_at) *wake_at = first_at;
    return NULL;
}

/* Only the thread reads and writes a schedule's next, retry_at and failures:
 * it needs no lock for them, and logs with none held. */
static void after_firing(schedule *s, int rc) {
    if (rc == LQ_OK) {
        if (s->failures) lq__log(LQ_LOG_INFO, "schedule %s enqueues its ticks again", s->name);
        s->failures = 0;
        s->retry_at = 0;
        return;
    }
    if (!s->failures) {
        lq__error_prefix("schedule %s: its tick could not be enqueued; retried", s->name);
        lq__log_error(LQ_LOG_WARNING, "a schedule");
    }
    int64_t wait = RETRY_FIRST_MS << (s->failures < 7 ? s->failures : 7);
    s->retry_at = lq__now_ms() + (wait < RETRY_MOST_MS ? wait : RETRY_MOST_MS);
    s->failures++;
}

static void *scheduler_main(void *arg) {
    lq__scheduler *sc = arg;
    lq_broker *b = sc->broker;
    pthread_mutex_lock(&sc->mu);
    while (!sc->stopping) {
        int64_t now = lq__now_ms(), wake_at;
        schedule *s = first_due(sc, now, &wake_at);
        if (!s) {
            struct timespec until = lq__deadline_in(wake_at - now);
            pthread_cond_timedwait(&sc->changed, &sc->mu, &until);
            continue;
        }
        s->firing = true;
        pthread_mutex_unlock(&sc->mu);
        after_firing(s, fire_due(b, s, now));
        pthread_mutex_lock(&sc->mu);
        s->firing = false;
        pthread_cond_broadcast(&sc->changed);
    }
    pthread_mutex_unlock(&sc->mu);
    return NULL;
}

/* ---- the scheduler -------------------------------------------------------- */

/* The broker's scheduler, started on first use. */
static int scheduler_of(lq__scheduler **out, lq_broker *b) {
    pthread_mutex_lock(&b->mu);
    int rc = b->closed ? lq__error(LQ_CLOSED, "the broker is closed") : LQ_OK;
    if (rc == LQ_OK && !b->scheduler) {
        lq__scheduler *sc = calloc(1, sizeof *sc);
        if (!sc) rc = lq__error(LQ_NOMEM, "out of memory");
        if (rc == LQ_OK) {
            pthread_mutex_init(&sc->mu, NULL);
            lq__cond_init(&sc->changed);
            sc->broker = b;
            b->scheduler = sc;
            if (pthread_create(&sc->thread, NULL, scheduler_main, sc) != 0) {
                b->scheduler = NULL;
                pthread_cond_destroy(&sc->changed);
                pthread_mutex_destroy(&sc->mu);
                free(sc);
                rc = lq__error(LQ_ERROR, "the scheduler's thread could not start");
            }
        }
    }
    *out = b->scheduler;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void lq__scheduler_stop(lq_broker *b) {
    pthread_mutex_lock(&b->mu);
    lq__scheduler *sc = b->scheduler;
    b->scheduler = NULL;
    pthread_mutex_unlock(&b->mu);
    if (!sc) return;
    pthread_mutex_lock(&sc->mu);
    sc->stopping = true;
    pthread_cond_broadcast(&sc->changed);
    pthread_mutex_unlock(&sc->mu);
    pthread_join(sc->thread, NULL);
    while (sc->schedules) {
        schedule *s = sc->schedules;
        sc->schedules = s->next_schedule;
        schedule_free(s);
    }
    pthread_cond_destroy(&sc->changed);
    pthread_mutex_destroy(&sc->mu);
    free(sc);
}

static schedule **find(lq__scheduler *sc, const char *name) {
    schedule **p = &sc->schedules;
    while (*p && strcmp((*p)->name, name) != 0) p = &(*p)->next_schedule;
    return p;
}

/* ---- the calls ------------------------------------------------------------ */

static int read_catch_up(schedule *s, const lq_options *o) {
    const char *text = lq__opt_str(o, LQ_OPT_CATCH_UP);
    static const char *const names[] = {"skip", "once", "all"};
    s->catch_up = -1;
    for (int i = 0; i < 3; i++)
        if (!text || strcmp(text, names[i]) == 0) s->catch_up = text ? i : CATCH_UP_SKIP;
    if (s->catch_up < 0)
        return lq__error(LQ_MISUSE, "option catch_up: \"%s\" is none of skip, once, all", text);
    s->catch_up_ms = lq__opt_int(o, LQ_OPT_CATCH_UP_MS);
    return LQ_OK;
}

/* The schedule's timing from its options. */
static int read_timing(schedule *s, const lq_options *o) {
    const char *cron = lq__opt_str(o, LQ_OPT_CRON), *tz = lq__opt_str(o, LQ_OPT_TZ);
    bool every = lq__opt_is_set(o, LQ_OPT_EVERY_MS);
    if (cron && every) return lq__error(LQ_MISUSE, "a schedule takes cron or every_ms, not both");
    if (!cron && !every) return lq__error(LQ_MISUSE, "a schedule needs cron or every_ms");
    if (tz && !cron) return lq__error(LQ_MISUSE, "option tz: an every_ms schedule has no time zone");
    int rc = LQ_OK;
    s->is_cron = cron != NULL;
    s->every_ms = lq__opt_int(o, LQ_OPT_EVERY_MS);
    if (cron && (rc = lq__cron_parse(&s->cron, cron)) != LQ_OK) {
        lq__error_prefix("option cron \"%s\"", cron);
        return rc;
    }
    if (tz && (rc = lq__tz_load(&s->zone, tz)) != LQ_OK) {
        lq__error_prefix("option tz");
        return rc;
    }
    return read_catch_up(s, o);
}

/* The schedule's own copy of the message, as each tick writes it. */
static int copy_message(schedule *s, const lq_table *t, const lq_message *m) {
    if (m->has_id)
        return lq__error(LQ_MISUSE, "a schedule's message takes no id: each tick writes a row of its own");
    int rc = lq__check_message(t, m, 0);
    if (rc == LQ_OK) rc = lq__message_copy(&s->message, m);
    if (rc != LQ_OK) return rc;
    /* A tick whose key a row holds enqueues nothing: the tick is spent. */
    if (m->dedup_key) s->message->on_duplicate = LQ_ON_DUPLICATE_EXISTING;
    if (lq__has(t, LQ_ROLE_HEADERS)) rc = lq__headers_set(&s->message->headers, "lq-schedule", s->name);
    return rc;
}

/* Where the schedule starts: after the latest tick any broker enqueued
 * (the ticks since, up to now, are missed), or after now the first time. */
static int place(schedule *s, lq_broker *b) {
    int64_t last;
    bool found;
    int rc = lq__ticks_last(&last, &found, b, &s->ticks, s->name);
    if (rc != LQ_OK) return rc;
    s->watched_from = lq__now_ms();
    int64_t lower = s->watched_from - s->catch_up_ms - 1;
    s->next = tick_after(s, !found ? s->watched_from : last > lower ? last : lower);
    return LQ_OK;
}

static int add(lq_broker *b, const lq_table *t, const char *name, const lq_options *o,
               const lq_message *m) {
    LQ__CHECK_ARG(*name, "a schedule needs a name");
    LQ__CHECK_ARG(strlen(name) <= NAME_MAX_BYTES, "a schedule's name is longer than 200 bytes");
    schedule *s = calloc(1, sizeof *s);
    int rc = s && (s->name = lq__strdup(name)) ? LQ_OK : lq__error(LQ_NOMEM, "out of memory");
    if (rc == LQ_OK) rc = read_timing(s, o);
    if (rc == LQ_OK) rc = copy_message(s, t, m);
    if (rc == LQ_OK) rc = lq__table_copy(&s->table, t);
    lq__scheduler *sc = NULL;
    if (rc == LQ_OK) rc = scheduler_of(&sc, b);
    if (rc == LQ_OK) {
        pthread_mutex_lock(&sc->mu);
        if (*find(sc, name)) rc = lq__error(LQ_MISUSE, "this broker has a schedule of that name already");
        pthread_mutex_unlock(&sc->mu);
    }
    if (rc == LQ_OK) rc = lq__ticks_open(&s->ticks, b, t);
    if (rc == LQ_OK) rc = place(s, b);
    if (rc == LQ_OK) {
        pthread_mutex_lock(&sc->mu);
        schedule **slot = find(sc, name);
        if (*slot) {
            rc = lq__error(LQ_MISUSE, "this broker has a schedule of that name already");
        } else {
            *slot = s;
            pthread_cond_broadcast(&sc->changed);
        }
        pthread_mutex_unlock(&sc->mu);
    }
    if (rc != LQ_OK) schedule_free(s);
    return rc;
}

int lq_schedule_add(lq_broker *b, const lq_table *t, const char *name, const lq_options *o,
                    const lq_message *m) {
    lq__error_clear();
    LQ__CHECK_ARG(b && t && name && m, "the broker, table, name or message is NULL");
    int rc = add(b, t, name, o, m);
    if (rc != LQ_OK) lq__error_prefix("schedule %s", name);
    return rc;
}

int lq_schedule_remove(lq_broker *b, const char *name) {
    lq__error_clear();
    LQ__CHECK_ARG(b && name, "the broker or name is NULL");
    pthread_mutex_lock(&b->mu);
    lq__scheduler *sc = b->scheduler;
    if (sc) pthread_mutex_lock(&sc->mu);
    pthread_mutex_unlock(&b->mu);
    schedule **slot = sc ? find(sc, name) : NULL;
    if (slot && *slot) (*slot)->removed = true; /* the thread takes it no more */
    while (slot && *slot && (*slot)->firing) {
        pthread_cond_wait(&sc->changed, &sc->mu);
        slot = find(sc, name);
    }
    schedule *s = slot ? *slot : NULL;
    if (s) *slot = s->next_schedule;
    if (sc) pthread_mutex_unlock(&sc->mu);
    if (!s) return lq__error(LQ_MISUSE, "schedule %s: this broker has no schedule of that name", name);
    schedule_free(s);
    return LQ_OK;
}
