"""Flow control: queue-wide concurrency, counted on the database across
processes, and worker_concurrency, counted in the subscription."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until
from test_processes import spawn
from worker_process import read_spans

Span = Tuple[int, int, int]  # start, end (monotonic ns), pid


# What a handler's start may lag the start its claim counted, on the
# database's clock: the rest of the claim and the hand-off to a worker (the
# row lock and advisory forms count as they reserve, before the claim takes
# its row: docs/flow-control.md), tens of milliseconds on a loaded 2-core
# host. A limit that overshoots starts its extra rows at once, far closer.
START_SLACK_NS = 100_000_000


class KeyGauge:
    """A handler that sleeps, counting the most rows of each partition key
    (None: rows without one) and of all keys ("all") in work at once."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.most: Dict[Any, int] = {}
        self._running: Dict[Any, int] = {}
        self._lock = threading.Lock()

    def handle(self, d: libqueue.Delivery) -> None:
        key = d.partition_key
        with self._lock:
            self._running[key] = self._running.get(key, 0) + 1
            self.most[key] = max(self.most.get(key, 0), self._running[key])
            self.most["all"] = max(self.most.get("all", 0), sum(self._running.values()))
        time.sleep(self.sleep_s)
        with self._lock:
            self._running[key] -= 1


def spans_of(log: str) -> List[Span]:
    return [(s.start, s.end, s.pid) for s in read_spans(log)]


def overlap(spans: List[Span]) -> Tuple[int, float]:
    """The most spans open at once, and the mean number open while the
    backlog lasted: from the first start to the last."""
    events = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    backlog_end = max(s for s, _, _ in spans)
    most = open_now = 0
    area = 0
    last = events[0][0]
    for at, step in events:
        if last < backlog_end:
            area += open_now * (min(at, backlog_end) - last)
        last = at
        open_now += step
        most = max(most, open_now)
    span = backlog_end - events[0][0]
    return most, area / span if span else float(most)


class Peak:
    """A handler of 30 ms that records the most of its runs at once."""

    def __init__(self) -> None:
        self.running = self.most = 0
        self._lock = threading.Lock()

    def handle(self, d: libqueue.Delivery) -> None:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.03)
        with self._lock:
            self.running -= 1


