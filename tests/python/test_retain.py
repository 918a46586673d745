"""Retention in a subscription's idle time (retain_ms, dead_letter_retain_ms):
a working subscription deletes the finished rows and dead letters older than
its option and nothing else, on every database; the options a table cannot
serve are refused at open."""

from __future__ import annotations

from typing import Any

import pytest

import libqueue
from helpers import make_table, wait_until

HOUR_MS = 3600 * 1000


def _ids(db: Any, table: str) -> list:
    return sorted(r[0] for r in db.query("SELECT id FROM %s" % table))


def test_old_finished_rows_go_while_the_queue_idles(db: Any, broker: libqueue.Broker,
                                                    form: str) -> None:
    table = make_table(form, processed_at="processed_at")
    broker.create_table(table)
    ids = broker.publish_many(table, [b"%d" % i for i in range(5)])
    with broker.subscribe(table, workers=1) as sub:
        finished = []
        for _ in range(3):
            d = sub.next(timeout=10)
            finished.append(d.id)
            d.ack()
    old, young = finished[:2], finished[2]
    db.execute("UPDATE jobs SET processed_at = %s WHERE id IN (%s)"
               % (db.past, ", ".join(str(int(i)) for i in old)))
    with broker.subscribe(table, workers=1, poll_interval_ms=50, retain_ms=HOUR_MS) as sub:
        held = sub.next(timeout=10)  # one in work, one queued: neither goes
        wait_until(lambda: set(old).isdisjoint(_ids(db, "jobs")), what="the old rows pruned")
        left = _ids(db, "jobs")
        assert left == sorted(set(ids) - set(old)) and young in left and held.id in left
        held.ack()
    assert broker.stats(table).due == 1


@pytest.mark.forms("lease")
def test_a_backlog_of_finished_rows_goes_in_batches(db: Any, broker: libqueue.Broker,
                                                   form: str) -> None:
    table = make_table(form, processed_at="processed_at")
    broker.create_table(table)
    queued = broker.publish_many(table, [b"q"])
    for start in range(0, 2500, 500):
        db.execute("INSERT INTO jobs (id, payload, attempt, processed_at) VALUES " + ", ".join(
            "(%d, ?, 1, %s)" % (i + 100, db.past) for i in range(start, start + 500)), [b"p"] * 500)
    with broker.subscribe(table, workers=1, poll_interval_ms=50, retain_ms=HOUR_MS) as sub:
        held = sub.next(timeout=10)  # claims start with the first next()
        wait_until(lambda: _ids(db, "jobs") == queued, what="2500 finished rows pruned")
        held.ack()


@pytest.mark.forms("lease")
def test_old_dead_letters_go(db: Any, broker: libqueue.Broker, form: str) -> None:
    table = make_table(form, retry_after="retry_after", dead_letter="jobs_dead")
    broker.create_table(table)
    broker.publish_many(table, [b"%d" % i for i in range(4)])
    with broker.subscribe(table, workers=1) as sub:
        for _ in range(3):
            sub.next(timeout=10).dead_letter()
    dead = [r["id"] for r in broker.dead_letters(table)]
    db.execute("UPDATE jobs_dead SET retry_after = %s WHERE id = %d" % (db.past, int(dead[0])))
    with broker.subscribe(table, workers=1, poll_interval_ms=50,
                          dead_letter_retain_ms=HOUR_MS) as sub:
        held = sub.next(timeout=10)  # the fourth row, held: claims start with next()
        wait_until(lambda: [r["id"] for r in broker.dead_letters(table)] == dead[1:],
                   what="the old dead letter pruned")
        held.ack()


@pytest.mark.forms("lease")
def test_what_a_table_cannot_serve_is_refused_at_open(broker: libqueue.Broker, form: str) -> None:
    table = make_table(form, retry_after="retry_after")
    broker.create_table(table)
    with pytest.raises(libqueue.Misuse, match="retain_ms needs a processed_at column"):
        broker.subscribe(table, retain_ms=1000)
    with pytest.raises(libqueue.Misuse, match="dead_letter_retain_ms needs dead letters"):
        broker.subscribe(table, dead_letter_retain_ms=1000)
    with pytest.raises(libqueue.Misuse):
        broker.subscribe(table, retain_ms=-1)
