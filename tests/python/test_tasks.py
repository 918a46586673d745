"""Typed tasks (libqueue.Queue): functions enqueued by name with JSON
arguments checked against their signature, run by name in push workers and
under run_async, the publish options passed through, enqueue_on in the
caller's transaction; rows that do not decode as JSON (a pickle among them),
name no task or do not fit go to the dead letters unrun. On every database."""

from __future__ import annotations

import asyncio
import json
import math
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, List

import pytest

import libqueue
from libqueue.tasks import TaskRefused
from helpers import POLL_MS, Recorder, make_table, wait_until
from test_publish_on import connect

#: A driver of the caller's own on each dialect, for enqueue_on.
DRIVER_OF = {"sqlite": "sqlite3", "postgresql": "psycopg2", "mysql": "pymysql"}


def task_table(form: str = "lease", **roles: Any) -> libqueue.Table:
    roles.setdefault("dead_letter", "jobs_dead")
    return make_table(form, "jobs", headers="headers", priority="priority",
                      retry_after="retry_after", dedup_key="dedup_key", **roles)


@pytest.fixture
def table(broker: libqueue.Broker) -> libqueue.Table:
    """The task table of the lease form, created, with dead letters."""
    table = task_table()
    broker.create_table(table)
    return table


def queue_of(broker: libqueue.Broker, table: libqueue.Table, ran: Recorder) -> libqueue.Queue:
    """A queue with tasks ``resize`` and ``shout`` recording their calls."""
    queue = libqueue.Queue(broker, table)

    @queue.task
    def resize(path: str, width: int = 100) -> None:
        ran.add(("resize", path, width))

    @queue.task(name="text.shout")
    def shout(words: List[str], *, times: int) -> None:
        ran.add(("shout", words, times))

    return queue


def count(db: Any) -> int:
    return db.count("jobs")


def dead_after_worker(db: Any, broker: libqueue.Broker, queue: libqueue.Queue,
                      dead: int) -> List[dict]:
    """Runs a worker until no row is left in the queue and ``dead`` are dead
    letters; returns the dead letters."""
    table = queue.table
    with queue.worker(workers=2, poll_interval_ms=POLL_MS):
        wait_until(lambda: count(db) == 0 and len(broker.dead_letters(table)) == dead,
                   what="%d dead letters" % dead)
    return broker.dead_letters(table)


def test_tasks_run_by_name_with_their_arguments(db, broker, form) -> None:
    table = task_table(form)
    broker.create_table(table)
    ran = Recorder()
    queue = queue_of(broker, table, ran)
    resize, shout = queue.tasks["resize"], queue.tasks["text.shout"]
    ids = [resize.enqueue("cat.png"), resize.enqueue(path="dög.png", width=64),
           shout.enqueue(["hi", "there"], times=3)]
    assert len(set(ids)) == 3 and count(db) == 3
    with queue.worker(workers=2, poll_interval_ms=POLL_MS) as sub:
        wait_until(lambda: sub.stat("acked") == 3, what="three tasks acked")
    assert sorted(ran.snapshot(), key=str) == sorted(
        [("resize", "cat.png", 100), ("resize", "dög.png", 64),
         ("shout", ["hi", "there"], 3)], key=str)
    assert count(db) == 0 and broker.dead_letters(table) == []


def test_payload_is_json_by_name_and_every_kind_of_parameter_round_trips(db, broker, table) -> None:
    queue = libqueue.Queue(broker, table, name_header="kind")
    calls = []

    @queue.task
    def every(a: int, /, b: Any, *rest: Any, c: Any = None, **more: Any) -> str:
        calls.append((a, b, rest, c, more))
        return "ran here"

    assert every(1, 2) == "ran here" and calls.pop() == (1, 2, (), None, {})  # called locally
    assert every.__name__ == "every" and count(db) == 0
    every.enqueue(1, b={"x": [1.5, None, True]}, c="see", d="dee")
    every.enqueue(1, 2, 3, 4, c=None)
    with queue.subscribe(poll_interval_ms=POLL_MS) as sub:
        first = sub.next(10)
        assert first.headers == {"kind": "every"}
        assert json.loads(first.payload) == {
            "args": [1], "kwargs": {"b": {"x": [1.5, None, True]}, "c": "see", "d": "dee"}}
        queue.handle(first)
        first.ack()
        second = sub.next(10)
        assert json.loads(second.payload) == {"args": [1, 2, 3, 4], "kwargs": {"c": None}}
        queue.handle(second)
        second.ack()
    assert calls == [(1, {"x": [1.5, None, True]}, (), "see", {"d": "dee"}),
                     (1, 2, (3, 4), None, {})]


