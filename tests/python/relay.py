"""A TCP relay on loopback between the library and a server, which a test
can cut (every connection closed, new ones refused) and restore: an outage
without stopping the shared test server.

The chaos suite's relay (tests/chaos/chaos_relay.py) extends this one: it
takes each accepted connection its own way (``_take``), connects to the
server its own way (``_connect``) and closes its own record of the open
connections (``_close_open``); the listening, ``url()``, ``cut()`` and
``restore()`` are these."""

from __future__ import annotations

import re
import socket
import struct
import threading
from typing import Dict, List, Optional


def close_socket(sock: Optional[socket.socket], reset: bool = False) -> None:
    """Shuts ``sock`` down, then closes it: with a FIN, or with ``reset`` a
    reset (SO_LINGER 0). None is let be."""
    if sock is None:
        return
    # A thread blocked in recv() keeps the socket open past close(): the
    # shutdown wakes it first. SHUT_RD sends nothing, so with SO_LINGER 0 the
    # close that follows sends the reset; SHUT_RDWR sends a FIN.
    try:
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD if reset else socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def shut_down(*socks: socket.socket) -> None:
    """Shuts each of ``socks`` down both ways (a FIN), closing nothing."""
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Relay:
    #: Where the relay listens, and its listen() backlog.
    HOST = "127.0.0.1"
    BACKLOG = 64

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._listener: Optional[socket.socket] = self._listen(0)
        self.port = self._listener.getsockname()[1]

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.HOST, port))
        sock.listen(self.BACKLOG)
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
                return  # cut or closed
            self._take(client)

    def _connect(self) -> socket.socket:
        """A new connection to the server (OSError if there is none)."""
        return socket.create_connection(self.target, timeout=5)

    def _take(self, client: socket.socket) -> None:
        """Forwards a connection just accepted, both ways."""
        try:
            server = self._connect()
        except OSError:
            client.close()
            return
        server.settimeout(None)  # the connect's timeout must not end an idle link
        with self._lock:
            self._open += [client, server]
        self._forward(client, server)

    def _forward(self, client: socket.socket, server: socket.socket) -> None:
        """Starts copying both ways."""
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket,
              link: Optional[Dict[str, bool]] = None) -> None:
        """Copies source to sink until either ends; while link["live"] is
        false what comes is read and dropped (a half-open link)."""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if link is None or link["live"]:
                    sink.sendall(data)
        except OSError:
            pass
        shut_down(source, sink)

    def _close_open(self) -> None:
        """Closes every connection the relay forwards."""
        with self._lock:
            opened, self._open = self._open, []
        for s in opened:
            close_socket(s)

    def cut(self) -> None:
        """Closes every connection and refuses new ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:  # wakes the accept() in progress: closing alone would not
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        self._close_open()

    def restore(self) -> None:
        self._listener = self._listen(self.port)

    def close(self) -> None:
        self.cut()
