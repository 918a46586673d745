"""What finished rows cost the claims: claim+ack throughput of a lease table
that keeps finished rows (processed_at), empty against holding N finished
rows, with a raw-SQL loop of the same claim and ack in the same run. One
JSON record per figure on stdout (bench/run collects them):

    python retention.py --url URL [--rows N] [--jobs J] [--repeat K]

- R-claim: J rows queued (untimed), then drained; the library with
  workers(4) and a no-op Python handler, timed from the subscription's start
  to its last settlement; raw: one connection of the database's Python
  driver running the library's lease claim (one row) and its ack (processed_at
  set, the lease cleared) until a claim finds nothing. Each run's finished
  rows are deleted after it (untimed), so the table holds 0 or N finished
  rows throughout. Library and raw runs alternate, K times; rates are medians.
  One record per table state ("finished_rows" 0 and N).
- R-retention: the library's rate at N finished rows over its own rate at 0
  ("lib_ratio"), and the raw loop's likewise ("raw_ratio"). Target:
  lib_ratio >= 0.90.
"""

import argparse
import json
import statistics
import time
from typing import Any, Callable, Dict, List

import libqueue

from ops import Raw  # bench/ops.py, beside this file: a driver connection, row sources

NAME = "lq_retention_jobs"
TABLE = libqueue.Table(NAME, payload="payload", attempt="attempt", locked_until="locked_until",
                       processed_at="processed_at")
LEASE_MS = 30_000


def statements(db: str) -> Dict[str, str]:
    """The library's lease claim of one row and its ack for TABLE, as the
    dialects build them (libqueue/src/dialects, sql/sql.c), in the driver's
    placeholders (%s for psycopg2 and pymysql, ? for sqlite3); MySQL's claim
    is a locking read that the core follows with a stamp."""
    t = NAME
    if db == "postgresql":
        return {"claim": (
            'WITH "lq_claimed" AS (SELECT ("id")::bigint AS "lq_c0", "payload" AS "lq_c1", '
            '("attempt")::bigint AS "lq_c2" FROM "%s" WHERE "processed_at" IS NULL AND '
            '("locked_until" IS NULL OR "locked_until" <= %%s) ORDER BY "id" LIMIT 1 FOR UPDATE '
            'SKIP LOCKED), "lq_stamped" AS (UPDATE "%s" AS "lq_row" SET "locked_until" = %%s, '
            '"attempt" = "lq_row"."attempt" + 1 FROM "lq_claimed" WHERE "lq_row"."id" = '
            '"lq_claimed"."lq_c0") SELECT * FROM "lq_claimed" ORDER BY "lq_c0"' % (t, t)),
            "ack": 'UPDATE "%s" SET "processed_at" = %%s, "locked_until" = NULL WHERE "id" = %%s '
                   'AND "locked_until" = %%s' % t}
    if db == "sqlite":
        return {"claim": (
            'UPDATE "%s" SET "locked_until" = ?, "attempt" = "attempt" + 1 WHERE "id" IN (SELECT '
            '"id" FROM "%s" WHERE "processed_at" IS NULL AND ("locked_until" IS NULL OR '
            '"locked_until" <= ?) ORDER BY "id" LIMIT 1) RETURNING "id", "payload", '
            '"attempt" - 1' % (t, t)),
            "ack": 'UPDATE "%s" SET "processed_at" = ?, "locked_until" = NULL WHERE "id" = ? '
                   'AND "locked_until" = ?' % t}
    return {"claim": ("SELECT `id`, `payload`, `attempt` FROM `%s` WHERE `processed_at` IS NULL "
                      "AND (`locked_until` IS NULL OR `locked_until` <= %%s) ORDER BY `id` LIMIT 1 "
                      "FOR UPDATE SKIP LOCKED" % t),
            "stamp": ("UPDATE `%s` SET `locked_until` = %%s, `attempt` = `attempt` + 1 WHERE "
                      "`id` = %%s AND (`locked_until` IS NULL OR `locked_until` <= %%s)" % t),
            "ack": ("UPDATE `%s` SET `processed_at` = %%s, `locked_until` = NULL WHERE `id` = "
                    "%%s AND `locked_until` = %%s" % t)}


def time_value(db: str, epoch_ms: int) -> Any:
    """A time as the core binds it: text on SQLite, a datetime elsewhere."""
    import datetime
    at = datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.timezone.utc)
    if db == "sqlite":
        return at.strftime("%Y-%m-%dT%H:%M:%S.") + "%03d+00:00" % (epoch_ms % 1000)
    return at.replace(tzinfo=None) if db == "mariadb" else at


def raw_drain(raw: Raw) -> int:
    """Claims one row and acks it until a claim finds nothing; returns the
    rows done. Each claim and each ack its own transaction, as the library's
    lease form runs them."""
    sql = statements(raw.db)
    cur = raw.conn.cursor()
    done = 0
    while True:
        now = int(time.time() * 1000)
        lease = time_value(raw.db, now + LEASE_MS)
        if raw.db == "mariadb":
            cur.execute(sql["claim"], (time_value(raw.db, now),))
            row = cur.fetchone()
            if row:
                cur.execute(sql["stamp"], (lease, row[0], time_value(raw.db, now)))
        elif raw.db == "postgresql":
            cur.execute(sql["claim"], (time_value(raw.db, now), lease))
            row = cur.fetchone()
        else:
            cur.execute(sql["claim"], (lease, time_value(raw.db, now)))
            row = cur.fetchone()
        raw.conn.commit()
        if not row:
            return done
        cur.execute(sql["ack"], (time_value(raw.db, int(time.time() * 1000)), row[0], lease))
        raw.conn.commit()
        done += 1


