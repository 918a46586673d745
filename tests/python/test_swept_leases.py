"""Swept leases (PostgreSQL, lease form). A table made by create_table keeps
the claim order of its free rows (lease NULL) in <table>_claim_free and its
leases in <table>_leased; its subscriptions' claims read the free rows
alone, and a sweep, at most a second apart, in a claim's statement or
before it, clears every lease run out, so that its row is claimed again. A table without
<table>_leased (made before, or by hand) is claimed as it always was: the
claim takes a row whose lease ran out itself. Both keep the same promises:
a lease run out gives its row back with its attempt counted, a late
settlement of it is refused, and a lease kept alive is never taken."""

from __future__ import annotations

import logging
import time
from typing import Any, Dict

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until
from statement_counter import StatementCounter

pytestmark = [pytest.mark.dialect("postgresql"), pytest.mark.through_pgbouncer]


def index_definitions(db: Any) -> Dict[str, str]:
    return dict(db.query("SELECT indexname, indexdef FROM pg_indexes "
                         "WHERE schemaname = current_schema() AND tablename = 'jobs'"))


def scans(db: Any) -> Dict[str, int]:
    """Each index's scans, as the statistics count them once a session ends."""
    return dict(db.query("SELECT indexrelname::text, idx_scan FROM pg_stat_user_indexes "
                         "WHERE schemaname = current_schema() AND relname = 'jobs'"))


def made_by_the_library(db: Any, broker: libqueue.Broker, swept: bool, **roles: Any) -> libqueue.Table:
    table = make_table("lease", **roles)
    broker.create_table(table)
    if not swept:
        db.execute("DROP INDEX jobs_leased")
    return table


def test_create_table_keeps_the_free_rows_and_the_leases_apart(db, broker) -> None:
    broker.create_table(make_table("lease", processed_at="processed_at"))
    defs = index_definitions(db)
    assert "WHERE ((locked_until IS NULL) AND (processed_at IS NULL))" in defs["jobs_claim_free"]
    assert "(locked_until) WHERE (locked_until IS NOT NULL)" in defs["jobs_leased"]
    # The claim order of every row stays, for the readers of the queue's order.
    assert defs["jobs_claim_order"].endswith("(id) WHERE (processed_at IS NULL)")


def test_the_claims_read_the_free_rows_index_and_the_sweeps_the_leases(db, broker) -> None:
    table = made_by_the_library(db, broker, True)
    with libqueue.Broker(db.url) as own:
        own.publish_many(table, [b"x"] * 50)
        with own.subscribe(table, workers=2, poll_interval_ms=POLL_MS, lease_ms=1000) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: sub.stat("acked") == 50, what="the rows acked")
            time.sleep(0.6)  # a sweep is due every 250 ms at this lease
    # The sessions ended: their counts are in the statistics.
    wait_until(lambda: scans(db)["jobs_claim_free"] > 0 and scans(db)["jobs_leased"] > 0,
               what="scans of both indexes counted")


def test_a_limit_that_makes_the_leases_index_sweeps_from_the_first_open(db, broker) -> None:
    """A table of before, under a limit that counts its leased rows: the
    subscription makes <table>_leased, and its own claims read the free rows
    at once, not only those of the next open."""
    table = made_by_the_library(db, broker, False)
    with libqueue.Broker(db.url) as own:
        own.publish_many(table, [b"x"] * 2000)  # enough that the plans read the indexes
        with own.subscribe(table, workers=2, concurrency=2, poll_interval_ms=POLL_MS,
                           lease_ms=1000) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: sub.stat("acked") == 2000, what="the rows acked")
    assert "jobs_leased" in index_definitions(db)
    wait_until(lambda: scans(db)["jobs_claim_free"] > 0, what="claims of the free rows counted")


@pytest.mark.parametrize("swept", [True, False], ids=["swept", "table-of-before"])
def test_a_lease_run_out_gives_its_row_back_and_fences_the_late_settlement(
        db, broker, other_broker, swept: bool) -> None:
    table = made_by_the_library(db, broker, swept)
    row = broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS, lease_ms=2000) as first, \
            other_broker.subscribe(table, poll_interval_ms=POLL_MS, lease_ms=2000) as second:
        mine = first.next(5)
        assert mine is not None and mine.id == row and mine.attempt == 1
        db.execute("UPDATE jobs SET locked_until = %s" % db.past)  # it runs out
        theirs = second.next(5)
        assert theirs is not None and theirs.id == row and theirs.attempt == 2
        with pytest.raises(libqueue.LeaseLost):
            mine.ack()
        theirs.ack()
    assert db.count("jobs") == 0


@pytest.mark.parametrize("swept", [True, False], ids=["swept", "table-of-before"])
def test_a_lease_kept_alive_is_never_swept(db, broker, other_broker, swept: bool) -> None:
    table = made_by_the_library(db, broker, swept)
    row = broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS, lease_ms=1000) as first, \
            other_broker.subscribe(table, poll_interval_ms=POLL_MS, lease_ms=1000) as second:
        mine = first.next(5)
        assert mine is not None and mine.id == row
        # Three and a half leases long, extended every half lease, swept
        # for every 250 ms by both subscriptions.
        assert second.next(3.5) is None
        mine.ack()
    assert db.count("jobs") == 0


