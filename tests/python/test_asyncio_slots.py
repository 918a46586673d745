"""run_async's slots: handlers run one after another in their slot's task,
each in a context of its own; a handler that never suspends settles as
one that does; the slot's task outlives a cancellation aimed at one
handler; and the loop stays responsive while the slots drain a backlog."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any, Awaitable, Dict, List

import pytest

import libqueue

from helpers import POLL_MS, make_table, publish_in_thousands, wait_until, worst_ticker_lag

DEADLINE_S = 60.0

#: What a handler sees of its context.
current_row: "contextvars.ContextVar[str]" = contextvars.ContextVar("current_row",
                                                                   default="unset")


def run(coroutine: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, DEADLINE_S))


async def drain(sub: libqueue.Subscription, handler: Any, settled: int,
                concurrency: int = 1) -> None:
    """run_async until `settled` settlements, then stop."""
    task = asyncio.ensure_future(sub.run_async(handler, concurrency=concurrency))
    while sub.stat("settled") < settled and not task.done():
        await asyncio.sleep(0.01)
    sub.stop()
    await task


@pytest.mark.parametrize("suspends", [False, True], ids=["returns_at_once", "suspends"])
def test_contextvars_do_not_reach_the_next_handler(db, broker, form, suspends) -> None:
    """Each handler starts from the context run_async was called in, also
    the next one in the same slot, whether or not the last suspended."""
    table = make_table(form)
    db.create_table(table)
    jobs = 12
    broker.publish_many(table, [b"%d" % i for i in range(jobs)])
    seen: List[str] = []

    async def handler(d: libqueue.Delivery) -> None:
        seen.append(current_row.get())
        current_row.set(d.payload.decode())
        if suspends:
            await asyncio.sleep(0)
        assert current_row.get() == d.payload.decode()

    async def work() -> None:
        current_row.set("caller")
        with broker.subscribe(table, workers=2, poll_interval_ms=POLL_MS) as sub:
            await drain(sub, handler, jobs)
        assert current_row.get() == "caller"

    run(work())
    assert seen == ["caller"] * jobs
    assert db.count("jobs") == 0


def test_a_handler_that_raises_at_once_is_retried(db, broker, form, caplog) -> None:
    """A handler that raises before its first await: logged, and the row
    retried, as one that raises later; a
    CancelledError of its own sends the row back unsettled and the run goes
    on."""
    caplog.set_level(logging.ERROR, logger="libqueue")
    table = make_table(form)
    db.create_table(table)
    broker.publish_many(table, [b"raise", b"cancel", b"ok"])
    attempts: Dict[bytes, List[int]] = {}

    async def handler(d: libqueue.Delivery) -> None:
        tries = attempts.setdefault(d.payload, [])
        tries.append(d.attempt)
        if d.payload == b"raise" and d.attempt == 1:
            raise ValueError("boom at once")
        if d.payload == b"cancel" and len(tries) == 1:
            raise asyncio.CancelledError()

    async def work() -> Dict[str, int]:
        with broker.subscribe(table, workers=2, poll_interval_ms=POLL_MS) as sub:
            task = asyncio.ensure_future(sub.run_async(handler, concurrency=2))
            while db.count("jobs") and not task.done():
                await asyncio.sleep(0.02)
            sub.stop()
            await task
            return {k: sub.stat(k) for k in ("acked", "retried")}

    stats = run(work())
    assert stats == {"acked": 3, "retried": 1}
    assert attempts[b"raise"] == [1, 2]
    assert len(attempts[b"cancel"]) == 2 and attempts[b"ok"] == [1]
    assert any("boom at once" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_handlers_run_in_their_slots_task(db, broker) -> None:
    """A handler's task is its slot's, not run_async's: a timeout inside a
    handler (asyncio.timeout, Python 3.11+) cancels that handler alone, and
    a cancel of its task a handler leaves pending never reaches the next."""
    table = make_table("lease")
    db.create_table(table)
    broker.publish_many(table, [b"slow", b"self-cancel", b"a", b"b"])
    timed_out: List[bytes] = []
    tasks: List[Any] = []

    async def handler(d: libqueue.Delivery) -> None:
        tasks.append(asyncio.current_task())
        if d.payload == b"slow":
            timeout = getattr(asyncio, "timeout", None)
            try:
                if timeout is None:
                    await asyncio.wait_for(asyncio.sleep(30), 0.05)
                else:
                    async with timeout(0.05):
                        await asyncio.sleep(30)
            except asyncio.TimeoutError:
                timed_out.append(d.payload)
        elif d.payload == b"self-cancel":
            asyncio.current_task().cancel()  # and returns before any await
        else:
            await asyncio.sleep(0)

    async def work() -> Any:
        with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
            runner = asyncio.ensure_future(sub.run_async(handler, concurrency=1))
            while sub.stat("acked") < 4 and not runner.done():
                await asyncio.sleep(0.01)
            sub.stop()
            await runner
            return runner

    runner = run(work())
    assert timed_out == [b"slow"]
    assert len(tasks) == 4 and len(set(map(id, tasks))) == 1  # one slot, one task
    assert tasks[0] is not runner
    assert db.count("jobs") == 0


@pytest.mark.forms("lease")
def test_a_slot_goes_on_after_its_handler_was_cancelled(db, broker, form) -> None:
    """The watcher cancels a handler whose run passed timeout_ms through its
    slot's task; the next handler in that slot runs in a task that is not
    being cancelled."""
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"slow")
    cancelling: List[int] = []

    async def handler(d: libqueue.Delivery) -> None:
        task = asyncio.current_task()
        assert task is not None
        if hasattr(task, "cancelling"):  # Python 3.11+
            cancelling.append(task.cancelling())
        if d.attempt == 1:
            await asyncio.sleep(30)

    async def work() -> None:
        with broker.subscribe(table, workers=2, timeout_ms=300,
                              poll_interval_ms=POLL_MS) as sub:
            await drain(sub, handler, 2)

    run(work())
    assert cancelling in ([], [0, 0])
    wait_until(lambda: db.count("jobs") == 0, what="the second run acked")


@pytest.mark.dialect("sqlite")
def test_loop_stays_responsive_under_run_async(db, broker) -> None:
    """A 10 ms ticker never lags more than 50 ms while run_async drains 10k
    jobs with handlers that never suspend."""
    table = make_table("lease")
    db.create_table(table)
    jobs = 10000
    publish_in_thousands(broker, table, jobs)

    async def handler(d: libqueue.Delivery) -> None:
        d.payload

    async def consume() -> None:
        with broker.subscribe(table, workers=16, poll_interval_ms=POLL_MS) as sub:
            await drain(sub, handler, jobs, concurrency=16)

    worst = run(worst_ticker_lag(consume))
    print("worst ticker lag over %d jobs: %.1f ms" % (jobs, worst * 1000))
    assert db.count("jobs") == 0
    assert worst < 0.05


def test_cancelling_run_async_sends_the_rows_back(db, broker, form) -> None:
    """Cancelling run_async cancels the handlers inside their slots and
    ends every slot; their rows go back unsettled, with no attempt spent,
    and a later run takes them."""
    table = make_table(form)
    db.create_table(table)
    jobs = 5
    broker.publish_many(table, [b"%d" % i for i in range(jobs)])
    started: List[int] = []
    cancelled: List[int] = []

    async def stuck(d: libqueue.Delivery) -> None:
        started.append(d.id)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(d.id)
            raise

    async def work() -> List[int]:
        with broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS) as sub:
            runner = asyncio.ensure_future(sub.run_async(stuck, concurrency=3))
            while len(started) < 3:
                await asyncio.sleep(0.01)
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner
            assert (sub.stat("acked"), sub.stat("retried")) == (0, 0)
        attempts: List[int] = []
        with broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS) as sub:
            async def record(d: libqueue.Delivery) -> None:
                attempts.append(d.attempt)

            await drain(sub, record, jobs, concurrency=3)
        return attempts

    attempts = run(work())
    assert sorted(cancelled) == sorted(started) and len(started) == 3
    assert attempts == [1] * jobs
    assert db.count("jobs") == 0
