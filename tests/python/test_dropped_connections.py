"""Connections the server dropped while idle in the pool are not lent (the
pool reads their socket first, without a round trip), and a statement
over MariaDB's max_allowed_packet is refused before it is sent, on a real
server: the pool has one connection, so a dead one kept there would fail
every publish after it."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import urllib.parse
from typing import Any, Iterator, List

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until
from relay import Relay, close_socket

#: The server's max_allowed_packet during the packet tests: small, so that a
#: payload over it is quick to build and send.
SMALL_PACKET = 1 << 20


@contextlib.contextmanager
def max_allowed_packet(db: Any, size: int) -> Iterator[None]:
    """The server's global max_allowed_packet set to ``size`` (sessions opened
    from now on take it), restored after."""
    old = int(db.scalar("SELECT @@GLOBAL.max_allowed_packet"))
    db.execute("SET GLOBAL max_allowed_packet = %d" % size)
    try:
        yield
    finally:
        db.execute("SET GLOBAL max_allowed_packet = %d" % old)


def mariadb_sessions(db: Any) -> List[int]:
    """The ids of the sessions on the test's database, less the helper's own
    (one connection per call): the broker's."""
    return sorted(int(row[0]) for row in db.query(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()",
        (db.database,)))


def the_broker_session(db: Any) -> int:
    """The one session of a broker whose pool holds one connection (once the
    helper connections that closed have left the list)."""
    sessions = wait_until(lambda: mariadb_sessions(db) if len(mariadb_sessions(db)) == 1 else None,
                          what="one broker session on the database")
    return sessions[0]


def payloads(db: Any) -> List[bytes]:
    return [bytes(row[0]) for row in db.query("SELECT payload FROM jobs ORDER BY id")]


def publish_after_the_kill(broker: libqueue.Broker, table: libqueue.Table) -> List[bytes]:
    """The publishes after the pool's one connection was killed while idle:
    the pool sees the close on the socket before it lends the connection,
    so none fails. Returns what was written."""
    for payload in (b"first", b"second", b"third"):
        broker.publish(table, payload)
    return [b"first", b"second", b"third"]


@pytest.mark.dialect("mysql")
def test_a_message_over_max_allowed_packet_is_refused_before_it_is_sent(db) -> None:
    """Refused with Misuse naming the limit; nothing went to the server, so
    the pool's one connection stays open and serves the next publish, and a
    payload just inside the limit is written."""
    table = make_table("lease")
    db.create_table(table)
    with max_allowed_packet(db, SMALL_PACKET), libqueue.Broker(db.url, pool_size=1) as broker:
        broker.publish(table, b"before")
        session = the_broker_session(db)
        with pytest.raises(libqueue.Misuse) as info:
            broker.publish(table, b"x" * (SMALL_PACKET + 1000))
        message = str(info.value)
        assert "max_allowed_packet" in message and "(%d bytes)" % SMALL_PACKET in message
        assert "a value of %d bytes" % (SMALL_PACKET + 1000) in message
        broker.publish(table, b"after")
        broker.publish(table, b"y" * (SMALL_PACKET - 4096))
        assert mariadb_sessions(db) == [session], "the connection was closed or replaced"
    assert payloads(db) == [b"before", b"after", b"y" * (SMALL_PACKET - 4096)]


@pytest.mark.dialect("mysql")
def test_a_handlers_statement_over_max_allowed_packet_is_refused(db) -> None:
    """A handler's own statement, as text (no parameters) and with a bound
    parameter: each refused before it is sent, and the delivery's
    transaction goes on on the same connection to its ack."""
    table = make_table("advisory")
    db.create_table(table)
    db.execute("CREATE TABLE marks (n INT)")
    big = "x" * (SMALL_PACKET + 1000)
    with max_allowed_packet(db, SMALL_PACKET), libqueue.Broker(db.url, pool_size=2) as broker:
        broker.publish(table, b"job")
        with broker.subscribe(table, poll_interval_ms=POLL_MS, transactional=1) as sub:
            with sub.next(5) as d:
                with pytest.raises(libqueue.Misuse, match="max_allowed_packet"):
                    d.execute("SELECT '%s'" % big)
                with pytest.raises(libqueue.Misuse, match="max_allowed_packet"):
                    d.execute("SELECT CHAR_LENGTH(?)", big)
                assert d.execute("INSERT INTO marks VALUES (1)") == 1
                d.ack()
    assert db.count("jobs") == 0
    assert db.count("marks") == 1


