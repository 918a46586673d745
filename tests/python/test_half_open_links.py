"""Links that turn half-open under a statement (the server frozen, or the
network gone silent while the kernel still acknowledges): every call keeps
its deadline, and a connection whose link failed is never used again, on
every server dialect."""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

import pytest

import libqueue

from helpers import make_table
from relay import Relay, close_socket

#: The broker's deadlines: the client gives up on a statement about
#: statement_timeout_ms + 2 s after sending it (PostgreSQL), or after its
#: read timeout (MySQL: whole seconds, + 2).
DEADLINES = dict(statement_timeout_ms=300, connect_timeout_ms=1000)
#: A call must return within this, where it would otherwise hang until the
#: link heals: far past any deadline above, so no timing is asserted.
RETURNS_WITHIN_S = 30.0

pytestmark = pytest.mark.dialect("postgresql", "mysql")


class HalfOpenRelay(Relay):
    """A relay whose links can turn half-open (``swallow()``): what either
    side of an open connection sends is read and dropped, for good, with
    nothing closed; new connections are accepted and never forwarded until
    ``heal()``. To the client, a frozen server: its kernel still accepts and
    acknowledges."""

    def __init__(self, host: str, port: int) -> None:
        self.swallowing = False
        self._links: List[Dict[str, bool]] = []
        super().__init__(host, port)

    def swallow(self) -> None:
        with self._lock:
            self.swallowing = True
            for link in self._links:
                link["live"] = False

    def heal(self) -> None:
        self.swallowing = False

    def _take(self, client: socket.socket) -> None:
        if self.swallowing:
            with self._lock:
                self._open.append(client)
            return
        try:
            server = self._connect()
        except OSError:
            close_socket(client)
            return
        server.settimeout(None)
        link = {"live": True}
        with self._lock:
            self._open += [client, server]
            self._links.append(link)
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=self._pipe, args=(a, b, link), daemon=True).start()


@pytest.fixture
def relay(db: Any) -> Iterator[HalfOpenRelay]:
    parts = urlsplit(db.url)
    r = HalfOpenRelay(parts.hostname, parts.port)
    yield r
    r.close()


def start(call: Callable[[], Any]) -> Tuple[threading.Thread, Dict[str, Any]]:
    """Runs ``call`` in a thread; the dict gets its "error" (None if it
    returned) once it ends."""
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            call()
            outcome["error"] = None
        except libqueue.Error as e:
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def warm_up(broker: libqueue.Broker, table: libqueue.Table) -> None:
    """Publishes from a few threads at once, so that the pool holds idle
    connections through the relay (which turn half-open with it)."""
    threads = [threading.Thread(target=lambda: [broker.publish(table, b"w") for _ in range(10)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def deadline_error(db: Any) -> Any:
    """What a passed deadline raises: PostgreSQL's own deadline is a
    Timeout; MySQL's read timeout loses the connection."""
    if db.dialect == "postgresql":
        return libqueue.Timeout
    return (libqueue.Timeout, libqueue.ConnectError)


def test_a_statement_on_a_half_open_link_fails_at_its_deadline(db, relay) -> None:
    table = make_table("lease")
    db.create_table(table)
    broker = libqueue.Broker(relay.url(db.url), pool_size=1, **DEADLINES)
    thread: Optional[threading.Thread] = None
    try:
        broker.publish(table, b"before")  # the pool's connection, through the relay
        relay.swallow()
        thread, outcome = start(lambda: broker.publish(table, b"lost"))
        thread.join(RETURNS_WITHIN_S)
        returned = not thread.is_alive()
        relay.heal()
        if returned:
            # The connection whose deadline passed is closed, not lent again.
            broker.publish(table, b"after")
    finally:
        relay.close()  # ends a call still waiting on the relay
        if thread is not None:
            thread.join(RETURNS_WITHIN_S)
        broker.close()
    assert returned, "a publish on a half-open link did not return within %gs" % RETURNS_WITHIN_S
    assert isinstance(outcome["error"], deadline_error(db)), outcome["error"]
    assert [bytes(row[0]) for row in db.query("SELECT payload FROM jobs ORDER BY id")] in (
        [b"before", b"after"], [b"before", b"lost", b"after"])


def test_gathered_acks_on_a_half_open_link_report_the_deadline(db, relay) -> None:
    """Two pulled deliveries acked at once (one transaction of the
    coalescer) on a link that turned half-open: each ack fails as what
    happened, a passed deadline or a connection that could not be made
    again, never as a statement sent on the connection that broke."""
    table, other = make_table("lease"), make_table("lease", "other")
    db.create_table(table)
    db.create_table(other)
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"a", b"b"])
    broker = libqueue.Broker(relay.url(db.url), **DEADLINES)
    threads: List[threading.Thread] = []
    outcomes: List[Dict[str, Any]] = []
    try:
        with broker.subscribe(table, workers=2, lease_ms=60000, poll_interval_ms=60000,
                              coalesce_wait_us=1000000) as sub:
            held = [sub.next(timeout=10), sub.next(timeout=10)]
            assert all(held)
            warm_up(broker, other)
            relay.swallow()
            barrier = threading.Barrier(2)

            def ack(delivery: libqueue.Delivery) -> None:
                barrier.wait(10)
                delivery.ack()

            for d in held:
                thread, outcome = start(lambda d=d: ack(d))
                threads.append(thread)
                outcomes.append(outcome)
            for thread in threads:
                thread.join(RETURNS_WITHIN_S)
            hung = sum(1 for t in threads if t.is_alive())
            relay.close()  # ends the calls still waiting on the relay
            for thread in threads:
                thread.join(RETURNS_WITHIN_S)
            for d in held:
                d.release()
    finally:
        relay.close()
        broker.close()
    assert not hung, "%d acks on a half-open link did not return within %gs" % (
        hung, RETURNS_WITHIN_S)
    wrong = [o["error"] for o in outcomes if not as_expected(db, o["error"])]
    assert not wrong, "acks failed as something else than their deadline: %s" % wrong


def as_expected(db: Any, error: Optional[libqueue.Error]) -> bool:
    """An ack's outcome on a link that broke: done, a passed deadline, or a
    new connection that could not be made (on PostgreSQL, where a deadline
    is a Timeout of its own, only that: a ConnectError otherwise means a
    statement was refused on the connection that broke)."""
    if error is None or isinstance(error, libqueue.Timeout):
        return True
    if not isinstance(error, libqueue.ConnectError):
        return False
    return db.dialect != "postgresql" or "cannot connect" in error.message
