"""A relay that counts the statements a PostgreSQL client runs, by their
text, for tests of what the library sends (one claim a poll, acks carried
by claims)."""

from __future__ import annotations

import socket
import struct
import threading
import urllib.parse
from collections import Counter
from typing import Any, Dict

from relay import Relay, shut_down


class StatementCounter(Relay):
    """A relay that reads what the client sends (PostgreSQL's protocol: an
    untyped startup message, after any SSL or GSS encryption requests, then
    typed messages) and counts the statements run, by their text: prepared
    ones at each Bind, the others at each Query. The link must be plain
    (sslmode=disable, as the suites' URL asks)."""

    ENCRYPTION_REQUESTS = (80877103, 80877104)

    def __init__(self, host: str, port: int) -> None:
        self.lock = threading.Lock()
        self.runs: Counter = Counter()
        self.parses: Counter = Counter()
        self.error: Any = None
        super().__init__(host, port)

    def _forward(self, client: socket.socket, server: socket.socket) -> None:
        threading.Thread(target=self._read_client, args=(client, server), daemon=True).start()
        threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    def _read_client(self, client: socket.socket, server: socket.socket) -> None:
        buf, typed, texts = b"", False, {}
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                server.sendall(data)
                if self.error is not None:
                    continue  # forwarding only
                try:
                    buf, typed = self._read(buf + data, typed, texts)
                except Exception as e:  # the test says so, and the link goes on
                    self.error = e
        except OSError:
            pass
        shut_down(client, server)

    def _read(self, buf: bytes, typed: bool, texts: Dict[bytes, str]) -> Any:
        """Counts the whole messages of ``buf``; returns the rest, and
        whether the startup is over."""
        while True:
            head = 5 if typed else 4
            if len(buf) < head:
                return buf, typed
            size = struct.unpack("!i", buf[head - 4:head])[0] + head - 4
            if len(buf) < size:
                return buf, typed
            message, buf = buf[:size], buf[size:]
            if not typed:
                typed = struct.unpack("!i", message[4:8])[0] not in self.ENCRYPTION_REQUESTS
            elif message[:1] == b"P":  # Parse: name, text
                name, text = message[5:].split(b"\0")[:2]
                texts[name] = text.decode()
                with self.lock:
                    self.parses[texts[name]] += 1
            elif message[:1] in (b"B", b"Q"):  # Bind: portal, statement; Query: text
                fields = message[5:].split(b"\0")
                text = texts.get(fields[1], "") if message[:1] == b"B" else fields[0].decode()
                with self.lock:
                    self.runs[text] += 1

    @classmethod
    def before(cls, url: str) -> "StatementCounter":
        """A counter in front of the server of ``url``."""
        parts = urllib.parse.urlsplit(url)
        return cls(parts.hostname, parts.port)

    def counted(self, predicate: Any, of: str = "runs") -> int:
        """The statements run (or, with of="parses", parsed) whose text
        meets ``predicate``."""
        with self.lock:
            return sum(n for text, n in getattr(self, of).items() if predicate(text))
