/* The statements the raw-SQL baselines run: the very text libqueue's
 * dialects build for the bench table (id, payload, attempt; locked_until in
 * the lease form; key template "job-{id}" in the advisory form), copied from
 * what libqueue/src/sql.c and libqueue/src/dialects/ produce. sql_check
 * compares each with the library's own, so a change in a dialect shows up as
 * a failed check in bench/run instead of a silently unfair baseline.
 *
 * W2-bulk's insert is the library's multi-row insert of a publish of many
 * messages: RAW_INSERT_ROWS tuples (a full chunk, publish.c's CHUNK_ROWS for
 * the bench table's one parameter a row), written by raw_insert_rows from
 * the *_INSERT_ROWS_* parts.
 *
 * The *_BATCH_* settlements are not the library's (it has no batch
 * settlement yet): they are the coalesced settlement of the "best settings"
 * raw loops (claim 100, settle 100 in one statement and one commit). */
#ifndef LQ_BENCH_RAW_SQL_H
#define LQ_BENCH_RAW_SQL_H

#define RAW_INSERT_ROWS 1000


/* ---- PostgreSQL ---- */
#define PG_ROW_LOCK_CLAIM                                                                          \
    "SELECT (\"id\")::bigint AS \"lq_c0\", \"payload\" AS \"lq_c1\", (\"attempt\")::bigint AS "    \
    "\"lq_c2\"" " FROM \"lq_bench_jobs\" WHERE 1 = 1 ORDER BY \"id\" LIMIT $1 FOR "   \
    "UPDATE SKIP LOCKED"
#define PG_ROW_LOCK_ACK "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" = $1"
#define PG_LEASE_CLAIM                                                                             \
    "WITH \"lq_claimed\" AS (SELECT (\"id\")::bigint AS \"lq_c0\", \"payload\" AS \"lq_c1\", "      \
    "(\"attempt\")::bigint AS \"lq_c2\"" " FROM \"lq_bench_jobs\" WHERE "             \
    "(\"locked_until\" IS NULL OR \"locked_until\" <= $1) ORDER BY \"id\" LIMIT $2 FOR UPDATE SKIP " \
    "LOCKED), \"lq_stamped\" AS (UPDATE \"lq_bench_jobs\" AS \"lq_row\" SET \"locked_until\" = $3, " \
    "\"attempt\" = \"lq_row\".\"attempt\" + 1 FROM \"lq_claimed\" WHERE \"lq_row\".\"id\" = "       \
    "\"lq_claimed\".\"lq_c0\") SELECT * FROM \"lq_claimed\" ORDER BY \"lq_c0\""
#define PG_LEASE_ACK "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" = $1 AND \"locked_until\" = $2"
#define PG_ADVISORY_CLAIM                                                                          \
    "SELECT \"lq_id\", \"lq_key\" FROM (SELECT \"id\"::bigint AS \"lq_id\", concat('', 'job-', "    \
    "\"id\") AS \"lq_key\" FROM \"lq_bench_jobs\" WHERE 1 = 1 ORDER BY \"id\" OFFSET 0) AS "         \
    "\"lq_candidates\" WHERE pg_try_advisory_xact_lock_shared(hashtextextended(\"lq_key\", 0)) "   \
    "LIMIT $1"
#define PG_ADVISORY_TAKE                                                                           \
    "UPDATE \"lq_bench_jobs\" SET \"attempt\" = \"attempt\" + 1 WHERE \"id\" = $1 AND 1 = 1 "        \
    "RETURNING (\"id\")::bigint AS \"lq_c0\", \"payload\" AS \"lq_c1\", (\"attempt\" - 1)::bigint "  \
    "AS \"lq_c2\""
/* The claim of one row in one statement, as the library runs it (with no
 * concurrency: $1-$6 and $8-$10 are the slots', $7 the rows passed over). */
