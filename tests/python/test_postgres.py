"""What only PostgreSQL does: version floors, LISTEN/NOTIFY, publishing in the
caller's transaction, deadlines, strict isolation levels."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

import libqueue

from fake_postgres import FakePostgres
from helpers import POLL_MS, make_table, publish_elsewhere, wait_until


pytestmark = pytest.mark.dialect("postgresql")


@pytest.fixture
def pg(db: Any) -> Any:
    return db



@pytest.mark.parametrize("version,opens", [("9.4.26", False), ("9.5.0", True), ("15.4", True)])
def test_skip_locked_floor(version: str, opens: bool) -> None:
    server = FakePostgres(version)
    try:
        if opens:
            libqueue.Broker(server.url).close()
        else:
            with pytest.raises(libqueue.ServerTooOld) as info:
                libqueue.Broker(server.url)
            assert "9.5" in str(info.value) and "9.4" in str(info.value)
    finally:
        server.close()


@pytest.mark.parametrize("form", ["advisory", "fifo"])
def test_hash_floor(form: str) -> None:
    """PostgreSQL 10 serves row locks and leases, but not advisory keys or
    FIFO groups (hashtextextended came in 11): those stop at open."""
    server = FakePostgres("10.23")
    try:
        with libqueue.Broker(server.url) as broker:
            if form == "advisory":
                table = libqueue.Table("jobs", payload="payload", advisory_lock="k-{id}")
                options = {}
            else:
                table = libqueue.Table("jobs", payload="payload", group="grp", fifo=True)
                options = {"group": "g"}
            with pytest.raises(libqueue.ServerTooOld) as info:
                broker.subscribe(table, **options)
            assert "11" in str(info.value) and "10.23" in str(info.value)
    finally:
        server.close()


def test_connect_deadline_on_a_silent_server() -> None:
    """A server that accepts and never answers is an error, not a hang."""
    server = FakePostgres("15.0", silent=True)
    try:
        started = time.monotonic()
        with pytest.raises(libqueue.ConnectError):
            libqueue.Broker(server.url, connect_timeout_ms=1000)
        assert time.monotonic() - started < 30
    finally:
        server.close()


def test_client_deadline_on_a_server_that_stops_answering() -> None:
    """A server that stops answering in the middle of a statement is an
    error once the client's own deadline passes (the statement timeout and
    two seconds), not a hang."""
    server = FakePostgres("15.0", stall_on=b"INSERT")
    try:
        with libqueue.Broker(server.url, statement_timeout_ms=300) as broker:
            with pytest.raises(libqueue.Timeout) as info:
                broker.publish(make_table("lease"), b"x")
        assert "no answer within 2300 ms" in str(info.value)
    finally:
        server.close()


def test_statement_deadline(pg) -> None:
    table = make_table("lease")
    pg.create_table(table)
    blocker = pg.connect()
    blocker.autocommit = False
    blocker.cursor().execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    try:
        with libqueue.Broker(pg.url, statement_timeout_ms=300) as broker:
            with pytest.raises(libqueue.Timeout):
                broker.publish(table, b"x")
    finally:
        blocker.rollback()
        blocker.close()


def test_notification_wakes_an_idle_subscription(pg, tmp_path) -> None:
    table = make_table("lease")
    pg.create_table(table)
    with libqueue.Broker(pg.url, listen_notify=1) as broker:
        with broker.subscribe(table, poll_interval_ms=60000) as sub:
            assert sub.next(1.0) is None  # idle: its first claim found nothing
            started = time.monotonic()
            publish_elsewhere(pg.url, b"wake", listen_notify=1)
            delivery = sub.next(20)
            assert delivery is not None and delivery.payload == b"wake"
            assert time.monotonic() - started < 20, "woken well before the 60 s poll"
            delivery.ack()


def test_notification_names_the_group(pg) -> None:
    """A publish's insert sends the wake-up with its group: the subscription
    of that group wakes (one of another group would not be woken by it)."""
    table = make_table("lease", group="grp")
    pg.create_table(table)
    with libqueue.Broker(pg.url, listen_notify=1) as broker:
        with broker.subscribe(table, group="b", poll_interval_ms=60000) as sub:
            assert sub.next(1.0) is None
            publisher = ("import libqueue, sys\n"
                         "t = libqueue.Table('jobs', payload='payload', attempt='attempt', "
                         "locked_until='locked_until', group='grp')\n"
                         "with libqueue.Broker(sys.argv[1], listen_notify=1) as b:\n"
                         "    b.publish(t, b'for b', group='b')\n")
            subprocess.run([sys.executable, "-c", publisher, pg.url], check=True)
            delivery = sub.next(20)
            assert delivery is not None and delivery.payload == b"for b"
            delivery.ack()


def test_publish_in_the_callers_transaction(pg, broker) -> None:
    """The task commits, or rolls back, with the data it serves."""
    table = make_table("row_lock")
    pg.create_table(table)
    pg.execute("CREATE TABLE orders (id INTEGER)")
    conn = pg.connect()
    conn.autocommit = False
    try:
        cur = conn.cursor()
        cur.execute("INSERT INTO orders VALUES (1)")  # opens the caller's transaction
        broker.publish_on(conn, table, [b"rolled back"])
        conn.rollback()
        assert pg.count("jobs") == 0 and pg.count("orders") == 0
        cur.execute("INSERT INTO orders VALUES (2)")
        ids = broker.publish_on(conn, table, [b"kept", b"kept too"])
        assert pg.count("jobs") == 0  # not before the caller's commit
        conn.commit()
        assert sorted(r[0] for r in pg.query("SELECT id FROM jobs")) == sorted(ids)
        assert pg.count("orders") == 1
    finally:
        conn.close()


def test_bulk_publish_in_the_callers_transaction(pg, broker) -> None:
    """lq_publish_on of many messages takes the multi-row inserts too, in
    the caller's transaction; the ids follow message order."""
    table = make_table("lease", group="grp")
    pg.create_table(table)
    conn = pg.connect()
    conn.autocommit = False
    try:
        messages = [{"payload": b"c%d" % i, "group": "g%d" % (i % 2)} for i in range(1500)]
        conn.cursor().execute("SELECT 1")  # opens the caller's transaction
        ids = broker.publish_on(conn, table, messages)
        assert pg.count("jobs") == 0  # not before the caller's commit
        conn.commit()
        rows = {r[0]: (bytes(r[1]), r[2]) for r in pg.query("SELECT id, payload, grp FROM jobs")}
        assert [rows[i] for i in ids] == [(m["payload"], m["group"]) for m in messages]
    finally:
        conn.close()