def over(db: Any, tls: bool) -> str:
    """The test database's URL, over TLS (verified) when ``tls``."""
    if not tls:
        return db.url
    ca = os.environ.get("LQ_TEST_TLS_CA")
    if not ca:
        pytest.skip("LQ_TEST_TLS_CA is unset: no servers with TLS (scripts/lib/servers.sh starts them)")
    query = ("sslmode=verify-full&sslrootcert=" if db.dialect == "postgresql"
             else "ssl_mode=VERIFY_CA&ssl_ca=") + ca
    return db.url + ("&" if "?" in db.url else "?") + query


@pytest.mark.dialect("mysql")
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_connection_the_server_killed_is_not_lent_again_mysql(db, tls) -> None:
    """Over TLS the server's farewell comes in records the protocol also
    uses: the close behind it is what tells."""
    table = make_table("lease")
    db.create_table(table)
    with libqueue.Broker(over(db, tls), pool_size=1) as broker:
        broker.publish(table, b"before")
        killed = the_broker_session(db)
        db.execute("KILL %d" % killed)
        wait_until(lambda: killed not in mariadb_sessions(db), what="the killed session to end")
        written = publish_after_the_kill(broker, table)
        assert the_broker_session(db) != killed
    assert payloads(db) == [b"before"] + written


@pytest.mark.dialect("postgresql")
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_connection_the_server_killed_is_not_lent_again_postgresql(db, tls) -> None:
    table = make_table("lease")
    db.create_table(table)
    name = db.schema  # unique to the test: the broker's sessions are found by it
    sessions = "SELECT pid FROM pg_stat_activity WHERE application_name = ?"
    with libqueue.Broker(over(db, tls) + "&application_name=" + name, pool_size=1) as broker:
        broker.publish(table, b"before")
        pids = [row[0] for row in db.query(sessions, (name,))]
        assert len(pids) == 1
        assert db.scalar("SELECT pg_terminate_backend(?)", (pids[0],)) is True
        wait_until(lambda: not db.query(sessions, (name,)), what="the killed session to end")
        written = publish_after_the_kill(broker, table)
        now = [row[0] for row in db.query(sessions, (name,))]
        assert len(now) == 1 and now[0] != pids[0]
    assert payloads(db) == [b"before"] + written


class HeldCloseRelay(Relay):
    """A relay that passes every byte both ways but, when the server closes
    a session, holds that close from the client for up to ``hold_s``: the
    window where a session's farewell (its FATAL error) has come and the
    close behind it has not."""

    def __init__(self, host: str, port: int, hold_s: float) -> None:
        self.hold_s = hold_s
        self.server_closed = threading.Event()
        super().__init__(host, port)

    def _forward(self, client: socket.socket, server: socket.socket) -> None:
        threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()
        threading.Thread(target=self._farewell, args=(server, client), daemon=True).start()

    def _farewell(self, server: socket.socket, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = server.recv(65536)
                if not data:
                    break
                client.sendall(data)
        self.server_closed.set()
        time.sleep(self.hold_s)
        close_socket(client)


@pytest.mark.dialect("postgresql")
def test_a_session_ended_before_its_close_arrived_is_not_lent_postgresql(db) -> None:
    """The server's FATAL has come and its close not yet (held by a relay):
    the pool reads the FATAL and opens another connection, where a lent
    one would have failed its publish. (Over TLS the server's close_notify
    comes right behind its FATAL, in bytes a relay passes, and tells the
    close by itself: the TLS variant above covers that.)"""
    table = make_table("lease")
    db.create_table(table)
    name = db.schema
    sessions = "SELECT pid FROM pg_stat_activity WHERE application_name = ?"
    url = db.url
    parts = urllib.parse.urlsplit(url)
    relay = HeldCloseRelay(parts.hostname, parts.port, hold_s=5)
    try:
        with libqueue.Broker(relay.url(url) + "&application_name=" + name, pool_size=1) as broker:
            broker.publish(table, b"before")
            pids = [row[0] for row in db.query(sessions, (name,))]
            assert len(pids) == 1
            assert db.scalar("SELECT pg_terminate_backend(?)", (pids[0],)) is True
            assert relay.server_closed.wait(10), "the server did not close the session"
            written = publish_after_the_kill(broker, table)
            now = [row[0] for row in db.query(sessions, (name,))]
            assert len(now) == 1 and now[0] != pids[0]
    finally:
        relay.close()
    assert payloads(db) == [b"before"] + written