#define PG_ADVISORY_CLAIM_ONE \
    "WITH \"lq_slot\" AS (SELECT ((\"lq_i\" + $1::int) % $2::int) AS \"lq_s\" FROM " \
    "generate_series(0, $3::int - 1) AS \"lq_i\" WHERE " \
    "pg_try_advisory_lock(hashtextextended($4::text || ((\"lq_i\" + $5::int) % " \
    "$6::int)::text, 0)) LIMIT 1), \"lq_key\" AS (SELECT \"lq_id\", \"lq_key\" FROM (SELECT " \
    "\"id\"::bigint AS \"lq_id\", concat('', 'job-', \"id\") AS \"lq_key\" FROM " \
    "\"lq_bench_jobs\" WHERE 1 = 1 AND NOT (\"id\" = ANY($7::bigint[])) ORDER BY \"id\" " \
    "OFFSET 0) AS \"lq_candidates\" WHERE ($8::int = 0 OR EXISTS (SELECT 1 FROM \"lq_slot\")) " \
    "AND CASE WHEN $9::int = 0 OR EXISTS (SELECT 1 FROM \"lq_slot\") THEN " \
    "pg_try_advisory_lock(hashtextextended(\"lq_key\", 0)) ELSE false END LIMIT 1), " \
    "\"lq_taken\" AS (UPDATE \"lq_bench_jobs\" SET \"attempt\" = \"attempt\" + 1 WHERE \"id\" " \
    "= (SELECT \"lq_id\" FROM \"lq_key\") AND 1 = 1 RETURNING (\"id\")::bigint AS \"lq_c0\", " \
    "\"payload\" AS \"lq_c1\", (\"attempt\" - 1)::bigint AS \"lq_c2\") SELECT " \
    "\"lq_slot\".\"lq_s\", \"lq_key\".\"lq_id\", \"lq_key\".\"lq_key\", CASE WHEN " \
    "\"lq_key\".\"lq_id\" IS NULL THEN pg_advisory_unlock(hashtextextended($10::text || " \
    "\"lq_slot\".\"lq_s\"::text, 0)) END, \"lq_taken\".* FROM (SELECT 1) AS \"lq_one\" LEFT " \
    "JOIN \"lq_slot\" ON true LEFT JOIN \"lq_key\" ON true LEFT JOIN \"lq_taken\" ON true"
