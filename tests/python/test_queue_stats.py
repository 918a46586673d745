"""Broker.stats (lq_queue_stats, lq_queue_attempts): each state of a queue
counted on every database and form, within the cap, and bad calls refused."""

from __future__ import annotations

import pytest

import libqueue
from helpers import make_table


def _table(form: str, **roles) -> libqueue.Table:
    return make_table(form, retry_after="retry_after", dead_letter="jobs_dead", **roles)


def test_an_empty_queue_reads_zero(broker: libqueue.Broker, form: str) -> None:
    jobs = _table(form)
    broker.create_table(jobs)
    stats = broker.stats(jobs)
    assert (stats.due, stats.delayed, stats.dead_letters, stats.head_age_s) == (0, 0, 0, None)
    assert stats.in_work == (0 if form == "lease" else None)
    assert stats.attempts == {} and not stats.capped


def test_each_state_is_counted(broker: libqueue.Broker, db, form: str) -> None:
    jobs = _table(form)
    broker.create_table(jobs)
    broker.publish_many(jobs, [b"a", b"b", b"c", b"d"])
    broker.publish(jobs, b"later", delay_ms=3_600_000)
    db.execute("UPDATE jobs SET retry_after = %s WHERE payload <> ?" % db.past, (b"later",))
    with broker.subscribe(jobs, workers=2, max_attempts=5) as sub:
        held = sub.next(timeout=10)
        dead = sub.next(timeout=10)
        dead.dead_letter()
        stats = broker.stats(jobs)
        assert stats.delayed == 1
        assert stats.dead_letters == 1
        if form == "lease":
            # The pull subscription may hold more rows claimed ahead.
            assert stats.in_work >= 1 and stats.due + stats.in_work == 3
        else:
            assert stats.in_work is None and stats.due == 3  # rows in work among them
        assert stats.head_age_s is None or stats.due > 0
        assert sum(stats.attempts.values()) == 4  # the delayed row too, not the dead one
        held.ack()
    stats = broker.stats(jobs)
    assert (stats.due, stats.delayed, stats.dead_letters) == (2, 1, 1)
    assert stats.head_age_s is not None and stats.head_age_s > 3600  # due since 2000
    assert stats.in_work == (0 if form == "lease" else None)


def test_counts_stop_at_the_cap(broker: libqueue.Broker, form: str) -> None:
    jobs = _table(form)
    broker.create_table(jobs)
    broker.publish_many(jobs, [b"x"] * 12)
    stats = broker.stats(jobs, cap=5)
    assert stats.due == 5 and stats.capped
    assert sum(stats.attempts.values()) == 5  # the first five in claim order
    assert broker.stats(jobs, cap=12).due == 12


def test_attempts_gather_past_the_last_bucket(broker: libqueue.Broker, db) -> None:
    jobs = _table("lease")
    broker.create_table(jobs)
    broker.publish_many(jobs, [b"1", b"2", b"3"])
    db.execute("UPDATE jobs SET attempt = 40 WHERE payload = ?", (b"3",))
    db.execute("UPDATE jobs SET attempt = 12 WHERE payload = ?", (b"2",))
    assert broker.stats(jobs).attempts == {1: 1, 9: 2}


def test_a_group_is_read_alone(broker: libqueue.Broker) -> None:
    jobs = libqueue.Table("jobs", payload="payload", attempt="attempt",
                          locked_until="locked_until", retry_after="retry_after",
                          group="queue", dead_letter="dead")
    broker.create_table(jobs)
    broker.publish_many(jobs, [{"payload": b"a", "group": "mail"},
                               {"payload": b"b", "group": "mail"},
                               {"payload": b"c", "group": "sms"}])
    assert broker.stats(jobs, group="mail").due == 2
    assert broker.stats(jobs, group="sms").due == 1
    with broker.subscribe(jobs, group="sms") as sub:
        sub.next(timeout=10).dead_letter()
    assert broker.stats(jobs, group="sms").dead_letters == 1
    with pytest.raises(libqueue.Misuse, match="name the group"):
        broker.stats(jobs)


def test_bad_calls_are_refused(broker: libqueue.Broker) -> None:
    jobs = _table("lease")
    broker.create_table(jobs)
    with pytest.raises(libqueue.Misuse, match="cap"):
        broker.stats(jobs, cap=0)
    with pytest.raises(libqueue.Misuse, match="no group column"):
        broker.stats(jobs, group="x")
    missing = libqueue.Table("nowhere", payload="payload", locked_until="locked_until")
    with pytest.raises(libqueue.Error, match="nowhere"):
        broker.stats(missing)
    broker.close()
    with pytest.raises(libqueue.Closed):
        broker.stats(jobs)


def test_without_a_due_column_only_due_rows_are_counted(broker: libqueue.Broker) -> None:
    jobs = libqueue.Table("plain", payload="payload", locked_until="locked_until")
    broker.create_table(jobs)
    broker.publish_many(jobs, [b"a", b"b"])
    stats = broker.stats(jobs)
    assert (stats.due, stats.delayed, stats.in_work) == (2, 0, 0)
    assert (stats.dead_letters, stats.head_age_s, stats.attempts) == (None, None, None)
