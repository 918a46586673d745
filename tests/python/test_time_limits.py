"""A delay never makes a row due earlier: one that passes the latest time
every database holds (9999-12-31T23:59:59.999Z) is refused, naming the
longest that fits, and the longest that fits is kept as given."""

from __future__ import annotations

import time

import pytest

import libqueue

from helpers import POLL_MS, make_table

YEAR_MS = 365 * 86_400_000
#: Milliseconds from the epoch to 9999-12-31T23:59:59.999Z.
LATEST_MS = 253_402_300_799_999


def longest_delay_now() -> int:
    return LATEST_MS - int(time.time() * 1000)


def year_of(db, column: str) -> int:
    value = db.scalar("SELECT %s FROM jobs" % db.quote(column))
    return int(str(value)[:4])


@pytest.mark.parametrize("delay_ms", [9000 * YEAR_MS, 2**62, 2**63 - 1])
def test_a_delay_past_the_latest_time_is_refused(db, broker, delay_ms: int) -> None:
    table = make_table("lease", retry_after="retry_after")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="9999-12-31.*the longest delay now is"):
        broker.publish(table, b"late", delay_ms=delay_ms)
    assert db.count("jobs") == 0


def test_the_longest_delay_that_fits_is_kept(db, broker) -> None:
    table = make_table("lease", retry_after="retry_after")
    db.create_table(table)
    broker.publish(table, b"late", delay_ms=longest_delay_now() - 86_400_000)
    assert year_of(db, "retry_after") == 9999
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        assert sub.next(timeout=0.3) is None  # not due: no claim takes it


def test_retry_after_past_the_latest_time_is_refused_and_the_row_stays_held(db, broker) -> None:
    table = make_table("lease", retry_after="retry_after")
    db.create_table(table)
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(timeout=5) as delivery:
            with pytest.raises(libqueue.Misuse, match="the longest delay now is"):
                delivery.retry_after(2**62)
            delivery.retry_after(longest_delay_now() - 86_400_000)
    assert year_of(db, "retry_after") == 9999
    assert db.count("jobs") == 1


def test_a_negative_delay_is_refused(db, broker) -> None:
    table = make_table("lease", retry_after="retry_after")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="negative"):
        broker.publish(table, b"x", delay_ms=-1)
