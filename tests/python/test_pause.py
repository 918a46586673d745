"""Pausing a queue (lq_queue_pause, lq_queue_resume, lq_queue_paused): a row
of the control table that every broker's subscriptions read before they
claim, at once in the pausing broker, within a poll interval elsewhere, and
at once on PostgreSQL through a notification; deliveries in work finish,
rows waiting for a worker go back; a whole table or one group."""

from __future__ import annotations

import time
from typing import Any

import pytest

import libqueue
from helpers import POLL_MS, make_table, wait_until


def _drain(sub: libqueue.Subscription, timeout: float = 0.5) -> int:
    n = 0
    while True:
        d = sub.next(timeout=timeout)
        if d is None:
            return n
        d.ack()
        n += 1


def test_a_paused_queue_claims_nothing_until_resumed(broker: libqueue.Broker,
                                                     other_broker: libqueue.Broker,
                                                     form: str) -> None:
    table = make_table(form)
    broker.create_table(table)
    assert not broker.paused(table)
    other_broker.pause(table)  # another broker: seen at the first look
    assert broker.paused(table)
    broker.publish_many(table, [b"a", b"b", b"c"])
    with broker.subscribe(table, workers=2, poll_interval_ms=POLL_MS) as sub:
        assert sub.next(timeout=0.5) is None
        assert sub.stat("delivered") == 0
        other_broker.resume(table)
        assert not broker.paused(table)
        assert _drain(sub, timeout=5) == 3


def test_pause_from_another_broker_is_seen_within_a_poll(broker: libqueue.Broker,
                                                         other_broker: libqueue.Broker,
                                                         form: str) -> None:
    table = make_table(form)
    broker.create_table(table)
    with broker.subscribe(table, workers=1, poll_interval_ms=POLL_MS) as sub:
        broker.publish(table, b"before")
        sub.next(timeout=5).ack()
        other_broker.pause(table)
        time.sleep(4 * POLL_MS / 1000.0)  # a look of the control table has come and gone
        broker.publish(table, b"while paused")
        assert sub.next(timeout=0.5) is None
        other_broker.resume(table)
        assert sub.next(timeout=5).payload == b"while paused"


@pytest.mark.forms("lease")
def test_in_work_finishes_and_waiting_rows_go_back(broker: libqueue.Broker, form: str) -> None:
    table = make_table(form)
    broker.create_table(table)
    broker.publish_many(table, [b"%d" % i for i in range(10)])
    with broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS) as sub:
        held = sub.next(timeout=5)
        wait_until(lambda: sub.stat("waiting") > 0, what="rows claimed ahead")
        broker.pause(table)  # this broker: its subscriptions are told now
        # A claim running as the pause came gives its rows back as it ends.
        wait_until(lambda: sub.stat("waiting") == 0 and broker.stats(table).due == 9,
                   what="the waiting rows given back")
        stats = broker.stats(table)
        assert (stats.due, stats.in_work, stats.paused) == (9, 1, True)
        held.ack()  # a delivery in work settles as ever
        assert sub.next(timeout=0.3) is None
        broker.resume(table)
        assert _drain(sub, timeout=5) == 9


def test_a_group_pauses_alone_and_with_its_table(broker: libqueue.Broker, form: str) -> None:
    table = make_table(form, "grouped", group="queue")
    broker.create_table(table)
    broker.pause(table, group="a")
    assert broker.paused(table, group="a") and not broker.paused(table, group="b")
    broker.publish_many(table, [dict(payload=b"x", group=g) for g in ("a", "b", "a", "b")])
    with broker.subscribe(table, group="a", poll_interval_ms=POLL_MS) as sub_a, \
            broker.subscribe(table, group="b", poll_interval_ms=POLL_MS) as sub_b:
        assert _drain(sub_b, timeout=2) == 2
        assert _drain(sub_a) == 0
        broker.pause(table)  # the whole table: every group
        assert broker.paused(table, group="b")
        broker.publish(table, b"y", group="b")
        assert _drain(sub_b) == 0
        broker.resume(table)  # the table's pause ends; group a's own stays
        assert _drain(sub_b, timeout=2) == 1
        assert broker.paused(table, group="a")
        assert _drain(sub_a) == 0
        broker.resume(table, group="a")
        assert _drain(sub_a, timeout=2) == 2


def test_pausing_twice_and_resuming_a_running_queue_change_nothing(broker: libqueue.Broker,
                                                                  form: str) -> None:
    table = make_table(form)
    broker.create_table(table)
    broker.resume(table)  # no control table yet: nothing to end
    broker.pause(table)
    broker.pause(table)
    assert broker.paused(table)
    broker.resume(table)
    broker.resume(table)
    assert not broker.paused(table)


def test_bad_input_is_refused_and_changes_nothing(broker: libqueue.Broker, db: Any) -> None:
    table = make_table("lease")
    broker.create_table(table)
    with pytest.raises(libqueue.SchemaError, match="jbos"):
        broker.pause(libqueue.Table("jbos", payload="payload", locked_until="locked_until"))
    with pytest.raises(libqueue.Misuse, match="no group column"):
        broker.pause(table, group="a")
    grouped = make_table("lease", "grouped", group="queue")
    broker.create_table(grouped)
    with pytest.raises(libqueue.Misuse, match="empty"):
        broker.pause(grouped, group="")
    assert not broker.paused(table)
    with pytest.raises(TypeError):
        broker.pause("jobs")  # type: ignore[arg-type]
    broker.close()
    with pytest.raises(libqueue.Closed):
        broker.pause(table)


@pytest.mark.dialect("postgresql")
def test_a_notification_tells_other_brokers_at_once(db: Any) -> None:
    table = make_table("lease")
    # A poll of a minute: only the notification can tell the subscription in time.
    with libqueue.Broker(db.url, listen_notify=1) as worker_side, \
            libqueue.Broker(db.url, listen_notify=1) as operator:
        operator.create_table(table)
        with worker_side.subscribe(table, poll_interval_ms=60000) as sub:
            operator.publish(table, b"first")
            sub.next(timeout=10).ack()
            operator.pause(table)
            time.sleep(0.5)  # the notification's way to the listener
            operator.publish(table, b"while paused")  # its notification wakes the claim
            assert sub.next(timeout=1) is None
            operator.resume(table)
            assert sub.next(timeout=10).payload == b"while paused"