def drain(db: Any, table: libqueue.Table, log: str, processes: int, **options: Any) -> None:
    options.setdefault("poll_interval_ms", POLL_MS)
    workers = [spawn(db, table, log, "drain", **options)
               for _ in range(processes)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready"
        wait_until(lambda: db.count(table.name) == 0, timeout=120, what="the table to drain")
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert w.wait(30) == 0


def concurrency_across_processes(db: Any, form: str, tmp_path: Any, processes: int = 3,
                                 **options: Any) -> None:
    """3 processes (or `processes`) x 6 workers with concurrency=4: never
    more than 4 handlers at once, and 3 or more on average while the backlog
    lasts."""
    table = make_table(form)
    db.create_table(table)
    rows = 200
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
    log = str(tmp_path / "spans.log")
    drain(db, table, log, processes, workers=6, concurrency=4, sleep_ms=(20, 50), **options)
    spans = spans_of(log)
    assert len(spans) == rows
    most, mean = overlap(spans)
    assert most <= 4, "%d handlers ran at once under concurrency=4" % most
    # 3 of 4 on average: the slots are used, with room for a loaded 2-core
    # host, where a process that waits for the CPU holds its slot idle.
    assert mean >= 3.0, "only %.2f of 4 busy on average while the backlog lasted" % mean


@pytest.mark.forms("lease")
@pytest.mark.across_processes
def test_concurrency_holds_across_processes(db, form, tmp_path) -> None:
    concurrency_across_processes(db, form, tmp_path)


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("advisory")
@pytest.mark.across_processes
def test_concurrency_holds_across_processes_by_slot_keys(db, form, tmp_path) -> None:
    """The advisory form: each row in work holds a slot key in its session."""
    concurrency_across_processes(db, form, tmp_path)


@pytest.mark.forms("row_lock")
def test_concurrency_holds_across_processes_by_slot_locks(db, form, tmp_path) -> None:
    """The row lock form: each row in work holds a slot lock of its claim's
    transaction (MySQL: a GET_LOCK given back when the transaction ends)."""
    concurrency_across_processes(db, form, tmp_path)


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("lease", "row_lock", "advisory")
def test_more_workers_than_the_limit_in_one_process_keep_the_limit_busy(db, form, tmp_path):
    """Two of the six workers find the limit at every turn and rest: each
    settlement here must wake one, whatever the claims beside it saw last
    (a row lock claim that found room could write so after one that found
    none had begun to rest, and every worker then rested until the poll,
    here 2 s: the limit's slots are not left to the poll)."""
    concurrency_across_processes(db, form, tmp_path, processes=1, poll_interval_ms=2000)


@pytest.mark.forms("lease")
def test_worker_concurrency_caps_what_one_subscription_holds(db, form) -> None:
    """workers=8, worker_concurrency=3: at most 3 handlers at once here."""
    table = make_table(form)
    db.create_table(table)
    peak = Peak()

    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(40)])
        with broker.subscribe(table, workers=8, worker_concurrency=3,
                              poll_interval_ms=POLL_MS) as sub:
            sub.run(peak.handle)
            wait_until(lambda: db.count("jobs") == 0, what="the table to drain")
    most = peak.most
    assert most == 3, "%d handlers ran at once under worker_concurrency=3" % most


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("row_lock", "advisory")
def test_a_process_holding_every_slot_makes_no_claim_until_one_is_free(db, broker, form):
    """workers=6, concurrency=4: while the process's own runs hold all 4
    slots, a claim could only find them held, so none is made; a hand-over
    is one claim, not one more for each idle worker woken beside it."""
    table = make_table(form)
    db.create_table(table)
    rows = 100
    broker.publish_many(table, [b"%d" % i for i in range(rows)])
    peak = Peak()
    # The claims made before each run starts: those after the last one are
    # the drained queue's polls, as many as the wait here lasts.
    seen: List[Tuple[int, int]] = []
    with broker.subscribe(table, workers=6, concurrency=4, poll_interval_ms=POLL_MS) as sub:
        def handle(d: libqueue.Delivery) -> None:
            seen.append((sub.stat("claims"), sub.stat("empty_claims")))
            peak.handle(d)

        sub.run(handle)
        wait_until(lambda: sub.stat("settled") == rows, what="every row to settle")
    claims, empty = max(seen)
    assert peak.most == 4
    # Each row is one claim, a few more where the last rows' claims met none.
    # MySQL's row lock form gives a slot's name back after the commit, so a
    # claim woken beside it may find it held still: 11-18 of 100 on a loaded
    # machine. Waking every idle worker at each hand-over would make 2 a row.
    bound = rows // 4 if (db.dialect, form) == ("mysql", "row_lock") else rows // 10
    assert empty <= bound, "%d of %d claims found every slot held or no row" % (empty, claims)


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("row_lock", "advisory")
def test_a_run_past_its_timeout_gives_its_slot_back_while_its_handler_runs(db, broker, form):
    """concurrency=1, two workers: the first run hangs past timeout_ms and
    keeps its worker, but its row went back and its slot with it (its
    transaction or key ended), so the row runs again beside it."""
    table = make_table(form)
    db.create_table(table)
    broker.publish(table, b"hangs once")
    seen: List[int] = []
    hung = threading.Event()

    def handle(d: libqueue.Delivery) -> None:
        seen.append(d.attempt)
        if d.attempt == 1:
            hung.wait(30)

    with broker.subscribe(table, workers=2, concurrency=1, timeout_ms=300,
                          poll_interval_ms=POLL_MS) as sub:
        sub.run(handle)
        try:
            wait_until(lambda: len(seen) >= 2, timeout=20,
                       what="the row's second run beside the first, hung")
        finally:
            hung.set()
        wait_until(lambda: db.count(table.name) == 0, what="the second run to ack the row")
    assert seen == [1, 2]


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("advisory")
def test_a_run_that_ended_lets_its_slot_go_while_its_settlement_waits(db, broker, form):
    """concurrency=1, two workers: the first row's ack waits on a row lock
    held here. Its run has ended, so its slot is let go before the ack and
    the second row runs meanwhile; then the ack goes on, and each row ran
    once. (On PostgreSQL a worker's settlement claims its next row in its
    own transaction, taking the slot over: a rate limit turns that off.)"""
    table = make_table(form)
    db.create_table(table)
    first_id, _ = broker.publish(table, b"first"), broker.publish(table, b"second")
    seen: List[bytes] = []
    first_running, first_may_end = threading.Event(), threading.Event()

    def handle(d: libqueue.Delivery) -> None:
        seen.append(d.payload)
        if d.id == first_id:
            first_running.set()
            first_may_end.wait(10)

    options = dict(rate_limit=1000) if db.dialect == "postgresql" else {}
    with contextlib.closing(db.connect()) as lock_conn:
        lock = lock_conn.cursor()
        with broker.subscribe(table, workers=2, concurrency=1, poll_interval_ms=POLL_MS,
                              **options) as sub:
            sub.run(handle)
            try:
                assert first_running.wait(10)
                lock.execute("BEGIN")
                lock.execute("SELECT id FROM %s WHERE id = %d FOR UPDATE" % (table.name, first_id))
                first_may_end.set()
                wait_until(lambda: len(seen) == 2, timeout=10,
                           what="the second row to run while the first one's ack waits")
                assert db.scalar("SELECT count(*) FROM %s WHERE id = ?" % table.name,
                                 (first_id,)) == 1, "the first row's ack did not wait"
            finally:
                first_may_end.set()
                lock.execute("ROLLBACK")
            wait_until(lambda: db.count(table.name) == 0, what="both rows acked")
    assert sorted(seen) == [b"first", b"second"]


@pytest.mark.forms("lease")
def test_a_queue_at_its_limit_is_not_claimed_past_it(db, form) -> None:
    """A broker that holds the whole limit leaves nothing to another, whose
    claims take no row until the room is given back."""
    table = make_table(form)
    db.create_table(table)
    with libqueue.Broker(db.url) as first, libqueue.Broker(db.url) as second:
        first.publish_many(table, [b"%d" % i for i in range(6)])
        b = second.subscribe(table, concurrency=2, workers=2, poll_interval_ms=POLL_MS)
        with first.subscribe(table, concurrency=2, workers=2, poll_interval_ms=POLL_MS) as a:
            held = [a.next(10), a.next(10)]
            assert all(held)
            assert b.next(0.5) is None, "a row was claimed past concurrency=2"
            held[0].ack()
            held[1].ack()
        # The first closed: its rows waiting went back, and the room is the second's.
        with b:
            got = [b.next(10), b.next(10)]
            assert all(got), "the room the first gave back was not taken"
            assert b.next(0.5) is None, "a row was claimed past concurrency=2"
            for d in got:
                d.ack()
    assert db.count("jobs") == 2


