"""TLS to PostgreSQL and MariaDB, proven on the server's side, and refused
whenever the client cannot have it as asked.

scripts/lib/servers.sh starts both servers with a certificate for localhost
and 127.0.0.1 signed by a throwaway CA (LQ_TEST_TLS_CA), and makes a second
CA that signs nothing the servers use (LQ_TEST_TLS_OTHER_CA). A session's
encryption is read by the session itself, inside a transactional delivery:
pg_stat_ssl on PostgreSQL, the Ssl_cipher status on MariaDB. A name the
certificate does not hold is 127.0.0.2, a relay on loopback to the server.
Servers without TLS are fakes that say so the way real ones do, and record
what the client sends them after that.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import uuid
from typing import Any, Iterator, List, Optional
from urllib.parse import quote, urlsplit

import pytest

import libqueue

from fake_server import FakeServer
from helpers import POLL_MS, WAIT_S, make_table
from relay import Relay

pytestmark = pytest.mark.dialect("postgresql", "mysql")

CA = os.environ.get("LQ_TEST_TLS_CA")
OTHER_CA = os.environ.get("LQ_TEST_TLS_OTHER_CA")
#: A host name outside the servers' certificate that still reaches loopback.
UNCERTIFIED_HOST = "127.0.0.2"
JOBS = 5


@pytest.fixture
def tls_ca() -> str:
    if not (CA and OTHER_CA):
        if os.environ.get("LQ_REQUIRE_SERVERS"):
            pytest.fail("LQ_REQUIRE_SERVERS is set but LQ_TEST_TLS_CA / LQ_TEST_TLS_OTHER_CA "
                        "are not: start the servers with scripts/lib/servers.sh")
        pytest.skip("LQ_TEST_TLS_CA is unset: no servers with TLS "
                    "(scripts/lib/servers.sh starts them)")
    return CA


def secret() -> str:
    """A password no message may show."""
    return "tls-pw-" + uuid.uuid4().hex


class TlsModes:
    """The URL parameters of each TLS mode, in a target's own names."""

    MODE = CA_PARAM = VERIFIED = REQUIRED = DISABLED = ""

    def verify(self) -> dict:
        return {self.MODE: self.VERIFIED, self.CA_PARAM: CA}

    def untrusted(self) -> dict:
        return {self.MODE: self.VERIFIED, self.CA_PARAM: OTHER_CA}

    def require(self) -> dict:
        return {self.MODE: self.REQUIRED}

    def plain(self) -> dict:
        return {self.MODE: self.DISABLED}


