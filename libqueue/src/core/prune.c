/* Retention: lq_queue_prune deletes the finished rows a table keeps
 * (processed_at), lq_dead_letters_prune the dead letters, once older than
 * the caller's age. A batch of LQ__PRUNE_BATCH rows a statement, each in
 * autocommit, so that a table of millions is never one long transaction
 * and claims and acks go on between the batches. */
#include "core/prune.h"

#include "core/schema.h"

#include <stdlib.h>
#include <string.h>

typedef struct prune_work {
    lq_broker *b;
    lq__prune_sql sql;
    lq__value args[LQ__P_COUNT];
} prune_work;

/* What the table needs; checked before anything reaches the database. */
static int check_table(const lq_table *t, const char *group, bool dead) {
    if (!dead && !lq__has(t, LQ_ROLE_PROCESSED_AT))
        return lq__error(LQ_MISUSE, "the table has no processed_at column: its acks delete rows, "
                                    "so it keeps no finished rows to prune");
    if (dead && !t->dead_letter)
        return lq__error(LQ_MISUSE, "the table declares no dead letters (its description's dead_letter)");
    if (dead && !lq__has(t, LQ_ROLE_RETRY_AFTER))
        return lq__error(LQ_MISUSE, "the table has no retry_after column, which is where "
                                    "dead-lettering writes when: its dead letters are purged "
                                    "(lq_dead_letters_purge), not pruned by age");
    if (group && !lq__has(t, LQ_ROLE_GROUP))
        return lq__error(LQ_MISUSE, "the table has no group column, so a group does not apply");
    return LQ_OK;
}

/* The statement and its values; `before` is the cut, epoch ms. */
static int begin_work(prune_work *w, lq_broker *b, const lq_table *t, const char *group, bool dead,
                      int64_t before, int64_t limit) {
    memset(w, 0, sizeof *w);
    w->b = b;
    int rc = check_table(t, group, dead);
    if (rc == LQ_OK) rc = lq__broker_check_open(b);
    if (rc == LQ_OK) rc = lq__sql_build_prune(&w->sql, b->dialect, t, dead, !dead && group);
    /* Interned: every call of this shape shares its prepared statements. */
    if (rc == LQ_OK) rc = lq__broker_intern(b, &w->sql.pick);
    if (rc == LQ_OK) rc = lq__broker_intern(b, &w->sql.remove);
    w->args[LQ__P_NOW] = (lq__value){.type = LQ__V_TIME, .i = before > 0 ? before : 0};
    w->args[LQ__P_LEASE_NOW] = (lq__value){.type = LQ__V_TIME, .i = lq__now_ms()};
    w->args[LQ__P_LIMIT] = (lq__value){.type = LQ__V_INT, .i = limit};
    if (group) w->args[LQ__P_GROUP] = (lq__value){.type = LQ__V_TEXT, .p = group, .n = strlen(group)};
    if (t->dead_letter)
        w->args[LQ__P_DEST] = (lq__value){.type = LQ__V_TEXT, .p = t->dead_letter, .n = strlen(t->dead_letter)};
    return rc;
}

typedef struct picked {
    const lq__dialect *d;
    lq__strbuf set;
    int64_t rows;
} picked;

static int on_pick(void *ctx, const lq__value *cols, int count) {
    picked *p = ctx;
    if (count < 1) return lq__error(LQ_BACKEND, "a row without its id");
    lq__held_set_add(&p->set, p->d, false, lq__value_int(&cols[0]), 0);
    p->rows++;
    return LQ_OK;
}

/* One batch: *found rows were past the cut (the batch was full when it is
 * the limit), *deleted went. */
static int run_batch(int64_t *found, int64_t *deleted, prune_work *w, lq__conn *conn) {
    const lq__dialect *d = w->b->dialect;
    int64_t n = 0;
    *found = *deleted = 0;
    if (!w->sql.pick.sql) {
        int rc = d->exec(&n, conn, &w->sql.remove, w->args, NULL, NULL);
        if (rc == LQ_OK) *found = *deleted = n;
        return rc;
    }
    picked p = {.d = d};
    int rc = d->exec(NULL, conn, &w->sql.pick, w->args, on_pick, &p);
    char *set = rc == LQ_OK && p.rows ? lq__held_set_take(&p.set, d) : NULL;
    if (rc == LQ_OK && p.rows && !set) rc = lq__error(LQ_NOMEM, "out of memory");
    if (set) {
        w->args[LQ__P_HELD_SET] = (lq__value){.type = LQ__V_TEXT, .p = set, .n = strlen(set)};
        rc = d->exec(&n, conn, &w->sql.remove, w->args, NULL, NULL);
        w->args[LQ__P_HELD_SET] = (lq__value){0};
    }
    lq__sb_free(&p.set);
    free(set);
    if (rc == LQ_OK) {
        *found = p.rows;
        *deleted = n;
    }
    return rc;
}

