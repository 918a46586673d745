/* Every public function given NULL where it takes a handle, an out pointer
 * or a string: a status function returns LQ_MISUSE with a message, an
 * accessor its empty value, a free or close does nothing; none crashes. The
 * real objects are made on a SQLite file so the NULLs reach each check. */
#include "check.h"
#include "libqueue.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

/* A status call that must refuse: LQ_MISUSE, said in lq_errmsg(). */
#define MISUSE(call)                                                              \
    do {                                                                          \
        int rc_ = (call);                                                         \
        if (rc_ != LQ_MISUSE || lq_errcode() != LQ_MISUSE || !lq_errmsg()[0]) {   \
            fprintf(stderr, "%s:%d: %s gave %s (%s)\n", __FILE__, __LINE__, #call, \
                    lq_status_name(rc_), lq_errmsg());                            \
            check_failures++;                                                     \
        }                                                                         \
    } while (0)

static int handler(lq_delivery *d, void *userdata) {
    (void)d;
    (void)userdata;
    return LQ_OK;
}

static void options_and_tables(void) {
    MISUSE(lq_options_new(NULL));
    MISUSE(lq_options_set_int(NULL, LQ_OPT_WORKERS, 1));
    MISUSE(lq_options_set_str(NULL, LQ_OPT_GROUP, "g"));
    int option, type;
    CHECK(lq_option_find(NULL, NULL, "workers") == LQ_OK); /* the out pointers are optional */
    MISUSE(lq_option_find(&option, &type, NULL));
    lq_options_free(NULL);

    lq_table *t;
    MISUSE(lq_table_new(NULL, "jobs"));
    MISUSE(lq_table_new(&t, NULL));
    CHECK(t == NULL);
    MISUSE(lq_table_set_schema(NULL, "s"));
    MISUSE(lq_table_set_id(NULL, "id", 1));
    MISUSE(lq_table_set_column(NULL, LQ_ROLE_PAYLOAD, "payload"));
    MISUSE(lq_table_set_fifo(NULL, 1));
    MISUSE(lq_table_set_advisory_lock(NULL, "k-{id}"));
    MISUSE(lq_table_set_isolation(NULL, LQ_ISOLATION_DEFAULT));
    MISUSE(lq_table_set_dead_letter(NULL, "dead"));
    CHECK(lq_table_form(NULL) == 0);
    char *sql;
    MISUSE(lq_table_create_sql(NULL, NULL, "sqlite"));
    MISUSE(lq_table_create_sql(&sql, NULL, "sqlite"));
    MISUSE(lq_table_check_form(NULL, "sqlite"));
    lq_table_free(NULL);
    lq_rendered_sql *rendered = (lq_rendered_sql *)&sql; /* must come back NULL */
    lq_message *m;
    lq_table_new(&t, "jobs");
    lq_message_new(&m);
    MISUSE(lq_publish_sql(NULL, "sqlite", t, m, 0));
    MISUSE(lq_publish_sql(&rendered, NULL, t, m, 0));
    CHECK(rendered == NULL);
    MISUSE(lq_publish_sql(&rendered, "sqlite", NULL, m, 0));
    MISUSE(lq_publish_sql(&rendered, "sqlite", t, NULL, 0));
    lq_message_free(m);
    lq_table_free(t);
    CHECK(lq_rendered_sql_text(NULL)[0] == '\0');
    CHECK(lq_rendered_sql_param_count(NULL) == 0);
    CHECK(lq_rendered_sql_param_type(NULL, 0) == LQ_SQL_NULL);
    CHECK(lq_rendered_sql_param_int64(NULL, 0) == 0);
    CHECK(lq_rendered_sql_param_double(NULL, 0) == 0.0);
    CHECK(lq_rendered_sql_param_data(NULL, 0) == NULL);
    CHECK(lq_rendered_sql_param_size(NULL, 0) == 0);
    CHECK(lq_rendered_sql_param_offset(NULL, 0) == SIZE_MAX);
    CHECK(lq_rendered_sql_returns_id(NULL) == 0);
    lq_rendered_sql_free(NULL);
    MISUSE(lq_redact_url(NULL, "sqlite:x"));
    MISUSE(lq_redact_url(&sql, NULL));
    lq_free(NULL);
}

