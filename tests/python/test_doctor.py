"""Broker.doctor and ``libqueue doctor`` on every database: each bad
condition made for real and named by its finding (an idle snapshot, a
dropped claim-order index, dead rows, a long transaction, a WAL file that
cannot start over), a healthy table all "ok", and bad input refused."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

import libqueue
from helpers import WAIT_S
from test_cli import cli, folder, refused  # noqa: F401 (folder is a fixture)

#: The checks of each dialect (lq_doctor in libqueue.h).
CHECKS = {
    "sqlite": {"journal_mode", "wal_size", "freelist", "claim_order_index"},
    "postgresql": {"dead_tuples", "autovacuum", "oldest_xmin", "prepared_xacts",
                   "replication_slots", "claim_order_index", "claim_plan", "fillfactor"},
    "mysql": {"history_length", "oldest_transaction", "claim_order_index"},
}
#: Checks of the whole server or database, which other programs on a shared
#: test server may trip: their level is not this table's doing.
SERVER_WIDE = {"oldest_xmin", "prepared_xacts", "replication_slots", "history_length",
               "oldest_transaction"}
DROP_INDEX = {
    "sqlite": 'DROP INDEX "jobs_claim_order"',
    # A lease table's claims walk the free rows' index on PostgreSQL
    # (docs/claim-index.md): without an index, neither is left.
    "postgresql": 'DROP INDEX "jobs_claim_order", "jobs_claim_free"',
    "mysql": "DROP INDEX `jobs_claim_order` ON `jobs`",
}
#: The index the claims of jobs() walk.
CLAIM_INDEX = {"sqlite": "jobs_claim_order", "postgresql": "jobs_claim_free",
               "mysql": "jobs_claim_order"}


def jobs() -> libqueue.Table:
    return libqueue.Table("jobs", payload="payload", attempt="attempt",
                          locked_until="locked_until", retry_after="retry_after")


def by_check(broker: libqueue.Broker, table: libqueue.Table) -> Dict[str, libqueue.Finding]:
    return {f.check: f for f in broker.doctor(table)}


def poll(broker: libqueue.Broker, table: libqueue.Table, check: str, until: Any,
         timeout: float = WAIT_S) -> libqueue.Finding:
    """The finding of `check` once `until(finding)` holds (fails after
    `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        found = by_check(broker, table)[check]
        if until(found):
            return found
        if time.monotonic() > deadline:
            pytest.fail("%s never came: last %r" % (check, found))
        time.sleep(0.2)


def test_a_healthy_table_is_all_ok(db: Any, broker: libqueue.Broker) -> None:
    table = jobs()
    broker.create_table(table)
    broker.publish_many(table, [b"a", b"b", b"c"])
    findings = broker.doctor(table)
    assert {f.check for f in findings} == CHECKS[db.dialect]
    for f in findings:
        assert isinstance(f, libqueue.Finding) and f.message and f.advice, f
        assert isinstance(f.value, (int, str)), f
        if f.check not in SERVER_WIDE:
            assert f.level == "ok" and f.advice == "nothing to do", f
    assert by_check(broker, table)["claim_order_index"].value == CLAIM_INDEX[db.dialect]


def test_a_dropped_claim_order_index_is_a_problem(db: Any, broker: libqueue.Broker) -> None:
    table = jobs()
    broker.create_table(table)
    db.execute(DROP_INDEX[db.dialect])
    found = by_check(broker, table)["claim_order_index"]
    assert found.level == "problem", found
    assert "retry_after, id" in found.message and "jobs" in found.message, found
    assert "CREATE INDEX" in found.advice, found
    db.execute('CREATE INDEX "by_due" ON "jobs" ("retry_after")' if db.dialect != "mysql"
               else "CREATE INDEX `by_due` ON `jobs` (`retry_after`)")
    found = by_check(broker, table)["claim_order_index"]
    assert (found.level, found.value) == ("ok", "by_due"), "the id may be left out: %r" % (found,)


def test_bad_input_is_one_clear_error(db: Any, broker: libqueue.Broker) -> None:
    with pytest.raises(libqueue.SchemaError) as e:
        broker.doctor(libqueue.Table("missing", payload="payload"))
    assert "missing" in str(e.value)
    broker.create_table(jobs())
    with pytest.raises(libqueue.SchemaError) as e:
        broker.doctor(libqueue.Table("jobs", payload="no_such_column"))
    assert "no_such_column" in str(e.value)
    with pytest.raises(TypeError):
        broker.doctor("jobs")  # type: ignore[arg-type]
    broker.close()
    with pytest.raises(libqueue.Closed):
        broker.doctor(jobs())


# -- PostgreSQL ---------------------------------------------------------------


@pytest.mark.dialect("postgresql")
def test_an_idle_snapshot_is_named_by_pid_and_application(db: Any,
                                                          broker: libqueue.Broker) -> None:
    import psycopg2

    table = jobs()
    broker.create_table(table)
    app = "lq-doctor-" + uuid.uuid4().hex[:8]
    holder = psycopg2.connect(db.server_url, application_name=app)
    try:
        holder.set_session(isolation_level="REPEATABLE READ")
        with holder.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")  # the snapshot is taken here
            pid = cur.fetchone()[0]
        time.sleep(libqueue._lib.LQ_DOCTOR_IDLE_SNAPSHOT_S + 0.5)
        found = poll(broker, table, "oldest_xmin", lambda f: "pid %d " % pid in f.message)
        assert found.level == "problem", found
        assert app in found.message and "idle in transaction" in found.message, found
        assert "pg_terminate_backend" in found.advice, found
    finally:
        holder.rollback()
        holder.close()
    found = poll(broker, table, "oldest_xmin", lambda f: "pid %d " % pid not in f.message)


@pytest.mark.dialect("postgresql")
def test_an_idle_transaction_that_wrote_is_named(db: Any, broker: libqueue.Broker) -> None:
    """At READ COMMITTED an idle transaction holds no snapshot between its
    statements, but once it wrote, its transaction id holds vacuum back:
    named all the same. One that has only read holds nothing, and is not."""
    import psycopg2

    table = jobs()
    broker.create_table(table)
    app = "lq-doctor-" + uuid.uuid4().hex[:8]
    reader = psycopg2.connect(db.server_url, application_name=app + "-r")
    writer = psycopg2.connect(db.server_url, application_name=app + "-w")
    try:
        with reader.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            read_pid = cur.fetchone()[0]
        with writer.cursor() as cur:
            cur.execute("SELECT txid_current()")  # a transaction id, as a write takes one
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        time.sleep(libqueue._lib.LQ_DOCTOR_IDLE_SNAPSHOT_S + 0.5)
        found = poll(broker, table, "oldest_xmin", lambda f: "pid %d " % pid in f.message)
        assert found.level == "problem", found
        assert app + "-w" in found.message and "idle in transaction" in found.message, found
        assert "pid %d " % read_pid not in found.message, found
    finally:
        for c in (reader, writer):
            c.rollback()
            c.close()
    poll(broker, table, "oldest_xmin", lambda f: "pid %d " % pid not in f.message)


@pytest.mark.dialect("postgresql")
def test_dead_rows_and_autovacuum_off_are_named(db: Any, broker: libqueue.Broker) -> None:
    table = jobs()
    broker.create_table(table)
    db.execute('ALTER TABLE "jobs" SET (autovacuum_enabled = false)')
    rows = 2 * libqueue._lib.LQ_DOCTOR_DEAD_ROWS
    db.execute('INSERT INTO "jobs" ("payload") SELECT \'\'::bytea FROM generate_series(1, %d)' % rows)
    db.execute('DELETE FROM "jobs"')
    # The server's statistics show the deletes within a second or so.
    found = poll(broker, table, "dead_tuples", lambda f: f.value >= rows)
    assert found.level == "problem" and "VACUUM" in found.advice, found
    assert "last autovacuum never" in found.message, found
    found = by_check(broker, table)["autovacuum"]
    assert (found.level, found.value) == ("warning", "off"), found
    db.execute('VACUUM "jobs"')
    poll(broker, table, "dead_tuples", lambda f: f.level == "ok")


@pytest.mark.dialect("postgresql")
def test_a_big_table_without_its_index_is_read_by_a_scan(db: Any,
                                                         broker: libqueue.Broker) -> None:
    table = jobs()
    broker.create_table(table)
    rows = 3 * libqueue._lib.LQ_DOCTOR_PLAN_ROWS
    db.execute('INSERT INTO "jobs" ("payload") SELECT \'\'::bytea FROM generate_series(1, %d)' % rows)
    db.execute('ANALYZE "jobs"')
    found = by_check(broker, table)["claim_plan"]
    assert found.level == "ok" and CLAIM_INDEX[db.dialect] in found.value, found
    db.execute(DROP_INDEX[db.dialect])
    found = by_check(broker, table)["claim_plan"]
    assert found.level == "problem" and "Seq Scan" in found.value, found
    assert "ANALYZE" in found.advice, found


# -- MariaDB ------------------------------------------------------------------


@pytest.mark.dialect("mysql")
def test_an_open_snapshot_is_named_by_thread_id(db: Any, broker: libqueue.Broker) -> None:
    table = jobs()
    broker.create_table(table)
    holder = db.connect()
    try:
        with holder.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SELECT CONNECTION_ID()")
            thread = cur.fetchone()[0]
        time.sleep(libqueue._lib.LQ_DOCTOR_IDLE_SNAPSHOT_S + 0.5)
        found = poll(broker, table, "oldest_transaction",
                     lambda f: "thread %d " % thread in f.message)
        assert found.level == "problem", found
        assert "thread %d (user" % thread in found.message and "idle" in found.message, found
        # Whole: MariaDB's sort of the result cut a bare CHAR cast to "REPEA".
        assert "RUNNING, REPEATABLE READ)" in found.message, found
        assert "KILL" in found.advice, found
    finally:
        holder.rollback()
        holder.close()
    poll(broker, table, "oldest_transaction", lambda f: "thread %d " % thread not in f.message)


# -- SQLite -------------------------------------------------------------------


@contextlib.contextmanager
def reading(path: str) -> Iterator[sqlite3.Connection]:
    """A connection holding a read transaction open on the file."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute('SELECT COUNT(*) FROM "jobs"').fetchone()
    try:
        yield conn
    finally:
        conn.execute("COMMIT")
        conn.close()


@pytest.mark.dialect("sqlite")
def test_a_wal_that_cannot_start_over_is_named(db: Any, broker: libqueue.Broker) -> None:
    table = jobs()
    broker.create_table(table)
    limit = libqueue._lib.LQ_DOCTOR_WAL_WARNING_MB * 1024 * 1024
    with reading(db.path):
        payload = b"x" * (1024 * 1024)
        for _ in range(limit // len(payload) // 8 + 2):  # eight rows a transaction
            broker.publish_many(table, [payload] * 8)
        found = by_check(broker, table)["wal_size"]
        assert found.level == "warning" and found.value > limit, found
        assert "-wal" in found.message and "read transactions" in found.advice, found
    journal = by_check(broker, table)["journal_mode"]
    assert (journal.level, journal.value) == ("ok", "wal"), journal


@pytest.mark.dialect("sqlite")
def test_the_journal_mode_is_read_from_the_file(db: Any) -> None:
    """A file another program left in rollback mode: libqueue's connections
    ask for WAL when they open, and the doctor reads the mode they got. (A
    mode other than WAL shows only where WAL cannot be had at all, such as a
    file system without shared memory, which a test cannot make here.)"""
    with contextlib.closing(sqlite3.connect(db.path)) as conn:
        conn.execute('CREATE TABLE "jobs" (id INTEGER PRIMARY KEY, payload BLOB)')
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    table = libqueue.Table("jobs", payload="payload", advisory_lock="job-{id}")
    with libqueue.Broker(db.url) as broker:
        found = by_check(broker, table)
    assert (found["journal_mode"].level, found["journal_mode"].value) == ("ok", "wal")
    assert found["claim_order_index"].level == "problem", "a table made without its index"
    with contextlib.closing(sqlite3.connect(db.path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- the command line ---------------------------------------------------------


def test_cli_doctor_prints_findings_and_json(folder: Path, db: Any) -> None:  # noqa: F811
    assert cli(folder, db, "--table", "jobs", "init").status == 0
    ran = cli(folder, db, "--table", "jobs", "doctor")
    assert ran.status in (0, 4), ran  # 4 only for a server-wide check on a shared server
    lines = ran.out.splitlines()
    index_line = [line for line in lines if "claim_order_index" in line]
    assert index_line and index_line[0].startswith("ok "), ran
    assert lines[0].index(lines[0].split()[1]) == index_line[0].index("claim_order_index"), \
        "the check column is aligned: %r" % ran.out
    ran = cli(folder, db, "--table", "jobs", "doctor", "--json")
    out = ran.json()
    assert out["table"] == "jobs"
    assert {f["check"] for f in out["findings"]} == CHECKS[db.dialect]
    assert all(set(f) == {"check", "level", "value", "message", "advice"} for f in out["findings"])


def test_cli_doctor_exits_4_on_a_problem(folder: Path, db: Any) -> None:  # noqa: F811
    assert cli(folder, db, "--table", "jobs", "init").status == 0
    db.execute(DROP_INDEX[db.dialect])
    ran = cli(folder, db, "--table", "jobs", "doctor")
    assert ran.status == 4, ran
    line = [x for x in ran.out.splitlines() if "claim_order_index" in x][0]
    assert line.startswith("problem "), ran
    assert "advice: create it: CREATE INDEX" in ran.out, ran
    ran = cli(folder, db, "--table", "jobs", "doctor", "--json")
    assert ran.status == 4
    levels = {f["check"]: f["level"] for f in ran.json()["findings"]}
    assert levels["claim_order_index"] == "problem"
    assert "4" in cli(folder, db, "--help").out.split("exit status:")[1]


def test_cli_doctor_refuses_bad_input(folder: Path, db: Any) -> None:  # noqa: F811
    refused(cli(folder, db, "--table", "missing", "doctor"), 1, "does not exist")
    refused(cli(folder, db, "--table", "missing", "doctor", "--json"), 1, "does not exist")
    refused(cli(folder, db, "doctor"), 2, "no table")
    ran = cli(folder, db, "--table", "jobs", "doctor", url="sqlite:///no/such/dir/q.db")
    refused(ran, 1, "LQ_CONNECT")
    assert cli(folder, db, "--table", "jobs", "doctor", "--cap", "1").status == 2


@pytest.mark.dialect("postgresql")
def test_fillfactor_gives_no_advice_where_the_claims_write_an_indexed_column(
        db: Any, broker: libqueue.Broker) -> None:
    """A lease table made by the library indexes its lease column
    (<table>_leased): its claims' updates are never HOT, whatever the
    fillfactor, so the check says why and advises nothing."""
    table = jobs()
    broker.create_table(table)
    rows = libqueue._lib.LQ_DOCTOR_HOT_UPDATES + 100
    broker.publish_many(table, [b"x"] * rows)
    with broker.subscribe(table, workers=4, poll_interval_ms=50) as sub:
        sub.run(lambda d: None)
        wait_for = time.monotonic() + 60
        while sub.stat("acked") < rows and time.monotonic() < wait_for:
            time.sleep(0.05)
    found = poll(broker, table, "fillfactor", lambda f: "of 0 updates" not in f.message
                 and int(f.message.split(" of ")[1].split()[0]) >= rows)
    assert found.level == "ok" and found.advice == "nothing to do", found
    assert "no fillfactor makes their updates HOT" in found.message, found
