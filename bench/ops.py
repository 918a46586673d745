"""Operating a deep queue, measured: what ``Broker.stats`` (lq_queue_stats
and lq_queue_attempts, as ``libqueue stats`` calls them) costs on a table of
N rows, against raw SQL counting the same states exactly. One JSON record per
figure on stdout (bench/run collects them):

    python ops.py --url URL [--rows N] [--repeat K]

- O-stats: a lease table of N rows (1M by default): 90% due, 5% delayed,
  5% leased, and 1% of N in its dead-letter table, loaded untimed in SQL.
  "stats_ms" is the median of K calls of Broker.stats (each count reading
  at most its cap of 100,000 rows); "raw_ms" the median of K runs of exact
  COUNT(*) queries of the same states; "ratio" is raw_ms / stats_ms (above 1:
  the library answers faster). Target: stats_ms under 1000.
"""

import argparse
import json
import statistics
import sqlite3
import time
from typing import Any, Callable, List

import libqueue

from w1 import db_name  # bench/w1.py, beside this file

NAME = "lq_ops_jobs"
TABLE = libqueue.Table(NAME, payload="payload", attempt="attempt", locked_until="locked_until",
                       retry_after="retry_after", dead_letter=NAME + "_dead")


class Raw:
    """A plain driver connection on the same database: loads rows, counts them."""

    def __init__(self, url: str) -> None:
        self.db = db_name(url)
        if self.db == "sqlite":
            path = url.split(":", 1)[1]
            self.conn: Any = sqlite3.connect(path[2:] if path.startswith("///") else path)
        elif self.db == "postgresql":
            import psycopg2  # Debian's python3-psycopg2
            self.conn = psycopg2.connect(url)
        else:
            import pymysql  # Debian's python3-pymysql
            from urllib.parse import urlparse
            u = urlparse(url)
            self.conn = pymysql.connect(host=u.hostname, port=u.port or 3306, user=u.username,
                                        password=u.password or "", database=u.path.lstrip("/"))

    def run(self, sql: str) -> Any:
        cur = self.conn.cursor()
        cur.execute(sql)
        row = cur.fetchone() if cur.description else None
        self.conn.commit()
        return row

    def numbers(self, n: int) -> str:
        """A row source of 1..n, in this dialect."""
        if self.db == "postgresql":
            return "generate_series(1, %d) AS s(n)" % n
        if self.db == "sqlite":
            return ("(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s "
                    "WHERE n < %d) SELECT n FROM s) AS s" % n)
        return "(SELECT seq AS n FROM seq_1_to_%d) AS s" % n

    def times(self) -> tuple:
        """A time long past and one far ahead, as the core stores times."""
        if self.db == "mariadb":
            return "'2000-01-01 00:00:00'", "'2999-01-01 00:00:00'"
        if self.db == "postgresql":
            return "'2000-01-01T00:00:00Z'::timestamptz", "'2999-01-01T00:00:00Z'::timestamptz"
        return "'2000-01-01T00:00:00.000+00:00'", "'2999-01-01T00:00:00.000+00:00'"


def load(raw: Raw, broker: libqueue.Broker, rows: int) -> None:
    for table in (NAME, NAME + "_dead"):
        raw.run("DROP TABLE IF EXISTS %s" % table)
    broker.create_table(TABLE)
    past, future = raw.times()
    cols = "payload, attempt, retry_after, locked_until"
    # 90% due, 5% delayed (retry_after ahead), 5% leased (locked_until ahead).
    raw.run("INSERT INTO %s (%s) SELECT 'x', 1 + n %% 3, CASE WHEN n %% 20 = 1 THEN %s ELSE %s "
            "END, CASE WHEN n %% 20 = 2 THEN %s ELSE NULL END FROM %s"
            % (NAME, cols, future, past, future, raw.numbers(rows)))
    raw.run("INSERT INTO %s_dead (id, %s) SELECT n, 'x', 5, %s, NULL FROM %s"
            % (NAME, cols, past, raw.numbers(max(1, rows // 100))))
    raw.run("ANALYZE" if raw.db == "sqlite" else "ANALYZE TABLE %s" % NAME
            if raw.db == "mariadb" else "ANALYZE %s" % NAME)


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    runs: List[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - started) * 1000)
    return statistics.median(runs)


def raw_counts(raw: Raw) -> None:
    past, future = raw.times()
    now = future.replace("2999", "2026")  # between the two: due rows are past, others ahead
    raw.run("SELECT COUNT(*) FROM %s WHERE retry_after <= %s AND (locked_until IS NULL OR "
            "locked_until <= %s)" % (NAME, now, now))
    raw.run("SELECT COUNT(*) FROM %s WHERE retry_after > %s" % (NAME, now))
    raw.run("SELECT COUNT(*) FROM %s WHERE locked_until > %s" % (NAME, now))
    raw.run("SELECT COUNT(*) FROM %s_dead" % NAME)
    raw.run("SELECT attempt, COUNT(*) FROM %s GROUP BY attempt" % NAME)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    raw = Raw(args.url)
    with libqueue.Broker(args.url) as broker:
        load(raw, broker, args.rows)
        stats = broker.stats(TABLE)
        stats_ms = median_ms(lambda: broker.stats(TABLE), args.repeat)
        raw_ms = median_ms(lambda: raw_counts(raw), args.repeat)
    print(json.dumps({"kind": "ops", "db": raw.db, "form": "lease", "binding": "python", "workload": "O-stats",
                      "rows": args.rows, "stats_ms": round(stats_ms, 1),
                      "raw_ms": round(raw_ms, 1), "ratio": round(raw_ms / stats_ms, 3),
                      "due": stats.due, "capped": stats.capped, "repeat": args.repeat}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