static void messages(void) {
    MISUSE(lq_message_new(NULL));
    MISUSE(lq_message_set_payload(NULL, "x", 1));
    MISUSE(lq_message_set_id(NULL, 1));
    MISUSE(lq_message_set_group(NULL, "g"));
    MISUSE(lq_message_set_partition_key(NULL, "k"));
    MISUSE(lq_message_set_priority(NULL, 1));
    MISUSE(lq_message_set_delay_ms(NULL, 1));
    MISUSE(lq_message_set_header(NULL, "a", "b"));
    MISUSE(lq_message_set_dedup_key(NULL, "k"));
    MISUSE(lq_message_set_on_duplicate(NULL, LQ_ON_DUPLICATE_EXISTING));
    lq_message *m;
    CHECK(lq_message_new(&m) == LQ_OK);
    MISUSE(lq_message_set_payload(m, NULL, 3));
    MISUSE(lq_message_set_header(m, NULL, "b"));
    MISUSE(lq_message_set_header(m, "a", NULL));
    lq_message_reset(NULL);
    lq_message_free(m);
    lq_message_free(NULL);
}

static void deliveries(void) {
    CHECK(lq_delivery_id(NULL) == 0);
    CHECK(lq_delivery_payload(NULL) == NULL);
    CHECK(lq_delivery_payload_size(NULL) == 0);
    CHECK(lq_delivery_attempt(NULL) == 0);
    CHECK(lq_delivery_group(NULL) == NULL);
    CHECK(lq_delivery_partition_key(NULL) == NULL);
    CHECK(lq_delivery_header_count(NULL) == 0);
    CHECK(lq_delivery_header(NULL, "a") == NULL);
    CHECK(lq_delivery_lease_expiry_ms(NULL) == 0);
    const char *name, *value;
    MISUSE(lq_delivery_header_at(&name, &value, NULL, 0));
    MISUSE(lq_delivery_ack(NULL));
    MISUSE(lq_delivery_retry(NULL));
    MISUSE(lq_delivery_retry_after(NULL, 10));
    MISUSE(lq_delivery_dead_letter(NULL));
    MISUSE(lq_deliveries_ack(NULL, NULL, 2));
    MISUSE(lq_deliveries_ack_behind(NULL, NULL, 2));
    MISUSE(lq_delivery_exec(NULL, NULL, "SELECT 1", NULL, 0));
    lq_delivery_free(NULL);
    lq_delivery_handled(NULL);
}

/* The broker and subscription calls, with a real broker and table so that
 * each NULL is the only thing wrong. */