@pytest.mark.forms("lease")
def test_subscriptions_opened_at_once_make_the_limit_index_without_a_warning(db, form, caplog):
    """Brokers that open limited subscriptions of a new table at once each
    make the index the limits count with (IF NOT EXISTS): one that finds it
    made meanwhile by another is not an error (PostgreSQL reports such a
    race as a duplicate name in its catalog)."""
    caplog.set_level(logging.WARNING, logger="libqueue")
    for round_ in range(3):
        table = make_table(form, "jobs_%d" % round_, partition_key="account")
        db.create_table(table)
        brokers = [libqueue.Broker(db.url) for _ in range(6)]
        gate = threading.Barrier(len(brokers))
        subs: List[Any] = []

        def open_one(b: libqueue.Broker) -> None:
            gate.wait()
            subs.append(b.subscribe(table, concurrency=4, partition_concurrency=2))

        threads = [threading.Thread(target=open_one, args=(b,)) for b in brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for sub in subs:
            sub.close()
        for b in brokers:
            b.close()
        assert len(subs) == len(brokers)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, warnings


@pytest.mark.parametrize("options, message", [
    (dict(concurrency=0), "option concurrency must be between 1 and"),
    (dict(worker_concurrency=-1), "option worker_concurrency must be between 1 and"),
    (dict(concurrency=2, worker_concurrency=3), "worker_concurrency 3 is above concurrency 2"),
])
def test_bad_limits_are_refused(db, broker, options: Dict[str, int], message: str) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match=message):
        broker.subscribe(table, **options)
    assert db.count("jobs") == 0


@pytest.mark.forms("row_lock")
def test_a_row_lock_claim_that_finds_nothing_gives_its_slot_back(db, form) -> None:
    """concurrency=1: claims of an empty queue take the slot and find no row;
    each gives it back (the broker's idle connections hold none), and a
    delivery holds it until it settles."""
    table = make_table(form)
    db.create_table(table)
    options = dict(concurrency=1, workers=1, poll_interval_ms=POLL_MS)
    with libqueue.Broker(db.url) as first, libqueue.Broker(db.url) as second:
        with first.subscribe(table, **options) as idle:
            for _ in range(3):
                assert idle.next(0.2) is None
        second.publish_many(table, [b"a", b"b"])
        with second.subscribe(table, **options) as busy:
            got = busy.next(10)
            assert got is not None, "a claim that found nothing kept its slot"
            with first.subscribe(table, **options) as other:
                assert other.next(0.5) is None, "a row was claimed past concurrency=1"
                got.ack()
                busy.close()  # what it took after the ack goes back, with its slot
                assert other.next(10) is not None, "the settled row's slot did not come back"


@pytest.mark.dialect("postgresql")
@pytest.mark.forms("lease")
def test_at_the_limit_a_run_hands_its_slot_on_in_one_commit(db, form) -> None:
    """concurrency=1: the ack of a row whose run ended commits in the claim
    that leases the next row, so the slot passes on in one commit. The same
    transaction writes both, so PostgreSQL gives the acked row's last version
    (processed_at set) and the next row's lease one xmin. A claim that comes
    late leaves the ack to the acker, so most pairs are asked for, not all."""
    table = make_table(form, processed_at="processed_at")
    db.create_table(table)
    rows = 20
    leases = []  # (id, the xmin of its lease), in run order

    def handle(d: libqueue.Delivery) -> None:
        leases.append((d.id, db.scalar("SELECT xmin::text FROM jobs WHERE id = ?", (d.id,))))

    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=1, concurrency=1, poll_interval_ms=POLL_MS) as sub:
            sub.run(handle)
            wait_until(lambda: db.count("jobs", "processed_at IS NULL") == 0, what="every row acked")
    acked = dict(db.query("SELECT id, xmin::text FROM jobs"))
    assert len(leases) == rows
    carried = sum(1 for (done, _), (_, lease) in zip(leases, leases[1:]) if acked[done] == lease)
    assert carried >= (rows - 1) * 3 // 4, \
        "%d of %d acks committed with the next row's lease" % (carried, rows - 1)


