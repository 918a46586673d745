"""Every outcome of a delivery, in both forms."""

from __future__ import annotations

import logging
import time

import pytest

import libqueue

from helpers import POLL_MS, make_table

# Through PgBouncer's transaction pooling too (the lease and row lock forms).
pytestmark = pytest.mark.through_pgbouncer


def one(sub: libqueue.Subscription, timeout: float = 5) -> libqueue.Delivery:
    d = sub.next(timeout)
    assert d is not None, "no delivery within %ss" % timeout
    return d


def test_ack_deletes(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    row = broker.publish(table, b"hello")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            assert (d.id, d.payload) == (row, b"hello")
            d.ack()
        assert db.count("jobs") == 0
        assert sub.next(0.2) is None


def test_ack_with_processed_at_keeps_the_row(db, broker, form) -> None:
    table = make_table(form, processed_at="processed_at")
    db.create_table(table)
    row = broker.publish(table, b"keep")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            d.ack()
        assert db.query("SELECT id FROM jobs WHERE processed_at IS NOT NULL") == [(row,)]
        assert sub.next(0.2) is None, "a processed row was delivered again"


def test_retry_returns_the_row(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    row = broker.publish(table, b"again")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            d.retry()
        # Delivered again long before a 30 s lease could run out: the retry
        # gave the row back.
        with one(sub) as d:
            assert (d.id, d.attempt) == (row, 2)
            # Stop first: a running subscription may claim the row again as
            # soon as it is retried, and the row is read below.
            sub.stop()
            d.retry()
    # Retry frees the row without counting an attempt (the claim counted).
    if form == "lease":
        assert db.scalar("SELECT locked_until FROM jobs") is None
    assert db.scalar("SELECT attempt FROM jobs") == 3
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            assert (d.id, d.attempt) == (row, 3)
            d.ack()
    assert db.count("jobs") == 0


def test_retry_after_hides_the_row_until_due(db, broker, form) -> None:
    table = make_table(form, retry_after="retry_after")
    db.create_table(table)
    row = broker.publish(table, b"later")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            d.retry_after(3_600_000)
        assert db.count("jobs") == 1
        assert sub.next(0.3) is None, "a row due in an hour was delivered"
        db.execute("UPDATE jobs SET retry_after = %s" % db.past)
        with one(sub) as d:
            assert d.id == row
            d.ack()


def test_retry_after_without_column_is_a_retry(db, broker, form, caplog) -> None:
    table = make_table(form)
    db.create_table(table)
    row = broker.publish(table, b"x")
    caplog.set_level(logging.WARNING, logger="libqueue")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            d.retry_after(3_600_000)
        with one(sub) as d:
            assert d.id == row
            d.ack()
    warnings = [r for r in caplog.records if r.name == "libqueue" and r.levelno >= logging.WARNING]
    assert warnings, "no warning logged for a retry_after the table cannot hold"


def test_delayed_publish(db, broker, form) -> None:
    table = make_table(form, retry_after="retry_after")
    db.create_table(table)
    broker.publish(table, b"later", delay_ms=3_600_000)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        assert sub.next(0.3) is None
        db.execute("UPDATE jobs SET retry_after = %s" % db.past)
        with one(sub) as d:
            assert d.payload == b"later"
            d.ack()


def test_dead_letter_to_a_group(db, broker, form) -> None:
    table = make_table(form, group="grp", dead_letter="dead")
    db.create_table(table)
    row = broker.publish(table, b"bad", group="work")
    with broker.subscribe(table, group="work", poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            d.dead_letter()
        assert db.query("SELECT id, grp FROM jobs") == [(row, "dead")]
        assert sub.next(0.2) is None
    with broker.subscribe(table, group="dead", poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            assert (d.id, d.group, d.payload) == (row, "dead", b"bad")
            d.ack()


def test_dead_letter_to_a_table(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead")
    db.create_table(table)
    db.create_table(table, name="jobs_dead")
    broker.publish(table, b"bad")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            d.dead_letter()
    assert db.count("jobs") == 0
    assert db.query("SELECT payload FROM jobs_dead") == [(b"bad",)]


@pytest.mark.parametrize("outcome", ["retry", "retry_after"])
def test_max_attempts_dead_letters(db, broker, form, outcome) -> None:
    table = make_table(form, dead_letter="jobs_dead", retry_after="retry_after")
    db.create_table(table)
    db.create_table(table, name="jobs_dead")
    broker.publish(table, b"poison")
    with broker.subscribe(table, poll_interval_ms=POLL_MS, max_attempts=2) as sub:
        for attempt in (1, 2):
            with one(sub) as d:
                assert d.attempt == attempt
                if outcome == "retry":
                    d.retry()
                else:
                    d.retry_after(0)
        assert sub.next(0.2) is None
    assert db.count("jobs") == 0
    assert db.query("SELECT payload FROM jobs_dead") == [(b"poison",)]


def test_max_attempts_needs_a_dead_letter_destination(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    with pytest.raises(libqueue.Misuse):
        broker.subscribe(table, max_attempts=3)


def test_max_attempts_needs_an_attempt_column(db, broker, form) -> None:
    table = make_table(form, attempt=None, dead_letter="jobs_dead")
    db.create_table(table)
    db.create_table(table, name="jobs_dead")
    with pytest.raises(libqueue.Misuse):
        broker.subscribe(table, max_attempts=3)


def test_settling_twice_is_misuse(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            d.ack()
            with pytest.raises(libqueue.Misuse):
                d.ack()


def test_released_delivery_refuses_use(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = one(sub)
        d.ack()
        d.release()
        d.release()  # idempotent
        with pytest.raises(libqueue.Misuse):
            d.payload


def test_transactional_writes_commit_with_the_ack(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    db.execute("CREATE TABLE audit (row_id INTEGER, note TEXT)")
    first, second = broker.publish_many(table, [b"keep", b"drop"])
    handled = set()
    with broker.subscribe(table, poll_interval_ms=POLL_MS, transactional=1) as sub:
        for _ in range(10):  # both rows, in whatever order they come
            with one(sub) as d:
                assert d.execute("INSERT INTO audit (row_id, note) VALUES (%s, %s)"
                                 % (db.placeholder(1), db.placeholder(2)),
                                 d.id, d.payload.decode()) == 1
                if d.payload == b"keep":
                    d.ack()
                else:
                    d.retry()
                handled.add(d.payload)
            if handled == {b"keep", b"drop"}:
                break
        sub.stop()
    assert db.query("SELECT row_id, note FROM audit") == [(first, "keep")]
    assert db.query("SELECT id FROM jobs") == [(second,)]


@pytest.mark.dialect("sqlite")
@pytest.mark.forms("lease")  # SQLite's advisory claims only read
def test_stop_ends_a_claim_waiting_for_the_own_transactions_lock(db, form) -> None:
    """SQLite has one writer: a claim made while a delivery's transaction
    holds the write lock waits for it, and the stop must not wait out that
    claim's lock timeout while the delivery waits for the stop."""
    table = make_table(form)
    db.create_table(table)
    db.execute("CREATE TABLE audit (note TEXT)")
    timeout_s = 60
    with libqueue.Broker(db.url, statement_timeout_ms=timeout_s * 1000) as broker:
        broker.publish_many(table, [b"a", b"b", b"c"])
        with broker.subscribe(table, poll_interval_ms=POLL_MS, transactional=1) as sub:
            with one(sub) as d:
                d.execute("INSERT INTO audit (note) VALUES (?)", "kept")
                d.ack()  # its settlement lets the claimer go on
            with one(sub) as d:
                d.execute("INSERT INTO audit (note) VALUES (?)", "x")  # the write lock
                time.sleep(0.3)  # the claimer's next claim waits for the lock
                started = time.monotonic()
                sub.stop()
                stopped_in = time.monotonic() - started
                d.retry()
    assert stopped_in < timeout_s / 2, "the stop waited %.1f s for a claim" % stopped_in
    assert db.query("SELECT note FROM audit") == [("kept",)]
    assert db.count("jobs") == 2
    # The rows claimed ahead went back at close, the retried one at once.
    assert db.query("SELECT count(*) FROM jobs WHERE locked_until IS NOT NULL") == [(0,)]


def test_execute_outside_transactional_mode_commits_on_its_own(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    db.execute("CREATE TABLE audit (note TEXT)")
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with one(sub) as d:
            assert d.execute("INSERT INTO audit (note) VALUES (%s)" % db.placeholder(1), "x") == 1
            sub.stop()
            d.retry()
    assert db.count("audit") == 1  # not rolled back by the retry
