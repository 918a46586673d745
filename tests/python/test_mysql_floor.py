"""The MySQL dialect's checks at open, against a fake server: the version
floor (MySQL 8.0.1, MariaDB 10.6: FOR UPDATE SKIP LOCKED), the binary log
format, and the deadlines of a server that stops answering.

The fake speaks just enough of the MySQL protocol (stdlib sockets only): a
protocol-10 handshake with the chosen version, OK to any handshake response,
OK to any statement, and a one-row text result set to the two queries the
dialect reads at open, ``SELECT VERSION()`` and the binary log variables.
The dialect reads the version with ``SELECT VERSION()`` (text protocol), not
from the handshake, so a proxy that answers the handshake itself is still
seen through; the fake sends the same version in both.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import threading
import time
from typing import List, Optional, Sequence

import pytest

import libqueue

from fake_server import FakeServer

# Capabilities: CLIENT_MYSQL/LONG_PASSWORD, FOUND_ROWS, LONG_FLAG,
# CONNECT_WITH_DB, PROTOCOL_41, TRANSACTIONS, SECURE_CONNECTION,
# MULTI_RESULTS, PLUGIN_AUTH.
CAPABILITIES = 0x1 | 0x2 | 0x4 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x20000 | 0x80000


SCRAMBLE = b"abcdefghijklmnopqrst"
#: The binary log query of the dialect, answered with ``binlog``.
BINLOG_QUERY = "SELECT @@SESSION.binlog_format, @@GLOBAL.log_bin, @@SESSION.sql_log_bin"


def native_password(password: str) -> bytes:
    """mysql_native_password's answer to SCRAMBLE."""
    one = hashlib.sha1(password.encode()).digest()
    two = hashlib.sha1(SCRAMBLE + hashlib.sha1(one).digest()).digest()
    return bytes(a ^ b for a, b in zip(one, two))


