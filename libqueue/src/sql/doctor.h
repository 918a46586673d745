/* The statements of lq_doctor (sql/doctor.c): what each database's own
 * catalog and statistics say about a queue table. Each is NULL sql where
 * the database has nothing of the kind. Parameters: LQ__P_NAME the table's
 * name, LQ__P_SCHEMA its schema (NULL: where the name resolves), and for
 * the plan the claim's own (LQ__P_GROUP, LQ__P_NOW, LQ__P_LEASE_NOW,
 * LQ__P_LIMIT). */
#ifndef LQ_SQL_DOCTOR_H
#define LQ_SQL_DOCTOR_H

#include "sql/dialect.h"

/* The catalogs a doctor reads, one per database. */
typedef enum lq__doctor_db { LQ__DOCTOR_POSTGRES, LQ__DOCTOR_MYSQL, LQ__DOCTOR_SQLITE } lq__doctor_db;

typedef struct lq__doctor_sql {
    lq__doctor_db db;
    lq__stmt probe;    /* every column of the description, no row: fails when one is missing */
    lq__stmt indexes;  /* (index, column) of the table's indexes, each index's in order */
    /* PostgreSQL */
    lq__stmt relation; /* reltuples, reloptions, live, dead, seconds since the last vacuum and
                          autovacuum (NULL: never), updates, HOT updates */
    lq__stmt xmin;     /* the five oldest snapshots of the database but this session's: pid,
                          application, state, seconds in its transaction, xmin age */
    lq__stmt prepared; /* the oldest prepared transaction: gid, seconds, how many */
    lq__stmt slots;    /* the oldest replication slot holding xmin: name, active, xmin age,
                          how many */
    lq__stmt plan;     /* EXPLAIN of the claim's candidates: one line a row */
    /* MySQL */
    lq__stmt history;  /* InnoDB's history list length */
    lq__stmt oldest;   /* the five oldest transactions but this session's: thread id, seconds,
                          command, user, state, isolation */
    /* SQLite */
    lq__stmt journal;  /* the journal mode */
    lq__stmt file;     /* the database's file name */
    lq__stmt pages;    /* free pages, pages, page size */
} lq__doctor_sql;

LQ__HIDDEN int lq__sql_build_doctor(lq__doctor_sql *out, const lq__dialect *d, const lq_table *t);
LQ__HIDDEN void lq__doctor_sql_free(lq__doctor_sql *s);

#endif
