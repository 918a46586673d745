"""Acks behind the handlers (the lease form with coalesced settlements): a
handler's return hands its ack to the subscription's acker and the worker
moves on; the acker commits every ack gathered meanwhile at once."""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Any, Dict

import pytest

import libqueue

from helpers import POLL_MS, Recorder, far_future, make_table, run_then_stop, wait_until
from statement_counter import StatementCounter


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


def _carried(text: str) -> bool:
    """The acks' statement a claim carries (sqlset.ack_set_whole)."""
    return '"lq_acked"' in text and "CAST(CASE" in text


@pytest.mark.dialect("postgresql")
@pytest.mark.forms("lease")
def test_a_claim_alone_carries_the_acks_behind_its_handlers(db, form) -> None:
    """On PostgreSQL a claim alone (no limit, FIFO group or holds) sends the
    acks queued behind the handlers in its own round trip and commit: a
    drain keeps one session busy, not a claimer's and an acker's. Every row
    is acked once."""
    table = make_table(form)
    db.create_table(table)
    rows = 400
    seen = Recorder()
    relay = StatementCounter.before(db.url)
    try:
        with libqueue.Broker(relay.url(db.url)) as broker:
            broker.publish_many(table, [b"%d" % i for i in range(rows)])
            with broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS) as sub:
                sub.run(lambda d: seen.add(d.payload))
                wait_until(lambda: sub.stat("acked") == rows, what="every row acked")
    finally:
        relay.close()
    assert relay.error is None
    assert sorted(seen.snapshot()) == sorted(b"%d" % i for i in range(rows))
    assert db.count("jobs") == 0
    carried = relay.counted(_carried)
    assert carried > 0, "no claim carried an ack"


@pytest.mark.dialect("postgresql")
@pytest.mark.forms("lease")
def test_acks_a_failed_claim_carried_go_on_their_own(db, form) -> None:
    """The claims start to fail (a trigger refuses every lease) while the
    handlers of rows already claimed run: the acks the failing claims carry
    roll back with them, then run on their own. Every row is acked, none
    comes back."""
    table = make_table(form)
    db.create_table(table)
    rows = 8
    release = threading.Event()
    started = Recorder()
    relay = StatementCounter.before(db.url)
    try:
        with libqueue.Broker(relay.url(db.url)) as broker:
            broker.publish_many(table, [b"%d" % i for i in range(rows)])
            # No poll: the claims after the first are those the runs' ends wake.
            with broker.subscribe(table, workers=rows, poll_interval_ms=60000) as sub:
                def handle(d: libqueue.Delivery) -> None:
                    started.add(d.id)
                    release.wait(30)

                sub.run(handle)
                wait_until(lambda: len(started.snapshot()) == rows, what="every row started")
                db.execute("CREATE FUNCTION no_lease() RETURNS trigger LANGUAGE plpgsql AS $$ "
                           "BEGIN IF NEW.locked_until IS NOT NULL AND OLD.locked_until IS NULL "
                           "THEN RAISE EXCEPTION 'no lease here'; END IF; RETURN NEW; END $$")
                db.execute("CREATE TRIGGER no_lease BEFORE UPDATE ON jobs FOR EACH ROW "
                           "EXECUTE FUNCTION no_lease()")
                # Rows the failing claims meet, written past the broker (whose
                # publish would wake a claim at once).
                db.execute("INSERT INTO jobs (payload) VALUES ('later'), ('later'), ('later'), ('later')")
                release.set()
                wait_until(lambda: sub.stat("acked") == rows, what="every started row acked")
                carried = relay.counted(_carried)
    finally:
        release.set()
        relay.close()
    assert relay.error is None
    assert carried > 0, "no claim carried an ack"
    assert db.count("jobs") == 4  # the rows published after, never leased
    assert db.count("jobs", "locked_until IS NOT NULL") == 0