@pytest.mark.parametrize("isolation", ["repeatable_read", "serializable"])
def test_strict_isolation_loses_nothing(pg, isolation: str) -> None:
    """Row lock claims and settlements at the stricter levels may fail with
    serialization errors under contention: a claim backs off and retries, a
    settlement's rollback returns the row for another delivery (at least
    once); no row is lost. A serialization failure is a rollback, not a
    lock someone holds: the poll interval does not double for it, or a busy
    queue would climb to the ceiling and sit idle between claims."""
    table = libqueue.Table("jobs", payload="payload", attempt="attempt", isolation=isolation)
    pg.create_table(table)
    rows = 200
    seen = []
    with libqueue.Broker(pg.url, pool_size=10) as one, libqueue.Broker(pg.url, pool_size=10) as two:
        ids = one.publish_many(table, [b"%d" % i for i in range(rows)])
        subs = [b.subscribe(table, workers=4, poll_interval_ms=POLL_MS) for b in (one, two)]
        for sub in subs:
            sub.run(lambda d: seen.append(d.id))
        wait_until(lambda: pg.count("jobs") == 0, timeout=60, what="every row")
        assert [sub.stat("poll_interval_ms") for sub in subs] == [POLL_MS, POLL_MS]
        for sub in subs:
            sub.close()
    assert set(seen) == set(ids)
