"""Fixtures of the Python binding's tests.

Every test that touches a database takes the ``db`` fixture: an object with
``url``, ``dialect``, ``execute(sql, params)``, ``query(sql, params)``,
``scalar(sql, params)``, ``create_table(table, extra=...)``, ``quote(name)``
and ``past`` (an SQL literal for a time long gone, for backdating). Today the
only backend is SQLite on a file in ``tmp_path``; a PostgreSQL or MariaDB
backend is one more class with the same interface, registered in
``BACKENDS`` (for example enabled by an environment variable holding its URL).

Tests that depend on the form take the ``form`` fixture ("lease" or
"advisory") and build their table with ``make_table(form, ...)``.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Callable, Dict, Iterator

import pytest

import libqueue

from backend_mariadb import MariaDB
from helpers import FORMS_BY_DIALECT, PgBouncerDB, PostgresDB, SqliteDB


def _sqlite(tmp_path: Any) -> SqliteDB:
    return SqliteDB(str(tmp_path / "queue.db"))


def _postgres(tmp_path: Any) -> PostgresDB:
    return PostgresDB(os.environ["LQ_TEST_PG_URL"], "lq_" + uuid.uuid4().hex[:12])


def _mariadb(tmp_path: Any) -> MariaDB:
    return MariaDB(os.environ["LQ_TEST_MARIADB_URL"])


def _pgbouncer(tmp_path: Any) -> PgBouncerDB:
    return PgBouncerDB(os.environ["LQ_TEST_PG_URL"], os.environ["LQ_TEST_PGBOUNCER_URL"])


#: Backend name -> (dialect, factory(tmp_path), environment variable naming
#: its server, or None when it needs none).
BACKENDS: Dict[str, Any] = {
    "sqlite": ("sqlite", _sqlite, None),
    "pg": ("postgresql", _postgres, "LQ_TEST_PG_URL"),
    "mariadb": ("mysql", _mariadb, "LQ_TEST_MARIADB_URL"),
    # PostgreSQL through PgBouncer in transaction pooling, for the modules
    # marked `through_pgbouncer`, in the forms that work through it.
    "pgbouncer": ("postgresql", _pgbouncer, "LQ_TEST_PGBOUNCER_URL"),
}

#: The forms that work through a pooler in transaction mode.
POOLED_FORMS = ("row_lock", "lease")


def _enabled() -> list:
    names = []
    for name, (_, _, env) in sorted(BACKENDS.items()):
        if env is None or os.environ.get(env):
            names.append(name)
        elif os.environ.get("LQ_REQUIRE_SERVERS"):
            raise pytest.UsageError("LQ_REQUIRE_SERVERS is set but %s is not" % env)
    return names


def pytest_generate_tests(metafunc: Any) -> None:
    """Every database test runs on each enabled backend, and a test that
    takes a form runs on each form its backend serves."""
    if "db" not in metafunc.fixturenames:
        return
    backends = _enabled()
    if not metafunc.definition.get_closest_marker("through_pgbouncer"):
        backends = [b for b in backends if b != "pgbouncer"]
    only = metafunc.definition.get_closest_marker("dialect")
    if only:
        backends = [b for b in backends if BACKENDS[b][0] in only.args]
    if "caller" in metafunc.fixturenames:
        # A driver of the caller's own (the module's DRIVERS: driver ->
        # dialect), on each backend of its dialect.
        drivers = metafunc.module.DRIVERS
        pairs = [(b, d) for b in backends for d in sorted(drivers)
                 if drivers[d] == BACKENDS[b][0]]
        metafunc.parametrize(("db", "caller"), pairs, indirect=True,
                             ids=["%s-%s" % p for p in pairs])
    elif "form" in metafunc.fixturenames:
        pairs = [(b, f) for b in backends for f in FORMS_BY_DIALECT[BACKENDS[b][0]]
                 if b != "pgbouncer" or f in POOLED_FORMS]
        forms = metafunc.definition.get_closest_marker("forms")
        if forms:
            pairs = [(b, f) for b, f in pairs if f in forms.args]
        if metafunc.definition.get_closest_marker("across_processes"):
            # SQLite keeps advisory keys in the process: a second process's
            # advisory subscription on one file is refused
            # (test_sqlite_key_space.py).
            pairs = [(b, f) for b, f in pairs if (BACKENDS[b][0], f) != ("sqlite", "advisory")]
        metafunc.parametrize(("db", "form"), pairs, indirect=["db"],
                             ids=["%s-%s" % p for p in pairs])
    else:
        metafunc.parametrize("db", backends, indirect=True)


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "across_processes: the test runs workers in other "
                            "processes (SQLite's in-process advisory keys are left out)")
    config.addinivalue_line("markers", "dialect(*names): the test runs on these dialects only")
    config.addinivalue_line("markers", "forms(*names): the test runs in these forms only")
    config.addinivalue_line("markers", "through_pgbouncer: the test runs through PgBouncer in "
                            "transaction pooling too (LQ_TEST_PGBOUNCER_URL)")


@pytest.fixture
def db(request: Any, tmp_path: Any) -> Iterator[Any]:
    backend = BACKENDS[request.param][1](tmp_path)
    yield backend
    if hasattr(backend, "close"):
        backend.close()


@pytest.fixture
def broker(db: Any) -> Iterator[libqueue.Broker]:
    b = libqueue.Broker(db.url)
    yield b
    b.close()


@pytest.fixture
def other_broker(db: Any) -> Iterator[libqueue.Broker]:
    """A second broker on the same database (another 'process')."""
    b = libqueue.Broker(db.url)
    yield b
    b.close()
