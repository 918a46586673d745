"""A claimed row waiting in the process for a worker whose lease runs out
before it is handed out (its extensions came late: here the test holds the
row's lock, the write lock on SQLite, past the lease's end): where another
claim took the row meanwhile, it is not handed out, and that claim's lease
is left as it is; where none did, it is extended first and handed out with
a lease that holds."""

from __future__ import annotations

import contextlib
import datetime
import time
from typing import Any, Optional

import pytest

from helpers import POLL_MS, far_future, make_table, wait_until

LEASE_MS = 1000


def lease_end(value: Any) -> float:
    """A lease column's value as epoch seconds (naive times are UTC)."""
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.timestamp()


@contextlib.contextmanager
def row_locked(db: Any, row: int, taken_by: Optional[str]):
    """Holds the row's lock (SQLite: the write lock) in a transaction of the
    test's own, yielding the row's lease expiry as it stands; at the end,
    another claim's lease `taken_by` (or none) is written, and it commits."""
    conn = db.connect()
    steal = "UPDATE jobs SET locked_until = %s WHERE id = %d" % (taken_by, row)
    try:
        if db.dialect == "sqlite":
            conn.execute("BEGIN IMMEDIATE")
            run = conn.execute
            expiry = conn.execute("SELECT locked_until FROM jobs WHERE id = %d" % row).fetchone()[0]
        else:
            cur = conn.cursor()
            run = cur.execute
            run("BEGIN")
            if taken_by and db.dialect == "mysql":
                # InnoDB: an update after the keeper's wait began would be a
                # deadlock's victim; the first write takes the lock instead,
                # and keeps the expiry it replaced.
                run(steal.replace("WHERE", "WHERE (@was := locked_until) IS NOT NULL AND"))
                run("SELECT @was")
                taken_by = None
            else:
                run("SELECT locked_until FROM jobs WHERE id = %d FOR UPDATE" % row)
            expiry = cur.fetchone()[0]
        yield lease_end(expiry)
        if taken_by:
            run(steal)
        run("COMMIT")
    finally:
        conn.close()


@pytest.mark.parametrize("taken", [True, False], ids=["taken", "not-taken"])
def test_a_waiting_row_whose_lease_ran_out_is_fenced(db, broker, taken: bool) -> None:
    fence(db, broker, taken)


def test_a_waiting_row_whose_lease_ran_out_under_a_limit_is_given_back(db, broker) -> None:
    """Where a limit counts leased rows, a lease that ran out counted for no
    claim meanwhile, so another may have taken its room: extended late, the
    row is given back unrun (and claimed again), not run over the limit."""
    counts = fence(db, broker, False, partition_concurrency=1)
    assert counts["lease_lost"] >= 1, "a lease extended after it ran out started a run"
    assert counts["claimed"] >= 3, "the row given back was not claimed again"


def fence(db, broker, taken: bool, **limits: Any) -> dict:
    """Claims two rows, holds the second's lock past its lease while the
    first is in work, then takes whatever comes; returns the
    subscription's lease_lost and claimed counts."""
    table = make_table("lease", partition_key="account")
    db.create_table(table)
    first, waiting = broker.publish_many(table, [dict(payload=b"first", partition_key="a"),
                                                 dict(payload=b"waiting", partition_key="b")])
    with broker.subscribe(table, workers=2, lease_ms=LEASE_MS, poll_interval_ms=POLL_MS,
                          **limits) as sub:
        held = sub.next(5)
        assert held is not None and held.id == first
        wait_until(lambda: sub.stat("waiting") == 1, what="the second row claimed ahead")
        with row_locked(db, waiting, far_future(db) if taken else None) as expiry:
            time.sleep(max(0.0, expiry - time.time()) + 0.3)  # its lease is over
        handed = []
        while True:
            d = sub.next(1.0)
            if d is None:
                break
            handed.append(d.id)
            if d.id == waiting:
                assert d.lease_expiry_ms > time.time() * 1000, "handed out with its lease over"
            d.ack()  # `first` may come again: its lease ran out too where the lock was the file's
            d.release()
        if taken:
            assert waiting not in handed, "a row another claim holds was handed out"
            assert sub.stat("lease_lost") >= 1
            assert db.count("jobs", "locked_until = %s" % far_future(db)) == 1
        else:
            assert waiting in handed
            assert db.count("jobs", "id = %d" % waiting) == 0
        held.release()
        return {name: sub.stat(name) for name in ("lease_lost", "claimed")}


def test_a_row_released_again_and_again_keeps_its_lease_length(db, broker) -> None:
    """A row released and claimed again 20 times within a second or so is
    leased for about lease_ms from now each time. (Where leases keep whole
    seconds, MySQL, each claim used to push the row's lease a second
    further: 49 s for a 30 s lease by the 20th.)"""
    table = make_table("lease")
    db.create_table(table)
    broker.publish(table, b"again")
    furthest = 0.0
    with broker.subscribe(table, workers=1, lease_ms=30000, poll_interval_ms=POLL_MS) as sub:
        for i in range(20):
            d = sub.next(5)
            assert d is not None, "the row did not come back after its release"
            furthest = max(furthest, d.lease_expiry_ms / 1000 - time.time())
            if i < 19:
                d.release()
            else:
                d.ack()
    assert db.count("jobs") == 0
    assert furthest <= 32, "a lease of 30 s ended %.1f s from now" % furthest


def test_a_short_lease_stays_short_beside_a_longer_one(db, broker, other_broker) -> None:
    """Leases are later than the last of their own length in the process,
    not than every lease of the process: one with lease_ms=2000 beside one of
    60 s gets leases of about 2 s, so its rows come back that soon after a
    crash. (Where leases keep whole seconds, MySQL, the rule is per row and
    length: docs/guarantees.md.)"""
    table = make_table("lease")
    db.create_table(table)
    broker.publish_many(table, [b"long", b"short"])
    with broker.subscribe(table, lease_ms=60000, poll_interval_ms=POLL_MS) as long_sub:
        held = long_sub.next(5)
        assert held is not None and held.lease_expiry_ms / 1000 - time.time() > 50
        with other_broker.subscribe(table, lease_ms=2000, poll_interval_ms=POLL_MS) as short_sub:
            d = short_sub.next(5)
            assert d is not None
            left = d.lease_expiry_ms / 1000 - time.time()
            assert left < 3.5, "a 2 s lease ends in %.1f s" % left
            d.ack()
        held.ack()
