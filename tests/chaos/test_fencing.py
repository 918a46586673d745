"""Fencing: a worker process that holds lease-form rows is stopped
(SIGSTOP) past its lease (lease_ms 1000) while this process claims the rows,
then continued (SIGCONT) and made to settle: each settlement is refused
(LQ_LEASE_LOST) and changes nothing, for every kind: ack, retry,
retry_after and dead letter of pulled deliveries, and a push handler's
return (an ack) and its raise (a retry). The new holder's acks then work.
On each database."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import time
from typing import Any, Dict, List

import pytest

import libqueue

from chaos_util import Worker, report

LEASE_MS = 1000
PULL_KINDS = ["ack", "retry", "retry_after", "dead_letter"]
PUSH_KINDS = ["return", "raise"]


def lease_table(name: str) -> libqueue.Table:
    return libqueue.Table(name, payload="payload", attempt="attempt", locked_until="locked_until",
                          retry_after="retry_after", dead_letter=name + "_dead")


def rows(db: Any, table: str) -> List[tuple]:
    return db.query("SELECT id, payload, attempt, locked_until, retry_after FROM %s ORDER BY id"
                    % db.quote(table))


def sqlite_write_locked(db: Any) -> bool:
    """Whether some process holds SQLite's write lock (a stopped process may,
    if stopped inside a write: then no one else can write until it goes
    on, a property of SQLite, not of the library)."""
    with contextlib.closing(sqlite3.connect(db.path, timeout=0, isolation_level=None)) as conn:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return True
        conn.execute("ROLLBACK")
        return False


def stop_quietly(db: Any, workers: List[Worker]) -> int:
    """SIGSTOP the workers; on SQLite, again until none was stopped inside a
    write. Returns how many tries it took."""
    for attempt in range(1, 51):
        for w in workers:
            w.signal(signal.SIGSTOP)
        time.sleep(0.05)
        if db.dialect != "sqlite" or not sqlite_write_locked(db):
            return attempt
        for w in workers:
            w.signal(signal.SIGCONT)
        time.sleep(0.02)
    pytest.fail("the stopped workers kept SQLite's write lock")


@pytest.mark.parametrize("db", ["sqlite", "pg", "mariadb"], indirect=True)
def test_a_stopped_holder_past_its_lease_cannot_settle(db, log) -> None:
    pulls, pushes = lease_table("pulls"), lease_table("pushes")
    stale = dict(lease_ms=LEASE_MS, poll_interval_ms=60000)
    with libqueue.Broker(db.url) as broker:
        broker.create_table(pulls)
        broker.create_table(pushes)
        broker.publish_many(pulls, [k.encode() for k in PULL_KINDS])
        broker.publish_many(pushes, [k.encode() for k in PUSH_KINDS])

        # Workers for every row, so that each holds all of its table at once.
        puller = Worker(db.url, pulls, log.path, "fence_pull",
                        options=dict(stale, workers=len(PULL_KINDS)),
                        count=len(PULL_KINDS), kinds=PULL_KINDS)
        pusher = Worker(db.url, pushes, log.path, "fence_push",
                        options=dict(stale, workers=len(PUSH_KINDS)))
        pulled = [int(puller.expect("held ").split()[1]) for _ in PULL_KINDS]
        assert puller.expect("ready") == "ready"
        pushed = [int(pusher.expect("held ").split()[1]) for _ in PUSH_KINDS]
        time.sleep(0.3)  # the claims that follow (and find nothing) end
        tries = stop_quietly(db, [puller, pusher])
        stopped_at = time.monotonic()

        # The new holder: a lease long enough that it extends nothing while
        # the stale settlements run, so the rows stay as its claims left them.
        claims: Dict[str, list] = {}
        subs = []
        for table, expected in ((pulls, set(pulled)), (pushes, set(pushed))):
            sub = broker.subscribe(table, lease_ms=60000, poll_interval_ms=50,
                                   workers=len(expected))
            subs.append(sub)
            got = []
            while len(got) < len(expected):
                d = sub.next(timeout=20)
                assert d is not None, "the stopped worker's rows of %s never came back: %s; %s" % (
                    table.name, rows(db, table.name), sub.health())
                got.append(d)
            assert {d.id for d in got} == expected
            assert all(d.attempt == 2 for d in got), [(d.id, d.attempt) for d in got]
            claims[table.name] = got
        reclaimed_after = time.monotonic() - stopped_at
        before = {t: rows(db, t) for t in ("pulls", "pushes")}

        for w in (puller, pusher):
            w.signal(signal.SIGCONT)
            w.send("go")
        results = {}
        for _ in PULL_KINDS:
            _, row, kind, outcome = puller.expect("result ").split(" ", 3)
            results[int(row)] = (kind, outcome)
        puller.expect("end")
        push_kind: Dict[int, str] = {}
        for _ in PUSH_KINDS:
            verb, row = pusher.expect(("returning ", "raising ")).split()
            push_kind[int(row)] = {"returning": "ack", "raising": "retry"}[verb]
        # A push handler's settlement has no caller to refuse it to: the core
        # logs the refusal. Wait for it for each pushed row: "row N: its
        # lease ran out and another claim holds it; the ack (a return) / the
        # retry (a raise) changed nothing (LQ_LEASE_LOST)".
        refused: Dict[int, str] = {}
        end = time.monotonic() + 10
        while len(refused) < len(pushed) and time.monotonic() < end:
            pusher.drain_lines()
            for line in pusher.seen:
                for row, kind in push_kind.items():
                    if line.startswith("log WARNING") and ("row %d:" % row) in line \
                            and ("the %s changed nothing" % kind) in line \
                            and "LQ_LEASE_LOST" in line:
                        refused.setdefault(row, line)
            time.sleep(0.05)
        time.sleep(0.3)  # anything else the stale process might still write
        after = {t: rows(db, t) for t in ("pulls", "pushes")}
        dead = {t: db.count(t + "_dead") for t in ("pulls", "pushes")}

        # The new holder's tokens are intact: its acks work.
        for got in claims.values():
            for d in got:
                d.ack()
                d.release()
        for sub in subs:
            sub.close()
        left = db.count("pulls") + db.count("pushes")
        assert puller.quit() == 0
        assert pusher.quit() == 0

    report("fencing[%s]" % db.dialect, stop_tries=tries,
           reclaimed_after_s=round(reclaimed_after, 2),
           pull_results={PULL_KINDS[i]: results[r][1].split()[0] for i, r in enumerate(pulled)},
           push_results={("return" if push_kind.get(r) == "ack" else "raise"):
                         ("%s refused" % push_kind[r]) if r in refused else "no refusal logged"
                         for r in pushed})
    for row, (kind, outcome) in results.items():
        assert outcome.startswith("LQ_LEASE_LOST"), "%s of row %d: %s" % (kind, row, outcome)
    assert after == before, "a stale settlement changed rows"
    assert dead == {"pulls": 0, "pushes": 0}, "a stale dead letter moved rows"
    assert sorted(refused) == sorted(pushed), (
        "no refusal logged for pushed rows %s; the pusher printed %s"
        % (sorted(set(pushed) - set(refused)), pusher.seen[-20:]))
    assert left == 0