@pytest.mark.dialect("postgresql")
@pytest.mark.forms("lease")
def test_a_carried_ack_waits_for_the_queue_lock_no_longer_than_its_lease(db, form) -> None:
    """While another session holds the queue's lock (a claim stalled in
    another process), the claim that carries a finished run's ack waits for
    the lock no more than half of the lease left, then the ack goes on its
    own: the row is acked within its lease, not left to run out and run
    again. The lock is the queue's: no row is claimed while it is held."""
    table = make_table(form)
    db.create_table(table)
    runs, lease_ends = [], []
    started, locked = threading.Event(), threading.Event()

    def handle(d: libqueue.Delivery) -> None:
        runs.append(d.payload)
        lease_ends.append(d.lease_expiry_ms / 1000)
        started.set()
        assert locked.wait(10), "the test did not take the queue's lock"

    with libqueue.Broker(db.url) as broker:
        first, _ = broker.publish_many(table, [b"first", b"second"])
        with broker.subscribe(table, workers=1, concurrency=1, lease_ms=2000,
                              poll_interval_ms=POLL_MS) as sub:
            sub.run(handle)
            assert started.wait(10), "the first row did not start"
            with contextlib.closing(db.connect()) as conn, conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                            ("concurrency:" + table.name,))
                locked.set()
                wait_until(lambda: db.count("jobs", "id = %d" % first) == 0,
                           timeout=lease_ends[0] - time.time() - 0.1,
                           what="the first row acked within its lease, the lock held elsewhere")
                time.sleep(0.3)
                assert runs == [b"first"], "a row was claimed while the queue's lock was held"
                cur.execute("COMMIT")
            wait_until(lambda: db.count("jobs") == 0, what="the second row, once the lock was free")
    assert runs == [b"first", b"second"]


@pytest.mark.forms("advisory")
def test_concurrency_in_the_advisory_form_holds_by_slot_keys(db, form) -> None:
    """workers=6, concurrency=2, one process: each delivery holds a slot key
    beside its row's; at most 2 handlers at once, and 2 reached."""
    table = make_table(form)
    db.create_table(table)
    peak = Peak()

    with libqueue.Broker(db.url, pool_size=10) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(30)])
        with broker.subscribe(table, workers=6, concurrency=2, poll_interval_ms=POLL_MS) as sub:
            sub.run(peak.handle)
            wait_until(lambda: db.count("jobs") == 0, what="the table to drain")
    most = peak.most
    assert most == 2, "%d handlers ran at once under concurrency=2" % most


@pytest.mark.dialect("postgresql", "mysql")
def test_contention_doubles_the_poll_interval_and_claims_that_meet_none_shrink_it(db, broker):
    """The queue-wide limit's lock held by another session: each claim's
    wait for it ends a second before its deadline as contention, and the
    interval doubles to the ceiling; once the lock is free again, claims
    that meet no conflict shrink it back to poll_interval_ms."""
    table = make_table("lease")
    db.create_table(table)
    broker.publish(table, b"a")
    hold = db.connect()
    cur = hold.cursor()
    try:
        with libqueue.Broker(db.url, statement_timeout_ms=1500) as quick, \
                quick.subscribe(table, concurrency=1, poll_interval_ms=20,
                                poll_ceiling_ms=160) as sub:
            # PostgreSQL: the queue's advisory lock. MySQL, where concurrency
            # is counted by holds: the queue's own row of the holds table,
            # which the subscription made and every growth locks first.
            if db.dialect == "postgresql":
                cur.execute("SELECT pg_advisory_lock(hashtextextended('concurrency:jobs', 0))")
            else:
                cur.execute("BEGIN")
                cur.execute("SELECT held FROM lq_limit_holds WHERE queue = 'concurrency:jobs' "
                            "AND holder = 0 FOR UPDATE")
            assert sub.next(0.05) is None  # pulls: the claims begin
            wait_until(lambda: sub.stat("poll_interval_ms") == 160, timeout=30,
                       what="the ceiling")
            assert sub.stat("contention") >= 3 and sub.stat("delivered") == 0
            if db.dialect == "postgresql":
                cur.execute("SELECT pg_advisory_unlock(hashtextextended('concurrency:jobs', 0))")
            else:
                hold.rollback()
            d = sub.next(10)
            assert d is not None
            d.ack()
            wait_until(lambda: sub.stat("poll_interval_ms") == 20, what="the interval back")
    finally:
        hold.close()


def test_poll_ceiling_below_the_interval_is_refused(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="poll_ceiling_ms 10 is below poll_interval_ms 50"):
        broker.subscribe(table, poll_interval_ms=50, poll_ceiling_ms=10)


def start_times(log: str) -> List[int]:
    """The handlers' start times (monotonic ns, one clock for every process
    of the machine), sorted."""
    return sorted(s.start for s in read_spans(log))


@pytest.mark.across_processes
def test_rate_limit_holds_across_processes(db, form, tmp_path) -> None:
    """rate_limit=20 per 1000 ms, 2 processes x 4 workers, 100 rows: no 21
    starts within a second, and the limit is used: at least 90% of the 80
    starts four windows allow come in the first four seconds."""
    table = make_table(form)
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(100)])
    log = str(tmp_path / "spans.log")
    drain(db, table, log, 2, workers=4, rate_limit=20, rate_period_ms=1000)
    t = start_times(log)
    assert len(t) == 100
    slack = START_SLACK_NS
    for i in range(len(t) - 20):
        assert t[i + 20] - t[i] >= 1_000_000_000 - slack, \
            "starts %d and %d are %.3f s apart" % (i, i + 20, (t[i + 20] - t[i]) / 1e9)
    in_four = sum(1 for x in t if x - t[0] < 4_000_000_000)
    assert in_four >= 72, "only %d starts in the first four seconds (80 allowed)" % in_four


