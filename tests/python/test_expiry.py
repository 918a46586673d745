"""Expiry of unstarted rows (publish's expires_in_ms, an expires_at column):
a row is never started once it is past, a retry included. The claim that
finds it so sends it to the dead letters unread, or without a destination
finishes it, and counts it (stat expired_unstarted); no handler sees it."""

from __future__ import annotations

import time

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until


def test_a_row_past_its_expiry_reaches_no_handler_and_is_dead_lettered(db, broker, form) -> None:
    table = make_table(form, expires_at="expires_at", dead_letter="jobs_dead")
    broker.create_table(table)
    late = broker.publish(table, b"late", expires_in_ms=300)
    time.sleep(0.5)  # no worker runs meanwhile
    fresh = broker.publish(table, b"fresh", expires_in_ms=60000)
    plain = broker.publish(table, b"plain")
    with broker.subscribe(table, workers=2, poll_interval_ms=POLL_MS) as sub:
        seen = []
        for delivery in sub.deliveries(timeout=1):
            seen.append(delivery.id)
            delivery.ack()
        assert sorted(seen) == sorted([fresh, plain])
        assert sub.stat("expired_unstarted") == 1
    assert db.count("jobs") == 0
    assert [r[0] for r in db.query("SELECT id FROM jobs_dead")] == [late]


def test_without_a_dead_letter_destination_an_expired_row_is_deleted(db, broker, form) -> None:
    table = make_table(form, expires_at="expires_at")
    broker.create_table(table)
    broker.publish(table, b"late", expires_in_ms=200)
    time.sleep(0.4)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        assert sub.next(0.5) is None
        assert sub.stat("expired_unstarted") == 1
    assert db.count("jobs") == 0


@pytest.mark.forms("lease")
def test_a_retry_due_after_the_expiry_is_not_started_again(db, broker, form) -> None:
    table = make_table(form, expires_at="expires_at", retry_after="retry_after",
                       dead_letter="jobs_dead")
    broker.create_table(table)
    row = broker.publish(table, b"once", expires_in_ms=500)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        first = sub.next(5)
        assert first is not None and first.id == row
        first.retry_after(800)  # due again after its expiry
        assert sub.next(1.5) is None
        assert sub.stat("expired_unstarted") == 1
    assert db.count("jobs_dead") == 1


def test_an_expiry_needs_its_column_and_a_sane_value(db, broker) -> None:
    table = make_table("lease")
    broker.create_table(table)
    with pytest.raises(libqueue.SchemaError, match="no expires_at column"):
        broker.publish(table, b"x", expires_in_ms=100)
    with pytest.raises(libqueue.Misuse):
        broker.publish(table, b"x", expires_in_ms=-1)
    assert db.count("jobs") == 0


def test_expired_rows_ahead_of_a_live_one_do_not_slow_its_claim(db, broker) -> None:
    """A claim whose rows all ended unrun was full: the next claim comes at
    once, not after a poll interval (300 rows at 8 a claim would take 38
    intervals of a second)."""
    table = make_table("lease", expires_at="expires_at")
    broker.create_table(table)
    broker.publish_many(table, [dict(payload=b"late", expires_in_ms=1)] * 300)
    time.sleep(0.1)
    live = broker.publish(table, b"live")
    with broker.subscribe(table, workers=8, poll_interval_ms=1000) as sub:
        d = sub.next(10)
        assert d is not None and d.id == live
        d.ack()
        wait_until(lambda: sub.stat("expired_unstarted") == 300, what="every expired row ended")
