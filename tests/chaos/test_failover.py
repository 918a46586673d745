"""Failover during a drain: a primary and its replica (chaos_replicas.py), the
broker on a URL that names both (PostgreSQL: libpq's multi-host URL with
target_session_attrs=read-write; MariaDB: libqueue's host list, the first
host with read_only = 0 wins). In the middle of the drain, while a publisher
publishes one job at a time, the primary is stopped at once (PostgreSQL:
pg_ctl stop -m immediate; MariaDB: SIGKILL) and the replica promoted. The
worker process and the publisher go on against the new primary without a
restart.

Asserted each time: the replica took writes after its promotion and the
primary stayed down; the worker survived and settled rows after the
promotion; the publisher published there; the table drains on the new
primary; every row done twice is explained: its run before was done before
the promotion (its settlement went to the old primary, or died with it) and
its run after started after the primary stopped (lease form: once the lease
passed; row lock form: at once, its transaction rolled back).

Synchronous PostgreSQL replication (synchronous_standby_names,
synchronous_commit on): 0 lost, every publish that returned is done.
Asynchronous replication (PostgreSQL without synchronous_standby_names, and
MariaDB's binlog replication): what the primary committed and had not sent
is gone. Asserted: a job lost was published before the primary stopped.
Reported: ``lost_publishes`` (publishes that returned and were never done)
and ``returned_acks`` (rows done before the failover and done again after).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

import libqueue
from chaos_replicas import MariaDBPair, PostgresPair
from chaos_util import DEADLINES, Log, Worker, now_ns, pick, report, wait_for, wait_progress
from helpers import make_table

FORMS = ("lease", "row_lock")
LEASE_MS = 2000
#: Jobs published before the drain starts; the failover comes after a third.
JOBS = pick(1500, 6000)
#: Publishes that must return from the new primary before the publisher stops.
PUBLISHES_AFTER = 50
#: A lagging replica: the rows done and the publishes returned on the
#: primary after replication is cut, before the primary stops.
LAGGING_DONE, LAGGING_PUBLISHES = 100, 20


@pytest.fixture
def pair(request: Any) -> Iterator[Any]:
    """A primary and its replica of their own, for one failover."""
    kind = request.param
    made = (PostgresPair(synchronous=True) if kind == "pg-sync"
            else PostgresPair(synchronous=False) if kind.startswith("pg-async")
            else MariaDBPair())
    yield made
    made.close()


class Publisher(threading.Thread):
    """Publishes "live-N" jobs one at a time until stopped, through a broker
    of its own on the pair's URL; keeps the time each publish returned.
    A publish that fails (the primary gone, the replica not yet promoted)
    is counted and the next one follows: its job may or may not exist."""

    def __init__(self, url: str, table: libqueue.Table) -> None:
        super().__init__(daemon=True)
        self.url, self.table = url, table
        self.returned: List[Tuple[str, int]] = []
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with libqueue.Broker(self.url, **DEADLINES) as broker:
            n = 0
            while not self.stop.is_set():
                payload = "live-%d" % n
                n += 1
                try:
                    broker.publish(self.table, payload.encode())
                    self.returned.append((payload, now_ns()))
                except libqueue.Error:
                    self.failed += 1
                    self.stop.wait(0.05)
                self.stop.wait(0.005)

    def returned_after(self, at_ns: int) -> int:
        return sum(1 for _, t in self.returned if t > at_ns)


def runs(log: Log) -> Dict[str, List[Tuple[str, int]]]:
    """Each payload's "start" and "done" lines, in order: (kind, ns)."""
    out: Dict[str, List[Tuple[str, int]]] = {}
    for kind, _, _, at, payload in log.events:
        if kind in ("start", "done"):
            out.setdefault(payload, []).append((kind, at))
    return out


def unexplained_duplicates(seen: Dict[str, List[Tuple[str, int]]], stopped_ns: int,
                           promoted_ns: int) -> Tuple[Set[str], List[str]]:
    """Payloads done more than once, and those whose runs the failover does
    not explain: a done before the promotion followed by a start after the
    primary stopped."""
    twice: Set[str] = set()
    wrong: List[str] = []
    for payload, events in seen.items():
        dones = [t for k, t in events if k == "done"]
        if len(dones) < 2:
            continue
        twice.add(payload)
        for earlier, later in zip(dones, dones[1:]):
            start = max(t for k, t in events if k == "start" and t <= later)
            if not (earlier < promoted_ns and start > stopped_ns):
                wrong.append("%s: done at %+.3f s, started again at %+.3f s (from the primary's "
                             "stop; promoted at %+.3f s)" % (
                                 payload, (earlier - stopped_ns) / 1e9,
                                 (start - stopped_ns) / 1e9, (promoted_ns - stopped_ns) / 1e9))
    return twice, wrong


#: (replication, form) of each run: quick mode, long mode (every pair).
ALL_CASES = [(kind, form) for kind in ("pg-sync", "pg-async", "mariadb", "pg-async-lagging",
                                       "mariadb-lagging") for form in FORMS]