@pytest.mark.parametrize("options, message", [
    (dict(rate_limit=0), "option rate_limit must be between 1 and"),
    (dict(rate_period_ms=500), "rate_period_ms is the window of rate_limit, which is not set"),
])
def test_bad_rate_limits_are_refused(db, broker, options: Dict[str, int], message: str) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match=message):
        broker.subscribe(table, **options)


def test_an_empty_queue_spends_no_starts(db, broker, form) -> None:
    """Claims that find nothing take back the starts they reserved (row
    lock, advisory) or record none (lease): after idle polls, a burst still
    gets the whole window."""
    table = make_table(form)
    db.create_table(table)
    with broker.subscribe(table, workers=2, rate_limit=5, rate_period_ms=60_000,
                          poll_interval_ms=POLL_MS) as sub:
        time.sleep(0.5)  # about ten empty claims
        broker.publish_many(table, [b"%d" % i for i in range(8)])
        got = []
        while len(got) < 5:
            d = sub.next(timeout=10)
            assert d is not None, "only %d of the window's 5 starts came" % len(got)
            got.append(d)
            d.ack()
        assert sub.next(timeout=0.5) is None, "a sixth start within the window"
    assert db.count(table.name) == 3


def spans_by_key(log: str) -> Dict[str, List[Tuple[int, int]]]:
    """The handler spans of a drain log by payload (the row's partition key)."""
    spans: Dict[str, List[Tuple[int, int]]] = {}
    for s in read_spans(log):
        spans.setdefault(s.payload, []).append((s.start, s.end))
    return spans


@pytest.mark.forms("lease", "advisory")
@pytest.mark.across_processes
def test_partition_concurrency_one_runs_each_key_alone(db, form, tmp_path) -> None:
    each_key_alone(db, form, tmp_path)


@pytest.mark.forms("row_lock")
@pytest.mark.across_processes
def test_partition_concurrency_one_runs_each_key_alone_on_key_slots(db, form, tmp_path) -> None:
    each_key_alone(db, form, tmp_path)


def each_key_alone(db: Any, form: str, tmp_path: Any) -> None:
    """partition_concurrency=1 with 10 keys, 3 processes x 6 workers: no two
    spans of one key overlap, and different keys do run side by side."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    rows = 120
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [dict(payload=b"k%d" % (i % 10), partition_key="k%d" % (i % 10))
                                    for i in range(rows)])
    log = str(tmp_path / "spans.log")
    drain(db, table, log, 3, workers=6, partition_concurrency=1, sleep_ms=(10, 30))
    by_key = spans_by_key(log)
    assert sum(len(v) for v in by_key.values()) == rows
    for key, spans in by_key.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start, "two rows of key %s ran at once" % key
    everything = [(s, e, 0) for spans in by_key.values() for s, e in spans]
    most, mean = overlap(everything)
    assert most > 1, "the keys never ran side by side"


@pytest.mark.forms("lease", "advisory", "row_lock")
@pytest.mark.across_processes
def test_partition_rate_limit_holds_per_key_across_processes(db, form, tmp_path) -> None:
    """partition_rate_limit=5 per 1000 ms, 3 keys of 20 rows, 2 processes x 4
    workers: no key starts 6 rows within a second, and a key at its limit
    does not hold back the others (more than one key's 5 in the first
    window)."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [dict(payload=b"k%d" % (i % 3), partition_key="k%d" % (i % 3))
                                    for i in range(60)])
    log = str(tmp_path / "spans.log")
    drain(db, table, log, 2, workers=4, partition_rate_limit=5, partition_rate_period_ms=1000)
    by_key = spans_by_key(log)
    assert sorted(len(v) for v in by_key.values()) == [20, 20, 20]
    slack = START_SLACK_NS
    for key, spans in by_key.items():
        t = sorted(start for start, _ in spans)
        for i in range(len(t) - 5):
            assert t[i + 5] - t[i] >= 1_000_000_000 - slack, \
                "key %s: starts %d and %d are %.3f s apart" % (key, i, i + 5, (t[i + 5] - t[i]) / 1e9)
    first = min(start for spans in by_key.values() for start, _ in spans)
    early = sum(1 for spans in by_key.values() for start, _ in spans
                if start - first < 900_000_000)
    assert early > 5, "only %d starts in the first window: the keys held each other back" % early


@pytest.mark.forms("lease", "advisory")
def test_partition_concurrency_two_per_key_in_one_process(db, broker, form) -> None:
    two_per_key(db, broker, form)


@pytest.mark.forms("row_lock")
@pytest.mark.dialect("mysql")
def test_partition_concurrency_two_per_key_on_key_slots_given_back_at_once(db, broker, form):
    """MySQL's key slot is taken once the row is locked, so none is kept for
    a row another transaction holds: keys interleaved reach 2 each."""
    two_per_key(db, broker, form)


@pytest.mark.forms("row_lock")
def test_partition_concurrency_two_per_key_on_key_slots(db, broker, form) -> None:
    """partition_concurrency=2 on key slots, one key of 4 rows, three
    brokers pulling: exactly 2 in work at once (a claim that took a slot for
    a row another holds uses it for the key's next row), and a third once
    one settles. (With keys interleaved, such a slot may stay unused until
    its claim's row settles: docs/flow-control.md.)"""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    broker.publish_many(table, [dict(payload=b"a%d" % i, partition_key="a") for i in range(4)])
    with libqueue.Broker(db.url) as second, libqueue.Broker(db.url) as third:
        subs = [b.subscribe(table, partition_concurrency=2, poll_interval_ms=POLL_MS)
                for b in (broker, second, third)]
        try:
            held = pull_for(subs, 2.0)
            assert len(held) == 2, "in work at once: %d" % len(held)
            held.pop(0).ack()
            held += pull_for(subs, 2.0)
            assert len(held) == 2, "in work after one settled: %d" % len(held)
            for d in held:
                d.ack()
        finally:
            for sub in subs:
                sub.close()
    assert db.count(table.name) == 1


