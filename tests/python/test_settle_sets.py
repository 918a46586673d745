"""Acks of a set of rows in one statement: a batch handler's return, and the
acks coalesced from concurrent deliveries."""

from __future__ import annotations

import pytest

import libqueue

from helpers import POLL_MS, Recorder, far_future, make_table, wait_until


def test_a_batch_acked_by_its_return(db, form) -> None:
    """Every row of every batch is acked when the handler returns, whatever
    the form: none is left, none is delivered twice."""
    table = make_table(form)
    db.create_table(table)
    rows = 57
    payloads = [b"%d\x00\xff" % i for i in range(rows - 1)] + [b""]  # each whole, with its row
    with libqueue.Broker(db.url) as broker:
        ids = broker.publish_many(table, payloads)
        seen = Recorder()
        with broker.subscribe(table, batch=20, workers=2, poll_interval_ms=POLL_MS) as sub:
            sub.run_batch(lambda batch: [seen.add((d.id, d.payload)) for d in batch] and None)
            wait_until(lambda: db.count("jobs") == 0, what="every row")
            # The count follows the statement: wait for it too.
            wait_until(lambda: sub.stat("settled") == rows, what="every settlement")
    assert sorted(seen.snapshot()) == sorted(zip(ids, payloads))


def test_a_batch_acked_into_processed_at(db, form) -> None:
    """With a processed_at column the set's ack marks every row and keeps it."""
    table = make_table(form, processed_at="processed_at")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(12)])
        with broker.subscribe(table, batch=12, poll_interval_ms=POLL_MS) as sub:
            sub.run_batch(lambda batch: None)
            wait_until(lambda: db.count("jobs", "processed_at IS NOT NULL") == 12, what="every row")
    assert db.count("jobs") == 12
    if form == "lease":
        assert db.count("jobs", "locked_until IS NOT NULL") == 0


@pytest.mark.forms("lease")
def test_a_lost_lease_in_a_set_fails_that_row_alone(db, form) -> None:
    """One row of an acked set whose lease another claim took: the others are
    acked, that one is left to its new holder."""
    table = make_table(form)
    db.create_table(table)
    later = far_future(db)
    victims = Recorder()
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(6)])
        with broker.subscribe(table, batch=6, poll_interval_ms=POLL_MS) as sub:
            @sub.run_batch
            def handle(batch: list) -> None:
                if len(victims):
                    return
                victim = batch[len(batch) // 2]
                # Another holder's lease on one row: a token of its own.
                victim.execute("UPDATE jobs SET locked_until = %s WHERE id = %d"
                               % (later, victim.id))
                victims.add(victim.id)

            wait_until(lambda: db.count("jobs") == 1, what="every row but one")
            wait_until(lambda: sub.stat("settled") == 6, what="every settlement")
    assert [r[0] for r in db.query("SELECT id FROM jobs")] == victims.snapshot()


@pytest.mark.forms("lease")
def test_coalesced_acks_with_and_without_a_wait(db, form) -> None:
    """Concurrent acks commit together whether the leader waits for the
    deliveries in work or not; a wait out of range is refused by name."""
    table = make_table(form)
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        with pytest.raises(libqueue.Misuse) as info:
            broker.subscribe(table, coalesce_wait_us=-1)
        assert "coalesce_wait_us" in str(info.value)
        for wait in (0, 2000):
            broker.publish_many(table, [b"%d" % i for i in range(40)])
            with broker.subscribe(table, workers=8, coalesce=1, coalesce_wait_us=wait,
                                  poll_interval_ms=POLL_MS) as sub:
                sub.run(lambda d: None)
                wait_until(lambda: db.count("jobs") == 0, what="every row")
                wait_until(lambda: sub.stat("settled") == 40, what="every settlement")


@pytest.mark.forms("lease")
def test_a_lone_ack_coalesced_with_retries_is_run(db, form) -> None:
    """Concurrent settlements where most are retries: a commit that gathers
    one ack among retries runs that ack too, so every row is done at once
    (none waits out its lease)."""
    table = make_table(form)
    db.create_table(table)
    rows = 120
    seen = Recorder()
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=6, coalesce=1, coalesce_wait_us=2000,
                              poll_interval_ms=POLL_MS) as sub:
            def handle(delivery) -> None:
                seen.add((delivery.id, delivery.attempt))
                if delivery.attempt == 1 and delivery.id % 4:
                    raise RuntimeError("first attempt fails")

            sub.run(handle)
            wait_until(lambda: db.count("jobs") == 0, what="every row")
    assert len({row for row, _ in seen.snapshot()}) == rows
