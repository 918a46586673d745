"""Advisory lock claims: claims beside each other read past the rows the
others take first; where keys live in the process (SQLite), a claim takes
its candidates' rows in one statement and looks ahead of the free workers,
and every key it cannot use goes back."""

from __future__ import annotations

import threading
import time

import pytest

import libqueue

from helpers import POLL_MS, Recorder, make_table, run_then_stop, wait_until


@pytest.mark.forms("advisory")
def test_fast_handlers_get_every_row_once_without_empty_claims(db, form) -> None:
    """Four workers with fast handlers: every row is handled once, and the
    claims seldom come back empty (each reads past the rows that the claims
    beside it take first)."""
    table = make_table(form)
    db.create_table(table)
    rows = 300
    seen = Recorder()
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS) as sub:
            sub.run(lambda d: seen.add(d.payload))
            wait_until(lambda: db.count("jobs") == 0, what="every row")
            wait_until(lambda: sub.stat("settled") == rows, what="every settlement")
            claims, empty = sub.stat("claims"), sub.stat("empty_claims")
    assert sorted(seen.snapshot()) == sorted(b"%d" % i for i in range(rows))
    assert empty < rows // 10, "%d of %d claims came back empty" % (empty, claims)


@pytest.mark.dialect("sqlite")
@pytest.mark.forms("advisory")
def test_stop_returns_the_rows_claimed_ahead(db, form) -> None:
    """Rows claimed ahead of the workers and never handed out go back at a
    stop with their attempt as it was, and their keys free: another
    subscription takes every one of them at once."""
    table = make_table(form)
    db.create_table(table)
    rows = 400
    with libqueue.Broker(db.url) as broker:
        delivered = run_then_stop(broker, table, rows)
        assert db.count("jobs") == rows - delivered
        assert db.count("jobs", "attempt != 1") == 0
        with broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS) as again:
            again.run(lambda d: None)
            wait_until(lambda: db.count("jobs") == 0, what="the returned rows")


@pytest.mark.dialect("sqlite")
@pytest.mark.forms("advisory")
def test_a_row_the_take_passes_over_lets_its_key_go(db, form) -> None:
    """A candidate whose row the take does not change (here a trigger skips
    it, as a row settled between the read and the take would be) is not
    delivered, and its key goes back: once the trigger is gone, the row is
    delivered, its attempt counted once."""
    table = make_table(form)
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        ids = broker.publish_many(table, [b"a", b"b", b"c"])
        skipped = ids[1]
        db.execute("CREATE TRIGGER skip_one BEFORE UPDATE ON jobs WHEN OLD.id = %d "
                   "BEGIN SELECT RAISE(IGNORE); END" % skipped)
        with broker.subscribe(table, workers=3, poll_interval_ms=POLL_MS) as sub:
            first = [sub.next(5), sub.next(5)]
            assert sorted(d.payload for d in first) == [b"a", b"c"]
            assert sub.next(0.3) is None
            db.execute("DROP TRIGGER skip_one")
            last = sub.next(5)
            assert (last.id, last.payload, last.attempt) == (skipped, b"b", 1)
            for d in first + [last]:
                d.ack()
                d.release()
    assert db.count("jobs") == 0


@pytest.mark.dialect("postgresql")
@pytest.mark.forms("advisory")
def test_a_settlement_that_fails_leaves_no_transaction_open_and_its_row_comes_back(db, form):
    """A settlement whose statement fails (a trigger refuses the delete)
    still lets its key go, on the same session: the row comes back, and no
    session of the broker is left idle in a transaction or closed."""
    table = make_table(form)
    db.create_table(table)
    db.execute("CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS "
               "$$BEGIN RAISE EXCEPTION 'refused'; END$$")
    db.execute("CREATE TRIGGER refuse BEFORE DELETE ON jobs FOR EACH ROW "
               "EXECUTE FUNCTION refuse_delete()")
    with libqueue.Broker(db.url) as broker:
        row = broker.publish(table, b"kept")
        with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
            d = sub.next(5)
            assert d is not None and d.id == row
            sessions = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid()")
            before = {r[0] for r in db.query(sessions)}
            with pytest.raises(libqueue.Error, match="refused"):
                d.ack()
            d.release()
            open_tx = db.query(sessions + " AND state LIKE 'idle in transaction%'")
            assert not open_tx, "a session was left in its failed transaction"
            closed = before - {r[0] for r in db.query(sessions)}
            assert not closed, "the delivery's session was closed rather than rolled back"
            db.execute("DROP TRIGGER refuse ON jobs")
            again = sub.next(5)
            assert again is not None and again.id == row, "the row did not come back"
            again.ack()
            assert sub.stat("settle_errors") == 1
    assert db.count("jobs") == 0
    db.execute("DROP FUNCTION refuse_delete()")


