"""Claims on big tables: the drain's rate with a huge backlog queued and with
many finished rows kept, against the same table empty, in the lease and row
lock forms. One JSON record per figure on stdout (bench/run collects them):

    python bigtable.py --url URL [--queued 10000000] [--finished 1000000]
                       [--jobs 20000] [--forms lease,row_lock] [--repeat K]

The table has a processed_at column (acks keep their rows) in every state,
and its rows are bulk-inserted in SQL, then analyzed (bench/retention.py's
prepare). Each run drains J rows with workers(4) and a no-op Python handler
(bench/retention.py's lib_drain), timed from the subscription's start to the
J-th settlement:
- B-claim, state "empty": J rows queued per run, the last run's deleted;
- state "finished": the same above F finished rows;
- state "queued": Q rows queued at once; each run drains J of them.
- B-bigtable: each state's rate over the empty table's, the median of the
  per-repeat ratios ("ratio"; the states' tables are loaded at once and
  drained in turn within each repeat). Target: at least 0.80.
- B-explain: the claim statement the library ran in the queued state (from
  pg_stat_statements, or MariaDB's general log) and its EXPLAIN there.
"""

import argparse
import json
import re
import statistics
import sys
from typing import Any, Dict, List

import libqueue

from ops import Raw  # bench/ops.py, beside this file
from retention import lib_drain, prepare, queue, timed  # bench/retention.py

STATES = ("empty", "finished", "queued")


def big_table(form: str, state: str) -> libqueue.Table:
    lease = dict(locked_until="locked_until") if form == "lease" else {}
    return libqueue.Table("lq_big_%s_%s" % (form, state), payload="payload", attempt="attempt",
                          processed_at="processed_at", **lease)


def pg_explain(raw: Raw, name: str) -> Dict[str, Any]:
    """The library's claim on `name` as pg_stat_statements keeps it,
    prepared and run under EXPLAIN ANALYZE in a transaction rolled back."""
    raw.conn.autocommit = True
    raw.run("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    row = raw.run("SELECT query FROM pg_stat_statements WHERE query LIKE '%%SKIP LOCKED%%' AND "
                  "query LIKE '%%%s%%' ORDER BY calls DESC LIMIT 1" % name)
    if not row:
        return {"note": "no claim of %s in pg_stat_statements" % name}
    raw.conn.autocommit = False
    cur = raw.conn.cursor()
    cur.execute("PREPARE lq_claim AS " + row[0])
    cur.execute("SELECT unnest(parameter_types)::text FROM pg_prepared_statements "
                "WHERE name = 'lq_claim'")
    values = []
    for (kind,) in cur.fetchall():  # the claim's times: now; its counts: 4 rows
        values.append("now()" if kind.startswith("timestamp") else "4")
    cur.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE lq_claim(%s)" % ", ".join(values))
    plan = [line for (line,) in cur.fetchall()]
    raw.conn.rollback()
    raw.run("DEALLOCATE lq_claim")
    return {"statement": row[0], "plan": plan}


def mariadb_claim_logged(raw: Raw, on: bool) -> None:
    """MariaDB's general log, to its table, on or off (and emptied)."""
    if on:
        raw.run("SET GLOBAL log_output = 'TABLE'")
        raw.run("TRUNCATE mysql.general_log")
    raw.run("SET GLOBAL general_log = %d" % on)


def mariadb_explain(raw: Raw, name: str) -> Dict[str, Any]:
    row = raw.run("SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log WHERE "
                  "command_type = 'Execute' AND "
                  "argument LIKE '%%SKIP LOCKED%%' AND argument LIKE '%%%s%%' LIMIT 1" % name)
    if not row:
        return {"note": "no claim of %s in the general log" % name}
    # A parameter the log left unexpanded: the claim's count, or a time.
    statement = re.sub(r"\?", "NOW(6)", re.sub(r"LIMIT \?", "LIMIT 4", row[0]))
    cur = raw.conn.cursor()
    cur.execute("EXPLAIN " + statement)
    cols = [d[0] for d in cur.description]
    plan = ["; ".join("%s=%s" % (c, v) for c, v in zip(cols, r)) for r in cur.fetchall()]
    raw.conn.commit()
    return {"statement": statement, "plan": plan}


def measure(raw: Raw, broker: libqueue.Broker, form: str,
            args: argparse.Namespace) -> List[Dict[str, Any]]:
    """The states' tables, loaded at once, then drained in turn, K times."""
    tables = {state: big_table(form, state) for state in STATES}
    rows = {"empty": (0, 0), "finished": (args.finished, 0), "queued": (0, args.queued)}
    above = {state: prepare(raw, broker, rows[state][0], tables[state], rows[state][1])
             for state in STATES}
    if raw.db == "postgresql":  # the loads written out before the clock runs, as bench/run's setup
        raw.conn.autocommit = True
        raw.run("CHECKPOINT")
        raw.conn.autocommit = False
    rates: Dict[str, List[float]] = {state: [] for state in STATES}
    for i in range(args.repeat):
        for state in STATES:
            if state != "queued":
                queue(broker, raw, args.jobs, above[state], tables[state])
            elif i == args.repeat - 1 and raw.db == "mariadb":
                mariadb_claim_logged(raw, True)
            rates[state].append(args.jobs / timed(
                lambda: lib_drain(broker, args.jobs, tables[state])))
            print("B-claim %s %s %s: %.0f/s" % (raw.db, form, state, rates[state][-1]),
                  file=sys.stderr, flush=True)
    records = []
    for state in STATES:
        rec: Dict[str, Any] = dict(kind="bigtable", db=raw.db, form=form, binding="python",
                                   workload="B-claim", state=state, finished_rows=rows[state][0],
                                   queued_rows=rows[state][1], jobs=args.jobs,
                                   jobs_per_s=round(statistics.median(rates[state])),
                                   runs=[round(r) for r in rates[state]])
        if state == "queued":
            name = tables[state].name
            if raw.db == "postgresql":
                rec["explain"] = pg_explain(raw, name)
            else:
                rec["explain"] = mariadb_explain(raw, name)
                mariadb_claim_logged(raw, False)
        records.append(rec)
    for state in STATES[1:]:
        paired = sorted(a / b for a, b in zip(rates[state], rates["empty"]))
        r = round(paired[(len(paired) - 1) // 2], 3)
        records.append(dict(kind="bigtable", db=raw.db, form=form, binding="python",
                            workload="B-bigtable", state=state, rows=sum(rows[state]), ratio=r,
                            target=0.8, ok=r >= 0.8))
    for table in tables.values():
        raw.run("DROP TABLE IF EXISTS %s" % table.name)
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--queued", type=int, default=10_000_000)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--forms", default="lease,row_lock")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if min(args.queued, args.finished, args.jobs, args.repeat) <= 0:
        parser.error("--queued, --finished, --jobs and --repeat must be positive")
    if args.queued < args.jobs * args.repeat:
        parser.error("--queued must hold --jobs for every repeat")
    raw = Raw(args.url)
    if raw.db not in ("postgresql", "mariadb"):
        parser.error("PostgreSQL or MariaDB only")
    if raw.db == "mariadb":  # as the library's sessions run
        raw.run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    with libqueue.Broker(args.url) as broker:
        for form in args.forms.split(","):
            if form not in ("lease", "row_lock"):
                parser.error("unknown form %r" % form)
            for rec in measure(raw, broker, form, args):
                print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
