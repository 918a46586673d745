"""Kill storm: a worker process (4 push workers) is killed with SIGKILL at
random moments and started again until the queue is empty.

Each handler logs "start <id>" and "done <id>" (fsync'd) and the test logs
"kill" after each kill, so the log is the order of events. Asserted: every
published row is done at least once and the table ends empty (lost 0, stuck
0), and every row done twice was done, then a kill came, then it started
again: the handler finished but the process died before its ack committed,
which is at-least-once delivery, not a fault.

On each database and form, but SQLite's advisory form: it keeps its keys
in the process, so two processes on one file do not see each other's keys
(documented); the storm runs one process at a time, yet the form's use
across processes is not supported, so it is left out. Quick: 20 kills each,
long: 200.
"""

from __future__ import annotations

import random
import time

import pytest

import libqueue

from chaos_util import Worker, duplicates, pick, report
from helpers import make_table

CASES = [("sqlite", "lease"),
         ("pg", "row_lock"), ("pg", "lease"), ("pg", "advisory"),
         ("mariadb", "row_lock"), ("mariadb", "lease"), ("mariadb", "advisory")]

#: The lease of the storm's workers: a killed worker's rows come back when
#: it runs out.
LEASE_MS = 2000
#: Rows kept waiting in the table while the storm lasts.
TOP_UP = 300


@pytest.mark.parametrize("db,form", CASES, indirect=["db"], ids=["%s-%s" % c for c in CASES])
def test_kill_storm_loses_nothing(db, form, log, tmp_path) -> None:
    kills_wanted = pick(20, 200)
    rng = random.Random()
    table = make_table(form)
    published = set()
    started_at = time.monotonic()
    options = dict(workers=4, poll_interval_ms=50)
    if form == "lease":
        options["lease_ms"] = LEASE_MS
    with libqueue.Broker(db.url) as broker:
        broker.create_table(table)

        def top_up() -> None:
            if db.count("jobs") < TOP_UP:
                published.update(broker.publish_many(
                    table, [b"job-%d" % i for i in range(len(published), len(published) + TOP_UP)]))

        kills = before_ready = 0
        while kills < kills_wanted:
            top_up()
            worker = Worker(db.url, table, log.path, "drain", options=options,
                            sleep=[0.0, 0.01])
            if rng.random() < 0.2:  # while it opens, subscribes, claims
                time.sleep(rng.uniform(0.0, 0.15))
                before_ready += 1
            else:
                worker.expect("ready", timeout=30)
                time.sleep(rng.uniform(0.0, 0.6))
            worker.kill()
            kills += 1
            log.mark("kill", str(worker.pid))

        # The last worker drains what is left: the killed workers' leases run
        # out, their sessions' locks are gone already.
        worker = Worker(db.url, table, log.path, "drain", options=options, sleep=[0.0, 0.01])
        worker.expect("ready", timeout=30)
        end = time.monotonic() + 60 + LEASE_MS / 1000
        while db.count("jobs") and time.monotonic() < end:
            time.sleep(0.2)
        stuck_rows = db.query("SELECT * FROM jobs ORDER BY id LIMIT 20")
        status = worker.terminate()

    log.poll()
    lost = sorted(published - log.done)
    stuck = db.count("jobs")
    unknown = sorted(log.done - published)
    dup, unexplained = duplicates(log)
    report("kill_storm[%s-%s]" % (db.dialect, form), kills=kills, killed_before_ready=before_ready,
           published=len(published), lost=len(lost), stuck=stuck,
           duplicates=len(dup), duplicates_explained_by_kills=len(dup) - len(unexplained),
           seconds=round(time.monotonic() - started_at, 1))
    assert not lost, "rows never done: %s" % lost[:20]
    assert stuck == 0, "rows left in the table a minute after the storm: %s" % stuck_rows
    assert status == 0, "the last worker ended with %s: %s" % (status, worker.stderr_tail())
    assert not unknown, "rows done that were never published: %s" % unknown[:20]
    assert not unexplained, "rows done twice with no kill between: %s" % unexplained[:10]
