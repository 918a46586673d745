"""Run timeouts, in every form: a delivery still in work past timeout_ms has
failed. Its row goes back at once (a retry, or the dead letters at
max_attempts): a lease is no longer extended, a row lock's transaction
commits the retry, an advisory key is let go; and the late settlement gets
LeaseLost and changes nothing."""

from __future__ import annotations

import time

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until


@pytest.mark.forms("lease", "row_lock", "advisory")
def test_a_run_past_its_timeout_goes_back_and_its_late_ack_changes_nothing(db, broker, form):
    table = make_table(form)
    db.create_table(table)
    row = broker.publish(table, b"slow")
    # Two workers: the late run still counts as one until it settles.
    with broker.subscribe(table, workers=2, timeout_ms=500, lease_ms=30000,
                          poll_interval_ms=POLL_MS) as sub:
        first = sub.next(10)
        assert first is not None and first.id == row and not first.expired
        started = time.monotonic()
        again = sub.next(10)  # the same row, back before its 30 s lease
        assert again is not None and again.id == row and again.attempt == first.attempt + 1
        assert time.monotonic() - started < 5
        assert first.expired and not again.expired
        with pytest.raises(libqueue.LeaseLost, match="passed timeout_ms"):
            first.ack()
        again.ack()
        assert sub.stat("expired") == 1
    assert db.count("jobs") == 0


@pytest.mark.forms("lease", "row_lock", "advisory")
def test_a_run_past_its_timeout_at_max_attempts_is_dead_lettered(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead")
    broker.create_table(table)
    broker.publish(table, b"hangs")
    with broker.subscribe(table, workers=2, timeout_ms=300, max_attempts=2,
                          poll_interval_ms=POLL_MS) as sub:
        first = sub.next(10)
        second = sub.next(10)
        assert second is not None and second.id == first.id and second.attempt == 2
        wait_until(lambda: second.expired, what="the second run to pass its timeout")
        with pytest.raises(libqueue.LeaseLost):
            second.retry()
        assert sub.next(1) is None
    assert db.count("jobs") == 0 and db.count("jobs_dead") == 1


@pytest.mark.forms("lease", "row_lock", "advisory")
def test_a_pushed_handler_past_its_timeout_is_told_and_its_return_changes_nothing(db, broker,
                                                                                   form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    seen = []

    def handle(d: libqueue.Delivery) -> None:
        seen.append(d.attempt)
        if d.attempt == 1:
            while not d.expired:  # a handler that watches for it gives up
                time.sleep(0.02)

    with broker.subscribe(table, workers=2, timeout_ms=300, poll_interval_ms=POLL_MS) as sub:
        sub.run(handle)
        wait_until(lambda: db.count("jobs") == 0, what="the retried run to ack the row")
    assert seen[:2] == [1, 2]


@pytest.mark.forms("row_lock")
def test_a_timeout_on_a_row_lock_batch_is_refused(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="share one transaction"):
        broker.subscribe(table, timeout_ms=500, batch=10)


@pytest.mark.parametrize("options, message", [
    (dict(timeout_ms=500, transactional=1), "cannot send back a transactional delivery"),
    (dict(timeout_ms=0), "option timeout_ms must be between 1 and"),
    (dict(timeout_ms=-5), "option timeout_ms must be between 1 and"),
])
def test_bad_timeouts_are_refused(db, broker, options, message: str) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match=message):
        broker.subscribe(table, **options)
