"""Publishing on the caller's own connection with each driver Debian packages:
``Broker.publish_on`` (psycopg2 through lq_publish_on; psycopg, PyMySQL,
mysqlclient, sqlite3 and SQLAlchemy through the rendered insert) and
``Broker.publish_sql`` run by hand. On each database a driver reaches: the
row commits with the caller's transaction, payload, headers, priority and
delay intact, and a rollback leaves nothing; a running subscription sees the
committed row (on PostgreSQL woken by the statement's NOTIFY, long before its
poll interval); a dedup key a row holds raises the driver's integrity error;
identifiers with quotes, backticks, % and ? work.
"""

from __future__ import annotations

import array
import time
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

import pytest

import libqueue

#: driver -> the dialect it reaches.
DRIVERS: Dict[str, str] = {
    "psycopg2": "postgresql", "psycopg2_sql": "postgresql", "psycopg": "postgresql",
    "sqlalchemy_pg": "postgresql", "sqlalchemy_pg_session": "postgresql",
    "pymysql": "mysql", "mysqldb": "mysql", "sqlalchemy_mysql": "mysql",
    "sqlite3": "sqlite", "sqlalchemy_sqlite": "sqlite",
}


class Caller:
    """A connection of the caller's, in a transaction of its own: what
    publish_on is handed (``target``), how its transaction ends, the
    exception a unique violation raises, and how it publishes."""

    def __init__(self, target: Any, commit: Callable[[], None], rollback: Callable[[], None],
                 close: Callable[[], None], integrity: Any,
                 publish: Optional[Callable[..., int]] = None) -> None:
        self.target, self.commit, self.rollback, self.close = target, commit, rollback, close
        self.integrity, self._publish = integrity, publish

    def publish(self, broker: libqueue.Broker, table: libqueue.Table, payload: Any,
                **fields: Any) -> int:
        if self._publish:
            return self._publish(broker, table, payload, **fields)
        return broker.publish_on(self.target, table, payload, **fields)


def _dbapi(conn: Any, integrity: Any, publish: Optional[Callable[..., int]] = None) -> Caller:
    return Caller(conn, conn.commit, conn.rollback, conn.close, integrity, publish)


def _sqlalchemy(url: str, session: bool = False, **connect_args: Any) -> Caller:
    import sqlalchemy
    from sqlalchemy.orm import Session

    engine = sqlalchemy.create_engine(url, future=True, connect_args=connect_args)
    holder = Session(engine, future=True) if session else engine.connect()

    def close() -> None:
        holder.close()
        engine.dispose()

    return Caller(holder, holder.commit, holder.rollback, close, sqlalchemy.exc.IntegrityError)


def _pg_url(db: Any, scheme: str) -> str:
    parts = urlsplit(db.server_url)
    return urlunsplit((scheme,) + tuple(parts[1:]))


def _mysql_params(db: Any) -> Dict[str, Any]:
    return dict(db._params, database=db.database)


def connect(driver: str, db: Any) -> Caller:
    """A connection of ``driver`` to the test's database, autocommit off."""
    search_path = "-csearch_path=%s" % getattr(db, "schema", "")
    if driver in ("psycopg2", "psycopg2_sql"):
        import psycopg2

        conn = psycopg2.connect(db.server_url, options=search_path)
        if driver == "psycopg2":  # the native path: libqueue's own status
            return _dbapi(conn, libqueue.Duplicate)

        def by_hand(broker: libqueue.Broker, table: libqueue.Table, payload: Any,
                    **fields: Any) -> int:
            sql, params = broker.publish_sql(table, payload, paramstyle="pyformat", **fields)
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchone()[0]

        return _dbapi(conn, psycopg2.IntegrityError, by_hand)
    if driver == "psycopg":
        import psycopg

        return _dbapi(psycopg.connect(db.server_url, options=search_path), psycopg.IntegrityError)
    if driver.startswith("sqlalchemy_pg"):
        return _sqlalchemy(_pg_url(db, "postgresql+psycopg2"), driver.endswith("session"),
                           options=search_path)
    if driver == "pymysql":
        import pymysql

        return _dbapi(pymysql.connect(binary_prefix=True, charset="utf8mb4", **_mysql_params(db)),
                      pymysql.IntegrityError)
    if driver == "mysqldb":
        import MySQLdb

        params = _mysql_params(db)
        return _dbapi(MySQLdb.connect(host=params["host"], port=params["port"], user=params["user"],
                                      passwd=params["password"], db=params["database"],
                                      charset="utf8mb4"), MySQLdb.IntegrityError)
    if driver == "sqlalchemy_mysql":
        params = _mysql_params(db)
        return _sqlalchemy("mysql+pymysql://%s:%s@%s:%d/%s?charset=utf8mb4" % (
            params["user"], params["password"], params["host"], params["port"],
            params["database"]))
    if driver == "sqlite3":
        import sqlite3

        return _dbapi(sqlite3.connect(db.path, timeout=30), sqlite3.IntegrityError)
    assert driver == "sqlalchemy_sqlite"
    return _sqlalchemy("sqlite:///" + db.path, session=True)