def test_arguments_are_checked_at_enqueue_and_a_bad_call_writes_nothing(db, broker, table) -> None:
    queue = queue_of(broker, table, Recorder())
    resize = queue.tasks["resize"]
    bad_calls = {
        "missing a required argument: 'path'": lambda: resize.enqueue(),
        "unexpected keyword argument 'height'": lambda: resize.enqueue("a.png", height=3),
        "too many positional arguments": lambda: resize.enqueue("a.png", 1, 2),
        "'path' cannot be JSON: Object of type bytes": lambda: resize.enqueue(b"a.png"),
        "'width' cannot be JSON: Out of range float": lambda: resize.enqueue("a", width=math.nan),
        "'width' = (1, 2) would arrive as [1, 2]": lambda: resize.enqueue("a", width=(1, 2)),
        "{1: 'x'} would arrive as {'1': 'x'}": lambda: resize.enqueue({1: "x"}),
        "'path' cannot be JSON: Object of type set": lambda: resize.enqueue({"a"}),
        "unknown enqueue option(s) dealy_ms": lambda: resize.options(dealy_ms=5).enqueue("a"),
        "unexpected keyword argument '_dealy_ms'": lambda: resize.enqueue("a", _dealy_ms=5),
    }
    for message, call in bad_calls.items():
        with pytest.raises(TypeError) as raised:
            call()
        assert message in str(raised.value) and str(raised.value).startswith("task resize: ")
    with pytest.raises(ValueError, match="header 'task' holds the task's name"):
        resize.enqueue("a", _headers={"task": "other"})
    with pytest.raises(libqueue.SchemaError):  # no group column: the core refuses, as publish
        resize.enqueue("a", _group="g")
    assert count(db) == 0

    with pytest.raises(ValueError, match="has a task named 'resize' already"):
        queue.task(name="resize")(lambda: None)
    with pytest.raises(ValueError, match="_priority are the names of enqueue options"):
        queue.task(lambda _priority: None)
    with pytest.raises(ValueError, match="needs the table's headers column"):
        libqueue.Queue(broker, make_table("lease"))
    with pytest.raises(TypeError, match="must be a libqueue.Table"):
        libqueue.Queue(broker, "jobs")


def test_options_pass_through_priority_delay_dedup_and_headers(db, broker, table) -> None:
    queue = queue_of(broker, table, Recorder())
    resize = queue.tasks["resize"]
    low = resize.enqueue("low.png", _priority=9, _headers={"trace": "t-1"})
    high = resize.options(priority=1, dedup="img-1").enqueue("high.png")
    with pytest.raises(libqueue.Duplicate):
        resize.enqueue("again.png", _dedup="img-1")
    assert resize.enqueue("again.png", _dedup="img-1", _on_duplicate="existing") == high
    later = resize.enqueue("later.png", _delay_ms=3_600_000)
    stats = broker.stats(table)
    assert (stats.due, stats.delayed) == (2, 1)
    with queue.subscribe(poll_interval_ms=POLL_MS) as sub:
        first = sub.next(10)
        assert first.id == high  # smaller priority first
        first.ack()
        second = sub.next(10)
        assert second.id == low and second.headers == {"trace": "t-1", "task": "resize"}
        second.ack()
        assert sub.next(0.2) is None  # the delayed one is not due
    assert [i for (i,) in db.query("SELECT id FROM jobs")] == [later]