def lib_drain(broker: libqueue.Broker, jobs: int, table: libqueue.Table = TABLE) -> None:
    """Runs workers(4) with a no-op handler until `jobs` have settled."""
    options = dict(lease_ms=LEASE_MS) if table.has("locked_until") else {}
    with broker.subscribe(table, workers=4, poll_interval_ms=50, **options) as sub:
        sub.run(lambda delivery: None)
        while sub.stat("settled") < jobs:
            time.sleep(0.002)
        sub.stop()


def analyze(raw: Raw, name: str = NAME) -> None:
    raw.run("ANALYZE" if raw.db == "sqlite" else "ANALYZE TABLE %s" % name
            if raw.db == "mariadb" else "ANALYZE %s" % name)


def prepare(raw: Raw, broker: libqueue.Broker, finished: int, table: libqueue.Table = TABLE,
            queued: int = 0) -> int:
    """The table anew, holding `finished` finished rows and then `queued`
    rows to do (bulk-inserted in SQL); returns its largest id, above which
    each run's rows are."""
    name = table.name
    raw.run("DROP TABLE IF EXISTS %s" % name)
    broker.create_table(table)
    past, _ = raw.times()
    total = finished + queued
    for start in range(0, total, 100_000):  # a bounded statement at a time
        n = min(100_000, total - start)
        done = "CASE WHEN %d + n <= %d THEN %s END" % (start, finished, past)
        raw.run("INSERT INTO %s (id, payload, attempt, processed_at) SELECT %d + n, 'x', 1, %s "
                "FROM %s" % (name, start, done, raw.numbers(n)))
    if raw.db == "postgresql":  # the next generated id, past the rows written with theirs
        raw.run("SELECT setval(pg_get_serial_sequence('%s', 'id'), %d)" % (name, total + 1))
    analyze(raw, name)
    return total


def queue(broker: libqueue.Broker, raw: Raw, jobs: int, above: int,
          table: libqueue.Table = TABLE) -> None:
    """The rows of a run, queued; the finished rows of the last run deleted."""
    raw.run("DELETE FROM %s WHERE id > %d" % (table.name, above))
    if raw.db == "postgresql":
        raw.conn.autocommit = True
        raw.run("VACUUM %s" % table.name)
        raw.conn.autocommit = False
    for start in range(0, jobs, 1000):
        broker.publish_many(table, [b"x"] * min(1000, jobs - start))


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(raw: Raw, url: str, finished: int, jobs: int, repeat: int) -> Dict:
    with libqueue.Broker(url) as broker:  # its own: the table is made anew
        return measure_on(raw, broker, finished, jobs, repeat)


def measure_on(raw: Raw, broker: libqueue.Broker, finished: int, jobs: int, repeat: int) -> Dict:
    above = prepare(raw, broker, finished)
    lib: List[float] = []
    raws: List[float] = []
    for _ in range(repeat):
        queue(broker, raw, jobs, above)
        lib.append(jobs / timed(lambda: lib_drain(broker, jobs)))
        assert raw.run("SELECT COUNT(*) FROM %s WHERE processed_at IS NULL" % NAME)[0] == 0
        queue(broker, raw, jobs, above)
        seconds = timed(lambda: raw_drain(raw))
        assert raw.run("SELECT COUNT(*) FROM %s WHERE processed_at IS NULL" % NAME)[0] == 0
        raws.append(jobs / seconds)
    lib_rate, raw_rate = statistics.median(lib), statistics.median(raws)
    return {"kind": "retention", "db": raw.db, "form": "lease", "binding": "python",
            "workload": "R-claim", "finished_rows": finished, "jobs": jobs,
            "jobs_per_s": round(lib_rate), "raw_jobs_per_s": round(raw_rate),
            "ratio": round(lib_rate / raw_rate, 3), "runs": [round(r) for r in lib],
            "raw_runs": [round(r) for r in raws], "repeat": repeat}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000, help="finished rows (default 1M)")
    parser.add_argument("--jobs", type=int, default=20000, help="rows each run drains")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    raw = Raw(args.url)
    if raw.db == "mariadb":  # as the library's sessions run
        raw.run("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    if raw.db == "sqlite":
        raw.run("PRAGMA synchronous = NORMAL")
    empty = measure(raw, args.url, 0, args.jobs, args.repeat)
    print(json.dumps(empty), flush=True)
    full = measure(raw, args.url, args.rows, args.jobs, args.repeat)
    print(json.dumps(full), flush=True)
    raw.run("DROP TABLE IF EXISTS %s" % NAME)
    lib_ratio = full["jobs_per_s"] / empty["jobs_per_s"]
    print(json.dumps({"kind": "retention", "db": raw.db, "form": "lease", "binding": "python",
                      "workload": "R-retention", "finished_rows": args.rows,
                      "lib_ratio": round(lib_ratio, 3),
                      "raw_ratio": round(full["raw_jobs_per_s"] / empty["raw_jobs_per_s"], 3),
                      "target": 0.9, "ok": lib_ratio >= 0.9}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
