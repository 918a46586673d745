"""Push mode: handlers, their outcomes, workers, advisory exclusivity."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Dict, List

import pytest

import libqueue

from helpers import POLL_MS, Recorder, make_table, wait_until


def test_returning_acks(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    payloads = [b"a", b"", b"\x00b\xffc\x00" * 100]  # the handler gets them whole
    ids = broker.publish_many(table, payloads)
    seen = Recorder()
    with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=2) as sub:
        sub.run(lambda d: seen.add((d.id, d.payload)))
        wait_until(lambda: db.count("jobs") == 0, what="all rows acked")
    assert sorted(seen.snapshot()) == sorted(zip(ids, payloads))


def test_run_as_decorator(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    seen = Recorder()
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:

        @sub.run
        def handle(d: libqueue.Delivery) -> None:
            seen.add(d.payload)

        assert callable(handle)
        wait_until(lambda: db.count("jobs") == 0, what="row acked")
    assert seen.snapshot() == [b"x"]


def test_handler_exception_is_logged_and_retried(db, broker, form, caplog) -> None:
    table = make_table(form)
    db.create_table(table)
    row = broker.publish(table, b"x")
    attempts = Recorder()
    caplog.set_level(logging.ERROR, logger="libqueue")

    def handler(d: libqueue.Delivery) -> None:
        attempts.add(d.attempt)
        if d.attempt == 1:
            raise ValueError("boom on row %d" % d.id)

    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.run(handler)
        wait_until(lambda: db.count("jobs") == 0, what="row acked on the second attempt")
    assert attempts.snapshot() == [1, 2]
    logged = [r for r in caplog.records if r.name == "libqueue" and r.exc_info
              and isinstance(r.exc_info[1], ValueError)]
    assert logged and "boom on row %d" % row in caplog.text


def test_handler_may_settle(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    attempts = Recorder()

    def handler(d: libqueue.Delivery) -> None:
        attempts.add(d.attempt)
        if d.attempt == 1:
            d.retry()  # settled: the return does not ack
        else:
            d.ack()

    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.run(handler)
        wait_until(lambda: db.count("jobs") == 0, what="row acked")
    assert attempts.snapshot() == [1, 2]


def test_pushed_delivery_dies_with_its_handler(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    kept: List[libqueue.Delivery] = []
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.run(kept.append)
        wait_until(lambda: db.count("jobs") == 0, what="row acked")
    (d,) = kept
    assert not d.alive
    with pytest.raises(libqueue.Misuse):
        d.payload
    with pytest.raises(libqueue.Misuse):
        d.ack()


def test_run_on_a_pulled_subscription_is_refused_and_it_goes_on(db, broker, form) -> None:
    """A subscription pulled from refuses push mode by name and goes on
    serving next(): the refusal changes nothing."""
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"a")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(5) as d:
            assert d.payload == b"a"
            d.ack()
        with pytest.raises(libqueue.Misuse) as info:
            sub.run(lambda d: None)
        assert "one mode" in str(info.value)
        broker.publish(table, b"b")
        with sub.next(5) as d:
            assert d is not None and d.payload == b"b"
            d.ack()
    assert db.count("jobs") == 0


def test_stop_from_inside_a_handler(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.run(lambda d: sub.stop())
        assert sub.wait(10), "stop from a handler did not finish"
    assert db.count("jobs") == 0


def test_a_stop_while_another_is_under_way_waits_for_the_handlers(db, broker) -> None:
    """A handler's stop (on a thread of its own) and the owner's stop at once:
    each returns once the handlers have, which use the subscription's handle
    until then (freed early, the next call into Python aborted the process)."""
    table = make_table("lease")
    db.create_table(table)
    broker.publish(table, b"x")
    started, finished = threading.Event(), threading.Event()

    def handler(delivery: libqueue.Delivery) -> None:
        started.set()
        sub.stop()  # from its own handler: stops on another thread, at once
        time.sleep(0.5)
        finished.set()

    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.run(handler)
        assert started.wait(10)
        time.sleep(0.1)  # the handler's stop is under way
        sub.stop()
        assert finished.is_set(), "stop returned before the handler did"
        assert not sub.running
    assert db.count("jobs") == 0


def test_publish_wakes_an_idle_subscription(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    arrived = threading.Event()
    with broker.subscribe(table, poll_interval_ms=60_000) as sub:
        sub.run(lambda d: arrived.set())
        wait_until(lambda: sub.stat("empty_claims") >= 1, what="the first, empty claim")
        broker.publish(table, b"wake up")
        assert arrived.wait(5), "publish did not wake the subscription"


def test_advisory_exclusivity_per_key(db, broker) -> None:
    """Rows of one key never run at once; rows of other keys still do."""
    table = libqueue.Table("jobs", payload="payload", attempt="attempt",
                           partition_key="account", advisory_lock="acct-{account}")
    db.create_table(table)
    keys = ["A", "B", "C"]
    broker.publish_many(table, [{"payload": b"%s%d" % (k.encode(), i), "partition_key": k}
                                for i in range(4) for k in keys])
    events = Recorder()  # (key, +1 | -1), appended under the recorder's lock
    b_started = threading.Event()
    a_saw_b = Recorder()

    def handler(d: libqueue.Delivery) -> None:
        key = d.partition_key
        events.add((key, +1))
        try:
            if key == "B":
                b_started.set()
            elif key == "A" and not len(a_saw_b):
                # Hold key A until a row of key B runs: it must, meanwhile.
                a_saw_b.add(b_started.wait(10))
            time.sleep(0.01)
        finally:
            events.add((key, -1))

    with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=4) as sub:
        sub.run(handler)
        wait_until(lambda: db.count("jobs") == 0, timeout=30, what="all rows acked")

    running: Dict[str, int] = {k: 0 for k in keys}
    for key, step in events.snapshot():
        running[key] += step
        assert running[key] <= 1, "two rows of key %s ran at once" % key
    assert a_saw_b.snapshot() == [True], "key B did not run while key A was in work"
    assert sum(1 for _, step in events.snapshot() if step > 0) == 12


def test_exit_with_a_running_subscription(db, tmp_path) -> None:
    """The exit hook stops running subscriptions: the process exits cleanly."""
    table = make_table("lease")
    db.create_table(table)
    script = textwrap.dedent("""
        import time, libqueue
        table = libqueue.Table("jobs", payload="payload", attempt="attempt",
                               locked_until="locked_until")
        broker = libqueue.Broker(%r)
        broker.publish_many(table, [b"x"] * 50)
        sub = broker.subscribe(table, poll_interval_ms=20, workers=4)
        sub.run(lambda d: time.sleep(0.01))
        time.sleep(0.2)
        print("exiting")
    """ % db.url)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=str(tmp_path), env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "exiting" in proc.stdout
    assert db.count("jobs", "locked_until IS NOT NULL") == 0
