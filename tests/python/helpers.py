"""Helpers shared by the tests of the Python binding (see conftest.py)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence

import pytest

import libqueue

#: How long a test waits for something that should happen "at once".
WAIT_S = 10.0
#: Poll interval of the subscriptions in tests (ms).
POLL_MS = 50


class Database:
    """What the test databases share (SqliteDB, PostgresDB and MariaDB in
    backend_mariadb.py); each has ``query()``, ``quote()`` and the column
    types by role, ``ROLE_TYPES``."""

    ROLE_TYPES: Dict[str, str] = {}

    def query(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        raise NotImplementedError

    @staticmethod
    def quote(name: str) -> str:
        raise NotImplementedError

    @staticmethod
    def _sql(sql: str, params: Sequence[Any]) -> str:
        """``sql`` for the drivers that take %s placeholders (psycopg2, pymysql):
        ? as %s, % doubled, when there are parameters."""
        return sql.replace("%", "%%").replace("?", "%s") if params else sql

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def count(self, table: str, where: str = "1=1") -> int:
        return int(self.scalar("SELECT count(*) FROM %s WHERE %s" % (self.quote(table), where)))

    def _columns(self, table: libqueue.Table, id_type: str, extra: Sequence[str]) -> List[str]:
        """The column definitions of CREATE TABLE for ``table``: its id
        column of type ``id_type``, a column for each role, then ``extra``."""
        cols = ["%s %s" % (self.quote(table.id), id_type)]
        for role, column in table.columns.items():
            cols.append("%s %s" % (self.quote(column), self.ROLE_TYPES[role]))
        return cols + list(extra)


class SqliteDB(Database):
    """A SQLite database file, driven through the stdlib ``sqlite3`` module."""

    dialect = "sqlite"
    #: A time long gone, as the core stores times on SQLite.
    past = "'2000-01-01T00:00:00.000+00:00'"

    #: Column types of the recommended SQLite table, by role.
    ROLE_TYPES = {
        "payload": "BLOB NOT NULL DEFAULT x''",
        "attempt": "INTEGER NOT NULL DEFAULT 1",
        "locked_until": "TEXT",
        "retry_after": "TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00','now'))",
        "processed_at": "TEXT",
        "expires_at": "TEXT",
        "created_at": "TEXT",
        "group": "TEXT",
        "partition_key": "TEXT",
        "priority": "INTEGER NOT NULL DEFAULT 0",
        "headers": "TEXT",
    }

    @staticmethod
    def placeholder(n: int) -> str:
        """The database's own placeholder for parameter n (from 1)."""
        return "?"

    def __init__(self, path: str) -> None:
        self.path = path
        self.url = "sqlite://" + path  # path is absolute: sqlite:///abs/...

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with contextlib.closing(self.connect()) as conn:
            conn.execute(sql, params)

    def executescript(self, sql: str) -> None:
        with contextlib.closing(self.connect()) as conn:
            conn.executescript(sql)

    def query(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        with contextlib.closing(self.connect()) as conn:
            return conn.execute(sql, params).fetchall()

    @staticmethod
    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def create_table(self, table: libqueue.Table, name: Optional[str] = None,
                     extra: Sequence[str] = ()) -> None:
        """CREATE TABLE for ``table`` (or a same-shaped table ``name``), written
        here rather than by the core, so that tests of the core do not lean on
        ``create_sql``. ``extra``: more column definitions."""
        cols = self._columns(table, "INTEGER PRIMARY KEY", extra)
        self.execute("CREATE TABLE %s (%s)" % (self.quote(name or table.name), ", ".join(cols)))


class PostgresDB(Database):
    """A schema of its own in the test server's database, driven through
    psycopg2; the URL points the core at the same schema (search_path)."""

    dialect = "postgresql"
    past = "'2000-01-01T00:00:00+00:00'"

    ROLE_TYPES = {
        "payload": "BYTEA NOT NULL DEFAULT ''",
        "attempt": "INTEGER NOT NULL DEFAULT 1",
        "locked_until": "TIMESTAMPTZ",
        "retry_after": "TIMESTAMPTZ NOT NULL DEFAULT now()",
        "processed_at": "TIMESTAMPTZ",
        "expires_at": "TIMESTAMPTZ",
        "created_at": "TIMESTAMPTZ",
        "group": "TEXT",
        "partition_key": "TEXT",
        "priority": "INTEGER NOT NULL DEFAULT 0",
        "headers": "JSONB",
    }

    def __init__(self, server_url: str, schema: str) -> None:
        import psycopg2  # Debian's python3-psycopg2
        self._psycopg2 = psycopg2
        self.server_url = server_url
        self.schema = schema
        self.execute("CREATE SCHEMA %s" % self.quote(schema), search_path=False)
        sep = "&" if "?" in server_url else "?"
        self.url = "%s%soptions=-csearch_path%%3D%s" % (server_url, sep, schema)

    def connect(self, search_path: bool = True) -> Any:
        conn = self._psycopg2.connect(self.server_url)
        conn.autocommit = True
        if search_path:
            with conn.cursor() as cur:
                cur.execute("SET search_path TO %s" % self.quote(self.schema))
        return conn

    def execute(self, sql: str, params: Sequence[Any] = (), search_path: bool = True) -> None:
        with contextlib.closing(self.connect(search_path)) as conn, conn.cursor() as cur:
            cur.execute(self._sql(sql, params), tuple(params) or None)

    executescript = execute

    def query(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(self._sql(sql, params), tuple(params) or None)
            return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                    for row in cur.fetchall()]

    quote = staticmethod(SqliteDB.quote)

    @staticmethod
    def placeholder(n: int) -> str:
        return "$%d" % n

    def create_table(self, table: libqueue.Table, name: Optional[str] = None,
                     extra: Sequence[str] = ()) -> None:
        id_type = ("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY" if table.id_generated
                   else "BIGINT PRIMARY KEY")
        cols = self._columns(table, id_type, extra)
        self.execute("CREATE TABLE %s (%s)" % (self.quote(name or table.name), ", ".join(cols)))

    def close(self) -> None:
        self.execute("DROP SCHEMA %s CASCADE" % self.quote(self.schema), search_path=False)


def _with_database(url: str, name: str) -> str:
    """The URL with its database replaced by `name` (its parameters kept)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


class PgBouncerDB(PostgresDB):
    """A database of its own, which the core reaches through PgBouncer in
    transaction pooling (the URL's ?pgbouncer=transaction) and the test
    through the server itself. A database rather than a schema: PgBouncer
    passes no search_path (``options``) on to the server."""

    def __init__(self, server_url: str, bouncer_url: str) -> None:
        import psycopg2  # Debian's python3-psycopg2
        self._psycopg2 = psycopg2
        self.database = "lq_" + uuid.uuid4().hex[:12]
        self.schema = "public"
        self.server_url = _with_database(server_url, "postgres")
        self.execute("CREATE DATABASE %s" % self.quote(self.database), search_path=False)
        self.server_url = _with_database(server_url, self.database)
        self.url = _with_database(bouncer_url, self.database)

    def close(self) -> None:
        self.server_url = _with_database(self.server_url, "postgres")
        self.execute("DROP DATABASE %s WITH (FORCE)" % self.quote(self.database), search_path=False)


#: The forms each dialect serves (SQLite has no row locks).
FORMS_BY_DIALECT = {
    "sqlite": ("lease", "advisory"),
    "postgresql": ("row_lock", "lease", "advisory"),
    "mysql": ("row_lock", "lease", "advisory"),
}
FORMS = ("row_lock", "lease", "advisory")


def make_table(form: str, name: str = "jobs", *, payload: str = "payload",
               attempt: Optional[str] = "attempt", **roles: Any) -> libqueue.Table:
    """A Table of the given form: lease (a locked_until column) or advisory
    (``advisory_lock="job-{<id column>}"`` unless given)."""
    if form == "lease":
        roles.setdefault("locked_until", "locked_until")
    elif form == "advisory":
        roles.setdefault("advisory_lock", "job-{%s}" % roles.get("id", "id"))
    elif form != "row_lock":
        raise ValueError(form)
    return libqueue.Table(name, payload=payload, attempt=attempt, **roles)


def run_then_stop(broker: libqueue.Broker, table: libqueue.Table, rows: int,
                  **options: Any) -> int:
    """Publishes ``rows`` rows, runs a no-op handler on them with four workers
    until a quarter are delivered, stops and closes the subscription; returns
    how many it delivered."""
    broker.publish_many(table, [b"%d" % i for i in range(rows)])
    sub = broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS, **options)
    sub.run(lambda d: None)
    wait_until(lambda: sub.stat("delivered") >= rows // 4, what="a quarter of the rows delivered")
    sub.stop()
    delivered = sub.stat("delivered")
    sub.close()
    return delivered


def publish_elsewhere(url: str, payload: bytes, **broker_options: Any) -> None:
    """Publishes ``payload`` to the lease table "jobs" from another process,
    on a broker opened with ``broker_options`` (with listen_notify on, its
    publish notifies)."""
    program = ("import json, libqueue, sys\n"
               "t = libqueue.Table('jobs', payload='payload', attempt='attempt', "
               "locked_until='locked_until')\n"
               "with libqueue.Broker(sys.argv[1], **json.loads(sys.argv[2])) as b:\n"
               "    b.publish(t, sys.argv[3].encode())\n")
    subprocess.run([sys.executable, "-c", program, url, json.dumps(broker_options),
                    payload.decode()], check=True)


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT_S, what: str = "") -> Any:
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting for %s" % (what or predicate))
        time.sleep(0.02)


class Recorder:
    """Thread-safe record of what push handlers saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: List[Any] = []

    def add(self, item: Any) -> None:
        with self.lock:
            self.items.append(item)

    def __len__(self) -> int:
        with self.lock:
            return len(self.items)

    def snapshot(self) -> List[Any]:
        with self.lock:
            return list(self.items)


def far_future(db: Any) -> str:
    """A lease expiry literal far ahead, in the form the database compares
    its lease column with: another holder's token."""
    return ("'2100-01-01T00:00:00.000+00:00'" if db.dialect == "sqlite"
            else "'2100-01-01 00:00:00'")


async def worst_ticker_lag(work: Callable[[], Awaitable[Any]]) -> float:
    """Awaits ``work()`` beside a 10 ms ticker task; returns the ticker's
    worst lag in seconds (how long the loop kept it waiting)."""
    import asyncio

    worst = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        loop = asyncio.get_running_loop()
        while not done.is_set():
            due = loop.time() + 0.01
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - due)

    tick = asyncio.ensure_future(ticker())
    try:
        await work()
    finally:
        done.set()
        await tick
    return worst


def publish_in_thousands(broker: libqueue.Broker, table: libqueue.Table, jobs: int) -> None:
    """Publishes ``jobs`` rows (payloads "0", "1", ...), a thousand a call."""
    for start in range(0, jobs, 1000):
        broker.publish_many(table, [b"%d" % i for i in range(start, min(jobs, start + 1000))])
