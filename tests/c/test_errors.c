/* The per-thread error accessors and the status names. */
#include "check.h"
#include "base/internal.h"

#include <pthread.h>

static void *other_thread(void *arg) {
    (void)arg;
    CHECK(lq_errcode() == LQ_OK);
    CHECK_STR(lq_errmsg(), "");
    lq__error_db(LQ_BACKEND, "40001", 7, "from the other thread");
    CHECK_STR(lq_errcode_sqlstate(), "40001");
    return NULL;
}

int main(void) {
    CHECK(lq__error(LQ_SCHEMA, "no such column: %s", "x") == LQ_SCHEMA);
    CHECK(lq_errcode() == LQ_SCHEMA);
    CHECK_STR(lq_errmsg(), "no such column: x");
    CHECK_STR(lq_errcode_sqlstate(), "");
    CHECK(lq_errcode_native() == 0);

    /* Another thread sees its own error, and leaves this one alone. */
    pthread_t t;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    CHECK_STR(lq_errmsg(), "no such column: x");

    lq__error_prefix("table %s", "jobs");
    CHECK_STR(lq_errmsg(), "table jobs: no such column: x");

    lq__error_db(LQ_CONTENTION, "40P01", 5, "deadlock");
    CHECK_STR(lq_errcode_sqlstate(), "40P01");
    CHECK(lq_errcode_native() == 5);

    /* Every public call starts clean. */
    lq_options *o;
    CHECK(lq_options_new(&o) == LQ_OK);
    CHECK(lq_errcode() == LQ_OK);
    CHECK_STR(lq_errmsg(), "");
    CHECK(lq_options_set_int(o, LQ_OPT_WORKERS, 0) == LQ_MISUSE);
    CHECK_CONTAINS(lq_errmsg(), "workers");
    CHECK(lq_options_set_str(o, LQ_OPT_WORKERS, "x") == LQ_MISUSE);
    int id, type;
    CHECK(lq_option_find(&id, &type, "poll_interval_ms") == LQ_OK);
    CHECK(id == LQ_OPT_POLL_INTERVAL_MS && type == LQ_OPTION_INT);
    CHECK(lq_option_find(&id, &type, "nope") == LQ_MISUSE);
    lq_options_free(o);

    CHECK_STR(lq_status_name(LQ_LEASE_LOST), "LQ_LEASE_LOST");
    CHECK_STR(lq_status_name(LQ_BATCH_ROLLED_BACK), "LQ_BATCH_ROLLED_BACK");
    CHECK_STR(lq_status_name(-3), "LQ_UNKNOWN");
    CHECK_STR(lq_status_name(999), "LQ_UNKNOWN");
    CHECK(lq_status_describe(999) != NULL);
    CHECK(lq_version_number() == LQ_VERSION_NUMBER);
    CHECK_STR(lq_version_string(), LQ_PROJECT_VERSION); /* as CMake read it */
    CHECK_DONE();
}