static int one_batch(int64_t *deleted, lq_broker *b, const lq_table *t, const char *group,
                     bool dead, int64_t before, int limit) {
    LQ__CHECK_ARG(deleted && b && t, "an argument is NULL");
    *deleted = 0;
    LQ__CHECK_ARG(limit >= 1, "limit is below 1");
    prune_work w;
    lq__conn *conn = NULL;
    int rc = begin_work(&w, b, t, group, dead, before, limit);
    if (rc == LQ_OK) rc = lq__pool_acquire(&conn, &b->pool);
    int64_t found;
    if (rc == LQ_OK) rc = run_batch(&found, deleted, &w, conn);
    if (conn) lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    lq__prune_sql_free(&w.sql);
    return rc;
}

int lq__prune_batch(int64_t *deleted, lq_broker *b, const lq_table *t, const char *group,
                    int64_t before_epoch_ms, int limit) {
    return one_batch(deleted, b, t, group, false, before_epoch_ms, limit);
}

int lq__dead_letters_prune_batch(int64_t *deleted, lq_broker *b, const lq_table *t,
                                 int64_t before_epoch_ms, int limit) {
    return one_batch(deleted, b, t, NULL, true, before_epoch_ms, limit);
}

/* Batches until one finds fewer rows than it may take. */
static int prune(int64_t *deleted_out, lq_broker *b, const lq_table *t, const char *group,
                 int64_t older_than_ms, bool dead) {
    const char *what = dead ? "prune dead letters" : "prune";
    lq__error_clear();
    if (deleted_out) *deleted_out = 0;
    LQ__CHECK_ARG(b && t, "the broker or table is NULL");
    LQ__CHECK_ARG(older_than_ms >= 0, "older_than_ms is negative");
    /* Acks and dead-lettering write their times on the host's clock. */
    int64_t now = lq__now_ms();
    int64_t before = older_than_ms < now ? now - older_than_ms : 0;
    prune_work w;
    lq__conn *conn = NULL;
    int64_t deleted = 0, found = LQ__PRUNE_BATCH, n;
    int rc = begin_work(&w, b, t, group, dead, before, LQ__PRUNE_BATCH);
    if (rc == LQ_OK) rc = lq__pool_acquire(&conn, &b->pool);
    /* A missing table or column fails here, before anything is made. */
    if (rc == LQ_OK) rc = b->dialect->prepare(conn, &w.sql.remove);
    if (rc == LQ_OK && w.sql.pick.sql) rc = b->dialect->prepare(conn, &w.sql.pick);
    if (rc == LQ_OK && !dead) {
        lq__processed_index_create(b, conn, t);
        lq__error_clear(); /* a warning said it: retention goes on without */
    }
    while (rc == LQ_OK && found == LQ__PRUNE_BATCH) {
        rc = run_batch(&found, &n, &w, conn);
        deleted += n;
    }
    if (conn) lq__pool_release(&b->pool, conn, rc == LQ_CONNECT);
    lq__prune_sql_free(&w.sql);
    if (deleted_out) *deleted_out = deleted; /* what committed, even when a later batch failed */
    if (rc == LQ_OK) {
        lq__log(LQ_LOG_INFO, "%s: %lld row(s) older than %lld ms", what, (long long)deleted,
                (long long)older_than_ms);
        return LQ_OK;
    }
    char label[256];
    lq__error_prefix("%s of %s", what, lq__table_label(t, label, sizeof label));
    return rc;
}

int lq_queue_prune(int64_t *deleted_out, lq_broker *b, const lq_table *t, const char *group,
                   int64_t older_than_ms) {
    return prune(deleted_out, b, t, group, older_than_ms, false);
}

int lq_dead_letters_prune(int64_t *deleted_out, lq_broker *b, const lq_table *t, const char *group,
                          int64_t older_than_ms) {
    return prune(deleted_out, b, t, group, older_than_ms, true);
}