def pull_for(subs: List[Any], seconds: float) -> List[libqueue.Delivery]:
    """What the subscriptions hand out within the time, none settled."""
    got: List[libqueue.Delivery] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for sub in subs:
            d = sub.next(0.05)
            if d is not None:
                got.append(d)
    return got


def two_per_key(db: Any, broker: libqueue.Broker, form: str) -> None:
    """partition_concurrency=2, 8 workers, 3 keys of 8 rows and 4 rows
    without a key: at most 2 rows of a key in work at once, a key reaching 2,
    and the keyless rows not held back; every database (SQLite's advisory
    slot keys live in the process)."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    gauge = KeyGauge(0.05)
    handle, most = gauge.handle, gauge.most
    rows = [dict(payload=b"x", partition_key="k%d" % (i % 3)) for i in range(24)]
    broker.publish_many(table, rows + [b"free"] * 4)
    with broker.subscribe(table, workers=8, partition_concurrency=2,
                          poll_interval_ms=POLL_MS) as sub:
        sub.run(handle)
        wait_until(lambda: db.count(table.name) == 0, what="the table to drain")
    keyed = {k: v for k, v in most.items() if k not in (None, "all")}
    assert sorted(keyed) == ["k0", "k1", "k2"]
    assert max(keyed.values()) == 2, "most of one key at once: %r" % keyed
    assert most.get(None, 0) >= 1


@pytest.mark.forms("row_lock")
@pytest.mark.dialect("mysql")
def test_partition_concurrency_above_mysqls_row_lock_cap_is_refused(db, broker, form) -> None:
    """MySQL's row lock claim names each of a key's slots in its filter."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="partition_concurrency in the row lock form is at "
                                              "most 16"):
        broker.subscribe(table, partition_concurrency=17)
    broker.subscribe(table, partition_concurrency=16).close()


@pytest.mark.forms("row_lock")
def test_partition_concurrency_of_a_row_lock_batch_is_refused(db, broker, form) -> None:
    table = make_table(form, partition_key="account")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="a batch's rows share one"):
        broker.subscribe(table, partition_concurrency=2, batch=4)


@pytest.mark.forms("row_lock")
def test_a_key_slot_is_held_until_the_transaction_ends(db, broker, form) -> None:
    """partition_concurrency=1 on key slots, across two brokers: while one
    holds a row of key a, the other gets the row of key b and not a's second;
    once the first settles, a's second row comes."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    broker.publish_many(table, [dict(payload=b"a1", partition_key="a"),
                                dict(payload=b"a2", partition_key="a"),
                                dict(payload=b"b1", partition_key="b")])
    with libqueue.Broker(db.url) as other, \
            broker.subscribe(table, partition_concurrency=1, poll_interval_ms=POLL_MS) as sa, \
            other.subscribe(table, partition_concurrency=1, poll_interval_ms=POLL_MS) as sb:
        first = sa.next(5)
        assert first is not None and first.payload == b"a1"
        second = sb.next(5)
        assert second is not None and second.payload == b"b1"
        assert sb.next(0.5) is None, "a second row of key a was claimed while a1 was in work"
        second.ack()
        first.ack()
        third = None
        deadline = time.monotonic() + 5
        while third is None and time.monotonic() < deadline:
            third = sa.next(0.1) or sb.next(0.1)
        assert third is not None and third.payload == b"a2"
        third.ack()
    assert db.count(table.name) == 0


@pytest.mark.parametrize("options, message", [
    (dict(partition_concurrency=2), "partition_concurrency needs a partition_key column"),
    (dict(partition_concurrency=3, concurrency=2), "partition_concurrency 3 is above concurrency 2"),
])
def test_bad_partition_limits_are_refused(db, broker, options: Dict[str, int], message: str):
    table = make_table("lease") if "concurrency" not in options else make_table(
        "lease", partition_key="account")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match=message):
        broker.subscribe(table, **options)


def test_partition_worker_concurrency_runs_each_key_alone_here(db, form) -> None:
    """partition_worker_concurrency=1, 6 workers, 3 keys and rows without a
    key: no two rows of one key in work at once in the subscription, keys
    side by side, and the keyless rows unlimited; every form."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    gauge = KeyGauge(0.02)
    handle, most = gauge.handle, gauge.most
    messages = [dict(payload=b"k", partition_key="k%d" % (i % 3)) for i in range(36)]
    messages += [dict(payload=b"none") for _ in range(12)]
    with libqueue.Broker(db.url, pool_size=8) as broker:
        broker.publish_many(table, messages)
        with broker.subscribe(table, workers=6, partition_worker_concurrency=1,
                              poll_interval_ms=POLL_MS) as sub:
            sub.run(handle)
            wait_until(lambda: db.count("jobs") == 0, what="the table to drain")
    assert [most["k%d" % i] for i in range(3)] == [1, 1, 1], most
    assert most["all"] > 1, "the keys never ran side by side"


