/* Write turns: one per file in the process, and a wait that a write's end
 * cuts short. */
#include "check.h"
#include "base/clock.h"
#include "dialects/write_turns.h"

#include <pthread.h>
#include <time.h>

static void *end_a_write(void *arg) {
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
    lq__turns_ended(arg);
    return NULL;
}

int main(void) {
    lq__turns *a = lq__turns_open("/tmp/one.db"), *again = lq__turns_open("/tmp/one.db");
    lq__turns *b = lq__turns_open("/tmp/other.db");
    CHECK(a && b && a == again && a != b);

    /* A write ended since the wait's count: it returns at once. */
    uint64_t seen = lq__turns_ended_count(a);
    lq__turns_ended(a);
    int64_t began = lq__mono_ms();
    lq__turns_wait(a, &seen, 30 * 1000000L);
    CHECK(lq__mono_ms() - began < 15000);
    CHECK(seen == lq__turns_ended_count(a));

    /* A write that ends during the wait wakes it, well before its 30 s; one
     * of another file does not count. */
    lq__turns_ended(b);
    pthread_t writer;
    pthread_create(&writer, NULL, end_a_write, a);
    began = lq__mono_ms();
    uint64_t before = seen;
    lq__turns_wait(a, &seen, 30 * 1000000L);
    CHECK(lq__mono_ms() - began < 15000);
    CHECK(seen == before + 1);
    pthread_join(writer, NULL);

    /* Nothing ends: the wait lasts its step. */
    began = lq__mono_ms();
    lq__turns_wait(a, &seen, 20000);
    CHECK(seen == before + 1);

    lq__turns_close(again);
    lq__turns_close(a);
    lq__turns_close(b);
    return check_failures;
}
