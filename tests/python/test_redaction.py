"""Credentials are never shown: a marker password goes through every path
that prints a URL or a failure (repr, failed connects, a wrong database, a
bad option, the core's log at debug level), and nothing captured holds it."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from typing import Any, List
from urllib.parse import urlsplit

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until
from relay import Relay

MARK = "Sekr3tMarker"


def with_password(url: str, password: str = MARK) -> str:
    """``url`` with its user's password replaced by (or set to) ``password``."""
    return re.sub(r"^(\w+://[^:@/]+)(:[^@/]*)?@", r"\1:%s@" % password, url, count=1)


@pytest.mark.parametrize("url, shown", [
    ("postgresql://app:s3cret@db/jobs", "postgresql://app:***@db/jobs"),
    ("mysql://u:p%40ss@h:3306/db?ssl_mode=REQUIRED&tls_passphrase=x1",
     "mysql://u:***@h:3306/db?ssl_mode=REQUIRED&tls_passphrase=***"),
    ("postgresql://h/db?sslmode=require&password=pw&sslpassword=key",
     "postgresql://h/db?sslmode=require&password=***&sslpassword=***"),
    ("mysql://a:b@c@h/db", "mysql://a:***@h/db"),
    ("postgresql://user@h/db", "postgresql://user@h/db"),
    ("mysql://u:pa#ss@h/db", "mysql://u:***@h/db"),
    ("mysql://h/db?tls%5Fpassphrase=s3cret&x=1", "mysql://h/db?tls%5Fpassphrase=***&x=1"),
    ("sqlite:jobs.db", "sqlite:jobs.db"),
    ("mysql:/u:s3cret@h/db", "mysql:/u:***@h/db"),  # a slash short, the password still hidden
    ("host=h port=5432 password=s3cret dbname=x", "host=h port=5432 password=*** dbname=x"),
    ("host = h password = 'se cr\\'et' dbname=x", "host = h password = *** dbname=x"),
    ("sslpassword=k host=h", "sslpassword=*** host=h"),
    ("jobs.db?password=s3cret", "jobs.db?password=***"),
    ("postgresql://u:p?w@h/db", "postgresql://u:***@h/db"),  # libpq's user info ends at '@'
    ("postgresql://u:p/w@h/db", "postgresql://u:***@h/db"),
    ("u:s3cret@h/db", "u:***@h/db"),  # no scheme
    ("sqlite:///srv/queues/q@1.db", "sqlite:///srv/queues/q@1.db"),  # no password in sight
    ("postgresql://h:5432/db?application_name=a@b", "postgresql://h:5432/db?application_name=a@b"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert libqueue.redact_url(url) == shown


@pytest.mark.parametrize("url, says", [
    ("host=127.0.0.1 user=app password=%s dbname=jobs" % MARK, "the URL has no scheme"),
    ("mysql:/app:%s@127.0.0.1/jobs" % MARK, '"mysql:": its URLs begin mysql://'),
    ("PostgreSQL://app:%s@127.0.0.1/jobs" % MARK, '"PostgreSQL:": its URLs begin postgresql://'),
    ("pg://app:%s@127.0.0.1/jobs" % MARK, '"pg:": unknown scheme'),
])
def test_a_url_of_no_scheme_taken_is_refused_without_its_password(url: str, says: str) -> None:
    with pytest.raises(libqueue.DialectError) as raised:
        libqueue.Broker(url)
    assert says in str(raised.value)
    assert MARK not in str(raised.value)


@pytest.mark.dialect("postgresql")
@pytest.mark.parametrize("query, name", [
    ("sslmdoe=disable", "sslmdoe"),
    ("connect_timeout=5&colour=%s&application_name=x" % MARK, "colour"),
])
def test_an_unknown_postgresql_parameter_is_named(db, query: str, name: str) -> None:
    """libpq refuses a URL with a parameter it does not know: the error names
    the parameter (and neither its value nor the password)."""
    url = with_password(db.url.split("?")[0]) + "?" + query
    with pytest.raises(libqueue.Misuse) as raised:
        libqueue.Broker(url)
    assert 'the URL\'s parameter "%s" is not one libpq knows' % name in str(raised.value)
    assert MARK not in str(raised.value)
    # Known parameters still read.
    with libqueue.Broker(db.url + "&connect_timeout=5&application_name=lq") as broker:
        assert broker.url


@pytest.mark.dialect("postgresql", "mysql")
def test_no_path_shows_the_password(db, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="libqueue")
    seen: List[str] = []

    def failure(url: str, **options: Any) -> None:
        with pytest.raises(libqueue.Error) as err:
            libqueue.Broker(url, connect_timeout_ms=2000, **options)
        seen.extend([str(err.value), repr(err.value), err.value.message])

    parts = urlsplit(db.url)
    unreachable = with_password(db.url).replace(":%d/" % parts.port, ":1/")
    failure(unreachable)                                                  # a failed connect
    failure(re.sub(r"/[^/?]+(\?|$)", r"/lq_no_such_db\1", with_password(db.url), count=1))
    failure(with_password(db.url), pool_sise=2)                           # a bad option
    failure(unreachable.split("?")[0] + "?password=%s" % MARK)            # a query parameter
    if db.dialect == "postgresql":
        bad = with_password(unreachable, MARK + "%zz")                    # a URL libpq cannot read
        failure(bad)
        failure(db.url, listen_notify=1, listen_url=bad)                  # the LISTEN connection's
    if db.dialect == "mysql":
        failure(with_password(db.url))                                    # a wrong password
    # A broker that opens (PostgreSQL's test server trusts loopback), and the
    # core's log at debug level while its claims fail.
    relay = Relay(parts.hostname, parts.port)
    try:
        url = with_password(relay.url(db.url), "lq" if db.dialect == "mysql" else MARK)
        table = make_table("lease")
        db.create_table(table)
        with libqueue.Broker(url, connect_timeout_ms=2000, statement_timeout_ms=2000) as broker:
            seen += [repr(broker), str(broker), broker.url]
            with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
                sub.next(timeout=0.1)  # claims run from the first pull
                relay.cut()
                wait_until(lambda: sub.health() is not None, what="a failed claim")
                seen.append(str(sub.health()))
    finally:
        relay.close()
    seen.append(caplog.text)
    assert seen and not [s for s in seen if MARK in s], [s for s in seen if MARK in s]


@pytest.mark.dialect("postgresql", "mysql")
def test_the_command_line_shows_no_password(db, tmp_path) -> None:
    """The CLI given a URL with a password (--url, as the process list would
    show it; the same URL from a file): a failed connect, a wrong database,
    and the commands that report on the queue print no password."""
    parts = urlsplit(db.url)
    unreachable = with_password(db.url).replace(":%d/" % parts.port, ":1/")
    wrong_db = re.sub(r"/[^/?]+(\?|$)", r"/lq_no_such_db\1", with_password(db.url), count=1)
    working = with_password(db.url, "lq" if db.dialect == "mysql" else MARK)
    url_file = tmp_path / "db.url"
    url_file.write_text(unreachable + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBQUEUE_URL")}
    runs = [["--url", unreachable, "stats"], ["--url", wrong_db, "init"],
            ["--url-file", str(url_file), "doctor"], ["--url", working, "init"],
            ["--url", working, "stats", "--json"], ["--url", working, "doctor"],
            ["--url", unreachable, "--help"]]
    shown = []
    for args in runs:
        proc = subprocess.run([sys.executable, "-m", "libqueue", "--table", "jobs"] + args,
                              cwd=tmp_path, env=env, text=True, capture_output=True, timeout=60)
        shown.append((args[-1], proc.returncode, proc.stdout + proc.stderr))
    assert [code for _, code, _ in shown[:3]] != [0, 0, 0], shown  # the failures failed
    assert [code for _, code, _ in shown[3:5]] == [0, 0], shown  # and the rest worked
    assert not [s for s in shown if MARK in s[2]], [s for s in shown if MARK in s[2]]
