"""Broker.create_table: the library creates a queue's tables, and checks the
ones that exist against their description, on every database."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any, List

import pytest

import libqueue

from helpers import POLL_MS, wait_until


def table_exists(db: Any, name: str) -> bool:
    if db.dialect == "sqlite":
        sql = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
    elif db.dialect == "postgresql":
        sql = ("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
               "AND tablename = ?")
    else:
        sql = ("SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
               "AND TABLE_NAME = ?")
    return int(db.scalar(sql, (name,))) == 1


def columns_of(db: Any, name: str) -> List[str]:
    if db.dialect == "sqlite":
        return [r[0] for r in db.query("SELECT name FROM pragma_table_info(?)", (name,))]
    if db.dialect == "postgresql":
        sql = ("SELECT column_name FROM information_schema.columns WHERE table_schema = "
               "current_schema() AND table_name = ? ORDER BY ordinal_position")
    else:
        sql = ("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
               "DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION")
    return [r[0] for r in db.query(sql, (name,))]


def lease_table(name: str = "jobs", **roles: Any) -> libqueue.Table:
    roles.setdefault("payload", "payload")
    roles.setdefault("attempt", "attempt")
    return libqueue.Table(name, locked_until="locked_until", retry_after="retry_after", **roles)


def drain(broker: libqueue.Broker, table: libqueue.Table, expected: int) -> int:
    handled: List[bytes] = []
    with broker.subscribe(table, workers=4, poll_interval_ms=POLL_MS) as sub:
        sub.run(lambda d: handled.append(d.payload))
        wait_until(lambda: len(handled) >= expected, what="%d deliveries" % expected)
    return len(handled)


PROGRAM = textwrap.dedent("""
    import sys, threading, libqueue
    jobs = libqueue.Table("jobs", payload="payload", attempt="attempt",
                          locked_until="locked_until", retry_after="retry_after",
                          priority="priority", headers="headers", processed_at="done_at")
    handled, drained = [], threading.Event()
    with libqueue.Broker(sys.argv[1]) as broker:
        broker.create_table(jobs)
        broker.publish_many(jobs, [b"job %d" % i for i in range(100)])
        with broker.subscribe(jobs, workers=4) as sub:
            @sub.run
            def handle(delivery):
                handled.append(delivery.id)
                if len(handled) >= 100:
                    drained.set()
            drained.wait(60)
    print(len(handled))