CASES = pick([("pg-sync", "lease"), ("pg-sync", "row_lock"), ("pg-async", "lease"),
              ("mariadb", "lease"), ("mariadb", "row_lock"), ("pg-async-lagging", "lease"),
              ("mariadb-lagging", "row_lock")], ALL_CASES)


@pytest.mark.parametrize("pair, form", CASES, indirect=["pair"])
def test_a_failover_during_a_drain(pair: Any, form: str, log: Log, request: Any) -> None:
    kind = request.node.callspec.params["pair"]
    table = make_table(form)
    with libqueue.Broker(pair.url, **DEADLINES) as broker:
        broker.create_table(table)
        initial = ["job-%d" % i for i in range(JOBS)]
        for first in range(0, JOBS, 500):
            broker.publish_many(table, [p.encode() for p in initial[first:first + 500]])
    options: Dict[str, Any] = dict(workers=4, poll_interval_ms=50)
    if form == "lease":
        options["lease_ms"] = LEASE_MS
    worker = Worker(pair.url, table, log.path, "drain", options=options, broker=DEADLINES,
                    sleep=[0.001, 0.004], log_payload=True)
    worker.expect("ready", timeout=30)
    publisher = Publisher(pair.url, table)
    publisher.start()
    try:
        wait_for(lambda: log.poll().done_count >= JOBS // 3, timeout=60, what="a third of the jobs")
        done_before = log.done_count
        cut = None
        if kind.endswith("-lagging"):
            # The asynchronous window made wide: the replica gets nothing
            # more while jobs are published and done on the primary.
            cut = (log.mark("fault", "replication-cut"), pair.cut_replication(), now_ns())
            wait_for(lambda: log.poll().done_count >= done_before + LAGGING_DONE
                     and publisher.returned_after(cut[2]) >= LAGGING_PUBLISHES,
                     timeout=60, what="work on the primary past the replica")
        stopped_ns = log.mark("fault", "primary-stopped")
        pair.stop_primary()
        down_ns = now_ns()
        pair.promote()
        promoted_ns = log.mark("fault", "replica-promoted")
        wait_for(lambda: publisher.returned_after(promoted_ns) >= PUBLISHES_AFTER, timeout=60,
                 what="publishes on the new primary")
    finally:
        publisher.stop.set()
        publisher.join(60)
    assert not publisher.is_alive(), "the publisher did not stop"
    wait_progress(lambda: pair.count(table.name) == 0, log, stall_s=60, timeout=240,
                  what="the table to drain on the new primary", worker=worker)
    survived = worker.alive()
    status = worker.terminate()
    log.poll()

    assert not pair.primary.running(), "the old primary came back"
    assert pair.replica_takes_writes(), "the replica was not promoted"
    seen = runs(log)
    done = {p for p, events in seen.items() if any(k == "done" for k, _ in events)}
    returned = {p: at for p, at in publisher.returned}
    returned.update((p, 0) for p in initial)
    lost = sorted(set(returned) - done)
    twice, unexplained = unexplained_duplicates(seen, stopped_ns, promoted_ns)
    done_after = len(log.of("done", promoted_ns))
    figures = dict(
        replication=kind, form=form, published=len(returned), done_before_failover=done_before,
        done_after_failover=done_after, publish_failures=publisher.failed,
        publishes_after_failover=publisher.returned_after(promoted_ns),
        lost_publishes=len(lost), returned_acks=len(twice),
        failover_s=round((promoted_ns - stopped_ns) / 1e9, 2),
        back_to_work_s=round(((log.first("start", promoted_ns) or promoted_ns) - promoted_ns) / 1e9, 2))
    report("failover[%s-%s]" % (kind, form), **figures)

    assert survived and status == 0, "the worker died: status %s, stderr %s" % (
        status, worker.stderr_tail())
    assert done_after > 0, "no row was done on the new primary"
    assert not unexplained, "rows done twice that the failover does not explain: %s" % (
        unexplained[:10],)
    if kind == "pg-sync":
        assert not lost, "synchronous replication lost %d jobs: %s" % (len(lost), lost[:20])
    else:
        # Asynchronous: only what the old primary committed can be gone.
        late = [p for p in lost if returned[p] > down_ns]
        assert not late, "jobs published after the primary stopped were lost: %s" % late[:20]
    if cut is not None:
        # What the primary committed after the cut never reached the
        # replica: its publishes are lost, and its rows done there (acked
        # there, or their acks not yet made) come back.
        cut_ns, cut_done_ns = cut[0], cut[2]
        early = [p for p in lost if returned[p] < cut_ns]
        assert not early, "jobs published before replication was cut were lost: %s" % early[:20]
        kept = [p for p, at in publisher.returned if cut_done_ns < at < stopped_ns
                and p not in lost]
        assert not kept, "publishes made past the replica were kept: %s" % kept[:20]
        held = [p for p, events in seen.items()
                if any(k == "done" and cut_done_ns < t < stopped_ns for k, t in events)
                and not any(k == "done" and t > promoted_ns for k, t in events)]
        assert not held, "rows done past the replica did not come back: %s" % held[:20]
