"""Attempt counting, lease loss, and rows going back to the queue."""

from __future__ import annotations

import threading

import pytest

import libqueue

from helpers import POLL_MS, Recorder, make_table, wait_until


def test_attempt_counting(db, broker, form) -> None:
    """The first delivery reads 1. The lease and advisory forms count at the
    claim (the column reads one ahead while a delivery is out); the row lock
    form counts at the settlement that puts the row back."""
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    n = 3
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        for attempt in range(1, n + 1):
            with sub.next(5) as d:
                assert d.attempt == attempt
                # Read while held: once retried, the subscription may claim
                # the row again in the background.
                counted = 0 if form == "row_lock" else 1
                assert db.scalar("SELECT attempt FROM jobs") == attempt + counted
                if attempt < n:
                    d.retry()
                else:
                    d.ack()
    assert db.count("jobs") == 0


def test_returned_waiting_rows_spend_no_attempt(db, broker, form) -> None:
    """A row the subscription claimed but never handed out, returned by stop,
    keeps its attempt count."""
    table = make_table(form)
    db.create_table(table)
    broker.publish_many(table, [b"%d" % i for i in range(10)])
    with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=4) as sub:
        with sub.next(5) as held:
            held_id = held.id
            sub.stop()
            held.retry()
    assert db.query("SELECT id, attempt FROM jobs WHERE id != ? AND attempt != 1", (held_id,)) == []


def test_attempt_is_zero_without_column(db, broker, form) -> None:
    table = make_table(form, attempt=None)
    db.create_table(table)
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(5) as d:
            assert d.attempt == 0
            d.ack()


def test_unsettled_pulled_delivery_goes_back_at_once(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    row = broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(5) as d:
            assert (d.id, d.attempt) == (row, 1)
        # Released unsettled: handed out again at once, no attempt spent.
        with sub.next(5) as d:
            assert (d.id, d.attempt) == (row, 1)
            sub.stop()  # nothing claims it again once released
    if form == "lease":
        assert db.scalar("SELECT locked_until FROM jobs") is None
    assert db.scalar("SELECT attempt FROM jobs") == 1


def lease_lost(db, broker, other_broker, second_lease_ms: int) -> None:
    table = make_table("lease")
    db.create_table(table)
    row = broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as first, \
            other_broker.subscribe(table, poll_interval_ms=POLL_MS,
                                   lease_ms=second_lease_ms) as second:
        mine = first.next(5)
        assert mine is not None and mine.lease_expiry_ms > 0
        # The lease runs out: another claim takes the row.
        db.execute("UPDATE jobs SET locked_until = %s" % db.past)
        theirs = second.next(5)
        assert theirs is not None and theirs.id == row
        with pytest.raises(libqueue.LeaseLost):
            mine.ack()
        assert db.count("jobs") == 1, "a lost lease still changed the row"
        theirs.ack()
        assert db.count("jobs") == 0
        mine.release()
        theirs.release()


def test_lease_lost(db, broker, other_broker) -> None:
    # The second claim takes a longer lease, so its expiry (the lease token)
    # differs from the first one's whatever the clock reads.
    lease_lost(db, broker, other_broker, second_lease_ms=90_000)


def test_lease_lost_same_lease_length(db, broker, other_broker) -> None:
    # Both claims take the default lease within the same second: the tokens
    # must still tell them apart.
    lease_lost(db, broker, other_broker, second_lease_ms=30_000)


def test_stop_returns_waiting_rows_pull(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    broker.publish_many(table, [b"%d" % i for i in range(10)])
    sub = broker.subscribe(table, poll_interval_ms=POLL_MS, workers=4)
    held = sub.next(5)
    assert held is not None
    sub.stop()
    # Only the delivery we hold is still claimed.
    assert db.query("SELECT id FROM jobs WHERE locked_until IS NOT NULL") == [(held.id,)]
    with pytest.raises(libqueue.Closed):
        sub.next(0.1)
    held.ack()  # still valid after stop
    held.release()
    sub.close()
    assert db.count("jobs") == 9
    assert db.count("jobs", "locked_until IS NOT NULL") == 0


def test_stop_returns_waiting_rows_push(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    broker.publish_many(table, [b"%d" % i for i in range(12)])
    handled = Recorder()
    release = threading.Event()

    def handler(d: libqueue.Delivery) -> None:
        handled.add(d.id)
        release.wait(10)

    sub = broker.subscribe(table, poll_interval_ms=POLL_MS, workers=2)
    sub.run(handler)
    wait_until(lambda: len(handled) >= 2, what="both workers busy")
    stopper = threading.Thread(target=sub.stop)
    stopper.start()
    stopper.join(0.2)  # give stop a moment to take claimed rows back
    release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    # Every row is either handled (acked: gone) or free again.
    assert db.count("jobs", "locked_until IS NOT NULL") == 0
    assert db.count("jobs") == 12 - len(handled)
    sub.close()