#define PG_ADVISORY_ACK "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" = $1"
/* Sent as text by the dialect (postgres.c, lock_call), not from the sqlset. */
#define PG_LOCK_KEY "SELECT pg_try_advisory_lock(hashtextextended($1, 0))"
#define PG_UNLOCK_KEY "SELECT pg_advisory_unlock(hashtextextended($1, 0))"
#define PG_INSERT "INSERT INTO \"lq_bench_jobs\" (\"attempt\", \"payload\") VALUES (1, $1) RETURNING \"id\""
#define PG_INSERT_ROWS_HEAD "INSERT INTO \"lq_bench_jobs\" (\"attempt\", \"payload\") VALUES "
#define PG_INSERT_ROWS_TUPLE "(1, $%d)"
#define PG_INSERT_ROWS_TAIL " RETURNING \"id\""
#define PG_ROW_LOCK_BATCH_ACK                                                                      \
    "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" IN (SELECT \"lq_id\" FROM (SELECT "                 \
    "unnest($1::bigint[]) AS \"lq_id\") AS \"lq_s\")"
#define PG_LEASE_BATCH_ACK                                                                         \
    "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" IN (SELECT \"lq_id\" FROM (SELECT "                 \
    "unnest($1::bigint[]) AS \"lq_id\") AS \"lq_s\") AND \"locked_until\" = $2"

/* ---- SQLite ---- */
#define SQ_LEASE_CLAIM                                                                             \
    "UPDATE \"lq_bench_jobs\" SET \"locked_until\" = ?1, \"attempt\" = \"attempt\" + 1 WHERE "       \
    "\"id\" IN (SELECT \"id\" FROM \"lq_bench_jobs\" WHERE (\"locked_until\" IS NULL OR "            \
    "\"locked_until\" <= ?2) ORDER BY \"id\" LIMIT ?3) RETURNING \"id\" AS \"lq_c0\", \"payload\" "  \
    "AS \"lq_c1\", \"attempt\" - 1 AS \"lq_c2\""
#define SQ_LEASE_ACK "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" = ?1 AND \"locked_until\" = ?2"
#define SQ_ADVISORY_CLAIM                                                                          \
    "SELECT \"id\", CAST('job-' || ifnull(\"id\", '') AS TEXT) FROM \"lq_bench_jobs\" WHERE 1 = 1 "  \
    "ORDER BY \"id\" LIMIT ?1"
#define SQ_ADVISORY_TAKE                                                                           \
    "UPDATE \"lq_bench_jobs\" SET \"attempt\" = \"attempt\" + 1 WHERE \"id\" = ?1 AND 1 = 1 "        \
    "RETURNING \"id\" AS \"lq_c0\", \"payload\" AS \"lq_c1\", \"attempt\" - 1 AS \"lq_c2\""
#define SQ_ADVISORY_ACK "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" = ?1"
#define SQ_INSERT "INSERT INTO \"lq_bench_jobs\" (\"attempt\", \"payload\") VALUES (1, ?1) RETURNING \"id\""
#define SQ_INSERT_ROWS_HEAD "INSERT INTO \"lq_bench_jobs\" (\"attempt\", \"payload\") VALUES "
#define SQ_INSERT_ROWS_TUPLE "(1, ?%d)"
#define SQ_INSERT_ROWS_TAIL " RETURNING \"id\""
#define SQ_LEASE_BATCH_ACK                                                                         \
    "DELETE FROM \"lq_bench_jobs\" WHERE \"id\" IN (SELECT \"lq_id\" FROM (SELECT value AS "       \
    "\"lq_id\" FROM json_each(?1)) AS \"lq_s\") AND \"locked_until\" = ?2"

/* ---- MySQL / MariaDB ---- */
#define MY_ROW_LOCK_CLAIM                                                                          \
    "SELECT `id` AS \"lq_c0\", `payload` AS \"lq_c1\", `attempt` AS \"lq_c2\""           \
    " FROM `lq_bench_jobs` WHERE 1 = 1 ORDER BY `id` LIMIT ? FOR UPDATE SKIP LOCKED"
#define MY_ROW_LOCK_ACK "DELETE FROM `lq_bench_jobs` WHERE `id` = ?"
#define MY_LEASE_CLAIM                                                                             \
    "SELECT `id` AS \"lq_c0\", `payload` AS \"lq_c1\", `attempt` AS \"lq_c2\""           \
    " FROM `lq_bench_jobs` WHERE (`locked_until` IS NULL OR `locked_until` <= ?) ORDER BY `id` "     \
    "LIMIT ? FOR UPDATE SKIP LOCKED"
#define MY_LEASE_STAMP                                                                             \
    "UPDATE `lq_bench_jobs` SET `locked_until` = ?, `attempt` = `attempt` + 1 WHERE `id` = ? AND "   \
    "(`locked_until` IS NULL OR `locked_until` <= ?)"
#define MY_LEASE_ACK "DELETE FROM `lq_bench_jobs` WHERE `id` = ? AND `locked_until` = ?"
#define MY_KEY_PART "CONCAT_WS('', LOWER(DATABASE()), '.', 'job-', CONVERT(`id` USING utf8mb4))"
#define MY_KEY_EXPR                                                                                \
    "IF(CHAR_LENGTH(" MY_KEY_PART ") BETWEEN 1 AND 64, " MY_KEY_PART ", SHA2(" MY_KEY_PART ", 256))"
#define MY_ADVISORY_CLAIM                                                                          \
    "SELECT `id` AS `lq_id`, " MY_KEY_EXPR " AS `lq_key` FROM `lq_bench_jobs` WHERE 1 = 1 AND "     \
    "IS_USED_LOCK(" MY_KEY_EXPR ") IS NULL ORDER BY `id` LIMIT ?"
#define MY_ADVISORY_TAKE "UPDATE `lq_bench_jobs` SET `attempt` = `attempt` + 1 WHERE `id` = ? AND 1 = 1"
#define MY_ADVISORY_TAKE_READ                                                                      \
    "SELECT `id` AS \"lq_c0\", `payload` AS \"lq_c1\", `attempt` - 1 AS \"lq_c2\""       \
    " FROM `lq_bench_jobs` WHERE `id` = ?"
#define MY_ADVISORY_ACK "DELETE FROM `lq_bench_jobs` WHERE `id` = ?"
/* Literal in the dialect (mysql.c, my_try_lock_key and my_unlock_key). */
#define MY_LOCK_KEY "SELECT IF(IS_USED_LOCK(?) IS NULL, CAST(COALESCE(GET_LOCK(?, 0), 0) AS SIGNED), 0)"
#define MY_UNLOCK_KEY \
    "SELECT IF(COALESCE(RELEASE_LOCK(?), 0) = 1, IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 0, 1), 0)"
#define MY_INSERT "INSERT INTO `lq_bench_jobs` (`attempt`, `payload`) VALUES (1, ?)"
/* MariaDB: the multi-row insert returns its ids (MySQL, which cannot, gets
 * single-row inserts from the library). */
#define MY_INSERT_ROWS_HEAD "INSERT INTO `lq_bench_jobs` (`attempt`, `payload`) VALUES "
#define MY_INSERT_ROWS_TUPLE "(1, ?)"
#define MY_INSERT_ROWS_TAIL " RETURNING `id`"

#endif
