/* Retention in a subscription's idle time: see retention.h. */
#include "runtime/retention.h"

#include "base/clock.h"
#include "core/prune.h"

#define LOOK_AGAIN_MAX_MS 60000

bool lq__retention_take_turn(lq__retention *r, int64_t now_ms) {
    if ((!r->retain_ms && !r->dead_retain_ms) || r->running || now_ms < r->due_ms) return false;
    r->running = true;
    return true;
}

void lq__retention_end_turn(lq__retention *r, int64_t due_ms) {
    r->running = false;
    r->due_ms = due_ms;
}

/* One batch of one kind; true when it was full (more may be left). */
static bool one_batch(lq_broker *b, const lq_table *t, const char *group, int64_t age_ms, bool dead) {
    int64_t now = lq__now_ms(), deleted = 0;
    int64_t before = age_ms < now ? now - age_ms : 0;
    int rc = dead ? lq__dead_letters_prune_batch(&deleted, b, t, before, LQ__PRUNE_BATCH)
                  : lq__prune_batch(&deleted, b, t, group, before, LQ__PRUNE_BATCH);
    if (rc != LQ_OK) {
        char label[256];
        lq__error_prefix("%s of %s", dead ? "dead_letter_retain_ms" : "retain_ms",
                         lq__table_label(t, label, sizeof label));
        lq__log_error(LQ_LOG_WARNING, "retention");
        return false;
    }
    if (deleted) lq__log(LQ_LOG_DEBUG, "retention: %lld %s", (long long)deleted,
                         dead ? "dead letter(s)" : "finished row(s)");
    return deleted == LQ__PRUNE_BATCH;
}

int64_t lq__retention_run(lq__retention *r, lq_broker *b, const lq_table *t, const char *group,
                          int64_t poll_ms) {
    bool more = false;
    if (r->retain_ms) more |= one_batch(b, t, group, r->retain_ms, false);
    if (r->dead_retain_ms) more |= one_batch(b, t, group, r->dead_retain_ms, true);
    int64_t now = lq__mono_ms();
    if (more) return now;
    int64_t shortest = r->retain_ms && r->dead_retain_ms
                           ? (r->retain_ms < r->dead_retain_ms ? r->retain_ms : r->dead_retain_ms)
                           : (r->retain_ms ? r->retain_ms : r->dead_retain_ms);
    int64_t wait = shortest / 10;
    if (wait > LOOK_AGAIN_MAX_MS) wait = LOOK_AGAIN_MAX_MS;
    if (wait < poll_ms) wait = poll_ms;
    return now + wait;
}
