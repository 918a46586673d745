"""Lanes, FIFO groups and connection accounting (seeds/lanes.txt)."""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import libqueue

from helpers import POLL_MS, Recorder, make_table, wait_until
from test_processes import spawn


def test_workers_by_key_keeps_each_keys_order(db, form) -> None:
    """Under workers_by_key(4), the rows of one key run one at a time, in the
    order they were published, whatever the other keys do."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    keys, per_key = 20, 6
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [dict(payload=b"%d:%d" % (k, i), partition_key="k%d" % k)
                                    for i in range(per_key) for k in range(keys)])
        spans = Recorder()
        with broker.subscribe(table, workers_by_key=4, poll_interval_ms=POLL_MS) as sub:
            @sub.run
            def handle(d: libqueue.Delivery) -> None:
                start = time.monotonic_ns()
                time.sleep(random.uniform(0, 0.003))
                spans.add((d.partition_key, int(d.payload.split(b":")[1]), start, time.monotonic_ns()))

            wait_until(lambda: len(spans) == keys * per_key, timeout=60, what="every row")
    by_key: Dict[str, List[Tuple[int, int, int]]] = {}
    for key, seq, start, end in spans.snapshot():
        by_key.setdefault(key, []).append((start, end, seq))
    for key, runs in by_key.items():
        runs.sort()
        assert [seq for _, _, seq in runs] == list(range(per_key)), "key %s out of order" % key
        for (_, end, _), (start, _, _) in zip(runs, runs[1:]):
            assert end <= start, "two rows of key %s ran at once" % key


def test_fifo_groups_do_not_take_the_advisory_form() -> None:
    with pytest.raises(libqueue.Misuse) as info:
        make_table("advisory", group="grp", fifo=True)
    assert "lock key" in str(info.value)


@pytest.mark.across_processes
@pytest.mark.forms("row_lock", "lease")
def test_fifo_group_across_two_processes(db, form, tmp_path) -> None:
    """A FIFO group read by two brokers in two processes: one row of the group
    in work at a time, in publish order."""
    table = make_table(form, group="grp", fifo=True)
    db.create_table(table)
    rows = 40
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [dict(payload=b"%d" % i, group="g") for i in range(rows)])
    log = str(tmp_path / "fifo.log")
    workers = [spawn(db, table, log, "drain", workers=4, group="g", poll_interval_ms=20)
               for _ in range(2)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready"
        wait_until(lambda: db.count("jobs") == 0, timeout=90, what="the group to drain")
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) == 0
    events = []
    with open(log) as f:
        for line in f:
            kind, _, pid, at, payload = line.split()
            events.append((int(at), kind, int(payload), int(pid)))
    events.sort()
    in_work, order = 0, []
    for _, kind, seq, _ in events:
        in_work += 1 if kind == "B" else -1
        assert in_work <= 1, "two rows of one FIFO group were in work at once"
        if kind == "B":
            order.append(seq)
    assert order == list(range(rows))


@pytest.mark.forms("row_lock", "lease")
def test_fifo_head_that_keeps_failing_holds_only_its_group(db, form) -> None:
    """retry() keeps a failing head at the front of its group until
    max_attempts parks it; other groups flow meanwhile."""
    table = make_table(form, group="grp", fifo=True, dead_letter="parked")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [dict(payload=b"bad", group="a"), dict(payload=b"a2", group="a"),
                                    dict(payload=b"b1", group="b")])
        with broker.subscribe(table, group="b", poll_interval_ms=POLL_MS) as other:
            d = other.next(5)
            assert d.payload == b"b1"  # group b flows while a's head fails
            d.ack()
        seen = []
        with broker.subscribe(table, group="a", poll_interval_ms=POLL_MS, max_attempts=3) as sub:
            for _ in range(4):
                d = sub.next(5)
                seen.append(d.payload)
                if d.payload == b"bad":
                    d.retry()
                else:
                    d.ack()
                d.release()
    assert seen == [b"bad", b"bad", b"bad", b"a2"]
    assert db.query("SELECT payload FROM jobs WHERE grp = 'parked'") == [(b"bad",)]


def test_an_empty_table_sees_one_claim_per_wait(db, form) -> None:
    table = make_table(form)
    db.create_table(table)
    poll_ms = 100
    with libqueue.Broker(db.url) as broker:
        with broker.subscribe(table, workers=8, poll_interval_ms=poll_ms) as sub:
            started = time.monotonic()
            assert sub.next(1.0) is None
            waits = (time.monotonic() - started) * 1000 / poll_ms
            claims = sub.stat("claims")
    # One claim per poll interval (plus the first), not one per worker.
    assert 1 <= claims <= waits + 2


# A statement that is not a keeper's look for cancel requests, on `column`.
NOT_A_LOOK = "AND %s NOT LIKE '%%lq_cancel_requests%%'"


def held_connections(db: Any, form: str, tables: Tuple[str, ...] = ("jobs",)) -> int:
    """The connections libqueue's subscriptions hold, read from the server:
    those in a statement or an open transaction (claims in flight, the row
    lock form's held transactions) and those holding an advisory key; not the
    handlers' own statements, which are all INSERTs here (publishes, and
    their writes to ``audit``), nor a row lock keeper's short look at
    lq_cancel_requests, which takes the spare like them (docs/model.md,
    "Sizing the pool"). PostgreSQL's are told by application name in
    this database (the suite runs one test at a time), MariaDB's by this
    test's database of its own. MariaDB shows an idle transaction only in
    information_schema.innodb_trx, a snapshot InnoDB takes at most every
    100 ms: callers sample no faster, so each read takes a fresh one."""
    if db.dialect == "postgresql":
        return int(db.scalar(
            "SELECT count(*) FROM pg_stat_activity a WHERE a.application_name = 'libqueue' "
            "AND a.datname = current_database() AND a.pid <> pg_backend_pid() "
            "AND ((a.state <> 'idle' AND a.query NOT LIKE 'INSERT%' " + NOT_A_LOOK % "a.query" + ") "
            "OR a.pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted))"))
    if form == "advisory":
        # Advisory deliveries hold a key, not a transaction: the key holders
        # (GET_LOCK names <database>.job-<id>, test_mysql.py) and the claims
        # running, both read live; innodb_trx's snapshot could still show a
        # handler's INSERT that has finished.
        keys = " OR ".join("p.id IN (SELECT IS_USED_LOCK(CONCAT('%s.job-', id)) FROM %s)"
                           % (db.database.lower(), table) for table in tables)
        return int(db.scalar(
            "SELECT count(*) FROM information_schema.processlist p WHERE p.db = DATABASE() "
            "AND p.id <> CONNECTION_ID() AND (" + keys + " OR (p.command = 'Query' "
            "AND COALESCE(p.info, '') NOT LIKE 'INSERT%'))"))
    return int(db.scalar(
        "SELECT count(*) FROM information_schema.processlist p WHERE p.db = DATABASE() "
        "AND p.id <> CONNECTION_ID() AND (p.id IN (SELECT trx_mysql_thread_id FROM "
        "information_schema.innodb_trx WHERE COALESCE(trx_query, '') NOT LIKE 'INSERT%' "
        + NOT_A_LOOK % "COALESCE(trx_query, '')" + "))"))


def sample_until(samples: List[int], db: Any, form: str, done: Any, timeout: float,
                 tables: Tuple[str, ...] = ("jobs",)) -> None:
    """Appends held_connections to ``samples`` until ``done()`` (or fails)."""
    deadline = time.monotonic() + timeout
    pause = 0.01 if db.dialect == "postgresql" else 0.11
    while not done():
        samples.append(held_connections(db, form, tables))
        if time.monotonic() > deadline:
            pytest.fail("timed out sampling the held connections")
        time.sleep(pause)


@pytest.mark.dialect("postgresql", "mysql")
def test_a_small_pool_keeps_a_connection_for_the_handlers(db, form) -> None:
    """Pool of 4, workers(8): the subscription holds at most 3 connections
    at every sample taken from the server while handlers run (blocked, then
    draining), and each handler's own statements (a publish, an insert of its
    own through the broker) get the fourth."""
    table = make_table(form)
    db.create_table(table)
    db.execute("CREATE TABLE audit (note TEXT)")
    rows = 12
    release = threading.Event()
    own, failed = Recorder(), Recorder()
    samples: List[int] = []
    with libqueue.Broker(db.url, pool_size=4, acquire_timeout_ms=5000) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])

        def handle(d: libqueue.Delivery) -> None:
            if d.payload == b"child":
                return
            try:
                broker.publish(table, b"child")
                d.execute("INSERT INTO audit (note) VALUES ('own')")
                own.add(d.payload)
            except libqueue.Error as e:
                failed.add(repr(e))
                raise
            release.wait(30)

        with broker.subscribe(table, workers=8, poll_interval_ms=POLL_MS) as sub:
            sub.run(handle)
            # Row lock and advisory deliveries hold a connection each: 3 of
            # them at once; leases hold none between statements: all 8.
            busy = 8 if form == "lease" else 3
            wait_until(lambda: sub.stat("in_work") >= busy, what="%d deliveries in work" % busy)
            stop = time.monotonic() + 1.5
            sample_until(samples, db, form, lambda: time.monotonic() > stop, 10)
            in_work = sub.stat("in_work")
            release.set()
            sample_until(samples, db, form, lambda: db.count("jobs") == 0, 60)
    assert max(samples) <= 3, "the subscription held %d connections of 4" % max(samples)
    assert in_work == busy
    assert not failed.snapshot(), "a handler's own statement was starved: %s" % failed.snapshot()
    assert len(own) == rows
    assert db.count("audit") == rows


@pytest.mark.dialect("postgresql", "mysql")
def test_transactional_deliveries_count_against_the_pool(db, form) -> None:
    """Transactional mode, pool of 4, workers(8): every delivery holds its
    transaction's connection, in every form, so 3 are in work at once (the
    lease form counts each row's connection from its claim, before its
    worker begins the transaction), the subscription holds at most 3
    connections at every sample, and a handler's publish gets the fourth."""
    table = make_table(form)
    db.create_table(table)
    db.execute("CREATE TABLE audit (note TEXT)")
    rows = 12
    release = threading.Event()
    failed = Recorder()
    samples: List[int] = []
    with libqueue.Broker(db.url, pool_size=4, acquire_timeout_ms=5000) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])

        def handle(d: libqueue.Delivery) -> None:
            if d.payload == b"child":
                return
            try:
                # In the delivery's transaction, and not an INSERT, so the
                # samples count its connection (see held_connections).
                d.execute("DELETE FROM audit WHERE note = 'none'")
                broker.publish(table, b"child")
            except libqueue.Error as e:
                failed.add(repr(e))
                raise
            release.wait(30)

        with broker.subscribe(table, workers=8, poll_interval_ms=POLL_MS,
                              transactional=1) as sub:
            sub.run(handle)
            wait_until(lambda: sub.stat("in_work") >= 3, what="3 deliveries in work")
            stop = time.monotonic() + 1.5
            sample_until(samples, db, form, lambda: time.monotonic() > stop, 10)
            in_work = sub.stat("in_work")
            release.set()
            sample_until(samples, db, form, lambda: db.count("jobs") == 0, 60)
    assert max(samples) <= 3, "the subscription held %d connections of 4" % max(samples)
    assert in_work == 3
    assert not failed.snapshot(), "a handler's own statement was starved: %s" % failed.snapshot()


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("row_lock", "advisory")
def test_subscriptions_on_one_pool_leave_each_other_room(db, form) -> None:
    """Two subscriptions of one broker, pool of 4, workers(4) each, slow
    handlers: together they hold at most 3 connections at every sample, the
    one that starts second is not starved by the first, and every handler's
    own statement gets the fourth. The advisory tables have a partition key,
    so each claim locks several keys, each on a connection of its own."""
    names = ("jobs", "jobs_b")
    keyed = dict(partition_key="account") if form == "advisory" else {}
    tables = [make_table(form, name, **keyed) for name in names]
    for table in tables:
        db.create_table(table)
    db.execute("CREATE TABLE audit (note TEXT)")
    rows = 24
    spans, failed = Recorder(), Recorder()
    samples: List[int] = []
    with libqueue.Broker(db.url, pool_size=4, acquire_timeout_ms=5000) as broker:
        for table in tables:
            key = (lambda i: dict(partition_key="k%d" % i)) if keyed else (lambda i: {})
            broker.publish_many(table, [dict(payload=b"%d" % i, **key(i)) for i in range(rows)])

        def handler(name: str) -> Any:
            def handle(d: libqueue.Delivery) -> None:
                start = time.monotonic()
                try:
                    d.execute("INSERT INTO audit (note) VALUES ('%s')" % name)
                except libqueue.Error as e:
                    failed.add(repr(e))
                    raise
                time.sleep(0.08)
                spans.add((name, start, time.monotonic()))
            return handle

        subs = [broker.subscribe(t, workers=4, poll_interval_ms=POLL_MS) for t in tables]
        try:
            # The first takes all the room; the second, starting later, is
            # left the next connection that comes free.
            subs[0].run(handler("jobs"))
            wait_until(lambda: subs[0].stat("in_work") == 3, what="the first to hold 3")
            subs[1].run(handler("jobs_b"))
            left = lambda: db.count("jobs") + db.count("jobs_b")  # noqa: E731
            sample_until(samples, db, form, lambda: left() == 0, 90, names)
        finally:
            for sub in subs:
                sub.close()
    assert max(samples) <= 3, "the subscriptions held %d connections of 4" % max(samples)
    assert not failed.snapshot(), "a handler's own statement was starved: %s" % failed.snapshot()
    assert db.count("audit") == 2 * rows
    # Side by side: each began rows before the other had finished its own
    # (the second before the first had done half of its rows).
    by_name: Dict[str, List[Tuple[float, float]]] = {}
    for name, start, end in spans.snapshot():
        by_name.setdefault(name, []).append((start, end))
    assert sorted(len(v) for v in by_name.values()) == [rows, rows]
    first = {name: min(s for s, _ in v) for name, v in by_name.items()}
    last = {name: max(e for _, e in v) for name, v in by_name.items()}
    assert first["jobs"] < last["jobs_b"]
    assert first["jobs_b"] < sorted(e for _, e in by_name["jobs"])[rows // 2]


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("row_lock")
def test_a_busy_subscription_leaves_the_next_room_to_a_starved_one(db, form) -> None:
    """Pool of 4: the first subscription holds all 3 connections of the
    room; the second, started then, holds nothing and waits. When one of the
    first's deliveries settles, the connection goes to the second, not back
    to the first, whose claimer is woken first and has rows waiting."""
    tables = [make_table(form, name) for name in ("jobs", "jobs_b")]
    for table in tables:
        db.create_table(table)
    gates = {"jobs": threading.Semaphore(0), "jobs_b": threading.Semaphore(0)}
    with libqueue.Broker(db.url, pool_size=4, acquire_timeout_ms=5000) as broker:
        for table in tables:
            broker.publish_many(table, [b"%d" % i for i in range(8)])

        def handler(name: str) -> Any:
            def handle(d: libqueue.Delivery) -> None:
                if not gates[name].acquire(timeout=30):
                    raise RuntimeError("never let go")
            return handle

        subs = [broker.subscribe(t, workers=4, poll_interval_ms=POLL_MS) for t in tables]
        try:
            subs[0].run(handler("jobs"))
            wait_until(lambda: subs[0].stat("in_work") == 3, what="the first to hold 3")
            subs[1].run(handler("jobs_b"))
            time.sleep(0.2)  # the second's claimer finds no room and waits
            assert subs[1].stat("in_work") == 0
            gates["jobs"].release()  # one of the first's deliveries settles
            wait_until(lambda: subs[1].stat("in_work") == 1, what="the second to take the room")
            assert subs[0].stat("in_work") == 2
        finally:
            for gate in gates.values():
                for _ in range(16):
                    gate.release()
            for sub in subs:
                sub.close()


def test_batch_subscription(db, form) -> None:
    """A batch handler receives up to n deliveries at once and settles each."""
    table = make_table(form)
    db.create_table(table)
    rows = 25
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        sizes = Recorder()
        with broker.subscribe(table, batch=10, poll_interval_ms=POLL_MS) as sub:
            @sub.run_batch
            def handle(batch: list) -> None:
                sizes.add(len(batch))
                for d in batch[1:]:
                    d.ack()  # the first is acked by the return

            wait_until(lambda: db.count("jobs") == 0, what="every row")
    assert sum(sizes.snapshot()) == rows
    assert max(sizes.snapshot()) > 1 and max(sizes.snapshot()) <= 10


@pytest.mark.forms("row_lock")
def test_a_row_lock_batch_shares_one_transaction(db, form) -> None:
    """One failing settlement rolls the whole batch back: every row returns,
    the acked ones too, and later settlements say so."""
    table = make_table(form, dead_letter="parked")
    db.create_table(table)
    db.create_table(table, name="parked", extra=["CHECK (false)"])  # every move fails
    broker = libqueue.Broker(db.url)
    try:
        broker.publish_many(table, [b"%d" % i for i in range(3)])
        with broker.subscribe(table, batch=3, poll_interval_ms=POLL_MS) as sub:
            batch = sub.next_batch(5, capacity=3)
            assert len(batch) == 3
            batch[0].ack()
            assert db.count("jobs") == 3  # not before the batch commits
            with pytest.raises(libqueue.BackendError):
                batch[1].dead_letter()
            with pytest.raises(libqueue.BatchRolledBack):
                batch[2].ack()
            for d in batch:
                d.release()
            sub.stop()
        assert db.count("jobs") == 3
    finally:
        broker.close()


def test_on_threads_pools_count_against_the_connection_limit(db) -> None:
    """Handler threads with pools of their own: the pool plus every thread's
    connections stay within connection_limit, or the subscription does not
    start, saying why."""
    table = make_table("lease" if db.dialect == "sqlite" else "row_lock")
    db.create_table(table)
    db.execute("CREATE TABLE audit (note TEXT)")
    with libqueue.Broker(db.url, pool_size=4, connection_limit=7) as broker:
        with pytest.raises(libqueue.ConnectionLimit) as info:
            broker.subscribe(table, on_threads=2, thread_connections=2)
        assert "4" in str(info.value) and "2 threads x 2" in str(info.value)
        broker.publish_many(table, [b"a", b"b", b"c"])
        insert = "INSERT INTO audit (note) VALUES (%s)" % db.placeholder(1)
        with broker.subscribe(table, on_threads=3, poll_interval_ms=POLL_MS) as sub:
            sub.run(lambda d: d.execute(insert, d.payload.decode()))
            wait_until(lambda: db.count("jobs") == 0, what="every row")
    assert sorted(r[0] for r in db.query("SELECT note FROM audit")) == ["a", "b", "c"]