def test_a_row_naming_no_task_of_the_queue_is_dead_lettered_unrun(db, broker, table) -> None:
    ran = Recorder()
    worker_queue = queue_of(broker, table, ran)
    producer_queue = libqueue.Queue(broker, table)

    @producer_queue.task
    def vanish(path: str) -> None:
        raise AssertionError("never called in this process")

    unknown = vanish.enqueue("cat.png")
    unnamed = broker.publish(table, b'{"kwargs": {"path": "x"}}')  # no task header
    known = worker_queue.tasks["resize"].enqueue("dog.png")
    dead = dead_after_worker(db, broker, worker_queue, 2)
    assert sorted(row["id"] for row in dead) == sorted([unknown, unnamed])
    assert ran.snapshot() == [("resize", "dog.png", 100)] and known not in [r["id"] for r in dead]


NOT_TASKS = [
    b"\xff\xfe not even UTF-8",
    b"resize('cat.png')",
    b'return os.execute("touch /tmp/x")',  # Lua source
    b"[1, 2]",
    b'{"args": "cat.png"}',
    b'{"kwargs": ["cat.png"]}',
    b'{"kwargs": {"path": "cat.png"}, "then": "more"}',
    b'{"kwargs": {"path": NaN}}',
    b'{"kwargs": {"path": "cat.png", "height": 3}}',  # does not fit the signature
    b'{"args": ["a", 1, 2]}',
    b"",
]


def test_rows_that_are_not_json_arguments_go_to_the_dead_letters_unrun(db, broker, table) -> None:
    ran = Recorder()
    queue = queue_of(broker, table, ran)
    ids = broker.publish_many(table, [{"payload": p, "headers": {"task": "resize"}}
                                      for p in NOT_TASKS])
    dead = dead_after_worker(db, broker, queue, len(NOT_TASKS))
    assert sorted(row["id"] for row in dead) == sorted(ids)
    assert ran.snapshot() == []


def test_a_pickle_payload_is_never_unpickled(db, broker, table, tmp_path: Path) -> None:
    class Opens:
        def __init__(self, path: Path) -> None:
            self.path = str(path)

        def __reduce__(self) -> Any:  # unpickling opens (creates) the file
            return (open, (self.path, "w"))

    proof = tmp_path / "unpickled-here"
    pickle.loads(pickle.dumps(Opens(proof))).close()
    assert proof.exists()  # such a payload does run code where it is unpickled

    ran = Recorder()
    queue = queue_of(broker, table, ran)
    target = tmp_path / "unpickled-by-the-worker"
    for protocol in (0, pickle.HIGHEST_PROTOCOL):
        broker.publish(table, pickle.dumps(Opens(target), protocol=protocol),
                       headers={"task": "resize"})
    dead_after_worker(db, broker, queue, 2)
    assert not target.exists() and ran.snapshot() == []


def test_a_raising_task_is_retried_then_dead_lettered(db, broker, table) -> None:
    queue = libqueue.Queue(broker, table)
    attempts = Recorder()

    @queue.task
    def flaky(n: int) -> None:
        attempts.add(n)
        raise RuntimeError("flaky %d" % n)

    flaky.enqueue(7)
    with queue.worker(workers=1, poll_interval_ms=POLL_MS, max_attempts=3):
        wait_until(lambda: len(broker.dead_letters(table)) == 1, what="the dead letter")
    assert attempts.snapshot() == [7, 7, 7]


def test_without_dead_letters_a_refused_row_raises_and_is_never_run(db, broker) -> None:
    table = task_table(dead_letter=None)
    broker.create_table(table)
    ran = Recorder()
    queue = queue_of(broker, table, ran)
    row = broker.publish(table, b"\x80\x03not json", headers={"task": "resize"})
    with queue.subscribe(poll_interval_ms=POLL_MS) as sub:
        delivery = sub.next(10)
        with pytest.raises(TaskRefused, match="its payload is not JSON"):
            queue.handle(delivery)
        assert not delivery.settled  # left to the caller: a raising handler's retry
        delivery.retry()
        again = sub.next(10)
        assert again.id == row and again.attempt == 2
        with pytest.raises(TaskRefused):
            asyncio.run(queue.handle_async(again))
        again.release()
    assert ran.snapshot() == [] and count(db) == 1


