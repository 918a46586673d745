"""A TCP relay on loopback between the library and a server, with the faults
of the chaos suite. It extends tests/python/relay.py (whose ``url()``,
``cut()`` and ``restore()`` it keeps): besides those it has

* ``blackhole()`` / ``heal()``: every open connection turns half-open (what
  either side sends is swallowed; nothing is closed), and new connections
  are accepted but never forwarded. ``heal()`` forwards new connections
  again and closes the server side of the swallowed ones (the server learns
  they are gone, as when a partition heals); their client side stays open,
  silent, until the client closes it;
* ``set_delay(seconds)``: every chunk that arrives from now on, either way,
  is forwarded that much later (order kept): a latency spike;
* ``cut_mid_result(n, min_bytes)``: the next ``n`` chunks of at least
  ``min_bytes`` from the server are forwarded in part (their first half),
  and the connection is then closed on both sides, by turns with a FIN and
  a reset (SO_LINGER 0).

Each connection's record (``Conn``) tells when it opened, whether it was
made half-open, how many bytes of the client's were swallowed and when the
client closed it.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from typing import Deque, List, Optional, Tuple

from relay import Relay, close_socket  # tests/python (conftest.py puts it on sys.path)


class Conn:
    def __init__(self, client: socket.socket, server: Optional[socket.socket]) -> None:
        self.client = client
        self.server = server
        self.opened_at = time.monotonic()
        self.half_open = server is None  # accepted while the relay swallowed everything
        self.half_open_at: Optional[float] = time.monotonic() if server is None else None
        self.swallowed_from_client = 0
        self.swallowed_at: Optional[float] = None  # the first swallowed byte of the client's
        self.client_closed_at: Optional[float] = None
        self.cut = False
        self.closed = False
        self.lock = threading.Lock()


class ChaosRelay(Relay):
    BACKLOG = 128

    def __init__(self, host: str, port: int) -> None:
        # Set before the relay listens: the accept thread reads them.
        self.conns: List[Conn] = []
        self.blackholed = False
        self.delay_s = 0.0
        self._cut_budget = 0
        self._cut_min_bytes = 0
        self.cuts = 0
        super().__init__(host, port)

    # -- set-up -------------------------------------------------------------

    def _connect(self) -> socket.socket:
        server = super()._connect()
        server.settimeout(None)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return server

    def _take(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server = None
        if not self.blackholed:
            try:
                server = self._connect()
            except OSError:
                close_socket(client)
                return
        conn = Conn(client, server)
        with self._lock:
            self.conns.append(conn)
        threading.Thread(target=self._pump, args=(conn, True), daemon=True).start()
        if server is not None:
            threading.Thread(target=self._pump, args=(conn, False), daemon=True).start()

    # -- forwarding -----------------------------------------------------------

    def _pump(self, conn: Conn, from_client: bool) -> None:
        """Reads one direction; a sender thread of its own forwards what is
        read, each chunk at its due time."""
        source = conn.client if from_client else conn.server
        assert source is not None
        pending: Deque[Tuple[float, bytes]] = collections.deque()
        ready = threading.Condition()
        ended = [False]
        threading.Thread(target=self._send, args=(conn, from_client, pending, ready, ended),
                         daemon=True).start()
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if conn.half_open:
                if from_client:
                    with conn.lock:
                        conn.swallowed_from_client += len(data)
                        if conn.swallowed_at is None:
                            conn.swallowed_at = time.monotonic()
                continue
            with ready:
                pending.append((time.monotonic() + self.delay_s, data))
                ready.notify()
        with ready:
            ended[0] = True
            ready.notify()
        if from_client:
            with conn.lock:
                if conn.client_closed_at is None and not conn.closed:
                    conn.client_closed_at = time.monotonic()
        if from_client or not conn.half_open:
            self._end(conn)

    def _send(self, conn: Conn, from_client: bool, pending: Deque[Tuple[float, bytes]],
              ready: threading.Condition, ended: List[bool]) -> None:
        sink = conn.server if from_client else conn.client
        while True:
            with ready:
                while not pending and not ended[0]:
                    ready.wait()
                if not pending:
                    return
                due, data = pending.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if conn.half_open or conn.closed or sink is None:
                continue
            if not from_client and len(data) >= self._cut_min_bytes and self._take_cut():
                try:
                    sink.sendall(data[: max(1, len(data) // 2)])
                except OSError:
                    pass
                conn.cut = True
                reset = self.cuts % 2 == 0
                with self._lock:
                    self.cuts += 1
                self._end(conn, reset=reset)
                return
            try:
                sink.sendall(data)
            except OSError:
                self._end(conn)
                return

    def _take_cut(self) -> bool:
        with self._lock:
            if self._cut_budget > 0:
                self._cut_budget -= 1
                return True
            return False

    def _end(self, conn: Conn, reset: bool = False) -> None:
        with conn.lock:
            if conn.closed:
                return
            conn.closed = True
        close_socket(conn.client, reset)
        close_socket(conn.server, reset)

    # -- faults ---------------------------------------------------------------

    def blackhole(self) -> None:
        """Every open connection half-open, new ones accepted and swallowed."""
        with self._lock:
            self.blackholed = True
            conns = list(self.conns)
        now = time.monotonic()
        for conn in conns:
            if not conn.closed and not conn.half_open:
                conn.half_open = True
                conn.half_open_at = now

    def heal(self) -> None:
        """New connections are forwarded again; the server side of the
        half-open ones is closed (their client side stays, silent)."""
        with self._lock:
            self.blackholed = False
            conns = list(self.conns)
        for conn in conns:
            if conn.half_open and conn.server is not None:
                close_socket(conn.server)

    def set_delay(self, seconds: float) -> None:
        self.delay_s = seconds

    def cut_mid_result(self, n: int = 1, min_bytes: int = 256) -> None:
        with self._lock:
            self._cut_budget += n
            self._cut_min_bytes = min_bytes

    def pending_cuts(self) -> int:
        with self._lock:
            return self._cut_budget

    def _close_open(self) -> None:
        with self._lock:
            conns = list(self.conns)
        for conn in conns:
            self._end(conn)

    # -- what happened ----------------------------------------------------------

    def half_open_conns(self) -> List[Conn]:
        with self._lock:
            return [c for c in self.conns if c.half_open]

    def stats(self) -> dict:
        with self._lock:
            conns = list(self.conns)
        half = [c for c in conns if c.half_open]
        return dict(connections=len(conns), half_open=len(half),
                    half_open_closed_by_client=sum(1 for c in half if c.client_closed_at),
                    cuts=self.cuts)