@pytest.fixture
def caller(request: Any, db: Any) -> Any:
    """The driver's connection (conftest pairs each driver with the backends
    of its dialect)."""
    c = connect(request.param, db)
    yield c
    c.close()


def jobs(name: str = "jobs", **roles: str) -> libqueue.Table:
    return libqueue.Table(name, payload="payload", attempt="attempt", locked_until="locked_until",
                          priority="priority", retry_after="retry_after", headers="headers",
                          dedup_key="dedup_key", created_at="created_at", **roles)


def count(db: Any, table: libqueue.Table) -> int:
    return db.scalar("SELECT COUNT(*) FROM %s" % db.quote(table.name))


def test_commit_publishes_and_rollback_leaves_nothing(db, broker, caller) -> None:
    table = jobs()
    broker.create_table(table)
    caller.publish(broker, table, b"rolled back")
    caller.rollback()
    assert count(db, table) == 0

    later = caller.publish(broker, table, b"later \x00\xfe", priority=7, delay_ms=2000,
                           headers={"trace": "t-1", "q": "it's \"so\""})
    now = caller.publish(broker, table, "now", priority=3)
    assert count(db, table) == 0  # not before the caller's commit
    caller.commit()
    assert count(db, table) == 2 and later != now
    assert db.scalar("SELECT %s FROM %s WHERE id = ?" % (db.quote("priority"), db.quote(table.name)),
                     (later,)) == 7

    with broker.subscribe(table, poll_interval_ms=100) as sub:
        first = sub.next(10)
        assert first is not None and first.id == now and first.payload == b"now"
        assert first.attempt == 1 and first.headers == {}
        first.ack()
        started = time.monotonic()
        second = sub.next(30)
        assert second is not None and second.id == later
        # Due 2 s after it was published, on the host's clock: not long before.
        assert time.monotonic() - started > 0.5
        assert second.payload == b"later \x00\xfe"
        assert second.headers == {"trace": "t-1", "q": "it's \"so\""}
        second.ack()


def test_a_buffer_is_one_message_of_its_bytes(db, broker, caller) -> None:
    table = libqueue.Table("jobs", payload="payload", locked_until="locked_until")
    broker.create_table(table)
    numbers = array.array("i", [7, 8])
    id_ = caller.publish(broker, table, numbers)  # not a list of two messages
    caller.commit()
    assert isinstance(id_, int)
    assert [tuple(r) for r in db.query("SELECT id, payload FROM jobs")] == \
        [(id_, numbers.tobytes())]


def test_a_held_dedup_key_raises_the_drivers_integrity_error(db, broker, caller) -> None:
    table = jobs()
    broker.create_table(table)
    first = caller.publish(broker, table, b"one", dedup_key="welcome-42")
    caller.commit()
    with pytest.raises(caller.integrity):
        caller.publish(broker, table, b"two", dedup_key="welcome-42")
    caller.rollback()
    assert db.query("SELECT id FROM %s" % db.quote(table.name)) == [(first,)]