@pytest.mark.parametrize("options, message", [
    (dict(partition_rate_limit=5), "partition_rate_limit needs a partition_key column"),
    (dict(partition_rate_period_ms=500, partition_concurrency=1),
     "partition_rate_period_ms is the window of partition_rate_limit"),
    (dict(partition_rate_limit=6, rate_limit=5), "partition_rate_limit 6 is above rate_limit 5"),
])
def test_bad_partition_rate_limits_are_refused(db, broker, options: Dict[str, int],
                                               message: str) -> None:
    keyed = "partition_rate_limit" not in options or len(options) > 1
    table = make_table("lease", partition_key="account") if keyed else make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match=message):
        broker.subscribe(table, **options)


@pytest.mark.forms("row_lock")
def test_partition_rate_limit_of_a_row_lock_batch_is_refused(db, broker, form) -> None:
    table = make_table(form, partition_key="account")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="partition_rate_limit in the row lock form gives "
                                              "back a row past its key's window"):
        broker.subscribe(table, partition_rate_limit=5, batch=4)


@pytest.mark.forms("lease", "advisory", "row_lock")
def test_partition_rate_limit_in_one_process(db, broker, form) -> None:
    """partition_rate_limit=3 per minute, 2 keys of 5 rows and 2 rows without
    a key, 4 workers: 3 of each key and the keyless rows run, the rest wait
    for the window; every database."""
    table = make_table(form, partition_key="account")
    db.create_table(table)
    rows = [dict(payload=b"x", partition_key="k%d" % (i % 2)) for i in range(10)]
    broker.publish_many(table, rows + [b"free"] * 2)
    ran: Dict[Any, int] = {}
    lock = threading.Lock()

    def handle(d: libqueue.Delivery) -> None:
        with lock:
            ran[d.partition_key] = ran.get(d.partition_key, 0) + 1

    with broker.subscribe(table, workers=4, partition_rate_limit=3,
                          partition_rate_period_ms=60_000, poll_interval_ms=POLL_MS) as sub:
        sub.run(handle)
        wait_until(lambda: sum(ran.values()) >= 8, what="the window's starts")
        time.sleep(0.5)  # more polls: nothing else may start
        assert ran == {"k0": 3, "k1": 3, None: 2}
    assert db.count(table.name) == 4


@pytest.mark.parametrize("options, message", [
    (dict(partition_worker_concurrency=1), "partition_worker_concurrency needs a partition_key"),
    (dict(partition_worker_concurrency=3, partition_concurrency=2),
     "partition_worker_concurrency 3 is above partition_concurrency 2"),
    (dict(partition_worker_concurrency=3, worker_concurrency=2),
     "partition_worker_concurrency 3 is above worker_concurrency 2"),
    (dict(partition_worker_concurrency=0), "partition_worker_concurrency"),
])
def test_bad_partition_worker_limits_are_refused(db, broker, options: Dict[str, int],
                                                 message: str) -> None:
    keyed = len(options) > 1 or options["partition_worker_concurrency"] == 0
    table = make_table("lease", partition_key="account") if keyed else make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match=message):
        broker.subscribe(table, **options)


def killed_slot_comes_back(db: Any, form: str, tmp_path: Any) -> None:
    """concurrency=2: a process holding one slot is SIGKILLed mid-handler;
    the other runs one row at a time until the slot is free again (the lease
    runs out; in the row lock form the session's end frees it at once), then
    two, and the dead one's row is done too: nothing lost."""
    table = make_table(form)
    db.create_table(table)
    rows = 80
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
    holder = spawn(db, table, str(tmp_path / "holder.log"), "hold", concurrency=2,
                   lease_ms=2000, poll_interval_ms=POLL_MS)
    held = int(holder.stdout.readline())
    log = str(tmp_path / "spans.log")
    drainer = spawn(db, table, log, "drain", workers=4, concurrency=2, lease_ms=2000,
                    poll_interval_ms=POLL_MS, sleep_ms=(60, 80))
    try:
        assert drainer.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        killed_at = time.monotonic_ns()
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        wait_until(lambda: db.count("jobs") == 0, timeout=60, what="the table to drain")
    finally:
        drainer.send_signal(signal.SIGTERM)
        assert drainer.wait(30) == 0
    spans = read_spans(log)
    assert sorted(s.row for s in spans) == sorted(set(s.row for s in spans))
    assert held in {s.row for s in spans} and len(spans) == rows
    free_after = 2_000_000_000 if form == "lease" else 500_000_000
    before = [(s.start, s.end, s.pid) for s in spans if s.end < killed_at]
    after = [(s.start, s.end, s.pid) for s in spans if s.start > killed_at + free_after]
    assert before and overlap(before)[0] == 1, "the held slot was taken while its holder lived"
    assert after and overlap(after)[0] == 2, "the dead process's slot never came back"


@pytest.mark.forms("lease")
@pytest.mark.across_processes
def test_a_killed_process_gives_its_slot_back_when_its_lease_runs_out(db, form, tmp_path):
    killed_slot_comes_back(db, form, tmp_path)


