"""A TCP relay on loopback between the library and a server, which a test
can cut (every connection closed, new ones refused) and restore: an outage
without stopping the shared test server."""

from __future__ import annotations

import re
import socket
import threading
from typing import List


class Relay:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._listener = self._listen(0)
        self.port = self._listener.getsockname()[1]

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()
        return sock

    def url(self, url: str) -> str:
        """The server's URL with this relay's port in place of the server's."""
        return re.sub(r"@127\.0\.0\.1:\d+", "@127.0.0.1:%d" % self.port, url, count=1)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Closes every connection and refuses new ones."""
        try:  # wakes the accept() in progress: closing alone would not
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            opened, self._open = self._open, []
        for s in opened:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self._listener = self._listen(self.port)

    def close(self) -> None:
        self.cut()
