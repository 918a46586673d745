/* Untimed table work for the benchmarks, on each database's own client
 * library: create the bench table afresh (the DDL libqueue recommends for the
 * form), preload rows, and count what is left. */
#ifndef LQ_BENCH_DB_H
#define LQ_BENCH_DB_H

#include "bench_common.h"
#include "libqueue.h"

/* The description of the bench table in a form: id, payload, attempt, and a
 * locked_until column (lease) or the key template "job-{id}" (advisory, one
 * key per row, so rows run in parallel). The caller frees it. */
lq_table *bench_table(bench_form form);

/* Drops and creates the bench table for `form` (a SQLite file is removed
 * and made anew), then preloads `rows` rows with a ~100-byte JSON payload,
 * 1000 per transaction, and refreshes the planner's statistics. Exits on
 * failure. */
void bench_setup(const char *url, bench_form form, int64_t rows);
/* Rows left in the bench table; exits on failure. */
int64_t bench_count(const char *url);
/* The memory SQLite holds in this process (its page caches, statements,
 * connections), in kB: the part of the heap that is not libqueue's. */
long bench_sqlite_memory_kb(void);

#endif