def _lenenc_int(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


def _lenenc_str(s: bytes) -> bytes:
    return _lenenc_int(len(s)) + s


class FakeMySQL(FakeServer):
    """A fake server on a free loopback port. ``binlog``: the answer to the
    binary log query (binlog_format, log_bin, sql_log_bin). ``silent``:
    accept and never send a byte. ``mute_queries``: handshake, then never
    answer a statement (a server that hangs mid-session)."""

    BACKLOG = 16

    def __init__(self, version: str, binlog: Sequence[str] = ("ROW", "0", "1"),
                 silent: bool = False, mute_queries: bool = False) -> None:
        self.version = version
        self.binlog = list(binlog)
        self.silent = silent
        self.mute_queries = mute_queries
        self.queries: List[str] = []
        self.logins: List[tuple] = []  # (user, auth response) of each handshake response
        super().__init__()
        self.url = "mysql://fake:secret@127.0.0.1:%d/fake" % self.port

    # -- the protocol -------------------------------------------------------

    @staticmethod
    def _send(conn: socket.socket, seq: int, payload: bytes) -> int:
        conn.sendall(struct.pack("<I", len(payload))[:3] + bytes([seq & 0xFF]) + payload)
        return seq + 1

    def _recv(self, conn: socket.socket) -> Optional[bytes]:
        head = self._recv_exact(conn, 4)
        if head is None:
            return None
        length = head[0] | head[1] << 8 | head[2] << 16
        return self._recv_exact(conn, length)

    def _handshake(self) -> bytes:
        # A MariaDB server puts the replication prefix in its handshake.
        shown = self.version
        if "MariaDB" in shown and not shown.startswith("5.5.5-"):
            shown = "5.5.5-" + shown
        scramble = SCRAMBLE
        return (b"\x0a" + shown.encode() + b"\0" + struct.pack("<I", 7) + scramble[:8] + b"\0"
                + struct.pack("<H", CAPABILITIES & 0xFFFF) + bytes([45])
                + struct.pack("<H", 0x0002) + struct.pack("<H", CAPABILITIES >> 16)
                + bytes([21]) + b"\0" * 10 + scramble[8:] + b"\0"
                + b"mysql_native_password\0")

    @staticmethod
    def _ok() -> bytes:
        return b"\x00" + _lenenc_int(0) + _lenenc_int(0) + struct.pack("<HH", 0x0002, 0)

    @staticmethod
    def _eof() -> bytes:
        return b"\xfe" + struct.pack("<HH", 0, 0x0002)

    def _result(self, conn: socket.socket, names: Sequence[str], values: Sequence[str]) -> None:
        seq = self._send(conn, 1, _lenenc_int(len(names)))
        for name in names:
            column = (_lenenc_str(b"def") + _lenenc_str(b"") + _lenenc_str(b"")
                      + _lenenc_str(b"") + _lenenc_str(name.encode()) + _lenenc_str(b"")
                      + b"\x0c" + struct.pack("<H", 45) + struct.pack("<I", 256)
                      + bytes([0xFD]) + struct.pack("<H", 0) + b"\x00" + b"\0\0")
            seq = self._send(conn, seq, column)
        seq = self._send(conn, seq, self._eof())
        seq = self._send(conn, seq, b"".join(_lenenc_str(v.encode()) for v in values))
        self._send(conn, seq, self._eof())

    def _session(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.silent:
                    threading.Event().wait(120)
                    return
                self._send(conn, 0, self._handshake())
                response = self._recv(conn)  # the handshake response: any is fine
                if response is None:
                    return
                user_end = response.index(b"\0", 32)
                auth_len = response[user_end + 1]
                self.logins.append((response[32:user_end].decode(),
                                    response[user_end + 2:user_end + 2 + auth_len]))
                self._send(conn, 2, self._ok())
                while True:
                    packet = self._recv(conn)
                    if not packet or packet[0] == 0x01:  # gone, or COM_QUIT
                        return
                    if self.mute_queries:
                        threading.Event().wait(120)
                        return
                    query = packet[1:].decode(errors="replace") if packet[0] == 0x03 else ""
                    self.queries.append(query)
                    if query.strip().upper() == "SELECT VERSION()":
                        self._result(conn, ["VERSION()"], [self.version])
                    elif query == BINLOG_QUERY:
                        self._result(conn, ["binlog_format", "log_bin", "sql_log_bin"],
                                     self.binlog)
                    elif query.startswith("SELECT") and "@@" in query:  # unknown here
                        err = (b"\xff" + struct.pack("<H", 1193) + b"#HY000"
                               + b"Unknown system variable")
                        self._send(conn, 1, err)
                    elif packet[0] == 0x03:
                        self._send(conn, 1, self._ok())
                    else:  # a command the fake does not know
                        err = (b"\xff" + struct.pack("<H", 1047) + b"#08S01"
                               + b"Unknown command")
                        self._send(conn, 1, err)
            except OSError:
                return


@pytest.fixture
def fake_server():
    servers: List[FakeMySQL] = []

    def make(*args, **kwargs) -> FakeMySQL:
        servers.append(FakeMySQL(*args, **kwargs))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.mark.parametrize("version", ["5.7.44", "5.7.44-log", "8.0.0", "10.5.19-MariaDB",
                                     "10.5.19-MariaDB-1:10.5.19+maria~deb11", "8.0",
                                     "garbage", ""])
def test_below_the_floor_is_refused(fake_server, version: str) -> None:
    server = fake_server(version)
    with pytest.raises(libqueue.ServerTooOld) as info:
        libqueue.Broker(server.url)
    message = str(info.value)
    assert info.value.status == libqueue.Status.SERVER_TOO_OLD
    assert "MySQL 8.0.1" in message and "MariaDB 10.6" in message
    assert '"%s"' % version in message, message
    assert "SELECT VERSION()" in server.queries


@pytest.mark.parametrize("version", ["8.0.1", "8.0.36-log", "8.4.3", "9.1.0",
                                     "10.6.0-MariaDB", "10.11.19-MariaDB-0+deb12u1",
                                     "11.4.2-MariaDB-log"])
def test_at_or_above_the_floor_opens(fake_server, version: str) -> None:
    server = fake_server(version)
    with libqueue.Broker(server.url) as broker:
        assert broker.dialect == "mysql"
    # The session the dialect asks for: UTC, READ COMMITTED, strict writes.
    setup = " ".join(server.queries)
    assert "time_zone = '+00:00'" in setup
    assert "READ COMMITTED" in setup
    assert "STRICT_TRANS_TABLES" in setup
    assert ("max_statement_time" in setup) == ("MariaDB" in version)


def test_statement_binlog_format_is_refused(fake_server) -> None:
    server = fake_server("10.11.6-MariaDB", binlog=("STATEMENT", "1", "1"))
    with pytest.raises(libqueue.DialectError) as info:
        libqueue.Broker(server.url)
    message = str(info.value)
    assert "binlog_format" in message and "STATEMENT" in message and "READ COMMITTED" in message


@pytest.mark.parametrize("binlog", [("STATEMENT", "0", "1"), ("STATEMENT", "1", "0"),
                                    ("MIXED", "1", "1"), ("ROW", "1", "1")])
def test_binlog_formats_that_accept_read_committed_writes(fake_server, binlog) -> None:
    """STATEMENT matters only while the binary log is written."""
    server = fake_server("8.0.36", binlog=binlog)
    libqueue.Broker(server.url).close()


def test_connect_deadline_on_a_silent_server(fake_server) -> None:
    server = fake_server("8.0.36", silent=True)
    started = time.monotonic()
    with pytest.raises(libqueue.ConnectError):
        libqueue.Broker(server.url, connect_timeout_ms=1000)
    assert time.monotonic() - started < 15


def test_read_deadline_on_a_server_that_stops_answering(fake_server) -> None:
    """Connected, then silent: the client's read timeout (statement timeout
    plus two seconds) ends the call, and the connection is reported lost."""
    server = fake_server("8.0.36", mute_queries=True)
    started = time.monotonic()
    with pytest.raises(libqueue.ConnectError) as info:
        libqueue.Broker(server.url, statement_timeout_ms=1000, connect_timeout_ms=1000)
    assert time.monotonic() - started < 20
    assert info.value.native_code in (2006, 2013), info.value


@pytest.mark.parametrize("url, error", [
    ("mysql://u@h:0/db", libqueue.Misuse),
    ("mysql://u@h:99999/db", libqueue.Misuse),
    ("mysql://u@h:12x/db", libqueue.Misuse),
    ("mysql://u@h/db?nosuch=1", libqueue.Misuse),
    ("mysql://u@h/db?ssl_mode=sometimes", libqueue.Misuse),
    ("mysql://u%zz@h/db", libqueue.Misuse),
    ("mysql://u@[::1/db", libqueue.Misuse),
    ("mysql://u@h/db/extra", libqueue.Misuse),
    ("mysql://u@h:1,,h:2/db", libqueue.Misuse),
    ("mysql://u@h:1,/db", libqueue.Misuse),
    ("mysql://u@h:1,h:0/db", libqueue.Misuse),
    ("mysql://u@" + ",".join(["h"] * 17) + "/db", libqueue.Misuse),
    ("mysql://u@h:1,h:2/db?socket=/tmp/x.sock", libqueue.Misuse),
])
def test_malformed_mysql_urls(url: str, error: type) -> None:
    with pytest.raises(error):
        libqueue.Broker(url)


def test_mariadb_scheme_and_decoded_credentials(fake_server) -> None:
    """mariadb:// picks the same dialect; user and password are
    percent-decoded (the fake takes any credentials)."""
    server = fake_server("10.11.19-MariaDB")
    url = "mariadb://us%40er:p%3Ass%2Fw%40rd@127.0.0.1:" + str(server.port) + "/fake?ssl_mode=DISABLED"
    with libqueue.Broker(url) as broker:
        assert broker.dialect == "mysql"
    assert server.logins[0] == ("us@er", native_password("p:ss/w@rd"))
