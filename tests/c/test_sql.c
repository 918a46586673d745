/* The statement builder: quoting, placeholders by symbol, and the shapes of
 * the SQLite statements for each form. */
#include "check.h"
#include "sql/dialect.h"

#include <stdlib.h>

static lq_table *jobs(void) {
    lq_table *t;
    lq_table_new(&t, "we\"ird");
    lq_table_set_column(t, LQ_ROLE_PAYLOAD, "payload");
    lq_table_set_column(t, LQ_ROLE_ATTEMPT, "attempt");
    lq_table_set_column(t, LQ_ROLE_RETRY_AFTER, "order");
    return t;
}

int main(void) {
    const lq__dialect *d = &lq__sqlite_dialect;
    lq_table *t = jobs();
    lq__sqlset set;

    /* No form column: SQLite refuses, naming the two forms it serves. */
    CHECK(lq__sqlset_build(&set, d, t) == LQ_DIALECT);
    CHECK_CONTAINS(lq_errmsg(), "lease form");
    CHECK_CONTAINS(lq_errmsg(), "advisory form");

    lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, "locked_until");
    CHECK(lq__sqlset_build(&set, d, t) == LQ_OK);
    CHECK_CONTAINS(set.claim.sql, "UPDATE \"we\"\"ird\" SET \"locked_until\" = ?1");
    CHECK_CONTAINS(set.claim.sql, "\"order\" <= ?");
    CHECK_CONTAINS(set.claim.sql, "RETURNING \"id\" AS \"lq_c0\", \"payload\" AS \"lq_c1\", \"attempt\" - 1 AS \"lq_c2\"");
    CHECK(set.claim.params[0] == LQ__P_LEASE);
    CHECK_STR(set.ack.sql, "DELETE FROM \"we\"\"ird\" WHERE \"id\" = ?1 AND \"locked_until\" = ?2");
    CHECK(set.ack.nparams == 2 && set.ack.params[0] == LQ__P_ID && set.ack.params[1] == LQ__P_HELD);
    CHECK_STR(set.retry.sql,
              "UPDATE \"we\"\"ird\" SET \"locked_until\" = NULL WHERE \"id\" = ?1 AND \"locked_until\" = ?2");
    CHECK_STR(set.extend.sql,
              "UPDATE \"we\"\"ird\" SET \"locked_until\" = ?1 WHERE \"id\" = ?2 AND \"locked_until\" = ?3");
    CHECK(set.retry_after.sql != NULL);
    CHECK(set.dead_group.sql == NULL && set.dead_copy.sql == NULL);
    lq__sqlset_free(&set);

    /* MySQL's lease claim is a locking read: the core stamps its rows, a
     * claim of several in one statement over their JSON. */
    CHECK(lq__sqlset_build(&set, &lq__mysql_dialect, t) == LQ_OK);
    CHECK_CONTAINS(set.stamp.sql, "WHERE `id` = ? AND (`locked_until` IS NULL OR `locked_until` <= ?)");
    CHECK_STR(set.stamp_set.sql,
              "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (`lq_id` BIGINT PATH '$[0]', `lq_held` DATETIME(6) "
              "PATH '$[1]')) AS `lq_s` JOIN `we\"ird` AS `lq_t` ON `lq_t`.`id` = `lq_s`.`lq_id` SET "
              "`lq_t`.`locked_until` = `lq_s`.`lq_held`, `lq_t`.`attempt` = `lq_t`.`attempt` + 1 "
              "WHERE (`lq_t`.`locked_until` IS NULL OR `lq_t`.`locked_until` <= ?)");
    CHECK(set.stamp_set.nparams == 2 && set.stamp_set.params[0] == LQ__P_HELD_SET &&
          set.stamp_set.params[1] == LQ__P_LEASE_NOW);
    lq__sqlset_free(&set);
    CHECK(lq__sqlset_build(&set, d, t) == LQ_OK); /* SQLite's claim stamps its rows itself */
    CHECK(set.stamp.sql == NULL && set.stamp_set.sql == NULL);
    lq__sqlset_free(&set);

    /* Dead letters into a table: copy, clear the lease, delete. */
    lq_table_set_dead_letter(t, "app.dead");
    CHECK(lq__sqlset_build(&set, d, t) == LQ_OK);
    CHECK_CONTAINS(set.dead_copy.sql, "INSERT INTO \"app\".\"dead\" SELECT * FROM \"we\"\"ird\"");
    CHECK_CONTAINS(set.dead_clear.sql, "UPDATE \"app\".\"dead\" SET \"locked_until\" = NULL");
    CHECK_CONTAINS(set.dead_delete.sql, "DELETE FROM \"we\"\"ird\"");
    lq__sqlset_free(&set);
    lq_table_set_dead_letter(t, "a.b.c");
    CHECK(lq__sqlset_build(&set, d, t) == LQ_MISUSE);

    /* The advisory form: candidates with their rendered key, then a take. */
    lq_table_set_dead_letter(t, NULL);
    lq_table_set_column(t, LQ_ROLE_LOCKED_UNTIL, NULL);
    CHECK(lq_table_set_advisory_lock(t, "acct-{account}'s") == LQ_OK);
    CHECK(lq_table_form(t) == LQ_FORM_ADVISORY);
    CHECK(lq__sqlset_build(&set, d, t) == LQ_OK);
    CHECK_CONTAINS(set.claim.sql, "CAST('acct-' || ifnull(\"account\", '') || '''s' AS TEXT)");
    CHECK_CONTAINS(set.take.sql, "SET \"attempt\" = \"attempt\" + 1 WHERE \"id\" = ?1");
    CHECK(set.retry.sql == NULL);
    CHECK_STR(set.ack.sql, "DELETE FROM \"we\"\"ird\" WHERE \"id\" = ?1");
    lq__sqlset_free(&set);

    /* processed_at marks instead of deleting. */
    lq_table_set_column(t, LQ_ROLE_PROCESSED_AT, "done_at");
    CHECK(lq__sqlset_build(&set, d, t) == LQ_OK);
    CHECK_STR(set.ack.sql, "UPDATE \"we\"\"ird\" SET \"done_at\" = ?1 WHERE \"id\" = ?2");
    CHECK_CONTAINS(set.claim.sql, "\"done_at\" IS NULL");
    lq__sqlset_free(&set);

    /* Retention's batch: bounded, by the index of finished rows; MySQL
     * picks the ids with a read that locks nothing, then deletes those. */
    lq__prune_sql prune;
    CHECK(lq__sql_build_prune(&prune, &lq__postgres_dialect, t, false, false) == LQ_OK);
    CHECK(prune.pick.sql == NULL);
    CHECK_STR(prune.remove.sql,
              "DELETE FROM \"we\"\"ird\" WHERE \"id\" IN (SELECT \"id\" FROM \"we\"\"ird\" WHERE "
              "\"done_at\" IS NOT NULL AND \"done_at\" < $1 ORDER BY \"done_at\" LIMIT $2 FOR UPDATE "
              "SKIP LOCKED)");
    lq__prune_sql_free(&prune);
    CHECK(lq__sql_build_prune(&prune, d, t, false, false) == LQ_OK);
    CHECK_CONTAINS(prune.remove.sql, "ORDER BY \"done_at\" LIMIT ?2)");
    lq__prune_sql_free(&prune);
    CHECK(lq__sql_build_prune(&prune, &lq__mysql_dialect, t, false, false) == LQ_OK);
    CHECK_STR(prune.pick.sql, "SELECT `id` FROM `we\"ird` WHERE `done_at` IS NOT NULL AND `done_at` "
                              "< ? ORDER BY `done_at`, `id` LIMIT ?");
    CHECK_CONTAINS(prune.remove.sql, "DELETE `lq_t` FROM JSON_TABLE(?, '$[*]' COLUMNS (`lq_id` "
                                     "BIGINT PATH '$')) AS `lq_s` JOIN `we\"ird` AS `lq_t`");
    CHECK(prune.remove.params[0] == LQ__P_HELD_SET && prune.remove.params[1] == LQ__P_NOW);
    lq__prune_sql_free(&prune);

    /* The insert: roles the table has, attempt 1, the id returned. */
    lq__stmt insert;
    CHECK(lq__sqlset_build_insert(&insert, d, t) == LQ_OK);
    CHECK_STR(insert.sql, "INSERT INTO \"we\"\"ird\" (\"attempt\", \"payload\", \"order\") VALUES "
                          "(1, ?1, ?2) RETURNING \"id\"");
    free(insert.sql);

    /* Several rows in one insert: each row's parameters at the next
     * positions, bound from the row's own set of arguments. */
    CHECK(lq__sql_insert_writes(t));
    CHECK(lq__sql_build_insert_rows(&insert, d, t, 3) == LQ_OK);
    CHECK_STR(insert.sql, "INSERT INTO \"we\"\"ird\" (\"attempt\", \"payload\", \"order\") VALUES "
                          "(1, ?1, ?2), (1, ?3, ?4), (1, ?5, ?6) RETURNING \"id\"");
    CHECK(insert.rows == 3 && insert.nparams == 2 && lq__stmt_values(&insert) == 6);
    lq__value args[3 * LQ__P_COUNT] = {{0}};
    CHECK(lq__stmt_arg(&insert, args, 0) == &args[LQ__P_PAYLOAD]);
    CHECK(lq__stmt_arg(&insert, args, 3) == &args[LQ__P_COUNT + LQ__P_RETRY_AFTER]);
    CHECK(lq__stmt_arg(&insert, args, 4) == &args[2 * LQ__P_COUNT + LQ__P_PAYLOAD]);
    free(insert.sql);
    /* Ids the messages carry are written, not returned; PostgreSQL numbers,
     * MySQL does not. */
    lq_table_set_id(t, "id", 0);
    CHECK(lq__sql_build_insert_rows(&insert, &lq__postgres_dialect, t, 2) == LQ_OK);
    CHECK_STR(insert.sql, "INSERT INTO \"we\"\"ird\" (\"id\", \"attempt\", \"payload\", \"order\") "
                          "VALUES ($1, 1, $2, $3), ($4, 1, $5, $6)");
    free(insert.sql);
    CHECK(lq__sql_build_insert_rows(&insert, &lq__mysql_dialect, t, 2) == LQ_OK);
    CHECK_STR(insert.sql, "INSERT INTO `we\"ird` (`id`, `attempt`, `payload`, `order`) "
                          "VALUES (?, 1, ?, ?), (?, 1, ?, ?)");
    free(insert.sql);
    lq_table_set_id(t, "id", 1);
    /* A table with nothing to write inserts DEFAULT VALUES, a row at a time. */
    lq_table *bare;
    lq_table_new(&bare, "bare");
    CHECK(!lq__sql_insert_writes(bare));
    CHECK(lq__sql_build_insert_rows(&insert, d, bare, 2) == LQ_MISUSE);
    CHECK(lq__sqlset_build_insert(&insert, d, bare) == LQ_OK);
    CHECK_STR(insert.sql, "INSERT INTO \"bare\" DEFAULT VALUES RETURNING \"id\"");
    free(insert.sql);
    lq_table_free(bare);

    char *create;
    CHECK(lq_table_create_sql(&create, t, "sqlite") == LQ_OK);
    CHECK_CONTAINS(create, "CREATE TABLE IF NOT EXISTS \"we\"\"ird\"");
    CHECK_CONTAINS(create, "\"attempt\" INTEGER NOT NULL DEFAULT 1");
    lq_free(create);
    CHECK(lq_table_create_sql(&create, t, "oracle") == LQ_DIALECT);
    lq_table_free(t);
    CHECK_DONE();
}