def test_async_tasks_under_run_async_and_in_push_workers(db, broker, table) -> None:
    queue = libqueue.Queue(broker, table)
    ran = Recorder()

    @queue.task
    async def fetch(url: str) -> None:
        await asyncio.sleep(0.001)  # stands for awaited I/O
        ran.add(("fetch", url))

    @queue.task
    def note(text: str) -> None:
        ran.add(("note", text))

    for i in range(4):
        fetch.enqueue("https://example.org/%d" % i)
    note.enqueue("plain")
    fetch.enqueue("with-header", _headers={"x": "y"})
    broker.publish(table, b"not json", headers={"task": "fetch"})

    async def main() -> None:
        with queue.subscribe(workers=3, poll_interval_ms=POLL_MS) as sub:
            runner = asyncio.ensure_future(sub.run_async(queue.handle_async, concurrency=3))
            while sub.stat("settled") < 7:
                await asyncio.sleep(0.02)
            sub.stop()
            await asyncio.wait_for(runner, 30)

    asyncio.run(asyncio.wait_for(main(), 60))
    assert sorted(ran.snapshot()) == sorted(
        [("fetch", "https://example.org/%d" % i) for i in range(4)] +
        [("note", "plain"), ("fetch", "with-header")])
    assert len(broker.dead_letters(table)) == 1

    fetch.enqueue("pushed")  # an async task in a push worker: run on a loop of its own
    with queue.worker(workers=2, poll_interval_ms=POLL_MS) as sub:
        wait_until(lambda: sub.stat("acked") == 1, what="the pushed async task")
    assert ran.snapshot()[-1] == ("fetch", "pushed") and count(db) == 0


def test_enqueue_on_commits_with_the_callers_transaction(db, broker, table) -> None:
    ran = Recorder()
    queue = queue_of(broker, table, ran)
    resize = queue.tasks["resize"]
    caller = connect(DRIVER_OF[db.dialect], db)
    try:
        resize.enqueue_on(caller.target, "rolled-back.png")
        caller.rollback()
        assert count(db) == 0
        with pytest.raises(TypeError, match="task resize: missing a required argument"):
            resize.enqueue_on(caller.target)
        committed = resize.enqueue_on(caller.target, "committed.png", _priority=3)
        second = resize.options(dedup="d-1").enqueue_on(caller.target, path="second.png")
        assert count(db) == 0  # not before the commit
        caller.commit()
    finally:
        caller.close()
    assert sorted(i for (i,) in db.query("SELECT id FROM jobs")) == sorted([committed, second])
    with queue.worker(poll_interval_ms=POLL_MS) as sub:
        wait_until(lambda: sub.stat("acked") == 2, what="both tasks")
    assert sorted(ran.snapshot()) == [("resize", "committed.png", 100),
                                      ("resize", "second.png", 100)]


def test_the_layer_works_without_typing_paramspec(tmp_path: Path) -> None:
    """Python before 3.10 has no typing.ParamSpec: the module falls back to
    typing_extensions, else to a plain TypeVar, and works the same."""
    program = textwrap.dedent("""
        import sys, types, typing
        old = types.ModuleType("typing")  # typing as it was before 3.10
        old.__dict__.update((k, v) for k, v in vars(typing).items() if k != "ParamSpec")
        sys.modules["typing"] = old
        sys.modules["typing_extensions"] = None  # not installed
        import libqueue
        from libqueue import tasks
        sys.modules["typing"] = typing
        assert type(tasks.P) is typing.TypeVar
        jobs = libqueue.Table("jobs", payload="payload", headers="headers",
                              locked_until="locked_until")
        with libqueue.Broker("sqlite:%s") as broker:
            broker.create_table(jobs)
            queue = libqueue.Queue(broker, jobs)

            @queue.task
            def add(a: int, b: int) -> int:
                return a + b

            assert add(1, 2) == 3
            add.enqueue(1, b=2)
            with queue.subscribe() as sub:
                d = sub.next(10)
                print(d.payload.decode(), d.headers)
                d.ack()
    """ % (tmp_path / "q.db"))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"args":[],"kwargs":{"a":1,"b":2}} {\'task\': \'add\'}\n'