def test_an_idle_subscription_sweeps_within_its_claims(db, broker) -> None:
    """One statement a poll: a claim that a sweep is due carries it, so an
    idle subscription sends no sweep of its own."""
    table = made_by_the_library(db, broker, True)
    relay = StatementCounter.before(db.url)
    try:
        with libqueue.Broker(relay.url(db.url)) as own:
            with own.subscribe(table, workers=2, poll_interval_ms=POLL_MS, lease_ms=1000) as sub:
                sub.run(lambda d: None)
                # A sweep is due every 250 ms at this lease.
                wait_until(lambda: relay.counted(lambda text: "lq_swept" in text) >= 3,
                           what="three claims that swept")
                # A row whose lease ran out: a claim sweeps it, the next one takes it.
                db.execute("INSERT INTO jobs (payload, locked_until) VALUES ('x', %s)" % db.past)
                wait_until(lambda: sub.stat("acked") == 1, what="the row of a lease run out")
                # A free row, claimed by a claim that sweeps or not.
                attempts = []
                sub.stop()
            with own.subscribe(table, workers=2, poll_interval_ms=POLL_MS, lease_ms=1000) as sub:
                sub.run(lambda d: attempts.append(d.attempt))
                swept_before = relay.counted(lambda text: "lq_swept" in text)
                own.publish_many(table, [b"y"] * 20)
                wait_until(lambda: sub.stat("acked") == 20, what="the free rows acked")
                assert relay.counted(lambda text: "lq_swept" in text) > swept_before
    finally:
        relay.close()
    assert relay.error is None
    assert relay.counted(lambda text: text.startswith("UPDATE") and "SKIP LOCKED" in text) == 0
    assert relay.counted(lambda text: "lq_claimed" in text and "lq_swept" not in text) > 0
    assert attempts == [1] * 20


@pytest.mark.parametrize("limit", [{}, {"concurrency": 2}, {"fifo": True}], ids=["alone", "concurrency", "fifo"])
def test_only_a_claim_alone_prepares_the_claim_that_sweeps(db, broker, limit) -> None:
    """A limited or FIFO subscription sends its sweep before its claim, in
    the claim's transaction: it never runs the claim that carries a sweep,
    and does not prepare it either."""
    fifo = limit.pop("fifo", False)
    table = made_by_the_library(db, broker, True, group="grp", fifo=fifo)
    relay = StatementCounter.before(db.url)
    try:
        with libqueue.Broker(relay.url(db.url)) as own:
            own.publish_many(table, [dict(payload=b"x", group="g") for _ in range(5)])
            with own.subscribe(table, workers=2, group="g", poll_interval_ms=POLL_MS, lease_ms=1000,
                               **limit) as sub:
                sub.run(lambda d: None)
                wait_until(lambda: sub.stat("acked") == 5, what="the rows acked")
                time.sleep(0.6)  # sweeps are due every 250 ms at this lease
    finally:
        relay.close()
    assert relay.error is None
    assert relay.counted(lambda text: 'SET "locked_until" = NULL' in text) > 0, "no sweep ran"
    prepared = relay.counted(lambda text: "lq_swept" in text, of="parses")
    assert (prepared == 0) == bool(limit or fifo)


def test_a_sweep_that_fails_holds_no_claim_up(db, broker, caplog) -> None:
    """A sweep that fails (here a trigger refuses it; a sweep past
    statement_timeout would do the same) is logged, and the claims go on:
    the free rows are claimed, the lease run out waits."""
    table = made_by_the_library(db, broker, True)
    db.execute("CREATE FUNCTION no_sweep() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
               "IF NEW.locked_until IS NULL AND OLD.locked_until IS NOT NULL THEN "
               "RAISE EXCEPTION 'no sweep here'; END IF; RETURN NEW; END $$")
    db.execute("CREATE TRIGGER no_sweep BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION no_sweep()")
    db.execute("INSERT INTO jobs (payload, locked_until) VALUES ('stuck', %s)" % db.past)
    caplog.set_level(logging.WARNING, logger="libqueue")
    with libqueue.Broker(db.url) as own:
        own.publish_many(table, [b"x"] * 20)
        with own.subscribe(table, workers=2, poll_interval_ms=POLL_MS, lease_ms=1000) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: sub.stat("acked") == 20, what="the free rows acked")
            assert sub.stat("acked") == 20
    assert db.count("jobs") == 1
    assert any("no sweep here" in r.getMessage() for r in caplog.records if r.name == "libqueue")


def test_a_backlog_of_leases_run_out_is_swept_in_bounded_steps(db, broker, caplog) -> None:
    """After a fleet's crash: 12,000 leases run out. A sweep clears 10,000
    at most, and the next follows at once; every row is claimed again."""
    table = made_by_the_library(db, broker, True)
    db.execute("INSERT INTO jobs (payload, locked_until) SELECT 'x', %s "
               "FROM generate_series(1, 12000)" % db.past)
    caplog.set_level(logging.INFO, logger="libqueue")
    with libqueue.Broker(db.url) as own:
        with own.subscribe(table, workers=4, poll_interval_ms=POLL_MS, lease_ms=60000) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: sub.stat("acked") == 12000, timeout=60, what="every row acked")
    assert db.count("jobs") == 0
    swept = [r.getMessage() for r in caplog.records
             if r.name == "libqueue" and "leases had run out" in r.getMessage()]
    assert swept[:2] == ["10000 leases had run out: their rows are due again",
                         "2000 leases had run out: their rows are due again"], swept
