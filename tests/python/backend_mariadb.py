"""The MariaDB (and MySQL) backend of the behavioural suite.

``MariaDB(server_url)`` makes a database of its own on the test server
(``CREATE DATABASE lq_<random>``), so tests are isolated; ``close()`` drops
it. ``server_url`` is a ``mysql://user:password@host:port/db`` URL, as
``scripts/lib/servers.sh`` exports in ``LQ_TEST_MARIADB_URL``; ``url`` is the
same server with the test's database, for the core. The helper connection
(Debian's python3-pymysql) runs in UTC, like the core's, and with ANSI_QUOTES,
so the suite's double-quoted identifiers read as on the other backends.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, List, Optional, Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

import libqueue

from helpers import Database


class MariaDB(Database):
    """A database of its own on a MariaDB or MySQL server, driven through
    pymysql. The interface is SqliteDB's (tests/python/helpers.py)."""

    dialect = "mysql"
    #: A time long gone, as the core stores times on MySQL (UTC).
    past = "'2000-01-01 00:00:00'"

    #: Column types by role. locked_until keeps whole seconds on purpose: the
    #: lease token is a whole second, which such a column holds exactly.
    ROLE_TYPES = {
        "payload": "LONGBLOB NOT NULL",
        "attempt": "INT NOT NULL DEFAULT 1",
        "locked_until": "DATETIME NULL",
        "retry_after": "DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)",
        "processed_at": "DATETIME(3) NULL",
        "expires_at": "DATETIME(3) NULL",
        "created_at": "DATETIME(3) NULL",
        "group": "VARCHAR(255) NULL",
        "partition_key": "VARCHAR(255) NULL",
        "priority": "INT NOT NULL DEFAULT 0",
        "headers": "JSON NULL",
    }

    def __init__(self, server_url: str, database: Optional[str] = None) -> None:
        import pymysql  # Debian's python3-pymysql

        self._pymysql = pymysql
        parts = urlsplit(server_url)
        if parts.scheme not in ("mysql", "mariadb"):
            raise ValueError("not a mysql:// URL: %r" % server_url)
        self._params = {
            "host": parts.hostname or "localhost",
            "port": parts.port or 3306,
            "user": unquote(parts.username or ""),
            "password": unquote(parts.password or ""),
        }
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        if "socket" in query:
            self._params["unix_socket"] = unquote(query["socket"])
        self.database = database or "lq_" + uuid.uuid4().hex[:12]
        self.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % self.quote(self.database),
                     use_database=False)
        self.server_url = server_url
        self.url = urlunsplit((parts.scheme, parts.netloc, "/" + self.database, parts.query, ""))

    def connect(self, use_database: bool = True) -> Any:
        conn = self._pymysql.connect(
            database=self.database if use_database else None, autocommit=True,
            charset="utf8mb4", binary_prefix=True,
            init_command="SET time_zone = '+00:00', "
                         "sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')",
            **self._params)
        return conn

    def execute(self, sql: str, params: Sequence[Any] = (), use_database: bool = True) -> None:
        with contextlib.closing(self.connect(use_database)) as conn, conn.cursor() as cur:
            cur.execute(self._sql(sql, params), tuple(params) or None)

    def executescript(self, sql: str) -> None:
        """Statements separated by ';' (as lq_table_create_sql writes them)."""
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            for statement in sql.split(";\n"):
                if statement.strip():
                    cur.execute(statement)

    def query(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(self._sql(sql, params), tuple(params) or None)
            return [tuple(v for v in row) for row in cur.fetchall()]

    @staticmethod
    def quote(name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    @staticmethod
    def placeholder(n: int) -> str:
        return "?"

    def create_table(self, table: libqueue.Table, name: Optional[str] = None,
                     extra: Sequence[str] = ()) -> None:
        """CREATE TABLE for ``table`` (or a same-shaped table ``name``), with
        the claim-order index the README recommends on InnoDB."""
        id_type = "BIGINT AUTO_INCREMENT PRIMARY KEY" if table.id_generated else "BIGINT PRIMARY KEY"
        cols = self._columns(table, id_type, extra)
        order = [table.columns[r] for r in ("group", "priority", "retry_after") if r in table.columns]
        cols.append("KEY %s (%s)" % (self.quote("claim_order"),
                                     ", ".join(self.quote(c) for c in order + [table.id])))
        self.execute("CREATE TABLE %s (%s) ENGINE=InnoDB" % (self.quote(name or table.name),
                                                              ", ".join(cols)))

    def close(self) -> None:
        # A failed test's traceback may keep a delivery, and the transaction
        # it holds, alive: the drop waits a bounded time for its locks (the
        # server's default is a year) and leaves the database behind.
        try:
            with contextlib.closing(self.connect(False)) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = 10")
                cur.execute("DROP DATABASE IF EXISTS %s" % self.quote(self.database))
        except Exception as exc:  # reported, never hangs the suite
            print("could not drop %s: %s" % (self.database, exc))
