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


def _lock_row(db, row: int):
    """Another session holding the lock of one row (its transaction open):
    a statement writing the row waits for it."""
    conn = db.connect()
    if db.dialect == "postgresql":
        conn.autocommit = False
    else:
        conn.autocommit(False)
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM jobs WHERE id = %d FOR UPDATE" % row)
    return conn


def _waiting_for(db, holder) -> int:
    """How many sessions wait for a lock `holder` holds."""
    if db.dialect == "postgresql":
        return db.scalar("SELECT count(*) FROM pg_stat_activity WHERE %d = ANY(pg_blocking_pids(pid))"
                         % holder.get_backend_pid())
    # InnoDB refreshes these tables from a cache only once it has gone
    # unread for 0.1 s: a faster poll would read the same stale rows forever.
    time.sleep(0.15)
    return db.scalar("SELECT count(*) FROM information_schema.innodb_lock_waits w "
                     "JOIN information_schema.innodb_trx t ON t.trx_id = w.blocking_trx_id "
                     "WHERE t.trx_mysql_thread_id = %d" % holder.thread_id())


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("lease")
def test_a_run_whose_ack_is_queued_behind_is_not_sent_back(db, broker, form) -> None:
    """timeout_ms covers the handler's run alone. A row whose ack waits in
    the acker's queue past the limit (the acker held up by a lock on rows
    it acks first) is not in work any more: it is not sent back, and its ack
    lands once. A run still going past it is sent back as before.

    The acker takes the acks queued as one set when it is free: the first
    row's ack holds it while b1 and b2 queue, then the set of those two
    waits for b1's lock, and the ack of `acked` queues behind it. `acked` is
    handed out before `hangs`, so the look at the book that sends `hangs`
    back finds `acked` past the limit too."""
    table = make_table(form)
    db.create_table(table)
    first, b1, b2, acked, hangs = [broker.publish(table, p)
                                   for p in (b"first", b"b1", b"b2", b"acked", b"hangs")]
    holds = []
    try:
        with broker.subscribe(table, workers=8, coalesce=1, timeout_ms=300, lease_ms=30000,
                              poll_interval_ms=POLL_MS) as sub:
            assert sub._acks_behind()
            pulled = [sub.next(10)]
            assert pulled[0].id == first
            # Locked once leased (a claim passes over locked rows), each
            # ack asked for at once after its row is handed out.
            hold_first = _lock_row(db, first)
            holds.append(hold_first)
            pulled[0]._ack_behind()
            wait_until(lambda: _waiting_for(db, hold_first) == 1, what="the acker to wait")
            pulled += [sub.next(10), sub.next(10)]
            assert [d.id for d in pulled] == [first, b1, b2]
            hold_b1 = _lock_row(db, b1)
            holds.append(hold_b1)
            pulled[1]._ack_behind()
            pulled[2]._ack_behind()
            hold_first.commit()
            wait_until(lambda: _waiting_for(db, hold_b1) == 1, what="the set to wait for b1")
            done = sub.next(10)
            assert done.id == acked
            done._ack_behind()  # queued: the acker waits for b1
            running = sub.next(10)
            assert running.id == hangs
            wait_until(lambda: running.expired, what="the run still going to pass timeout_ms")
            assert not done.expired and not any(d.expired for d in pulled)
            hold_b1.commit()
            wait_until(lambda: db.count("jobs") == 1, what="the queued acks to land")
            assert [r[0] for r in db.query("SELECT id FROM jobs")] == [hangs]
            again = sub.next(10)
            assert again.id == hangs and again.attempt == 2
            again.ack()
            assert sub.next(0.3) is None  # nothing else comes back
            assert sub.stat("expired") == 1 and sub.stat("retried") == 1
            assert sub.stat("acked") == 5 and sub.stat("lease_lost") == 0
    finally:
        for hold in holds:
            hold.close()
    assert db.count("jobs") == 0
