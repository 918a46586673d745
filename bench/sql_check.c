/* Checks that the raw-SQL baselines run the very statements the library
 * runs: builds each dialect's statements for the bench table through the
 * library's own builder (internal: linked against the core's objects) and
 * compares them with bench/raw_sql.h. Prints one line per statement that
 * differs, with both texts, and exits 1; prints "sql_check: ok" otherwise.
 *
 *   sql_check [--print]     --print: also show every statement the library builds */
#include "bench_common.h"
#include "bench_db.h"
#include "sql/dialect.h"
#include "raw_common.h"
#include "raw_sql.h"
#include "sql/sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void expect(const char *where, const char *what, const lq__stmt *got, const char *want) {
    const char *text = got->sql ? got->sql : "(none)";
    if (strcmp(text, want) == 0) return;
    failures++;
    printf("sql_check: %s %s differs\n  library: %s\n  raw:     %s\n", where, what, text, want);
}

static void print_set(const char *where, const lq__sqlset *set, const lq__stmt *insert) {
    const struct {
        const char *name;
        const lq__stmt *stmt;
    } all[] = {{"claim", &set->claim}, {"claim_one", &set->claim_one}, {"take", &set->take}, {"take_read", &set->take_read}, {"take_set", &set->take_set},
               {"stamp", &set->stamp}, {"ack", &set->ack},   {"ack_set", &set->ack_set},
               {"ack_set_held", &set->ack_set_held}, {"release", &set->release},
               {"extend", &set->extend}, {"insert", insert}};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i].stmt->sql) printf("%s %s: %s\n", where, all[i].name, all[i].stmt->sql);
}

int main(int argc, char **argv) {
    bool print = bench_flag(argc, argv, "--print");
    const struct {
        const lq__dialect *dialect;
        bench_form form;
        const char *claim, *take, *take_read, *stamp, *ack, *insert, *ack_set, *claim_one;
    } cases[] = {
        {&lq__postgres_dialect, BENCH_ROW_LOCK, PG_ROW_LOCK_CLAIM, NULL, NULL, NULL, PG_ROW_LOCK_ACK, PG_INSERT,
         PG_ROW_LOCK_BATCH_ACK, NULL},
        {&lq__postgres_dialect, BENCH_LEASE, PG_LEASE_CLAIM, NULL, NULL, NULL, PG_LEASE_ACK, PG_INSERT,
         PG_LEASE_BATCH_ACK, NULL},
        {&lq__postgres_dialect, BENCH_ADVISORY, PG_ADVISORY_CLAIM, PG_ADVISORY_TAKE, NULL, NULL,
         PG_ADVISORY_ACK, PG_INSERT, NULL, PG_ADVISORY_CLAIM_ONE},
        {&lq__sqlite_dialect, BENCH_LEASE, SQ_LEASE_CLAIM, NULL, NULL, NULL, SQ_LEASE_ACK, SQ_INSERT,
         SQ_LEASE_BATCH_ACK, NULL},
        {&lq__sqlite_dialect, BENCH_ADVISORY, SQ_ADVISORY_CLAIM, SQ_ADVISORY_TAKE, NULL, NULL,
         SQ_ADVISORY_ACK, SQ_INSERT, NULL, NULL},
        {&lq__mysql_dialect, BENCH_ROW_LOCK, MY_ROW_LOCK_CLAIM, NULL, NULL, NULL, MY_ROW_LOCK_ACK, MY_INSERT, NULL, NULL},
        {&lq__mysql_dialect, BENCH_LEASE, MY_LEASE_CLAIM, NULL, NULL, MY_LEASE_STAMP, MY_LEASE_ACK, MY_INSERT, NULL, NULL},
        {&lq__mysql_dialect, BENCH_ADVISORY, MY_ADVISORY_CLAIM, MY_ADVISORY_TAKE, MY_ADVISORY_TAKE_READ,
         NULL, MY_ADVISORY_ACK, MY_INSERT, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char where[64];
        snprintf(where, sizeof where, "%s %s", cases[i].dialect->name, bench_form_name(cases[i].form));
        lq_table *t = bench_table(cases[i].form);
        lq__sqlset set;
        lq__stmt insert;
        if (lq__sqlset_build(&set, cases[i].dialect, t) != LQ_OK ||
            lq__sqlset_build_insert(&insert, cases[i].dialect, t) != LQ_OK) {
            printf("sql_check: %s: the library cannot build its statements: %s\n", where, lq_errmsg());
            failures++;
            lq_table_free(t);
            continue;
        }
        if (print) print_set(where, &set, &insert);
        expect(where, "claim", &set.claim, cases[i].claim);
        if (cases[i].claim_one) expect(where, "claim_one", &set.claim_one, cases[i].claim_one);
        if (cases[i].take) expect(where, "take", &set.take, cases[i].take);
        if (cases[i].take_read) expect(where, "take_read", &set.take_read, cases[i].take_read);
        if (cases[i].stamp) expect(where, "stamp", &set.stamp, cases[i].stamp);
        expect(where, "ack", &set.ack, cases[i].ack);
        /* A batch's ack: in the lease form, of rows that share their claim's token. */
        bool lease = cases[i].form == BENCH_LEASE;
        if (cases[i].ack_set)
            expect(where, lease ? "ack_set_held" : "ack_set", lease ? &set.ack_set_held : &set.ack_set,
                   cases[i].ack_set);
        expect(where, "insert", &insert, cases[i].insert);
        lq__sqlset_free(&set);
        free(insert.sql);
        lq_table_free(t);
    }
    /* W2-bulk's multi-row insert: a full chunk of the bench table's rows. */
    const struct {
        const lq__dialect *dialect;
        const char *head, *tuple, *tail;
    } rows[] = {
        {&lq__postgres_dialect, PG_INSERT_ROWS_HEAD, PG_INSERT_ROWS_TUPLE, PG_INSERT_ROWS_TAIL},
        {&lq__sqlite_dialect, SQ_INSERT_ROWS_HEAD, SQ_INSERT_ROWS_TUPLE, SQ_INSERT_ROWS_TAIL},
        {&lq__mysql_dialect, MY_INSERT_ROWS_HEAD, MY_INSERT_ROWS_TUPLE, MY_INSERT_ROWS_TAIL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        lq_table *t = bench_table(BENCH_LEASE);
        lq__stmt insert;
        char *want = raw_insert_rows(rows[i].head, rows[i].tuple, rows[i].tail, RAW_INSERT_ROWS);
        if (lq__sql_build_insert_rows(&insert, rows[i].dialect, t, RAW_INSERT_ROWS) != LQ_OK) {
            printf("sql_check: %s: the library cannot build its multi-row insert: %s\n",
                   rows[i].dialect->name, lq_errmsg());
            failures++;
        } else {
            if (print) printf("%s insert_rows: %.200s..\n", rows[i].dialect->name, insert.sql);
            expect(rows[i].dialect->name, "insert_rows", &insert, want);
            free(insert.sql);
        }
        free(want);
        lq_table_free(t);
    }
    if (!failures) printf("sql_check: ok (the raw loops run the library's statements)\n");
    return failures ? 1 : 0;
}
