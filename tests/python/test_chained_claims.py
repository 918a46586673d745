"""Chained claims in the row lock form: a push worker that settles its row
after the handler commits AND CHAINs, so its next claim runs in a
transaction already open; when no claim follows at once, the empty
transaction is rolled back before the worker waits or stops."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until


def _named_broker(db) -> tuple:
    """A broker whose PostgreSQL sessions carry a name of their own."""
    name = "lq_chain_" + uuid.uuid4().hex[:8]
    return libqueue.Broker("%s&application_name=%s" % (db.url, name)), name


def _open_transactions(db, name: str) -> int:
    return int(db.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = ? "
                         "AND state LIKE 'idle in transaction%'", (name,)))


@pytest.mark.dialect("postgresql")
def test_no_session_stays_in_a_transaction_once_the_queue_is_drained(db) -> None:
    table = make_table("row_lock")
    db.create_table(table)
    broker, name = _named_broker(db)
    try:
        broker.publish_many(table, [b"%d" % i for i in range(200)])
        with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=4) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: db.count("jobs") == 0, what="all rows acked")
            # Idle claims come and go; a transaction left open would stay.
            wait_until(lambda: _open_transactions(db, name) == 0,
                       what="no session idle in a transaction while the queue is empty")
            sub.stop()
            assert _open_transactions(db, name) == 0
    finally:
        broker.close()


@pytest.mark.dialect("postgresql")
def test_a_settlement_inside_the_handler_does_not_chain(db) -> None:
    """The worker claims only after its handler returns: a row the handler
    settled itself leaves no transaction open while the handler goes on."""
    table = make_table("row_lock")
    db.create_table(table)
    broker, name = _named_broker(db)
    settled, release = threading.Event(), threading.Event()
    seen = []

    def handler(d: libqueue.Delivery) -> None:
        d.ack()
        settled.set()
        release.wait(10)

    try:
        broker.publish(table, b"x")
        with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=1) as sub:
            sub.run(handler)
            assert settled.wait(10)
            time.sleep(0.2)
            seen.append(_open_transactions(db, name))
            release.set()
        assert seen == [0]
        assert db.count("jobs") == 0
    finally:
        release.set()
        broker.close()


def _com_begin(db) -> int:
    return int(db.query("SHOW GLOBAL STATUS LIKE 'Com_begin'")[0][1])


@pytest.mark.dialect("mysql")
def test_a_worker_claiming_after_its_settlement_starts_no_transaction(db) -> None:
    table = make_table("row_lock")
    db.create_table(table)
    rows = 60
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        before = _com_begin(db)
        with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=1) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: db.count("jobs") == 0, what="all rows acked")
            sub.stop()
        begun = _com_begin(db) - before
    # The first claim and the idle claims after the last row begin their
    # own; each of the others runs in the transaction its row's commit
    # chained (one START TRANSACTION a row without it).
    assert begun < rows // 3, begun
