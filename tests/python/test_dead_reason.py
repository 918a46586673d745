"""The dead_reason role: a row going to the dead letters says why, in every
form, into a dead-letter table or group, and a replay clears it."""

from __future__ import annotations

import time

import pytest

import libqueue

from helpers import POLL_MS, make_table


def _reasons(db, table_name: str = "jobs_dead") -> dict:
    return {row[0]: row[1] for row in db.query("SELECT id, dead_reason FROM %s" % table_name)}


def test_each_way_to_the_dead_letters_is_named(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead", dead_reason="dead_reason",
                       expires_at="expires_at")
    broker.create_table(table)
    told, spent, cancelled = broker.publish_many(table, [b"told", b"spent", b"cancelled"])
    expired = broker.publish(table, b"expired", expires_in_ms=1)
    assert broker.cancel(table, cancelled)
    time.sleep(0.05)  # the expiry passes
    with broker.subscribe(table, poll_interval_ms=POLL_MS, max_attempts=1) as sub:
        for _ in range(2):
            d = sub.next(5)
            assert d is not None
            d.dead_letter() if d.id == told else d.retry()  # the only attempt: spent
        assert sub.next(0.3) is None
    assert _reasons(db) == {told: "dead_letter", spent: "max_attempts",
                            cancelled: "cancelled", expired: "expired"}


def test_into_a_group_and_back_by_a_replay(db, broker) -> None:
    table = make_table("lease", group="queue", dead_letter="dead", dead_reason="dead_reason")
    broker.create_table(table)
    row = broker.publish(table, b"x", group="emails")
    with broker.subscribe(table, group="emails", poll_interval_ms=POLL_MS) as sub:
        sub.next(5).dead_letter()
    assert db.scalar("SELECT dead_reason FROM jobs WHERE id = ?", (row,)) == "dead_letter"
    assert broker.replay_dead_letters(table, [row], group="dead") == 1
    assert db.scalar("SELECT dead_reason FROM jobs WHERE id = ?", (row,)) is None


@pytest.mark.forms("lease")
def test_a_run_past_its_timeout_at_its_last_attempt(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead", dead_reason="dead_reason")
    broker.create_table(table)
    row = broker.publish(table, b"slow")
    with broker.subscribe(table, poll_interval_ms=POLL_MS, max_attempts=1,
                          timeout_ms=200) as sub:
        d = sub.next(5)
        deadline = time.monotonic() + 10
        while not d.expired and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(libqueue.LeaseLost):
            d.ack()
    assert _reasons(db) == {row: "timeout"}


def test_a_row_past_a_size_limit(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead", dead_reason="dead_reason")
    broker.create_table(table)
    big = broker.publish(table, b"x" * 100)
    small = broker.publish(table, b"ok")
    with broker.subscribe(table, poll_interval_ms=POLL_MS, max_payload_bytes=10) as sub:
        d = sub.next(5)
        assert d is not None and d.id == small
        d.ack()
    assert _reasons(db) == {big: "oversize"}
