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

from typing import Any, Callable, Dict, Iterator

import pytest

import libqueue

from helpers import FORMS, SqliteDB


def _sqlite(tmp_path: Any) -> SqliteDB:
    return SqliteDB(str(tmp_path / "queue.db"))


#: Backend name -> factory(tmp_path). Add server backends here.
BACKENDS: Dict[str, Callable[[Any], Any]] = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def db(request: Any, tmp_path: Any) -> Any:
    return BACKENDS[request.param](tmp_path)


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


@pytest.fixture(params=FORMS)
def form(request: Any) -> str:
    return request.param