@pytest.mark.dialect("postgresql")
@pytest.mark.forms("advisory")
@pytest.mark.parametrize("concurrency", [None, 2], ids=["no_limit", "concurrency"])
def test_a_row_the_one_statement_claim_cannot_take_lets_its_key_and_slot_go(db, form, concurrency):
    """Where one statement takes a slot, a key and the row: a row it cannot
    take (here a trigger skips its update, as a row settled between the
    statement's snapshot and its key would be) is not delivered, and its key
    and slot go back at once; an idle queue's polls hold no lock after them;
    once the trigger is gone, the row is delivered, its attempt counted once."""
    table = make_table(form, advisory_lock="skipped-{id}")  # keys no other test takes
    db.create_table(table)
    locks = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
             "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
    # The suite's tests share the database: an earlier test's sessions end
    # (and let their locks go) a moment after its brokers close.
    wait_until(lambda: db.scalar(locks) == 0, what="the locks of earlier tests gone")
    options = dict(workers=3, poll_interval_ms=POLL_MS)
    if concurrency:
        options["concurrency"] = concurrency
    per_row = 2 if concurrency else 1  # its key, and its slot
    with libqueue.Broker(db.url) as broker:
        ids = broker.publish_many(table, [b"a", b"b", b"c"])
        skipped = ids[1]
        db.execute("CREATE FUNCTION skip_one() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$BEGIN IF OLD.id = %d THEN RETURN NULL; END IF; RETURN NEW; END$$" % skipped)
        db.execute("CREATE TRIGGER skip_one BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION skip_one()")
        with broker.subscribe(table, **options) as sub:
            first = [sub.next(5), sub.next(5)]
            assert sorted(d.payload for d in first) == [b"a", b"c"]
            assert sub.next(0.3) is None
            assert db.scalar(locks) == 2 * per_row, "a lock of the row not taken was kept"
            db.execute("DROP TRIGGER skip_one ON jobs")
            for d in first:
                d.ack()
                d.release()
            last = sub.next(5)
            assert (last.id, last.payload, last.attempt) == (skipped, b"b", 1)
            last.ack()
            last.release()
            assert sub.next(0.3) is None  # idle polls, each taking a slot and letting it go
            assert db.scalar(locks) == 0, "an idle poll kept a lock"
            assert db.count("jobs") == 0
    db.execute("DROP FUNCTION skip_one()")


@pytest.mark.forms("advisory")
def test_a_key_with_quotes_and_backslashes_is_taken_and_let_go_under_a_limit(db, form) -> None:
    """A key whose text has quotes and backslashes is taken and let go as any
    other, under a limit too (where one statement tries the slots and then
    the key): every row runs once, never more than the limit at once."""
    table = make_table(form, advisory_lock="it's \\ \"{id}\"")
    db.create_table(table)
    rows = 30
    seen = Recorder()
    lock = threading.Lock()
    running, most = [0], [0]

    def handle(d: libqueue.Delivery) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1
        seen.add(d.payload)

    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=4, concurrency=2, poll_interval_ms=POLL_MS) as sub:
            sub.run(handle)
            wait_until(lambda: db.count("jobs") == 0, what="every row")
            wait_until(lambda: sub.stat("settled") == rows, what="every settlement")
            assert sub.stat("settle_errors") == 0
    assert sorted(seen.snapshot()) == sorted(b"%d" % i for i in range(rows))
    assert most[0] <= 2


@pytest.mark.forms("advisory")
def test_a_limit_above_one_statements_tries_fills_every_slot(db, form) -> None:
    """concurrency=20, more slots than one statement tries on MySQL (16 a
    statement, the rest in the next): handlers that wait for one another
    reach 20 at once, never more."""
    table = make_table(form)
    db.create_table(table)
    limit, rows = 20, 60
    lock = threading.Condition()
    running, most, seen = [0], [0], Recorder()

    def handle(d: libqueue.Delivery) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            lock.notify_all()
            lock.wait_for(lambda: running[0] >= limit or most[0] >= limit, timeout=2)
            running[0] -= 1
        seen.add(d.payload)

    with libqueue.Broker(db.url, pool_size=limit + 6) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=limit + 4, concurrency=limit, poll_interval_ms=POLL_MS) as sub:
            sub.run(handle)
            wait_until(lambda: sub.stat("settled") == rows, what="every settlement")
    assert sorted(seen.snapshot()) == sorted(b"%d" % i for i in range(rows))
    assert most[0] == limit, "%d ran at once under concurrency=%d" % (most[0], limit)
