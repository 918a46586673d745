"""Chained claims in the row lock form: a push worker that settles its row
after the handler commits AND CHAINs, so its next claim runs in a
transaction already open; when no claim follows at once, the empty
transaction is rolled back before the worker waits or stops."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

import libqueue

from helpers import POLL_MS, Recorder, make_table, wait_until


def _named_broker(db) -> tuple:
    """A broker whose PostgreSQL sessions carry a name of their own."""
    name = "lq_chain_" + uuid.uuid4().hex[:8]
    return libqueue.Broker("%s&application_name=%s" % (db.url, name)), name


def _open_transactions(db, name: str) -> int:
    return int(db.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = ? "
                         "AND state LIKE 'idle in transaction%'", (name,)))


@pytest.mark.dialect("postgresql")
def test_no_session_stays_in_a_transaction_once_the_queue_is_drained(db) -> None:
    table = make_table("row_lock")
    db.create_table(table)
    broker, name = _named_broker(db)
    try:
        broker.publish_many(table, [b"%d" % i for i in range(200)])
        with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=4) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: db.count("jobs") == 0, what="all rows acked")
            # Idle claims come and go; a transaction left open would stay.
            wait_until(lambda: _open_transactions(db, name) == 0,
                       what="no session idle in a transaction while the queue is empty")
            sub.stop()
            assert _open_transactions(db, name) == 0
    finally:
        broker.close()


@pytest.mark.dialect("postgresql")
def test_a_settlement_inside_the_handler_does_not_chain(db) -> None:
    """The worker claims only after its handler returns: a row the handler
    settled itself leaves no transaction open while the handler goes on."""
    table = make_table("row_lock")
    db.create_table(table)
    broker, name = _named_broker(db)
    settled, release = threading.Event(), threading.Event()
    seen = []

    def handler(d: libqueue.Delivery) -> None:
        d.ack()
        settled.set()
        release.wait(10)

    try:
        broker.publish(table, b"x")
        with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=1) as sub:
            sub.run(handler)
            assert settled.wait(10)
            time.sleep(0.2)
            seen.append(_open_transactions(db, name))
            release.set()
        assert seen == [0]
        assert db.count("jobs") == 0
    finally:
        release.set()
        broker.close()


def _com_begin(db) -> int:
    return int(db.query("SHOW GLOBAL STATUS LIKE 'Com_begin'")[0][1])


@pytest.mark.dialect("mysql")
def test_a_worker_claiming_after_its_settlement_starts_no_transaction(db) -> None:
    table = make_table("row_lock")
    db.create_table(table)
    rows = 60
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        before = _com_begin(db)
        with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=1) as sub:
            sub.run(lambda d: None)
            wait_until(lambda: db.count("jobs") == 0, what="all rows acked")
            sub.stop()
        begun = _com_begin(db) - before
    # The first claim and the idle claims after the last row begin their
    # own; each of the others runs in the transaction its row's commit
    # chained (one START TRANSACTION a row without it).
    assert begun < rows // 3, begun


# The advisory form: a push worker's settlement claims its next row in the
# same transaction, on the session that holds the settled row's key and
# slot, and lets that key go once it committed (PostgreSQL in one round
# trip, MySQL statement by statement).


def _commits(db) -> int:
    return int(db.scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))


def _advisory_locks(db, ids=()) -> int:
    """The advisory locks held: on PostgreSQL all of them, on MySQL the keys
    of the rows `ids` (GET_LOCK names are not listed)."""
    if db.dialect == "postgresql":
        return int(db.scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"))
    return int(db.scalar("SELECT count(*) FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j "
                         "WHERE IS_USED_LOCK(CONCAT(LOWER(DATABASE()), '.job-', j.id)) IS NOT NULL",
                         (json.dumps(list(ids)),)))


def _every_slot_free(url: str, table: libqueue.Table, limit: int) -> bool:
    """Whether `limit` rows run at once under concurrency=`limit` on a broker
    of its own: every slot is free (on MySQL, whose GET_LOCK names are not
    listed, a slot left held would keep one of them out)."""
    together = threading.Barrier(limit, timeout=10)
    met = Recorder()
    with libqueue.Broker(url) as broker:
        broker.publish_many(table, [b"slot check"] * limit)

        def handler(d: libqueue.Delivery) -> None:
            try:
                together.wait()
                met.add(True)
            except threading.BrokenBarrierError:
                met.add(False)

        with broker.subscribe(table, workers=limit, concurrency=limit, poll_interval_ms=POLL_MS) as sub:
            sub.run(handler)
            wait_until(lambda: len(met) >= limit or False in met.snapshot(), timeout=20,
                       what="the slot check's rows")
            first = met.snapshot()[:limit]
            together.abort()  # rows run after those do not wait
    return first == [True] * limit


def _com_commit(db) -> int:
    return int(db.query("SHOW GLOBAL STATUS LIKE 'Com_commit'")[0][1])


@pytest.mark.dialect("mysql")
@pytest.mark.parametrize("attempt", ["attempt", None], ids=["pick", "no_attempt"])
def test_an_advisory_worker_on_mysql_claims_its_next_row_in_its_settlements_transaction(db, attempt) -> None:
    """Without a pipeline, statement by statement: the ack and the next
    row's claim commit together, one COMMIT a row, where each ran in a
    commit of its own (autocommit) before; that COMMIT also begins the
    transaction the next row's settlement runs in (AND CHAIN). With an
    attempt column one statement picks the row; without one (no count for
    the take to check), the candidates, a key's try and the read go in
    turn."""
    table = make_table("advisory", attempt=attempt)
    db.create_table(table)
    rows = 100
    seen = Recorder()
    with libqueue.Broker(db.url) as broker:
        ids = broker.publish_many(table, [b"%d" % i for i in range(rows)])
        before, begun_before = _com_commit(db), _com_begin(db)
        with broker.subscribe(table, workers=1, concurrency=2, poll_interval_ms=3000) as sub:
            sub.run(lambda d: seen.add((d.payload, d.attempt)))
            wait_until(lambda: sub.stat("settled") == rows, what="every settlement")
        commits, begun = _com_commit(db) - before, _com_begin(db) - begun_before
        assert _every_slot_free(db.url, table, 2)
    once = 1 if attempt else 0  # no count without the column
    assert sorted(seen.snapshot()) == sorted((b"%d" % i, once) for i in range(rows))
    assert db.count("jobs") == 0
    # One a row (autocommit statements count none), and not two.
    assert rows * 9 // 10 <= commits < rows * 3 // 2, "%d commits for %d rows" % (commits, rows)
    # A START TRANSACTION a row without the chain; with it, the first
    # settlement's and the slot check's.
    assert begun < rows // 10, "%d transactions begun for %d rows" % (begun, rows)
    assert _advisory_locks(db, ids) == 0


@pytest.mark.dialect("postgresql")
def test_an_advisory_worker_claims_its_next_row_in_its_settlements_transaction(db) -> None:
    """One commit for a row's ack and the next row's claim, and one
    statement after it for the key: two transactions a row, where a
    settlement and a claim of their own take three."""
    table = make_table("advisory")
    db.create_table(table)
    rows = 200
    broker, name = _named_broker(db)
    seen = Recorder()
    try:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        time.sleep(1.2)  # sessions report their counts within a second of going idle
        before = _commits(db)
        # The first poll reads whether the queue is paused; the next is after the drain.
        with broker.subscribe(table, workers=1, concurrency=2, poll_interval_ms=3000) as sub:
            sub.run(lambda d: seen.add((d.payload, d.attempt)))
            wait_until(lambda: len(seen) == rows, what="every row")
            wait_until(lambda: sub.stat("settled") == rows, what="every settlement")
    finally:
        broker.close()
    # A session reports its counts as it ends.
    wait_until(lambda: db.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?",
                                 (name,)) == 0, what="the broker's sessions gone")
    time.sleep(1.2)
    commits = _commits(db) - before
    assert sorted(seen.snapshot()) == sorted((b"%d" % i, 1) for i in range(rows))
    assert db.count("jobs") == 0
    assert commits < rows * 5 // 2, "%d transactions for %d rows" % (commits, rows)


@pytest.mark.dialect("postgresql", "mysql")
def test_rows_settlements_claimed_run_once_within_the_limit_while_pauses_come_and_go(db) -> None:
    table = make_table("advisory")
    db.create_table(table)
    rows, limit = 150, 2
    runs, open_now, most = Recorder(), [0], [0]
    lock = threading.Lock()

    def handler(d: libqueue.Delivery) -> None:
        with lock:
            open_now[0] += 1
            most[0] = max(most[0], open_now[0])
        runs.add((d.payload, d.attempt))
        time.sleep(0.005)
        with lock:
            open_now[0] -= 1

    stop = threading.Event()
    with libqueue.Broker(db.url) as broker, libqueue.Broker(db.url) as pauser:
        ids = broker.publish_many(table, [b"%d" % i for i in range(rows)])

        def toggle() -> None:
            while not stop.wait(0.07):
                pauser.pause(table)
                time.sleep(0.03)
                pauser.resume(table)

        toggler = threading.Thread(target=toggle)
        # On MySQL a run lets its slot go first where a worker waits for
        # room, and its settlement then claims nothing: no worker waits here.
        workers = 4 if db.dialect == "postgresql" else limit
        with broker.subscribe(table, workers=workers, concurrency=limit, poll_interval_ms=POLL_MS) as sub:
            sub.run(handler)
            toggler.start()
            try:
                wait_until(lambda: len(runs) == rows, timeout=30, what="every row")
            finally:
                stop.set()
                toggler.join()
            pauser.resume(table)
            wait_until(lambda: sub.stat("in_work") == 0, what="the last settlements")
            wait_until(lambda: _advisory_locks(db, ids) == 0, what="every key and slot let go")
        # Its sessions are the broker's still, any lock left with them.
        assert _every_slot_free(db.url, table, limit)
    assert sorted(runs.snapshot()) == sorted((b"%d" % i, 1) for i in range(rows))
    assert most[0] <= limit
    assert db.count("jobs") == 0


@pytest.mark.dialect("postgresql", "mysql")
def test_a_stop_gives_back_the_rows_settlements_claimed_unrun(db) -> None:
    """Workers stopped between a settlement that claimed their next row and
    its run give that row back: its attempt unspent, its key and slot free."""
    table = make_table("advisory")
    db.create_table(table)
    rows = 400
    with libqueue.Broker(db.url) as broker:
        ids = broker.publish_many(table, [b"%d" % i for i in range(rows)])
        workers = 4 if db.dialect == "postgresql" else 3  # none waits for room on MySQL
        sub = broker.subscribe(table, workers=workers, concurrency=3, poll_interval_ms=POLL_MS)
        sub.run(lambda d: time.sleep(0.002))
        wait_until(lambda: sub.stat("delivered") >= rows // 4, what="a quarter of the rows delivered")
        sub.stop()
        delivered, settled = sub.stat("delivered"), sub.stat("settled")
        # A row a settlement claimed goes back counted nowhere; rows a claim
        # took ahead for the workers (a MySQL claim takes several) go back
        # counted as settled.
        assert delivered <= settled <= sub.stat("claimed")
        if db.dialect == "postgresql":
            # Only a poll's claim for the worker waiting for room (one of the
            # four, under three slots) may take a row the stop gives back
            # before it runs.
            assert settled - delivered <= workers - 3
        sub.close()
        assert db.count("jobs") == rows - delivered
        assert db.count("jobs", "attempt != 1") == 0  # as published: none spent
        assert _advisory_locks(db, ids) == 0
        assert _every_slot_free(db.url, table, 3)


@pytest.mark.dialect("postgresql", "mysql")
def test_a_retry_and_the_claim_it_carries_count_each_attempt_once(db) -> None:
    """A settlement that sends its row back may claim that very row again in
    the same transaction on PostgreSQL (its key is the session's already;
    on MySQL the row waits for the next claim): each run still counts one
    attempt."""
    table = make_table("advisory")
    db.create_table(table)
    rows = 40
    runs = Recorder()

    def handler(d: libqueue.Delivery) -> None:
        runs.add((d.payload, d.attempt))
        if d.attempt == 1:
            raise RuntimeError("first attempt fails")

    with libqueue.Broker(db.url) as broker:
        ids = broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=2, concurrency=2, poll_interval_ms=POLL_MS) as sub:
            sub.run(handler)
            wait_until(lambda: db.count("jobs") == 0, timeout=30, what="every row acked")
            wait_until(lambda: sub.stat("in_work") == 0, what="the last settlements")
        assert _every_slot_free(db.url, table, 2)
    assert sorted(runs.snapshot()) == sorted((b"%d" % i, a) for i in range(rows) for a in (1, 2))
    assert _advisory_locks(db, ids) == 0


@pytest.mark.dialect("postgresql", "mysql")
@pytest.mark.parametrize("heard", [True, False], ids=["notified", "polled"])
def test_a_pause_stops_workers_whose_settlements_claim_their_next_rows(db, heard) -> None:
    """The read of the pause a claim makes once a poll comes with the
    settlement that claims the next row: a pause stops a busy queue within a
    poll or two, told by a notification or not, and a resume starts it again."""
    if heard and db.dialect != "postgresql":
        pytest.skip("only PostgreSQL tells other brokers of a pause")
    table = make_table("advisory")
    db.create_table(table)
    rows = 3000
    starts = Recorder()
    options = {} if heard else {"listen_notify": False}
    with libqueue.Broker(db.url, **options) as broker, libqueue.Broker(db.url) as pauser:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=2, concurrency=2, poll_interval_ms=POLL_MS) as sub:
            sub.run(lambda d: (starts.add(time.monotonic()), time.sleep(0.002)))
            wait_until(lambda: len(starts) >= 50, what="a busy queue")
            pauser.pause(table)
            paused_at = time.monotonic()
            wait_until(lambda: sub.stat("in_work") == 0, what="the runs in work ended")
            time.sleep(4 * POLL_MS / 1000.0)
            held = len(starts)
            time.sleep(4 * POLL_MS / 1000.0)
            assert len(starts) == held, "rows started while the queue was paused"
            late = [t for t in starts.snapshot() if t > paused_at + 3 * POLL_MS / 1000.0]
            assert not late, "%d rows started more than 3 polls after the pause" % len(late)
            assert db.count("jobs", "attempt != 1") == 0  # the rows given back spent nothing
            pauser.resume(table)
            wait_until(lambda: len(starts) > held, what="the queue going on after the resume")


def _refuse_updates_of(db, row: int) -> None:
    if db.dialect == "postgresql":
        db.execute("CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$BEGIN IF OLD.id = %d THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END$$"
                   % row)
        db.execute("CREATE TRIGGER refuse_one BEFORE UPDATE ON jobs FOR EACH ROW "
                   "EXECUTE FUNCTION refuse_one()")
    else:
        db.execute("CREATE TRIGGER refuse_one BEFORE UPDATE ON jobs FOR EACH ROW "
                   "IF OLD.id = %d THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'; END IF"
                   % row)


def _refuse_no_more(db) -> None:
    if db.dialect == "postgresql":
        db.execute("DROP TRIGGER refuse_one ON jobs")
        db.execute("DROP FUNCTION refuse_one()")
    else:
        db.execute("DROP TRIGGER refuse_one")


@pytest.mark.dialect("postgresql", "mysql")
def test_a_settlement_whose_carried_claim_fails_still_settles_its_row(db) -> None:
    """The claim a settlement carries fails (here a trigger refuses the next
    row's update) and takes the transaction with it: the settlement goes
    alone, so its row is not run again; the next row runs once it can."""
    table = make_table("advisory")
    db.create_table(table)
    runs = Recorder()
    with libqueue.Broker(db.url) as broker:
        first, refused = broker.publish_many(table, [b"a", b"b"])
        _refuse_updates_of(db, refused)
        with broker.subscribe(table, workers=1, poll_interval_ms=POLL_MS) as sub:
            sub.run(lambda d: runs.add(d.payload))
            wait_until(lambda: db.count("jobs", "id = %d" % first) == 0, what="the first row's ack")
            time.sleep(5 * POLL_MS / 1000.0)  # claims of the refused row come and fail
            assert runs.snapshot() == [b"a"]
            _refuse_no_more(db)
            wait_until(lambda: db.count("jobs") == 0, what="the refused row, once it is not")
    assert runs.snapshot() == [b"a", b"b"]


def _end_a_session_holding_a_key_at_the_pause_read(db) -> None:
    """Makes the control table a view that ends the session reading it,
    once, when that session holds a row's key (a settlement's carried read;
    the claims' own reads go through sessions that hold none)."""
    if db.dialect == "postgresql":
        db.execute("CREATE SEQUENCE lq_sessions_ended")
        db.execute("CREATE TABLE lq_control_rows (queue TEXT NOT NULL, queue_group TEXT NOT NULL, "
                   "paused_at BIGINT NOT NULL)")
        db.execute("""
            CREATE FUNCTION lq_control_read() RETURNS SETOF lq_control_rows LANGUAGE plpgsql AS $$
            BEGIN
              IF EXISTS (SELECT 1 FROM pg_locks
                         WHERE pid = pg_backend_pid() AND locktype = 'advisory')
                 AND nextval('lq_sessions_ended') = 1 THEN
                PERFORM pg_terminate_backend(pg_backend_pid());
              END IF;
              RETURN QUERY SELECT * FROM lq_control_rows;
            END $$""")
        db.execute("CREATE VIEW lq_queue_control AS SELECT * FROM lq_control_read()")
        return
    # MariaDB: the keys are GET_LOCK names, "<database>.job-<id>"; the view is
    # made first (TEMPTABLE), so its one row meets the function on each read.
    db.execute("CREATE SEQUENCE lq_sessions_ended")
    db.execute("CREATE TABLE lq_control_rows (queue VARCHAR(200) NOT NULL, "
               "queue_group VARCHAR(200) NOT NULL, paused_at BIGINT NOT NULL)")
    db.execute("INSERT INTO lq_control_rows VALUES ('none', 'none', 0)")
    db.execute("""
        CREATE FUNCTION lq_end_a_key_holder() RETURNS INT NOT DETERMINISTIC MODIFIES SQL DATA
        BEGIN
          IF EXISTS (SELECT 1 FROM jobs
                     WHERE IS_USED_LOCK(CONCAT(LOWER(DATABASE()), '.job-', id)) = CONNECTION_ID())
             AND NEXTVAL(lq_sessions_ended) = 1 THEN
            KILL CONNECTION_ID();
          END IF;
          RETURN 1;
        END""")
    db.execute("CREATE ALGORITHM = TEMPTABLE VIEW lq_queue_control AS "
               "SELECT * FROM lq_control_rows WHERE lq_end_a_key_holder() = 1")


def _sessions_ended(db) -> bool:
    if db.dialect == "postgresql":
        return db.scalar("SELECT is_called FROM lq_sessions_ended") in (True, 1)
    return int(db.scalar("SELECT next_not_cached_value FROM lq_sessions_ended")) > 1


@pytest.mark.dialect("postgresql", "mysql")
def test_a_session_lost_at_the_carried_pause_read_loses_no_row(db) -> None:
    """A settlement of the advisory form carries the next claim and, when one
    is due, the read of the pause, after its commit. The server ends the
    session at that read: the settlement holds, the row the settlement
    claimed is not run on the dead session but comes back once its key went
    with it, and the worker goes on. Every row runs once."""
    table = make_table("advisory")
    db.create_table(table)
    _end_a_session_holding_a_key_at_the_pause_read(db)
    rows = 60
    runs = Recorder()

    def handle(d: libqueue.Delivery) -> None:
        runs.add(d.payload)
        time.sleep(0.01)  # a poll interval passes every few rows: pause reads come due

    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"%d" % i for i in range(rows)])
        with broker.subscribe(table, workers=1, poll_interval_ms=POLL_MS) as sub:
            sub.run(handle)
            wait_until(lambda: db.count("jobs") == 0, timeout=30, what="every row settled")
            # The last settlement's commit is in before its count.
            wait_until(lambda: sub.stat("in_work") == 0, what="nothing in work")
            stats = {name: sub.stat(name) for name in ("delivered", "settled", "in_work")}
    seen = runs.snapshot()
    twice = sorted({p for p in seen if seen.count(p) > 1})
    assert _sessions_ended(db), "no carried pause read was made"
    assert not twice and len(seen) == rows, "rows run twice: %r; runs %d; %r" % (twice, len(seen),
                                                                               stats)
    # The row the lost session claimed counts as settled, not delivered (as a
    # row a stop gives back unrun).
    assert stats["delivered"] == rows and stats["in_work"] == 0, stats
    assert rows <= stats["settled"] <= rows + 1, stats
