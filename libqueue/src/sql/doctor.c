/* The statements of lq_doctor: each database's catalog and statistics on
 * one queue table. They differ by database beyond what a dialect's shapes
 * cover, so they are written here for each, picked by the dialect object
 * (its address: the layers above the dialects name no database). */
#include "sql/doctor.h"

#include <stdlib.h>
#include <string.h>

static lq__doctor_db doctor_db_of(const lq__dialect *d) {
#ifdef LQ_WITH_POSTGRESQL
    if (d == &lq__postgres_dialect) return LQ__DOCTOR_POSTGRES;
#endif
#ifdef LQ_WITH_MYSQL
    if (d == &lq__mysql_dialect) return LQ__DOCTOR_MYSQL;
#endif
    (void)d;
    return LQ__DOCTOR_SQLITE;
}

/* A statement of fixed text, binding nothing. */
static int build_text(lq__stmt *out, const lq__dialect *d, const lq_table *t, const char *text) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, text);
    return lq__sql_finish(&b);
}

/* EXPLAIN SELECT id FROM t WHERE <claimable> ORDER BY <claim order> LIMIT n:
 * the candidates every claim reads first. */
static int build_plan(lq__stmt *out, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, out, d, t);
    lq__sql_add(&b, "EXPLAIN SELECT ");
    lq__sql_id(&b);
    lq__sql_from_claimable(&b, lq_table_form(t) == LQ_FORM_LEASE);
    lq__sql_claim_limit(&b);
    return lq__sql_finish(&b);
}

/* ---- PostgreSQL ----------------------------------------------------------- */

/* "c.relname = <name> AND <c in the schema, or visible>" for pg_class c and
 * pg_namespace n: the relation an unqualified name resolves to is the
 * first on the search path, as in every statement that names it. */
static void pg_this_table(lq__sql *b) {
    lq__sql_add(b, "c.relname = ");
    lq__sql_param(b, LQ__P_NAME);
    lq__sql_add(b, " AND CASE WHEN ");
    lq__sql_param(b, LQ__P_SCHEMA);
    lq__sql_add(b, "::text IS NULL THEN pg_catalog.pg_table_is_visible(c.oid) ELSE n.nspname = ");
    lq__sql_param(b, LQ__P_SCHEMA);
    lq__sql_add(b, " END");
}

static int pg_build(lq__doctor_sql *s, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &s->indexes, d, t);
    lq__sql_add(&b, "SELECT i.relname::text, COALESCE(a.attname::text, '') "
                    "FROM pg_catalog.pg_index x "
                    "JOIN pg_catalog.pg_class c ON c.oid = x.indrelid "
                    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                    "JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid "
                    "CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, pos) "
                    "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
                    "WHERE x.indisvalid AND ");
    pg_this_table(&b);
    lq__sql_add(&b, " ORDER BY i.relname, k.pos");
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;

    lq__sql_start(&b, &s->relation, d, t);
    lq__sql_add(&b, "SELECT c.reltuples::bigint, "
                    "COALESCE(pg_catalog.array_to_string(c.reloptions, ','), ''), "
                    "s.n_live_tup, s.n_dead_tup, "
                    "EXTRACT(EPOCH FROM now() - s.last_vacuum)::bigint, "
                    "EXTRACT(EPOCH FROM now() - s.last_autovacuum)::bigint, "
                    "s.n_tup_upd, s.n_tup_hot_upd "
                    "FROM pg_catalog.pg_class c "
                    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                    "LEFT JOIN pg_catalog.pg_stat_user_tables s ON s.relid = c.oid "
                    "WHERE c.relkind IN ('r', 'p') AND ");
    pg_this_table(&b);
    if ((rc = lq__sql_finish(&b)) != LQ_OK) return rc;

    /* Vacuum keeps the row versions any snapshot of this database may still
     * see, and those deleted since a transaction that wrote began (its id
     * holds the horizon back after its statements, and a READ COMMITTED
     * snapshot, end); other databases' sessions do not hold back this
     * table. */
    rc = build_text(&s->xmin, d, t,
                    "SELECT pid, COALESCE(application_name, ''), COALESCE(state, ''), "
                    "COALESCE(EXTRACT(EPOCH FROM now() - xact_start)::bigint, 0), "
                    "GREATEST(age(backend_xmin), age(backend_xid))::bigint "
                    "FROM pg_catalog.pg_stat_activity "
                    "WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) "
                    "AND pid <> pg_catalog.pg_backend_pid() "
                    "AND datname = pg_catalog.current_database() "
                    "ORDER BY GREATEST(age(backend_xmin), age(backend_xid)) DESC, xact_start LIMIT 5");
    if (rc == LQ_OK)
        rc = build_text(&s->prepared, d, t,
                        "SELECT gid, EXTRACT(EPOCH FROM now() - prepared)::bigint, COUNT(*) OVER () "
                        "FROM pg_catalog.pg_prepared_xacts "
                        "WHERE database = pg_catalog.current_database() ORDER BY prepared LIMIT 1");
    if (rc == LQ_OK)
        rc = build_text(&s->slots, d, t,
                        "SELECT slot_name::text, active, age(xmin)::bigint, COUNT(*) OVER () "
                        "FROM pg_catalog.pg_replication_slots WHERE xmin IS NOT NULL "
                        "ORDER BY age(xmin) DESC LIMIT 1");
    if (rc == LQ_OK) rc = build_plan(&s->plan, d, t);
    return rc;
}