""")


def test_a_program_creates_publishes_drains_and_runs_again(db, tmp_path) -> None:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    for run in range(2):  # the second run finds the table and checks it
        done = subprocess.run([sys.executable, str(script), db.url], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "100", run
        assert db.count("jobs", "%s IS NULL" % db.quote("done_at")) == 0, run
    assert db.count("jobs") == 200  # processed_at keeps the acked rows


def test_every_form_works_on_a_table_it_created(db, form) -> None:
    roles = {"locked_until": "locked_until"} if form == "lease" else {}
    if form == "advisory":
        roles["advisory_lock"] = "account-{account}"
    table = libqueue.Table("jobs", payload="payload", attempt="attempt", **roles)
    with libqueue.Broker(db.url) as broker:
        broker.create_table(table)
        broker.publish_many(table, [b"a", b"b", b"c"])
        assert drain(broker, table, 3) == 3
    if form == "advisory":
        assert "account" in columns_of(db, "jobs")


def test_verify_only_finds_a_missing_table_and_creates_nothing(db, broker) -> None:
    with pytest.raises(libqueue.SchemaError, match="does not exist"):
        broker.create_table(lease_table(), verify_only=True)
    assert not table_exists(db, "jobs")
    broker.create_table(lease_table())
    broker.create_table(lease_table(), verify_only=True)


def test_a_missing_column_is_named_and_nothing_changes(db, broker) -> None:
    db.create_table(lease_table())
    before = columns_of(db, "jobs")
    wanted = lease_table(priority="prio", partition_key="tenant")
    with pytest.raises(libqueue.SchemaError) as err:
        broker.create_table(wanted)
    message = str(err.value)
    assert 'column "prio" (priority) is missing' in message
    assert 'column "tenant" (partition_key) is missing' in message
    assert err.value.status_name == "LQ_SCHEMA"
    assert columns_of(db, "jobs") == before


def test_a_column_of_the_wrong_type_is_named(db, broker) -> None:
    text = {"sqlite": "TEXT", "postgresql": "TEXT", "mysql": "VARCHAR(20)"}[db.dialect]
    number = {"sqlite": "INTEGER", "postgresql": "BIGINT", "mysql": "BIGINT"}[db.dialect]
    db.execute("CREATE TABLE jobs (id %s PRIMARY KEY, payload %s, attempt %s, "
               "locked_until %s, retry_after %s)" % (number, text, text, number, text))
    with pytest.raises(libqueue.SchemaError) as err:
        broker.create_table(lease_table())
    message = str(err.value)
    assert 'column "attempt" (attempt) is %s, which does not hold an integer' % (
        text.split("(")[0].lower() if db.dialect == "mysql" else
        "text" if db.dialect == "postgresql" else "TEXT") in message
    assert 'column "locked_until" (locked_until)' in message
    assert '"payload"' not in message  # text holds a payload
    if db.dialect != "sqlite":  # SQLite keeps times as text: a TEXT column holds them
        assert 'column "retry_after" (retry_after)' in message


def test_a_name_that_needs_quoting(db, broker) -> None:
    name = 'odd "name`s'
    table = libqueue.Table(name, payload="the payload", attempt="try's",
                           locked_until="locked until", group='a "group"')
    broker.create_table(table)
    broker.create_table(table, verify_only=True)
    broker.publish_many(table, [{"payload": b"x", "group": "g"}] * 5)
    got = 0
    with broker.subscribe(table, group="g", workers=2, poll_interval_ms=POLL_MS) as sub:
        for delivery in sub.deliveries(timeout=1.0):
            delivery.ack()
            got += 1
    assert got == 5
    assert table_exists(db, name)


def test_a_schema_that_does_not_exist(db, broker) -> None:
    table = lease_table(schema="lq_no_such_schema")
    with pytest.raises(libqueue.SchemaError, match='schema "lq_no_such_schema" does not exist'):
        broker.create_table(table)


@pytest.mark.parametrize("qualified", [False, True])
def test_a_view_is_refused_by_name(db, broker, qualified: bool) -> None:
    """A view of the name is no queue's table: create_table says so rather
    than pass on the server's error (or check the view's columns)."""
    broker.create_table(lease_table("jobs_rows"))
    db.execute("CREATE VIEW jobs AS SELECT * FROM jobs_rows")
    schema = None
    if qualified:
        schema = {"sqlite": "main", "postgresql": "current_schema()", "mysql": "DATABASE()"}
        schema = "main" if db.dialect == "sqlite" else db.scalar("SELECT " + schema[db.dialect])
    label = "%s.jobs" % schema if schema else "jobs"
    for flags in ({}, {"verify_only": True}):
        with pytest.raises(libqueue.SchemaError) as err:
            broker.create_table(lease_table(schema=schema), **flags)
        assert "%s is a view, not a table" % label in str(err.value)
        assert err.value.status_name == "LQ_SCHEMA"
    # As a dead-letter table too.
    with pytest.raises(libqueue.SchemaError, match="jobs is a view, not a table"):
        broker.create_table(lease_table("queue", dead_letter="jobs"))
    assert not table_exists(db, "queue")  # nothing made, on MySQL too


def test_a_template_column_the_table_lacks_is_added_and_left_empty(db, broker) -> None:
    """What the README warns of: create_table adds the column of an advisory
    key template, nullable, and no publish fills it, so every row renders one
    key."""
    table = libqueue.Table("jobs", payload="payload", advisory_lock="acct-{account}")
    broker.create_table(table)
    assert "account" in columns_of(db, "jobs")
    broker.publish_many(table, [b"a", b"b", b"c"])
    assert db.count("jobs", "account IS NULL") == 3


def test_a_dead_letter_table_that_is_the_table_itself_is_refused(db, broker) -> None:
    """Dead letters into the queue itself would be counted as both, and a
    purge of them would delete queued rows."""
    for table in (lease_table(dead_letter="jobs"),
                  lease_table(schema="lq_s", dead_letter="lq_s.jobs")):
        with pytest.raises(libqueue.Misuse, match="dead letters cannot go to the table itself"):
            broker.create_table(table)
    assert not table_exists(db, "jobs")


@pytest.mark.dialect("postgresql")
def test_a_name_the_server_would_cut_is_refused(db, broker) -> None:
    """PostgreSQL keeps 63 bytes of a name: a longer table name would be cut
    to another table's (its dead-letter table's), and one of 55 to 63 bytes
    would give its indexes one name. Each is refused, naming the name, and
    nothing is made or written."""
    long = "q" * 64
    table = libqueue.Table(long, payload="payload", attempt="attempt", locked_until="locked_until",
                           dead_letter=long + "_dead")
    for call in (lambda: broker.create_table(table), lambda: broker.publish(table, b"x")):
        with pytest.raises(libqueue.DialectError, match='the name "q{64}" is over 63 bytes'):
            call()
    indexed = libqueue.Table("q" * 60, payload="payload", attempt="attempt",
                             locked_until="locked_until")
    with pytest.raises(libqueue.DialectError, match='the name "q{60}_claim_order" is over 63 bytes'):
        broker.create_table(indexed)
    assert db.scalar("SELECT count(*) FROM pg_class WHERE relname LIKE 'qqqq%'") == 0


def test_the_dead_letter_table_is_created_and_used(db, broker) -> None:
    table = lease_table(dead_letter="jobs_dead")
    broker.create_table(table)
    assert table_exists(db, "jobs_dead")
    broker.publish(table, b"poison")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(timeout=5) as delivery:
            delivery.dead_letter()
    assert db.count("jobs") == 0
    assert db.scalar("SELECT payload FROM jobs_dead") == b"poison"


def test_ids_are_never_reused_so_dead_letters_keep_theirs(db, broker) -> None:
    # A table emptied by dead letters gets new rows: their ids must not be
    # those of the rows already in the dead-letter table.
    table = lease_table(dead_letter="jobs_dead")
    broker.create_table(table)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        for payload in (b"first", b"second", b"third"):
            broker.publish(table, payload)
            with sub.next(timeout=5) as delivery:
                delivery.dead_letter()
    assert db.count("jobs") == 0
    assert sorted(r[0] for r in db.query("SELECT payload FROM jobs_dead")) == [
        b"first", b"second", b"third"]


@pytest.mark.dialect("sqlite", "postgresql")
def test_a_failure_half_way_leaves_nothing_behind(db, broker) -> None:
    # The dead-letter table exists without the payload column: the queue's
    # table is created first, then the check of the other fails, and the
    # transaction takes both back.
    db.execute("CREATE TABLE jobs_dead (id BIGINT PRIMARY KEY, attempt INTEGER, "
               "locked_until TEXT, retry_after TEXT)")
    with pytest.raises(libqueue.SchemaError, match='jobs_dead.*"payload" \\(payload\\) is missing'):
        broker.create_table(lease_table(dead_letter="jobs_dead"))
    assert not table_exists(db, "jobs")


@pytest.mark.dialect("mysql")
def test_a_failure_on_mysql_keeps_the_table_created_before_it(db, broker) -> None:
    # MySQL's DDL commits by itself: the queue's table, created first, stays.
    db.execute("CREATE TABLE jobs_dead (id BIGINT PRIMARY KEY)")
    with pytest.raises(libqueue.SchemaError, match="jobs_dead"):
        broker.create_table(lease_table(dead_letter="jobs_dead"))
    assert table_exists(db, "jobs")
    broker.create_table(lease_table(), verify_only=True)


RACER = textwrap.dedent("""
    import sys, libqueue
    url, name = sys.argv[1], sys.argv[2]
    table = libqueue.Table(name, payload="payload", attempt="attempt",
                           locked_until="locked_until", retry_after="retry_after",
                           dead_letter=name + "_dead")
    with libqueue.Broker(url) as broker:
        print("ready", flush=True)
        sys.stdin.readline()
        broker.create_table(table)
        broker.publish(table, b"x")
    print("created")
""")


def test_four_processes_create_one_table_at_once(db, tmp_path) -> None:
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    for round_ in range(3):
        name = "raced_%d" % round_
        racers = [subprocess.Popen([sys.executable, str(script), db.url, name], text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE) for _ in range(4)]
        for r in racers:
            line = r.stdout.readline().strip()
            if line != "ready":
                r.kill()
                pytest.fail("a racer did not open its broker: %r\n%s" % (line, r.communicate()[1]))
        for r in racers:  # all at once, as near as four pipes allow
            r.stdin.write("go\n")
            r.stdin.flush()
        for r in racers:
            out, err = r.communicate(timeout=60)
            assert r.returncode == 0, err
            assert out.strip() == "created"
        assert db.count(name) == 4
        assert table_exists(db, name + "_dead")


def test_create_sql_is_what_create_table_runs(db, broker) -> None:
    table = lease_table(group="queue", priority="priority")
    db.executescript(table.create_sql(db.dialect))
    broker.create_table(table, verify_only=True)
    assert columns_of(db, "jobs") == ["id", "payload", "attempt", "queue", "priority",
                                      "retry_after", "locked_until"]
