"""Two processes on one table, and a process killed mid-handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until
from worker_process import read_spans

WORKER = os.path.join(os.path.dirname(__file__), "worker_process.py")


def table_json(table: libqueue.Table) -> str:
    roles = dict(table.columns)
    if table.advisory_lock:
        roles["advisory_lock"] = table.advisory_lock
    if table.fifo:
        roles["fifo"] = True
    return json.dumps(dict(name=table.name, **roles))


def spawn(db: Any, table: libqueue.Table, log: str, mode: str, **options: Any) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, WORKER, db.url, table_json(table), log, mode,
                             json.dumps(options)], stdout=subprocess.PIPE, text=True)


@pytest.mark.across_processes
def test_two_processes_never_hold_one_row_at_once(db, form, tmp_path) -> None:
    table = make_table(form)
    db.create_table(table)
    rows = 300
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
    log = str(tmp_path / "effects.log")
    workers = [spawn(db, table, log, "drain", workers=4, poll_interval_ms=POLL_MS)
               for _ in range(2)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready"
        wait_until(lambda: db.count("jobs") == 0, timeout=60, what="the table to drain")
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) == 0

    spans: Dict[int, List[Tuple[int, int, int]]] = {}
    for span in read_spans(log):
        spans.setdefault(span.row, []).append((span.start, span.end, span.pid))
    assert sorted(spans) == sorted(set(spans)) and len(spans) == rows
    for row, held in spans.items():
        held.sort()
        for (_, end, _), (start, _, _) in zip(held, held[1:]):
            assert end <= start, "row %d was held by two handlers at once" % row
    pids = {pid for held in spans.values() for _, _, pid in held}
    assert len(pids) == 2, "both processes should have worked the table"


@pytest.mark.across_processes
def test_killed_worker_gives_its_row_back(db, form, tmp_path) -> None:
    """SIGKILL mid-handler: the row comes back at once in the row lock and
    advisory forms (the session ends), after the lease in the lease form; no
    row is lost, and only the lease and advisory forms spent an attempt."""
    table = make_table(form)
    db.create_table(table)
    lease_ms = 2000
    with libqueue.Broker(db.url) as broker:
        row = broker.publish(table, b"doomed")
        worker = spawn(db, table, str(tmp_path / "log"), "hold", lease_ms=lease_ms,
                       poll_interval_ms=POLL_MS)
        assert int(worker.stdout.readline()) == row
        killed_at = time.monotonic()
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
        with broker.subscribe(table, poll_interval_ms=POLL_MS, lease_ms=lease_ms) as sub:
            delivery = sub.next(30)
            back_after = time.monotonic() - killed_at
            assert delivery is not None and delivery.id == row
            assert delivery.attempt == (1 if form == "row_lock" else 2)
            if form == "lease":
                assert back_after >= lease_ms / 1000 - 0.5, "the lease should have held the row"
            delivery.ack()
    assert db.count("jobs") == 0