def test_on_duplicate_existing_needs_the_native_path(db, broker, caller) -> None:
    """Where libqueue writes the row itself (psycopg2) it returns the key's
    holder; a driver's own insert cannot, and is refused before it runs."""
    table = jobs()
    broker.create_table(table)
    first = caller.publish(broker, table, b"one", dedup_key="welcome-7")
    if caller.integrity is libqueue.Duplicate:
        assert caller.publish(broker, table, b"two", dedup_key="welcome-7",
                              on_duplicate="existing") == first
    elif caller._publish:  # publish_sql by hand, which has no such keyword
        with pytest.raises(TypeError, match="on_duplicate"):
            caller.publish(broker, table, b"two", dedup_key="welcome-7", on_duplicate="existing")
    else:
        with pytest.raises(libqueue.Misuse,
                           match=r"publish_on: on_duplicate=\"existing\" .* psycopg2"):
            caller.publish(broker, table, b"two", dedup_key="welcome-7", on_duplicate="existing")
    caller.commit()
    assert db.query("SELECT id FROM %s" % db.quote(table.name)) == [(first,)]


def test_hostile_identifiers(db, broker, caller) -> None:
    name = "q\"u`o?t%s$1"
    table = libqueue.Table(name, id="i%d", payload="pay?load", priority="pr`io%s",
                           locked_until="lock\"ed", headers="h$2", dedup_key="d%%k")
    broker.create_table(table)
    id_ = caller.publish(broker, table, b"odd names", priority=2, headers={"a": "b"},
                         dedup_key="k%s?")
    caller.commit()
    with broker.subscribe(table, poll_interval_ms=100) as sub:
        d = sub.next(10)
        assert d is not None and d.id == id_ and d.payload == b"odd names"
        assert d.headers == {"a": "b"}
        d.ack()


@pytest.mark.dialect("postgresql")
def test_a_listening_subscription_is_woken_by_the_commit(db, caller) -> None:
    """The statement's pg_notify reaches the listening broker at the commit:
    the row is claimed long before the minute-long poll interval."""
    table = jobs()
    with libqueue.Broker(db.url, listen_notify=1) as listening, \
            libqueue.Broker(db.url, listen_notify=1) as publisher:
        listening.create_table(table)
        with listening.subscribe(table, poll_interval_ms=60000) as sub:
            assert sub.next(1.0) is None  # the claims found nothing and wait
            id_ = caller.publish(publisher, table, b"wake up")
            caller.commit()
            started = time.monotonic()
            d = sub.next(45)
            assert d is not None and d.id == id_
            assert time.monotonic() - started < 30  # half the poll interval: the wake-up
            d.ack()


def test_publish_on_a_list_and_refusals(db, broker, caller) -> None:
    table = jobs()
    broker.create_table(table)
    ids = broker.publish_on(caller.target, table, [b"a", {"payload": b"b", "priority": 2}])
    caller.commit()
    assert len(ids) == 2 and sorted(r[0] for r in db.query(
        "SELECT id FROM %s" % db.quote(table.name))) == sorted(ids)
    with pytest.raises(TypeError):
        broker.publish_on(caller.target, table, [b"a"], priority=1)
    with pytest.raises(libqueue.SchemaError):
        broker.publish_on(caller.target, table, b"x", group="no group column")
    caller.rollback()


@pytest.mark.dialect("postgresql")
def test_a_column_of_the_wrong_type_is_refused_on_the_native_path(db, broker) -> None:
    """lq_publish_on reads the table's columns as lq_publish does (through
    the broker's own connection, so the caller's transaction is untouched):
    an id of text would take no id, and its row would wait unclaimed."""
    broker.create_table(jobs(group="grp"))
    caller = connect("psycopg2", db)
    try:
        with pytest.raises(libqueue.SchemaError) as info:
            caller.publish(broker, jobs(id="grp", group="grp"), b"x")
        assert 'column "grp" (id)' in info.value.message
        good = caller.publish(broker, jobs(group="grp"), b"y")  # the transaction goes on
        caller.commit()
    finally:
        caller.close()
    assert [r[0] for r in db.query("SELECT id FROM jobs")] == [good]