/* ---- MySQL and MariaDB ---------------------------------------------------- */

static int my_build(lq__doctor_sql *s, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &s->indexes, d, t);
    lq__sql_add(&b, "SELECT INDEX_NAME, COALESCE(COLUMN_NAME, '') FROM information_schema.STATISTICS "
                    "WHERE TABLE_SCHEMA = COALESCE(");
    lq__sql_param(&b, LQ__P_SCHEMA);
    lq__sql_add(&b, ", DATABASE()) AND TABLE_NAME = ");
    lq__sql_param(&b, LQ__P_NAME);
    lq__sql_add(&b, " ORDER BY INDEX_NAME, SEQ_IN_INDEX");
    int rc = lq__sql_finish(&b);
    if (rc == LQ_OK)
        rc = build_text(&s->history, d, t,
                        "SELECT COUNT FROM information_schema.INNODB_METRICS "
                        "WHERE NAME = 'trx_rseg_history_len'");
    /* A session idle inside a transaction shows as the command Sleep. The
     * casts give a length: MariaDB's sort of this result cuts a value cast
     * to a bare CHAR to its column's length in characters ("REPEA"). */
    if (rc == LQ_OK)
        rc = build_text(&s->oldest, d, t,
                        "SELECT t.trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), "
                        "COALESCE(p.COMMAND, ''), COALESCE(p.USER, ''), CAST(t.trx_state AS CHAR(32)), "
                        "CAST(t.trx_isolation_level AS CHAR(32)) "
                        "FROM information_schema.INNODB_TRX t "
                        "LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
                        "WHERE t.trx_mysql_thread_id <> CONNECTION_ID() "
                        "ORDER BY t.trx_started LIMIT 5");
    return rc;
}

/* ---- SQLite --------------------------------------------------------------- */

/* "<schema>." where the table names one. */
static void sqlite_schema_dot(lq__sql *b) {
    if (!b->table->schema) return;
    lq__sql_ident(b, b->table->schema);
    lq__sql_add(b, ".");
}

static int sqlite_build(lq__doctor_sql *s, const lq__dialect *d, const lq_table *t) {
    lq__sql b;
    lq__sql_start(&b, &s->indexes, d, t);
    lq__sql_add(&b, "SELECT il.name, ii.name FROM pragma_index_list(");
    lq__sql_param(&b, LQ__P_NAME);
    lq__sql_add(&b, ", ");
    lq__sql_param(&b, LQ__P_SCHEMA);
    lq__sql_add(&b, ") AS il, pragma_index_info(il.name, ");
    lq__sql_param(&b, LQ__P_SCHEMA);
    lq__sql_add(&b, ") AS ii ORDER BY il.name, ii.seqno");
    int rc = lq__sql_finish(&b);
    if (rc != LQ_OK) return rc;

    /* journal_mode has no table-valued form: it may change the mode. */
    lq__sql_start(&b, &s->journal, d, t);
    lq__sql_add(&b, "PRAGMA ");
    sqlite_schema_dot(&b);
    lq__sql_add(&b, "journal_mode");
    if ((rc = lq__sql_finish(&b)) != LQ_OK) return rc;

    lq__sql_start(&b, &s->file, d, t);
    lq__sql_add(&b, "SELECT file FROM pragma_database_list WHERE name = COALESCE(");
    lq__sql_param(&b, LQ__P_SCHEMA);
    lq__sql_add(&b, ", 'main')");
    if ((rc = lq__sql_finish(&b)) != LQ_OK) return rc;

    lq__sql_start(&b, &s->pages, d, t);
    lq__sql_add(&b, "SELECT * FROM ");
    sqlite_schema_dot(&b);
    lq__sql_add(&b, "pragma_freelist_count, ");
    sqlite_schema_dot(&b);
    lq__sql_add(&b, "pragma_page_count, ");
    sqlite_schema_dot(&b);
    lq__sql_add(&b, "pragma_page_size");
    return lq__sql_finish(&b);
}

void lq__doctor_sql_free(lq__doctor_sql *s) {
    lq__stmt *all[] = {&s->probe,   &s->indexes, &s->relation, &s->xmin,    &s->prepared, &s->slots,
                       &s->plan,    &s->history, &s->oldest,   &s->journal, &s->file,     &s->pages};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->sql);
    memset(s, 0, sizeof *s);
}

int lq__sql_build_doctor(lq__doctor_sql *out, const lq__dialect *d, const lq_table *t) {
    memset(out, 0, sizeof *out);
    out->db = doctor_db_of(d);
    int rc = lq__sql_probe(&out->probe, d, t);
    if (rc == LQ_OK) {
        switch (out->db) {
        case LQ__DOCTOR_POSTGRES: rc = pg_build(out, d, t); break;
        case LQ__DOCTOR_MYSQL: rc = my_build(out, d, t); break;
        default: rc = sqlite_build(out, d, t);
        }
    }
    if (rc != LQ_OK) lq__doctor_sql_free(out);
    return rc;
}
