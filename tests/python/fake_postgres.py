"""A fake PostgreSQL server that reports a chosen version and answers every
query with one row holding one text value, but a read of a table's columns,
which finds none (it has no tables): enough for libpq to connect, for the
version floors to be read, and for a broker to open."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Optional

from fake_server import FakeServer


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


class FakePostgres(FakeServer):
    def __init__(self, version: str, silent: bool = False, stall_on: Optional[bytes] = None) -> None:
        """``silent``: accept connections and never answer (a dead peer);
        ``stall_on``: answer until a message holds these bytes (a statement's
        text), then read on and never answer again (a server that hangs in
        the middle of a statement)."""
        self.version = version
        self.silent = silent
        self.stall_on = stall_on
        super().__init__()
        self.url = "postgresql://fake@127.0.0.1:%d/fake?sslmode=disable" % self.port

    def _session(self, conn: socket.socket) -> None:
        with conn:
            if self.silent:
                conn.recv(65536)
                threading.Event().wait(120)
                return
            length = struct.unpack("!I", conn.recv(4))[0]
            conn.recv(length - 4)  # the startup packet
            params = {"server_version": self.version, "client_encoding": "UTF8",
                      "server_encoding": "UTF8", "integer_datetimes": "on",
                      "standard_conforming_strings": "on", "DateStyle": "ISO, MDY"}
            out = _message(b"R", struct.pack("!I", 0))
            for k, v in params.items():
                out += _message(b"S", k.encode() + b"\0" + v.encode() + b"\0")
            out += _message(b"K", struct.pack("!II", 1, 2)) + _message(b"Z", b"I")
            conn.sendall(out)
            self._answer(conn)

    def _read(self, conn: socket.socket, n: int) -> bytes:
        data = self._recv_exact(conn, n)
        if data is None:
            raise EOFError
        return data

    def _answer(self, conn: socket.socket) -> None:
        """Reads messages; at each Sync (extended protocol) or Query (simple)
        answers with a canned one-row result."""
        row = (_message(b"T", struct.pack("!H", 1) + b"v\0" + struct.pack("!IHIhih", 0, 0, 25, -1, -1, 0))
               + _message(b"D", struct.pack("!HI", 1, 1) + b"x")
               + _message(b"C", b"SELECT 1\0") + _message(b"Z", b"I"))
        no_row = (_message(b"T", struct.pack("!H", 1) + b"v\0" + struct.pack("!IHIhih", 0, 0, 25, -1, -1, 0))
                  + _message(b"C", b"SELECT 0\0") + _message(b"Z", b"I"))
        extended = _message(b"1", b"") + _message(b"2", b"")
        columns_read = False
        stalled = False
        try:
            while True:
                kind = self._read(conn, 1)
                length = struct.unpack("!I", self._read(conn, 4))[0]
                body = self._read(conn, length - 4)
                if kind == b"X":
                    return
                stalled = stalled or bool(self.stall_on and self.stall_on in body)
                if stalled:
                    continue
                if kind in (b"P", b"Q"):  # the statement's text
                    columns_read = b"pg_attribute" in body
                answer = no_row if columns_read else row
                if kind == b"S":
                    conn.sendall(extended + answer)
                elif kind == b"Q":
                    conn.sendall(answer)
        except (EOFError, OSError):
            return