class PostgresTarget(TlsModes):
    """The test's schema on the PostgreSQL server, reached with a URL of the
    test's making. The server trusts loopback, so any password logs in: the
    URL's is there to be kept out of messages."""

    dialect = "postgresql"
    verified_host = "localhost"
    #: The session's TLS version, or '' for a plain session.
    probe = ("INSERT INTO seen (tls) SELECT CASE WHEN ssl THEN version ELSE '' END "
             "FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    name_mismatch = r'does not match host name "127\.0\.0\.2"'
    unknown_ca = r"certificate verify failed"

    def __init__(self, db: Any) -> None:
        self.db = db
        parts = urlsplit(db.server_url)
        self.port = parts.port
        self.database = parts.path.lstrip("/")
        self.user = parts.username or "postgres"
        self.password = secret()
        #: Marks the library's sessions in pg_stat_activity.
        self.application = "lq_tls_" + uuid.uuid4().hex[:8]

    #: The URL parameters of the TLS modes (TlsModes).
    MODE, CA_PARAM = "sslmode", "sslrootcert"
    VERIFIED, REQUIRED, DISABLED = "verify-full", "require", "disable"

    def url(self, params: dict, host: str = "127.0.0.1", port: Optional[int] = None) -> str:
        query = dict(params, application_name=self.application,
                     options="-csearch_path=" + self.db.schema)
        return "postgresql://%s:%s@%s:%d/%s?%s" % (
            self.user, quote(self.password, safe=""), host, port or self.port, self.database,
            "&".join("%s=%s" % (k, quote(str(v), safe="/")) for k, v in query.items()))

    def sessions_tls(self) -> Optional[List[bool]]:
        """Whether each of the library's sessions is encrypted, as the
        server sees them."""
        return [bool(r[0]) for r in self.db.query(
            "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
            "WHERE a.application_name = ?", (self.application,))]

    def close(self) -> None:
        pass


class MariaDBTarget(TlsModes):
    """The test's database on the MariaDB server, through a user of the
    test's own whose password is the test's secret."""

    dialect = "mysql"
    # Connector/C takes "localhost" for its default unix socket: the TCP
    # session is verified against the certificate's 127.0.0.1.
    verified_host = "127.0.0.1"
    probe = ("INSERT INTO seen (tls) SELECT VARIABLE_VALUE FROM "
             "information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'SSL_CIPHER'")
    name_mismatch = r"TLS/SSL error: Validation of SSL server certificate failed"
    unknown_ca = r"TLS/SSL error: .*certificate"

    def __init__(self, db: Any) -> None:
        self.db = db
        parts = urlsplit(db.url)
        self.port = parts.port or 3306
        self.user = "lq_tls_" + uuid.uuid4().hex[:8]
        self.password = secret()
        # Sessions come from 127.0.0.1, the relay's too.
        db.execute("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'" % (self.user, self.password))
        db.execute("GRANT ALL ON %s.* TO '%s'@'127.0.0.1'" % (db.quote(db.database), self.user))

    MODE, CA_PARAM = "ssl_mode", "ssl_ca"
    VERIFIED, REQUIRED, DISABLED = "VERIFY_IDENTITY", "REQUIRED", "DISABLED"

    def url(self, params: dict, host: str = "127.0.0.1", port: Optional[int] = None) -> str:
        # Parameters go as they are: the dialect decodes user, password and
        # database only.
        return "mysql://%s:%s@%s:%d/%s?%s" % (
            self.user, quote(self.password, safe=""), host, port or self.port, self.db.database,
            "&".join("%s=%s" % kv for kv in params.items()))

    def sessions_tls(self) -> Optional[List[bool]]:
        return None  # another session's TLS shows only in performance_schema, off here

    def close(self) -> None:
        self.db.execute("DROP USER IF EXISTS '%s'@'127.0.0.1'" % self.user, use_database=False)


@pytest.fixture
def target(db: Any, tls_ca: str) -> Iterator[Any]:
    t = PostgresTarget(db) if db.dialect == "postgresql" else MariaDBTarget(db)
    yield t
    t.close()


class UncertifiedRelay(Relay):
    """A relay listening on 127.0.0.2, a loopback address the servers'
    certificate does not name."""

    HOST = UNCERTIFIED_HOST


@pytest.fixture
def relay(target: Any) -> Iterator[Relay]:
    try:
        r = UncertifiedRelay("127.0.0.1", target.port)
    except OSError as e:
        pytest.skip("cannot listen on %s: %s" % (UNCERTIFIED_HOST, e))
    yield r
    r.cut()


def run_queue(target: Any, url: str, encrypted: bool) -> List[str]:
    """Creates a queue table through ``url``, publishes and drains JOBS jobs
    in transactional mode, each delivery recording its session's TLS
    (version or cipher, '' when plain) in table seen. Where the server shows
    every session's TLS, checks that the pool's sessions are all
    ``encrypted`` or all plain. Returns what the deliveries recorded."""
    db = target.db
    db.execute("CREATE TABLE seen (tls VARCHAR(100))")
    table = make_table("lease")
    with libqueue.Broker(url) as broker:
        broker.create_table(table)
        broker.publish_many(table, [b"job %d" % i for i in range(JOBS)])
        with broker.subscribe(table, transactional=1, poll_interval_ms=POLL_MS) as sub:
            for _ in range(JOBS):
                delivery = sub.next(WAIT_S)
                assert delivery is not None, "a job was not delivered"
                with delivery:
                    assert delivery.execute(target.probe) == 1
                    delivery.ack()
        sessions = target.sessions_tls()
    assert db.count("jobs") == 0
    if sessions is not None:
        assert sessions and all(s == encrypted for s in sessions), sessions
    return [row[0] or "" for row in db.query("SELECT tls FROM seen")]


def refused(url: str, password: str, pattern: str) -> libqueue.Error:
    """Opening ``url`` fails with ConnectError matching ``pattern``, and its
    message does not hold ``password``."""
    with pytest.raises(libqueue.ConnectError) as info:
        libqueue.Broker(url).close()
    error = info.value
    assert re.search(pattern, str(error)), str(error)
    assert password not in str(error) and password not in error.message
    assert password not in repr(error)
    return error


# -- TLS as asked ----------------------------------------------------------


def test_a_verified_session_carries_a_queue_encrypted(target) -> None:
    url = target.url(target.verify(), host=target.verified_host)
    seen = run_queue(target, url, encrypted=True)
    assert len(seen) == JOBS and all(seen), seen


def test_a_plain_session_reads_as_plain(target) -> None:
    """The probe tells the two apart: a session asked to be plain is."""
    seen = run_queue(target, target.url(target.plain()), encrypted=False)
    assert seen == [""] * JOBS


def test_require_encrypts_without_verifying(target, relay) -> None:
    """require / REQUIRED take the certificate unchecked, as the client
    libraries document: through a name it does not hold, and trusting no CA."""
    seen = run_queue(target, target.url(target.require(), host=UNCERTIFIED_HOST, port=relay.port),
                     encrypted=True)
    assert len(seen) == JOBS and all(seen), seen


# -- refusals --------------------------------------------------------------


def test_a_certificate_for_another_name_is_refused(target, relay) -> None:
    url = target.url(target.verify(), host=UNCERTIFIED_HOST, port=relay.port)
    refused(url, target.password, target.name_mismatch)


def test_an_unknown_ca_is_refused(target) -> None:
    url = target.url(target.untrusted(), host=target.verified_host)
    refused(url, target.password, target.unknown_ca)


SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104


class ServerWithoutTls(FakeServer):
    """A fake that takes one connection at a time (5 s for each read) and
    records in ``received`` what the client sends."""

    THREADED = False

    def __init__(self) -> None:
        self.received: List[bytes] = []
        super().__init__()

    def _session(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                self._converse(conn)
            except OSError:
                pass

    def _converse(self, conn: socket.socket) -> None:
        raise NotImplementedError


class PostgresWithoutTls(ServerWithoutTls):
    """Answers libpq's SSLRequest (and GSSENCRequest) with 'N', as a server
    with ssl=off does, then records whatever the client sends: a startup
    packet would carry the user name."""

    def _converse(self, conn: socket.socket) -> None:
        data = conn.recv(8)
        while len(data) == 8 and struct.unpack("!II", data) in (
                (8, SSL_REQUEST), (8, GSSENC_REQUEST)):
            conn.sendall(b"N")
            data = conn.recv(8)
        while data:
            self.received.append(data)
            data = conn.recv(65536)


class MariaDBWithoutTls(ServerWithoutTls):
    """A MariaDB greeting without the TLS capability (CLIENT_SSL), as a
    server without ssl_cert sends it. Records the client's handshake
    response, then asks for the password in clear (mysql_clear_password),
    as a server with PAM or LDAP logins may, records that too, and ends."""

    # CLIENT_MYSQL, FOUND_ROWS, LONG_FLAG, CONNECT_WITH_DB, PROTOCOL_41,
    # TRANSACTIONS, SECURE_CONNECTION, MULTI_RESULTS, PLUGIN_AUTH: no SSL.
    CAPABILITIES = 0x1 | 0x2 | 0x4 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x20000 | 0x80000

    @staticmethod
    def _send(conn: socket.socket, seq: int, payload: bytes) -> None:
        conn.sendall(struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload)

    def _recv(self, conn: socket.socket) -> bytes:
        head = self._recv_exact(conn, 4)
        if head is None:
            return b""
        length, body = head[0] | head[1] << 8 | head[2] << 16, b""
        while len(body) < length:
            chunk = conn.recv(length - len(body))
            if not chunk:
                break
            body += chunk
        return body

    def _greeting(self) -> bytes:
        caps, scramble = self.CAPABILITIES, b"abcdefghijklmnopqrst"
        return (b"\x0a" + b"5.5.5-10.11.19-MariaDB\0" + struct.pack("<I", 7) + scramble[:8] + b"\0"
                + struct.pack("<H", caps & 0xFFFF) + bytes([45]) + struct.pack("<H", 0x0002)
                + struct.pack("<H", caps >> 16) + bytes([21]) + b"\0" * 10 + scramble[8:] + b"\0"
                + b"mysql_native_password\0")

    def _converse(self, conn: socket.socket) -> None:
        self._send(conn, 0, self._greeting())
        response = self._recv(conn)
        if not response:
            return
        self.received.append(response)
        self._send(conn, 2, b"\xfe" + b"mysql_clear_password\0")
        self.received.append(self._recv(conn))
        self._send(conn, 4, b"\x00\x00\x00\x02\x00\x00\x00")  # OK
        self.received.append(self._recv(conn))


#: The fakes' users: PostgreSQL's startup packet and MySQL's handshake
#: response carry them.
FAKE_USER = "lq_tls_user"
#: Every mode that asks for TLS, against each fake.
NO_TLS_CASES = [
    ("postgresql", "sslmode=require"),
    ("postgresql", "sslmode=verify-full&sslrootcert={ca}"),
    ("mysql", "ssl_mode=VERIFY_CA&ssl_ca={ca}"),
    ("mysql", "ssl_mode=VERIFY_IDENTITY&ssl_ca={ca}"),
    ("mysql", "ssl_mode=REQUIRED"),
]
NO_TLS_MESSAGE = r"server does not support SSL, but SSL was required|did not start TLS|" \
                 r"SSL is required, but the server does not support it|started no TLS"


@pytest.fixture
def server_without_tls(request: Any) -> Iterator[Any]:
    dialect, params = request.param
    fake = PostgresWithoutTls() if dialect == "postgresql" else MariaDBWithoutTls()
    scheme = "postgresql" if dialect == "postgresql" else "mysql"
    fake.password = secret()
    # Any CA will do: no certificate is ever shown.
    fake.url = "%s://%s:%s@127.0.0.1:%d/lqtest?%s" % (
        scheme, FAKE_USER, fake.password, fake.port,
        params.format(ca=CA or "/nonexistent/ca.pem"))
    yield fake
    fake.close()


def _no_tls_ids(cases: list) -> List[str]:
    return ["%s-%s" % (d, p.split("&")[0]) for d, p in cases]


@pytest.mark.parametrize("server_without_tls", NO_TLS_CASES, indirect=True,
                         ids=_no_tls_ids(NO_TLS_CASES))
def test_tls_modes_refuse_a_server_without_tls(server_without_tls) -> None:
    refused(server_without_tls.url, server_without_tls.password, NO_TLS_MESSAGE)


REQUIRED_SENDS_THE_USER = (
    "libqueue/src/dialects/mysql.c, my_connect/set_tls: with ssl_mode=REQUIRED, unverified, "
    "Connector/C 3.3 logs in before it finds the server has no TLS (the connection is refused "
    "after), so such a server receives the user name and a challenge response; the logins "
    "that would send the password itself are left out (MARIADB_OPT_RESTRICTED_AUTH). Only "
    "VERIFY_CA and VERIFY_IDENTITY refuse before the login.")


@pytest.mark.parametrize("server_without_tls", NO_TLS_CASES, indirect=True,
                         ids=_no_tls_ids(NO_TLS_CASES))
def test_no_password_reaches_a_server_without_tls(server_without_tls) -> None:
    with pytest.raises(libqueue.ConnectError):
        libqueue.Broker(server_without_tls.url).close()
    sent = b"".join(server_without_tls.received)
    assert server_without_tls.password.encode() not in sent, "the password went out in plain text"


@pytest.mark.parametrize("server_without_tls", [
    pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=REQUIRED_SENDS_THE_USER))
    if case == ("mysql", "ssl_mode=REQUIRED") else case
    for case in NO_TLS_CASES], indirect=True, ids=_no_tls_ids(NO_TLS_CASES))
def test_no_user_name_reaches_a_server_without_tls(server_without_tls) -> None:
    with pytest.raises(libqueue.ConnectError):
        libqueue.Broker(server_without_tls.url).close()
    sent = b"".join(server_without_tls.received)
    assert FAKE_USER.encode() not in sent, "the user name went out in plain text"