@pytest.mark.dialect("postgresql")
def test_a_text_payload_column_keeps_the_payloads_text(db, broker, caller) -> None:
    """A payload column of text takes the payload's text on every path: a
    driver's bytes value would go as BYTEA, which the server writes there as
    its hex form (\\x616263 for abc). A payload that is not UTF-8 is
    refused, and nothing is written."""
    if caller._publish:
        pytest.skip("publish_sql run by hand: the caller's driver sends what it is given")
    db.execute("CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, payload TEXT, "
               "attempt INTEGER NOT NULL DEFAULT 0, locked_until TIMESTAMPTZ)")
    table = libqueue.Table("jobs", payload="payload", attempt="attempt", locked_until="locked_until")
    ids = [caller.publish(broker, table, p) for p in (b"abc", "\u00e9t\u00e9".encode(), "text")]
    with pytest.raises((libqueue.Misuse, libqueue.BackendError), match="UTF-?8"):
        caller.publish(broker, table, b"\xff\xfe")
    caller.rollback()
    ids = [caller.publish(broker, table, p) for p in (b"abc", "\u00e9t\u00e9".encode(), "text")]
    caller.commit()
    assert db.query("SELECT payload FROM jobs ORDER BY id") == [("abc",), ("\u00e9t\u00e9",), ("text",)]
    with broker.subscribe(table, poll_interval_ms=100) as sub:
        got = []
        for _ in ids:
            d = sub.next(10)
            got.append(d.payload)
            d.ack()
    assert sorted(got) == sorted([b"abc", "\u00e9t\u00e9".encode(), b"text"])


def test_publish_sql_paramstyles(tmp_path) -> None:
    """Placeholders become the driver's, a % doubles where the driver reads
    one; nothing of a quoted name is taken for a placeholder."""
    table = libqueue.Table("t?%s$1", payload="p%", priority="pr?")
    with libqueue.Broker("sqlite:%s" % (tmp_path / "q.db")) as broker:
        sql, params = broker.publish_sql(table, b"x", priority=4)
        assert sql == 'INSERT INTO "t?%s$1" ("p%", "pr?") VALUES (?, ?) RETURNING "id"'
        assert params == (b"x", 4)
        expected: Dict[Optional[str], Tuple[str, Any]] = {
            "qmark": ('("p%", "pr?") VALUES (?, ?)', (b"x", 4)),
            "numeric": ('("p%", "pr?") VALUES (:1, :2)', (b"x", 4)),
            "named": ('("p%", "pr?") VALUES (:p1, :p2)', {"p1": b"x", "p2": 4}),
            "format": ('("p%%", "pr?") VALUES (%s, %s)', (b"x", 4)),
            "pyformat": ('("p%%", "pr?") VALUES (%(p1)s, %(p2)s)', {"p1": b"x", "p2": 4}),
        }
        for style, (part, values) in expected.items():
            sql, params = broker.publish_sql(table, b"x", priority=4, paramstyle=style)
            assert part in sql and params == values, style
        with pytest.raises(libqueue.Misuse):
            broker.publish_sql(table, b"x", paramstyle="dollar")
        with pytest.raises(TypeError):
            broker.publish_sql(table, b"x", on_duplicate="existing")


def test_publish_sql_on_postgresql_notifies_unless_told(tmp_path) -> None:
    """Rendered for PostgreSQL (via the C call): the wake-up is part of the
    statement, and left out on request."""
    table = jobs()
    out = libqueue._ffi.ffi.new("lq_rendered_sql **")
    message = libqueue.broker._build_message(table, {"payload": b"x"})
    lib = libqueue._ffi.lib
    assert lib.lq_publish_sql(out, b"postgresql", table._ptr, message, 0) == 0
    assert "pg_notify" in libqueue._ffi.text(lib.lq_rendered_sql_text(out[0]))
    lib.lq_rendered_sql_free(out[0])
    assert lib.lq_publish_sql(out, b"postgresql", table._ptr, message,
                              lib.LQ_PUBLISH_SQL_NO_NOTIFY) == 0
    assert "pg_notify" not in libqueue._ffi.text(lib.lq_rendered_sql_text(out[0]))
    lib.lq_rendered_sql_free(out[0])


def test_publish_on_takes_the_known_drivers(tmp_path) -> None:
    import sqlite3

    table = jobs()
    with libqueue.Broker("sqlite:%s" % (tmp_path / "q.db")) as broker:
        broker.create_table(table)
        with pytest.raises(TypeError):
            broker.publish_on(object(), table, b"x")
        conn = sqlite3.connect(str(tmp_path / "q.db"))
        try:
            assert broker.publish_on(conn, table, b"x") == 1
            conn.rollback()
        finally:
            conn.close()