static void brokers_and_subscriptions(const char *dir) {
    char url[512];
    snprintf(url, sizeof url, "sqlite://%s/null_handles.db", dir);
    lq_broker *b;
    MISUSE(lq_broker_open(NULL, url, NULL));
    MISUSE(lq_broker_open(&b, NULL, NULL));
    CHECK(b == NULL);
    CHECK(lq_broker_dialect(NULL) == NULL || lq_broker_dialect(NULL)[0] == '\0');
    lq_broker_close(NULL);
    CHECK(lq_broker_open(&b, url, NULL) == LQ_OK);

    lq_table *t;
    CHECK(lq_table_new(&t, "jobs") == LQ_OK);
    CHECK(lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload") == LQ_OK);
    CHECK(lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until") == LQ_OK);
    MISUSE(lq_table_create(NULL, t, 0));
    MISUSE(lq_table_create(b, NULL, 0));
    CHECK(lq_table_create(b, t, 0) == LQ_OK);

    lq_message *m;
    CHECK(lq_message_new(&m) == LQ_OK);
    MISUSE(lq_publish(NULL, NULL, t, &m, 1));
    MISUSE(lq_publish(NULL, b, NULL, &m, 1));
    MISUSE(lq_publish(NULL, b, t, NULL, 1));
    lq_message *holes[2] = {m, NULL};
    MISUSE(lq_publish(NULL, b, t, holes, 2));
    MISUSE(lq_publish_on(NULL, b, NULL, t, &m, 1));
    MISUSE(lq_cancel(NULL, t, 1));
    MISUSE(lq_cancel(b, NULL, 1));

    int64_t values[LQ_QUEUE_STAT_COUNT];
    MISUSE(lq_queue_stats(values, LQ_QUEUE_STAT_COUNT, NULL, t, NULL, 10));
    MISUSE(lq_queue_stats(values, LQ_QUEUE_STAT_COUNT, b, NULL, NULL, 10));
    MISUSE(lq_queue_stats(NULL, LQ_QUEUE_STAT_COUNT, b, t, NULL, 10));
    MISUSE(lq_queue_stats(values, LQ_QUEUE_STAT_COUNT, b, t, NULL, 0));
    CHECK(lq_queue_stats(NULL, 0, b, t, NULL, 10) == LQ_OK); /* asks for nothing */
    MISUSE(lq_queue_attempts(values, 2, NULL, t, NULL, 10));
    MISUSE(lq_queue_attempts(values, 2, b, NULL, NULL, 10));
    MISUSE(lq_queue_attempts(NULL, 2, b, t, NULL, 10));
    MISUSE(lq_queue_attempts(values, 0, b, t, NULL, 10));
    CHECK(lq_queue_attempts(values, 2, b, t, NULL, 10) == LQ_SCHEMA); /* no attempt column */
    char *json;
    MISUSE(lq_dead_letters_list(NULL, b, t, NULL, 0, 10));
    MISUSE(lq_dead_letters_list(&json, NULL, t, NULL, 0, 10));
    MISUSE(lq_dead_letters_list(&json, b, NULL, NULL, 0, 10));
    MISUSE(lq_dead_letters_list(&json, b, t, NULL, 0, 10)); /* no dead letters declared */
    int64_t moved, one = 1;
    MISUSE(lq_dead_letters_replay(&moved, NULL, t, NULL, NULL, 0));
    MISUSE(lq_dead_letters_replay(&moved, b, NULL, NULL, NULL, 0));
    MISUSE(lq_dead_letters_replay(&moved, b, t, NULL, NULL, 1));
    MISUSE(lq_dead_letters_replay(&moved, b, t, NULL, &one, 0));
    MISUSE(lq_dead_letters_purge(&moved, NULL, t, NULL, NULL, 0));
    MISUSE(lq_dead_letters_purge(&moved, b, t, NULL, NULL, 0)); /* no dead letters declared */
    MISUSE(lq_queue_prune(&moved, NULL, t, NULL, 0));
    MISUSE(lq_queue_prune(&moved, b, NULL, NULL, 0));
    MISUSE(lq_queue_prune(NULL, b, t, NULL, 0)); /* no processed_at column */
    MISUSE(lq_dead_letters_prune(&moved, NULL, t, NULL, 0));
    MISUSE(lq_dead_letters_prune(&moved, b, NULL, NULL, 0));
    MISUSE(lq_dead_letters_prune(NULL, b, t, NULL, 0)); /* no dead letters declared */
    int paused;
    MISUSE(lq_queue_pause(NULL, t, NULL));
    MISUSE(lq_queue_pause(b, NULL, NULL));
    MISUSE(lq_queue_pause(b, t, "a")); /* no group column */
    MISUSE(lq_queue_resume(NULL, t, NULL));
    MISUSE(lq_queue_resume(b, NULL, NULL));
    MISUSE(lq_queue_paused(NULL, b, t, NULL));
    MISUSE(lq_queue_paused(&paused, NULL, t, NULL));
    MISUSE(lq_queue_paused(&paused, b, NULL, NULL));
    MISUSE(lq_doctor(NULL, b, t));
    json = (char *)&moved; /* not NULL: the refusals must clear it */
    MISUSE(lq_doctor(&json, NULL, t));
    CHECK(json == NULL);
    MISUSE(lq_doctor(&json, b, NULL));
    CHECK(lq_doctor(&json, b, t) == LQ_OK && json && strstr(json, "\"findings\":["));
    lq_free(json);

    lq_subscription *s;
    MISUSE(lq_subscription_open(NULL, b, t, NULL));
    MISUSE(lq_subscription_open(&s, NULL, t, NULL));
    CHECK(s == NULL);
    MISUSE(lq_subscription_open(&s, b, NULL, NULL));
    CHECK(lq_subscription_open(&s, b, t, NULL) == LQ_OK);
    MISUSE(lq_subscription_run(NULL, handler, NULL));
    MISUSE(lq_subscription_run(s, NULL, NULL));
    MISUSE(lq_subscription_run_batch(NULL, NULL, NULL));
    lq_delivery *d, *batch[4];
    size_t got;
    MISUSE(lq_subscription_next(NULL, s, 0));
    d = batch[0] = (lq_delivery *)&got; /* not NULL: the refusals must clear them */
    MISUSE(lq_subscription_next(&d, NULL, 0));
    CHECK(d == NULL);
    MISUSE(lq_subscription_next_batch(NULL, 4, &got, s, 0));
    MISUSE(lq_subscription_next_batch(batch, 4, NULL, s, 0));
    got = 9;
    MISUSE(lq_subscription_next_batch(batch, 4, &got, NULL, 0));
    CHECK(got == 0);
    int fd = 7;
    MISUSE(lq_subscription_fd(NULL, s));
    MISUSE(lq_subscription_fd(&fd, NULL));
    CHECK(fd == -1);
    MISUSE(lq_subscription_try_next(NULL, s));
    d = (lq_delivery *)&got;
    MISUSE(lq_subscription_try_next(&d, NULL));
    CHECK(d == NULL);
    got = 9;
    MISUSE(lq_subscription_try_next_batch(batch, 4, &got, NULL));
    CHECK(got == 0);
    MISUSE(lq_subscription_try_next_batch(NULL, 4, &got, s));
    MISUSE(lq_subscription_try_next_batch(batch, 4, NULL, s));
    MISUSE(lq_subscription_stop(NULL));
    int64_t failing;
    MISUSE(lq_subscription_health(NULL, &failing));
    CHECK(lq_subscription_stat(NULL, LQ_STAT_CLAIMS) == 0);
    lq_metrics *snapshot = (lq_metrics *)&failing; /* must come back NULL */
    MISUSE(lq_subscription_metrics(&snapshot, NULL));
    CHECK(snapshot == NULL);
    MISUSE(lq_subscription_metrics(NULL, s));
    CHECK(lq_metrics_stat(NULL, LQ_STAT_CLAIMS) == 0);
    CHECK(lq_metrics_count(NULL, LQ_HISTOGRAM_CLAIM, -1) == 0);
    CHECK(lq_metrics_sum(NULL, LQ_HISTOGRAM_WAIT) == 0);
    lq_metrics_free(NULL);
    CHECK(lq_subscription_metrics(&snapshot, s) == LQ_OK);
    CHECK(lq_metrics_stat(snapshot, 0) == 0 && lq_metrics_stat(snapshot, LQ_STAT_POOL_IDLE + 1) == 0);
    CHECK(lq_metrics_count(snapshot, 3, 0) == 0 && lq_metrics_count(snapshot, LQ_HISTOGRAM_CLAIM, 16) == 0);
    lq_metrics_free(snapshot);
    CHECK(isnan(lq_histogram_bound(-1)) && isnan(lq_histogram_bound(LQ_HISTOGRAM_BUCKETS)));
    CHECK(isinf(lq_histogram_bound(LQ_HISTOGRAM_BUCKETS - 1)) && lq_histogram_bound(0) == 0.001);
    CHECK(lq_subscription_in_handler(NULL) == 0);
    lq_subscription_close(NULL);

    lq_subscription_close(s);
    lq_message_free(m);
    lq_table_free(t);
    lq_broker_close(b);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    options_and_tables();
    messages();
    deliveries();
    brokers_and_subscriptions(dir);
    return check_failures ? 1 : 0;
}
