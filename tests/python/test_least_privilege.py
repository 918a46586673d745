"""A queue run under a role of its own. The owner (the suite's admin
connection) creates the queue table and its dead-letter table with the
library; a role that may only SELECT, INSERT, UPDATE and DELETE rows of those
two tables then runs every outcome in every form, checks the tables, and
listens for notifications on PostgreSQL. Creating a table under it is
refused, naming the denial. The grants are those of docs/security.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

import libqueue

from helpers import POLL_MS, WAIT_S, make_table

pytestmark = pytest.mark.dialect("postgresql", "mysql")

#: One row per outcome, named by its payload.
OUTCOMES = (b"ack", b"retry", b"retry_after", b"dead_letter", b"release")


def _with_user(url: str, user: str, password: str = "") -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    login = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    return urlunsplit((parts.scheme, login + "@" + host, parts.path, parts.query, ""))


def _grant_postgres(db: Any, role: str, tables: List[str]) -> Callable[[], None]:
    db.execute("CREATE ROLE %s LOGIN" % db.quote(role), search_path=False)
    db.execute("GRANT USAGE ON SCHEMA %s TO %s" % (db.quote(db.schema), db.quote(role)))
    db.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s TO %s" % (
        ", ".join("%s.%s" % (db.quote(db.schema), db.quote(t)) for t in tables), db.quote(role)))

    def drop() -> None:
        # Its grants first: a role that holds any cannot be dropped.
        db.execute("DROP OWNED BY %s" % db.quote(role), search_path=False)
        db.execute("DROP ROLE %s" % db.quote(role), search_path=False)
    return drop


def _grant_mariadb(db: Any, user: str, password: str, tables: List[str]) -> Callable[[], None]:
    import pymysql

    account = "'%s'@'%s'" % (user, urlsplit(db.url).hostname or "localhost")
    db.execute("CREATE USER %s IDENTIFIED BY '%s'" % (account, password))

    def drop() -> None:
        db.execute("DROP USER IF EXISTS %s" % account, use_database=False)
    try:
        for table in tables:
            db.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON %s.%s TO %s" % (
                db.quote(db.database), db.quote(table), account))
    except pymysql.err.OperationalError as e:
        drop()
        if os.environ.get("LQ_REQUIRE_SERVERS"):
            raise
        pytest.skip("the suite's MariaDB user cannot grant (%s): scripts/lib/servers.sh gives "
                    "it GRANT OPTION" % e)
    return drop


@pytest.fixture
def worker(db: Any) -> Iterator[Callable[..., str]]:
    """``worker(*tables)``: the URL of a new role that may only read and
    write the rows of ``tables`` (made by the owner before)."""
    drops: List[Callable[[], None]] = []

    def make(*tables: str) -> str:
        name = "lq_worker_" + uuid.uuid4().hex[:8]
        if db.dialect == "postgresql":
            drops.append(_grant_postgres(db, name, list(tables)))
            return _with_user(db.url, name)  # the server trusts loopback
        password = "pw-" + uuid.uuid4().hex
        drops.append(_grant_mariadb(db, name, password, list(tables)))
        return _with_user(db.url, name, password)

    yield make
    for drop in drops:
        drop()


def owner_creates(db: Any, table: libqueue.Table) -> None:
    with libqueue.Broker(db.url) as owner:
        owner.create_table(table)


def test_the_role_runs_every_outcome(db, form, worker) -> None:
    table = make_table(form, retry_after="retry_after", dead_letter="jobs_dead")
    owner_creates(db, table)
    url = worker("jobs", "jobs_dead")
    attempts: Dict[bytes, List[int]] = {p: [] for p in OUTCOMES}
    done = set()
    with libqueue.Broker(url) as broker:
        broker.create_table(table, verify_only=True)  # reads the catalog only
        broker.create_table(table)  # the tables exist: checked, nothing created
        broker.publish_many(table, list(OUTCOMES))
        with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
            deadline = time.monotonic() + 4 * WAIT_S
            while done != set(OUTCOMES) and time.monotonic() < deadline:
                delivery = sub.next(WAIT_S)
                assert delivery is not None, "no delivery; settled so far: %s" % sorted(done)
                with delivery:  # leaving it unsettled releases it
                    payload = delivery.payload
                    attempts[payload].append(delivery.attempt)
                    again = len(attempts[payload]) > 1
                    if payload == b"ack" or again:
                        delivery.ack()
                        done.add(payload)
                    elif payload == b"retry":
                        delivery.retry()
                    elif payload == b"retry_after":
                        delivery.retry_after(3_600_000)
                        done.add(payload)
                    elif payload == b"dead_letter":
                        delivery.dead_letter()
                        done.add(payload)
    assert done == set(OUTCOMES)
    assert attempts[b"retry"] == [1, 2]
    assert attempts[b"release"] == [1, 1], "a release spends no attempt"
    assert [bytes(r[0]) for r in db.query("SELECT payload FROM jobs")] == [b"retry_after"]
    assert [bytes(r[0]) for r in db.query("SELECT payload FROM jobs_dead")] == [b"dead_letter"]


def test_creating_a_table_under_the_role_is_refused_naming_the_denial(db, worker) -> None:
    owner_creates(db, make_table("lease", dead_letter="jobs_dead"))
    url = worker("jobs", "jobs_dead")
    with libqueue.Broker(url) as broker:
        with pytest.raises(libqueue.Error) as info:
            broker.create_table(make_table("lease", name="jobs_more"))
    error = info.value
    assert "jobs_more" in error.message
    if db.dialect == "postgresql":
        assert re.search(r"permission denied for schema %s" % db.schema, error.message), error
        assert error.sqlstate == "42501"  # insufficient_privilege
        exists = ("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
                  "AND tablename = ?")
    else:
        assert re.search(r"CREATE command denied to user", error.message), error
        assert error.native_code == 1142  # ER_TABLEACCESS_DENIED_ERROR
        exists = ("SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                  "AND TABLE_NAME = ?")
    assert int(db.scalar(exists, ("jobs_more",))) == 0


PUBLISHER = """
import sys, libqueue
table = libqueue.Table("jobs", payload="payload", attempt="attempt", locked_until="locked_until")
with libqueue.Broker(sys.argv[1], listen_notify=1) as broker:
    broker.publish(table, b"wake")
"""


@pytest.mark.dialect("postgresql")
def test_listen_notify_works_under_the_role(db, worker) -> None:
    """LISTEN and NOTIFY need no privilege: a publish by the role in another
    process wakes the role's idle subscription long before its poll."""
    table = make_table("lease")
    owner_creates(db, table)
    url = worker("jobs")
    with libqueue.Broker(url, listen_notify=1) as broker:
        with broker.subscribe(table, poll_interval_ms=60000) as sub:
            assert sub.next(1.0) is None  # idle: its first claim found nothing
            started = time.monotonic()
            subprocess.run([sys.executable, "-c", PUBLISHER, url], check=True, timeout=60)
            delivery = sub.next(20)
            assert delivery is not None and delivery.payload == b"wake"
            assert time.monotonic() - started < 20, "woken well before the 60 s poll"
            with delivery:
                delivery.ack()
