"""What the tests' fake servers share (fake_postgres.py, test_tls.py,
test_mysql_floor.py): a listening socket on a free loopback port, and a
thread that accepts connections and hands each to ``_session(conn)``, in a
thread of its own or, with ``THREADED`` false, one after another."""

from __future__ import annotations

import socket
import threading
from typing import Optional


class FakeServer:
    #: The listen() backlog.
    BACKLOG = 8
    #: Each connection in a thread of its own (else in the accept thread,
    #: one after another).
    THREADED = True

    def __init__(self) -> None:
        """A subclass sets what its sessions read before calling this: the
        server accepts from here on."""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(self.BACKLOG)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            if self.THREADED:
                threading.Thread(target=self._session, args=(conn,), daemon=True).start()
            else:
                self._session(conn)

    def _session(self, conn: socket.socket) -> None:
        raise NotImplementedError

    @staticmethod
    def _recv_exact(conn: socket.socket, n: int) -> Optional[bytes]:
        """``n`` bytes from ``conn``, or None if it ends before."""
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()
