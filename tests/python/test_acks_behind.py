"""Acks behind the handlers (the lease form with coalesced settlements): a
handler's return hands its ack to the subscription's acker and the worker
moves on; the acker commits every ack gathered meanwhile at once."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Dict

import pytest

import libqueue

from helpers import POLL_MS, Recorder, far_future, make_table, run_then_stop, wait_until


@pytest.mark.forms("lease")
def test_every_row_is_acked_and_claims_look_ahead(db, form) -> None:
    """Fast handlers: every row is acked once, and on a server, whose claims
    take a round trip and a commit, the claims ask for rows ahead of the free
    workers (with a row per free worker a claim takes 4 at most, so 300 rows
    would take 75 claims or more)."""
    table = make_table(form)
    db.create_table(table)
    rows = 300
    seen = Recorder()
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=4, coalesce=1, poll_interval_ms=POLL_MS) as sub:
            sub.run(lambda d: seen.add(d.payload))
            wait_until(lambda: db.count("jobs") == 0, what="every row")
            wait_until(lambda: sub.stat("settled") == rows, what="every settlement")
            claims = sub.stat("claims")
    assert sorted(seen.snapshot()) == sorted(b"%d" % i for i in range(rows))
    if db.dialect != "sqlite":  # where a claim's commit is slower than a handler
        assert claims < rows // 4, "%d claims for %d rows" % (claims, rows)


@pytest.mark.forms("lease")
@pytest.mark.parametrize("limit", [{}, {"concurrency": 2}, {"concurrency": 2, "workers": 2}],
                         ids=["unlimited", "at_a_limit", "at_a_limit_each_claim_reaches"])
def test_an_ack_behind_that_lost_its_lease_is_logged(db, form, caplog, limit) -> None:
    """The lease of one row passes to another holder while its handler runs:
    its ack, run behind the handler, changes nothing and says so in the log;
    the other rows are acked. At a limit the ack may be carried by a claim
    (where each claim takes all the room left, it is), whose transaction
    then rolls back and lets the acks run on their own."""
    caplog.set_level(logging.WARNING, logger="libqueue")
    table = make_table(form)
    db.create_table(table)
    later = far_future(db)
    victims = Recorder()
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(8)])
        options: Dict[str, Any] = dict(workers=4, coalesce=1, poll_interval_ms=POLL_MS)
        options.update(limit)
        with broker.subscribe(table, **options) as sub:
            def handle(d: libqueue.Delivery) -> None:
                if d.payload == b"3":
                    d.execute("UPDATE jobs SET locked_until = %s WHERE id = %d" % (later, d.id))
                    victims.add(d.id)

            sub.run(handle)
            wait_until(lambda: db.count("jobs") == 1, what="every row but one")
            wait_until(lambda: sub.stat("settled") == 8, what="every settlement")
    assert [r[0] for r in db.query("SELECT id FROM jobs")] == victims.snapshot()
    lost = [r.getMessage() for r in caplog.records
            if r.name == "libqueue" and "acking after the handler" in r.getMessage()]
    assert len(lost) == 1 and "lease" in lost[0], lost


@pytest.mark.forms("lease")
def test_stopping_runs_the_acks_still_behind(db, form) -> None:
    """A subscription stopped while acks are queued runs them before it
    returns: every delivered row is settled, and none comes back."""
    table = make_table(form)
    db.create_table(table)
    rows = 200
    with libqueue.Broker(db.url) as broker:
        delivered = run_then_stop(broker, table, rows, coalesce=1)
    # The delivered rows are gone; those claimed ahead went back unleased.
    assert db.count("jobs") == rows - delivered
    assert db.count("jobs", "locked_until IS NOT NULL") == 0


@pytest.mark.dialect("sqlite")
@pytest.mark.forms("advisory")
def test_advisory_acks_go_behind_where_keys_live_in_the_process(db, form, caplog) -> None:
    """SQLite keeps advisory keys in the process, so a delivery whose handler
    returned holds only its key: its ack goes to the acker, like a lease's.
    Seen where the ack cannot commit (another connection holds the write
    lock past the statement timeout): the acker says so, and the row, its
    key let go, comes back and is acked."""
    caplog.set_level(logging.WARNING, logger="libqueue")
    table = make_table(form)
    db.create_table(table)
    blocker = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    runs = Recorder()

    def handle(d: libqueue.Delivery) -> None:
        runs.add(d.id)
        if len(runs.snapshot()) == 1:
            blocker.execute("BEGIN IMMEDIATE")  # the write lock, until let go below

    try:
        with libqueue.Broker(db.url, statement_timeout_ms=300) as broker:
            broker.publish(table, b"x")
            with broker.subscribe(table, workers=1, coalesce=1, poll_interval_ms=POLL_MS) as sub:
                sub.run(handle)
                wait_until(lambda: any("acking after the handler" in r.getMessage()
                                       for r in caplog.records if r.name == "libqueue"),
                           what="the acker's failed ack")
                blocker.execute("ROLLBACK")
                wait_until(lambda: db.count("jobs") == 0, what="the row acked at its second run")
    finally:
        blocker.close()
    assert len(runs.snapshot()) == 2
    assert not any("settling after the handler" in r.getMessage() for r in caplog.records)