@pytest.mark.forms("row_lock")
def test_a_killed_process_gives_its_slot_lock_back_at_once(db, form, tmp_path) -> None:
    killed_slot_comes_back(db, form, tmp_path)


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.forms("advisory")
def test_a_killed_process_gives_its_slot_key_back_at_once(db, form, tmp_path) -> None:
    killed_slot_comes_back(db, form, tmp_path)


@pytest.mark.dialect("mysql")
@pytest.mark.forms("lease")
def test_concurrency_on_mysql_is_held_by_each_subscription(db, form) -> None:
    """MySQL keeps concurrency by holds: each subscription's row of
    lq_limit_holds holds room for its rows in work, never more than the
    limit between them; what one holds beyond its rows goes back to the
    queue when a claim finds no row, and its row goes when it closes."""
    table = make_table(form)
    db.create_table(table)

    def held() -> List[int]:  # the subscriptions' rows of the queue, not its own
        return [int(n) for (n,) in db.query(
            "SELECT held FROM lq_limit_holds WHERE queue = 'concurrency:jobs' AND holder <> 0")]

    def take_one(subs: List[Any]) -> Any:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for sub in subs:
                d = sub.next(0.1)
                if d is not None:
                    return d
        return None

    with libqueue.Broker(db.url) as first, libqueue.Broker(db.url) as second:
        first.publish_many(table, [b"1", b"2"])
        a = first.subscribe(table, concurrency=3, workers=2, poll_interval_ms=POLL_MS)
        b = second.subscribe(table, concurrency=3, workers=2, poll_interval_ms=POLL_MS)
        got = [a.next(10), a.next(10)]
        assert all(got)
        assert 2 <= sum(held()) <= 3
        second.publish_many(table, [b"3", b"4"])
        # One row's room is left, whichever subscription takes it.
        extra = take_one([b, a])
        assert extra is not None
        assert a.next(0.3) is None and b.next(0.3) is None, "a row was claimed past concurrency=3"
        assert sum(held()) <= 3
        for d in got + [extra]:
            d.ack()
        last = take_one([a, b])
        assert last is not None
        last.ack()
        # The queue is empty: the claims find no row, and give back.
        wait_until(lambda: sum(held()) == 0, what="the room given back")
        a.close()
        b.close()
    assert held() == [], "a closed subscription's row was kept"


@pytest.mark.dialect("mysql")
@pytest.mark.forms("lease")
def test_an_idle_queue_under_holds_costs_one_read_a_poll(db, form) -> None:
    """Once a claim found no row, each poll reads whether a row is there
    before it takes room: an idle subscription writes nothing (no growth, no
    claim's transaction, no trim), and a row published later is still run."""
    table = make_table(form)
    db.create_table(table)

    names = ("Com_update", "Com_commit", "Com_select")
    status = "SHOW GLOBAL STATUS WHERE Variable_name IN (%s)" % ", ".join("'%s'" % n for n in names)

    def server(cur: Any) -> Dict[str, int]:  # on one session, which adds nothing between reads
        cur.execute(status)
        return {name: int(value) for name, value in cur.fetchall()}

    with libqueue.Broker(db.url) as broker, contextlib.closing(db.connect()) as conn, \
            conn.cursor() as cur:
        broker.publish(table, b"first")
        with broker.subscribe(table, concurrency=2, workers=2, poll_interval_ms=POLL_MS) as sub:
            got = sub.next(10)
            assert got is not None
            got.ack()
            assert sub.next(0.3) is None  # a claim finds no row, and gives its room back
            before = server(cur)
            claims = sub.stat("claims")
            assert sub.next(1.0) is None  # 20 polls
            polls = sub.stat("claims") - claims
            after = server(cur)
            assert polls >= 5, "the subscription polled %d times in 1 s" % polls
            assert after["Com_update"] == before["Com_update"], "an idle poll wrote the holds"
            assert after["Com_commit"] == before["Com_commit"], "an idle poll ran a transaction"
            # A poll is counted once it has ended, so each poll counted read
            # before `after`; only the claims in flight when `before` was read
            # (one a worker at most) may have read before it.
            assert after["Com_select"] - before["Com_select"] >= polls - 2
            broker.publish(table, b"later")
            later = sub.next(10)
            assert later is not None and later.payload == b"later"
            later.ack()
    assert db.count("jobs") == 0


@pytest.mark.dialect("postgresql")
def test_a_limited_subscription_opens_beside_an_open_transaction(db, broker) -> None:
    """The limits count leased rows through <table>_leased, which a table
    made by the library has: a subscription looks it up rather than running
    CREATE INDEX IF NOT EXISTS, which would wait for a transaction open on
    the table (and hold every writer behind it) even where the index is."""
    import psycopg2

    table = make_table("lease")
    broker.create_table(table)
    writer = psycopg2.connect(db.server_url)
    opened = threading.Event()
    try:
        with writer.cursor() as cur:
            cur.execute("INSERT INTO %s.jobs (payload) VALUES ('x')" % db.quote(db.schema))

        def subscribe() -> None:
            with broker.subscribe(table, concurrency=2, poll_interval_ms=POLL_MS):
                opened.set()

        threading.Thread(target=subscribe, daemon=True).start()
        assert opened.wait(10), "the subscription waited for the open transaction"
    finally:
        writer.rollback()
        writer.close()
