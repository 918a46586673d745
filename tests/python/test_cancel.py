"""Cancel (Broker.cancel): a queued row leaves its queue (into the dead
letters, or deleted) and is never claimed after; in the lease form a row in
work is cancelled too, its run told at once where the cancel is heard of (this
broker, or a notification on PostgreSQL), else at the next lease extension,
and its settlement refused (Cancelled); in the advisory form likewise, the run
told at its settlement; in the row lock form the run's process takes the row
out in the run's own transaction, at the cancel's request. A cancelled row is
never acked as done."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until


def test_a_queued_row_is_dead_lettered_and_never_claimed(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead")
    broker.create_table(table)
    doomed, kept = broker.publish_many(table, [b"doomed", b"kept"])
    assert broker.cancel(table, doomed) is True
    assert broker.cancel(table, doomed) is False  # gone from the queue
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        got = [d for d in sub.deliveries(timeout=0.5)]
        assert [d.id for d in got] == [kept]
        got[0].ack()
    assert [r[0] for r in db.query("SELECT id FROM jobs_dead")] == [doomed]


def test_without_a_destination_a_queued_row_is_deleted(db, broker, form) -> None:
    table = make_table(form)
    broker.create_table(table)
    row = broker.publish(table, b"x")
    assert broker.cancel(table, row)
    assert db.count("jobs") == 0
    assert broker.cancel(table, 12345) is False


def test_into_a_dead_letter_group_the_key_is_free_again(db, broker) -> None:
    table = make_table("lease", group="queue", dedup_key="dedup_key", dead_letter="dead")
    broker.create_table(table)
    row = broker.publish(table, b"x", group="emails", dedup_key="k")
    assert broker.cancel(table, row)
    assert db.scalar("SELECT %s FROM jobs WHERE id = ?" % db.quote("queue"), (row,)) == "dead"
    assert broker.publish(table, b"again", group="emails", dedup_key="k") != row


def test_a_processed_row_is_not_cancelled(db, broker) -> None:
    table = make_table("lease", processed_at="processed_at")
    broker.create_table(table)
    row = broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.next(5).ack()
    assert broker.cancel(table, row) is False
    assert db.count("jobs") == 1


@pytest.mark.forms("lease")
def test_a_row_in_work_is_cancelled_and_its_run_told(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead")
    broker.create_table(table)
    row = broker.publish(table, b"long")
    with broker.subscribe(table, lease_ms=2000, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert d is not None and not d.cancelled
        assert broker.cancel(table, row)
        wait_until(lambda: d.cancelled, what="the run to see its cancel at a lease extension")
        with pytest.raises(libqueue.Cancelled, match="cancelled while in work"):
            d.ack()
        assert sub.next(0.5) is None
    assert db.count("jobs") == 0 and db.count("jobs_dead") == 1


@pytest.mark.forms("lease")
def test_a_settlement_right_after_a_cancel_is_refused(db, broker, form) -> None:
    table = make_table(form, processed_at="processed_at")
    broker.create_table(table)
    row = broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert broker.cancel(table, row)
        with pytest.raises(libqueue.Cancelled):
            d.ack()  # before any extension: the row is gone while its lease holds
    assert db.count("jobs") == 0  # deleted, never marked processed


@pytest.mark.forms("advisory")
@pytest.mark.parametrize("outcome", ["ack", "dead_letter"])  # a plain retry writes nothing here
def test_an_advisory_row_in_work_is_cancelled_and_its_settlement_refused(db, broker, form,
                                                                         outcome) -> None:
    table = make_table(form, dead_letter="jobs_dead", processed_at="processed_at")
    broker.create_table(table)
    row, other = broker.publish_many(table, [b"long", b"other"])
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert d is not None and d.id == row and not d.cancelled
        assert broker.cancel(table, row) is True  # the run holds the key, not the row
        with pytest.raises(libqueue.Cancelled, match="cancelled while in work"):
            getattr(d, outcome)()
        assert d.cancelled
        later = sub.next(5)
        assert later is not None and later.id == other  # the cancelled row is not claimed again
        later.ack()
        assert sub.next(0.3) is None
    assert [r[0] for r in db.query("SELECT id FROM jobs_dead")] == [row]
    assert db.scalar("SELECT COUNT(*) FROM jobs WHERE processed_at IS NOT NULL") == 1  # other only


@pytest.mark.forms("advisory")
def test_an_advisory_row_in_work_cancelled_into_its_group_stays_a_dead_letter(db, broker,
                                                                              form) -> None:
    table = make_table(form, group="queue", dead_letter="dead")
    broker.create_table(table)
    row = broker.publish(table, b"x", group="emails")
    with broker.subscribe(table, group="emails", poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert broker.cancel(table, row)
        with pytest.raises(libqueue.Cancelled):
            d.ack()  # finds the row in the dead-letter group: deletes nothing
    assert db.scalar("SELECT %s FROM jobs WHERE id = ?" % db.quote("queue"), (row,)) == "dead"


@pytest.mark.forms("advisory")
def test_an_advisory_row_in_work_under_another_broker_is_cancelled(db, broker, form) -> None:
    table = make_table(form)
    broker.create_table(table)
    row = broker.publish(table, b"x")
    with libqueue.Broker(db.url) as other, other.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert broker.cancel(table, row)  # another broker: another session, the key held there
        with pytest.raises(libqueue.Cancelled):
            d.ack()
    assert db.count("jobs") == 0


@pytest.mark.forms("lease")
def test_a_run_hears_of_its_cancel_before_any_extension(db, broker, form) -> None:
    table = make_table(form)
    broker.create_table(table)
    row = broker.publish(table, b"long")
    # A lease of a minute is first extended after thirty seconds: the run
    # learns of the cancel from the broker that made it.
    with broker.subscribe(table, lease_ms=60000, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert broker.cancel(table, row)
        wait_until(lambda: d.cancelled, timeout=5, what="the run to hear of its cancel")
        with pytest.raises(libqueue.Cancelled):
            d.ack()


@pytest.mark.dialect("postgresql")
@pytest.mark.forms("lease")
def test_a_run_under_another_broker_hears_of_its_cancel_by_notification(db, broker,
                                                                       form) -> None:
    table = make_table(form)
    broker.create_table(table)
    row = broker.publish(table, b"long")
    with libqueue.Broker(db.url, listen_notify=1) as worker_side, \
            worker_side.subscribe(table, lease_ms=60000, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        time.sleep(0.3)  # the listener's LISTEN is in place
        assert broker.cancel(table, row)
        wait_until(lambda: d.cancelled, timeout=5, what="the run to hear of its cancel")


def _cancel_in_thread(broker, table, row):
    """Starts broker.cancel(table, row) on a thread; returns a function that
    waits for it and returns its result (or raises its exception)."""
    result = {}

    def run():
        try:
            result["value"] = broker.cancel(table, row)
        except Exception as exc:  # handed to the test's thread
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()

    def outcome():
        thread.join(30)
        assert not thread.is_alive(), "the cancel did not return"
        if "error" in result:
            raise result["error"]
        return result["value"]
    return outcome


@pytest.mark.forms("row_lock")
def test_a_row_lock_run_is_cancelled_in_its_transaction(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead")
    broker.create_table(table)
    row = broker.publish(table, b"long")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert d is not None and not d.cancelled
        assert broker.cancel(table, row) is True  # taken out by the run's own process
        assert d.cancelled
        with pytest.raises(libqueue.Cancelled, match="cancelled while in work"):
            d.ack()
        # The run's connection came back: the subscription goes on.
        later = broker.publish(table, b"later")
        got = sub.next(5)
        assert got is not None and got.id == later
        got.ack()
    assert db.count("jobs") == 0
    assert [r[0] for r in db.query("SELECT id FROM jobs_dead")] == [row]


@pytest.mark.forms("row_lock")
def test_a_cancelled_row_lock_run_gives_its_slot_back_before_it_settles(db, broker, form):
    """concurrency=1: the run taken out by a cancel no longer holds the
    queue's one slot (its transaction ended), so the next row is claimed
    while that run has still to settle."""
    table = make_table(form)
    broker.create_table(table)
    row = broker.publish(table, b"long")
    with broker.subscribe(table, concurrency=1, workers=2, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert d is not None and d.id == row
        assert broker.cancel(table, row) is True
        assert d.cancelled
        later = broker.publish(table, b"later")
        got = sub.next(5)
        assert got is not None and got.id == later, "the cancelled run kept the slot"
        got.ack()
        with pytest.raises(libqueue.Cancelled):
            d.ack()
    assert db.count("jobs") == 0


@pytest.mark.forms("row_lock")
def test_a_row_lock_run_under_another_broker_is_cancelled(db, broker, form) -> None:
    table = make_table(form)
    broker.create_table(table)
    row = broker.publish(table, b"x")
    with libqueue.Broker(db.url) as other, \
            other.subscribe(table, poll_interval_ms=POLL_MS, workers=2) as sub:
        d = sub.next(5)
        assert broker.cancel(table, row) is True  # another broker: found by its keeper's look
        assert d.cancelled
        with pytest.raises(libqueue.Cancelled):
            d.retry()
    assert db.count("jobs") == 0


@pytest.mark.forms("row_lock")
def test_a_row_lock_cancel_waits_while_a_batch_holds_the_row(db, broker, form) -> None:
    """A batch's rows share one transaction, which a cancel does not enter:
    it waits for the batch; a row the batch acks is finished (False), a row
    it sends back (for later, so that no claim takes it again first) is
    cancelled as queued (True)."""
    table = make_table(form, dead_letter="jobs_dead", retry_after="retry_after")
    broker.create_table(table)
    acked, retried = broker.publish_many(table, [b"acked", b"retried"])
    with broker.subscribe(table, batch=2, poll_interval_ms=POLL_MS) as sub:
        batch = sub.next_batch(5, 2)
        assert sorted(d.id for d in batch) == [acked, retried]
        first = _cancel_in_thread(broker, table, acked)
        second = _cancel_in_thread(broker, table, retried)
        time.sleep(0.8)
        for d in batch:
            d.ack() if d.id == acked else d.retry_after(60000)
        assert first() is False
        assert second() is True
        assert sub.next(0.5) is None
    assert [r[0] for r in db.query("SELECT id FROM jobs_dead")] == [retried]


@pytest.mark.forms("row_lock")
def test_a_row_lock_cancel_that_is_never_taken_changes_nothing(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead")
    broker.create_table(table)
    row = broker.publish(table, b"x")
    with broker.subscribe(table, batch=1, poll_interval_ms=POLL_MS) as sub:
        (d,) = sub.next_batch(5, 1)
        with pytest.raises(libqueue.Timeout, match="nothing changed"):
            broker.cancel(table, row)
        d.ack()  # the request was withdrawn: the run's outcome stands
    assert db.count("jobs") == 0 and db.count("jobs_dead") == 0
    assert db.count("lq_cancel_requests") == 0


@pytest.mark.forms("row_lock")
def test_a_request_left_behind_is_passed_over(db, broker, form) -> None:
    """A request older than a cancel's whole wait (its canceller went away)
    takes out no later run of the row."""
    table = make_table(form)
    broker.create_table(table)
    first, left = broker.publish_many(table, [b"first", b"left"])
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        assert d.id == first and broker.cancel(table, first)  # makes the requests table
        with pytest.raises(libqueue.Cancelled):
            d.ack()
        db.execute("INSERT INTO lq_cancel_requests (queue, row_id, state, requested_at) "
                   "VALUES ('jobs', ?, 0, ?)", (left, int(time.time() * 1000) - 120000))
        d = sub.next(5)
        assert d.id == left
        time.sleep(1.5)  # three looks of its keeper
        assert not d.cancelled
        d.ack()
    assert db.count("jobs") == 0


@pytest.mark.forms("row_lock")
def test_two_cancels_of_one_row_in_work_share_its_request(db, broker, form) -> None:
    table = make_table(form, dead_letter="jobs_dead")
    broker.create_table(table)
    row = broker.publish(table, b"x")
    with libqueue.Broker(db.url) as other, \
            other.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(5)
        outcomes = [_cancel_in_thread(broker, table, row) for _ in range(2)]
        results = [outcome() for outcome in outcomes]
        assert True in results and set(results) <= {True, False}
        assert d.cancelled
    assert [r[0] for r in db.query("SELECT id FROM jobs_dead")] == [row]
    assert db.count("lq_cancel_requests") == 0


@pytest.mark.parametrize("row", ["x", "1", 1.0, None, True],
                         ids=["word", "digits", "float", "none", "bool"])
def test_an_id_that_is_no_int_is_a_type_error_naming_it(db, broker, row: Any) -> None:
    table = make_table("lease")
    broker.create_table(table)
    kept = broker.publish(table, b"x")
    with pytest.raises(TypeError, match=r"^cancel: id takes an int, (got|not a bool) \S+"):
        broker.cancel(table, row)
    assert [r[0] for r in db.query("SELECT id FROM jobs")] == [kept]  # nothing cancelled


def test_the_dead_letter_calls_name_an_argument_that_is_no_int(db, broker) -> None:
    table = make_table("lease", retry_after="retry_after", dead_letter="jobs_dead")
    broker.create_table(table)
    with pytest.raises(TypeError, match="^dead_letters: after takes an int, got str 'x'$"):
        broker.dead_letters(table, after="x")
    with pytest.raises(TypeError, match="^dead_letters: limit takes an int, got float 1.5$"):
        broker.dead_letters(table, limit=1.5)
    for move in (broker.replay_dead_letters, broker.purge_dead_letters):
        with pytest.raises(TypeError, match="dead letters: ids takes an int, got str 'x'$"):
            move(table, ["x"])
    with pytest.raises(TypeError, match="^stats: cap takes an int, not a bool"):
        broker.stats(table, cap=True)
