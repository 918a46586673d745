"""PostgreSQL through PgBouncer in transaction pooling (scripts/lib/servers.sh
starts it with 2 server connections per database, fewer than the clients
here): the lease and row lock forms drain through it, flow limits hold, the
advisory form and LISTEN on the pooled URL are refused with what to use
instead, and listen_url takes wake-ups past the pooler. The outcome suite
(test_outcomes.py) runs through it too."""

from __future__ import annotations

import os
import threading
import urllib.parse

import pytest

import libqueue

from helpers import POLL_MS, PgBouncerDB, make_table, publish_elsewhere, wait_until

pytestmark = pytest.mark.skipif(not os.environ.get("LQ_TEST_PGBOUNCER_URL"),
                                reason="LQ_TEST_PGBOUNCER_URL names no PgBouncer")


@pytest.fixture
def pooled() -> PgBouncerDB:
    db = PgBouncerDB(os.environ["LQ_TEST_PG_URL"], os.environ["LQ_TEST_PGBOUNCER_URL"])
    yield db
    db.close()


def without_pooler_parameter(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [p for p in urllib.parse.parse_qsl(parts.query) if p[0] != "pgbouncer"]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def drain(broker: libqueue.Broker, table: libqueue.Table, rows: int, **options) -> list:
    """Publishes `rows` rows and runs them with 8 workers; returns the
    payloads the handler saw, in order."""
    broker.publish_many(table, [b"%d" % i for i in range(rows)])
    seen, lock = [], threading.Lock()

    def handle(d: libqueue.Delivery) -> None:
        with lock:
            seen.append(d.payload)

    with broker.subscribe(table, workers=8, poll_interval_ms=POLL_MS, **options) as sub:
        sub.run(handle)
        wait_until(lambda: sub.stat("settled") >= rows, timeout=60, what="the drain")
    return seen


@pytest.mark.parametrize("form", ["row_lock", "lease"])
def test_a_drain_through_the_pooler(pooled, form) -> None:
    """8 workers and the broker's other connections over 2 server sessions:
    statements of ours prepared on one session would be missing on the
    other, and the drain would fail."""
    table = make_table(form)
    pooled.create_table(table)
    with libqueue.Broker(pooled.url, pool_size=10) as broker:
        seen = drain(broker, table, 300)
    assert sorted(seen) == sorted(b"%d" % i for i in range(300))
    assert pooled.count("jobs") == 0
    # No session of the pool kept a setting or a prepared statement of ours.
    with libqueue.Broker(pooled.url) as broker:
        pass
    direct = pooled.connect()
    try:
        with direct.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND application_name = 'libqueue'")
            assert cur.fetchone()[0] <= 2, "more server sessions than PgBouncer's pool"
    finally:
        direct.close()


def test_the_pooled_sessions_keep_no_setting_of_ours(pooled) -> None:
    """The statement timeout is not set on the session: it would stay on
    a server connection other clients share."""
    table = make_table("lease")
    pooled.create_table(table)
    with libqueue.Broker(pooled.url, statement_timeout_ms=1234) as broker:
        drain(broker, table, 20)
    import psycopg2
    through = psycopg2.connect(without_pooler_parameter(pooled.url))
    try:
        through.autocommit = True
        with through.cursor() as cur:
            for _ in range(4):  # whichever of the 2 server sessions it gets
                cur.execute("SHOW statement_timeout")
                assert cur.fetchone()[0] == "0"
                cur.execute("SELECT count(*) FROM pg_prepared_statements")
                assert cur.fetchone()[0] == 0
    finally:
        through.close()


@pytest.mark.parametrize("form", ["row_lock", "lease"])
def test_a_queue_wide_limit_holds_through_the_pooler(pooled, form) -> None:
    """concurrency's locks live in a transaction, which the pooler keeps on
    one server session: two at most in work, across two brokers."""
    table = make_table(form)
    pooled.create_table(table)
    running, most, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def handle(d: libqueue.Delivery) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(0.05)
        with lock:
            running[0] -= 1

    with libqueue.Broker(pooled.url) as a, libqueue.Broker(pooled.url) as b:
        a.publish_many(table, [b"%d" % i for i in range(40)])
        with a.subscribe(table, workers=4, concurrency=2, poll_interval_ms=POLL_MS) as sa, \
                b.subscribe(table, workers=4, concurrency=2, poll_interval_ms=POLL_MS) as sb:
            sa.run(handle)
            sb.run(handle)
            wait_until(lambda: pooled.count("jobs") == 0, timeout=60, what="the drain")
    assert 1 <= most[0] <= 2


def test_the_advisory_form_is_refused(pooled) -> None:
    table = make_table("advisory")
    pooled.create_table(table)
    with libqueue.Broker(pooled.url) as broker:
        row = broker.publish(table, b"x")  # a publish is an insert: it goes through
        with pytest.raises(libqueue.Misuse, match="pooler in transaction mode.*lease or row lock"):
            broker.subscribe(table)
        with pytest.raises(libqueue.Misuse, match="advisory form holds each row's lock"):
            broker.cancel(table, row)
    assert pooled.count("jobs") == 1


def test_listen_notify_on_the_pooled_url_is_refused(pooled) -> None:
    with pytest.raises(libqueue.Misuse, match="give listen_url"):
        libqueue.Broker(pooled.url, listen_notify=1)


def test_listen_url_takes_wake_ups_past_the_pooler(pooled) -> None:
    """Claims go through the pooler; the LISTEN connection to the server
    itself wakes an idle subscription long before its 60 s poll."""
    table = make_table("lease")
    pooled.create_table(table)
    with libqueue.Broker(pooled.url, listen_notify=1, listen_url=pooled.server_url) as broker:
        with broker.subscribe(table, poll_interval_ms=60000) as sub:
            assert sub.next(1.0) is None  # idle: its first claim found nothing
            publish_elsewhere(pooled.url, b"wake", listen_notify=1, listen_url=pooled.server_url)
            delivery = sub.next(20)
            assert delivery is not None and delivery.payload == b"wake"
            delivery.ack()


def test_the_broker_option_does_what_the_url_parameter_does(pooled) -> None:
    table = make_table("lease")
    pooled.create_table(table)
    url = without_pooler_parameter(pooled.url)
    with libqueue.Broker(url, pgbouncer="transaction") as broker:
        assert len(drain(broker, table, 50)) == 50
        with pytest.raises(libqueue.Misuse, match="pooler in transaction mode"):
            broker.subscribe(make_table("advisory"))


@pytest.mark.parametrize("how", ["url", "option"])
def test_a_mode_other_than_transaction_is_refused(pooled, how) -> None:
    url = without_pooler_parameter(pooled.url)
    with pytest.raises(libqueue.Misuse, match="libqueue knows .*transaction"):
        if how == "url":
            libqueue.Broker(url + "&pgbouncer=session")
        else:
            libqueue.Broker(url, pgbouncer="session")


def test_the_option_is_refused_where_no_pooler_applies(tmp_path) -> None:
    with pytest.raises(libqueue.Misuse, match="sqlite takes no pooler option"):
        libqueue.Broker("sqlite:%s" % (tmp_path / "q.db"), pgbouncer="transaction")


def test_listen_url_needs_listen_notify(pooled) -> None:
    with pytest.raises(libqueue.Misuse, match="listen_url is the connection of listen_notify"):
        libqueue.Broker(pooled.url, listen_url=pooled.server_url)


def test_listen_url_must_reach_the_server_itself(pooled) -> None:
    with pytest.raises(libqueue.Misuse, match="must reach the server itself"):
        libqueue.Broker(pooled.url, listen_notify=1, listen_url=pooled.url)


@pytest.mark.parametrize("where", ["alone", "first", "middle", "last", "after a password with ?"])
def test_the_url_parameter_leaves_the_url_whole(pooled, where) -> None:
    """libpq refuses a parameter it does not know: libqueue takes
    pgbouncer=transaction out wherever it stands, and the rest still reads
    (the pooler trusts loopback here, so a password is not checked)."""
    base = without_pooler_parameter(pooled.url).split("?")[0]
    if where.startswith("after"):
        base = base.replace("postgres@", "postgres:pa?ss@")
        where = "alone"
    query = {
        "alone": "pgbouncer=transaction",
        "first": "pgbouncer=transaction&sslmode=disable&connect_timeout=5",
        "middle": "sslmode=disable&pgbouncer=transaction&connect_timeout=5",
        "last": "sslmode=disable&connect_timeout=5&pgbouncer=transaction",
    }[where]
    table = make_table("lease")
    pooled.create_table(table)
    with libqueue.Broker(base + "?" + query) as broker:
        broker.publish(table, b"x")
        with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
            with sub.next(10) as d:
                d.ack()
        with pytest.raises(libqueue.Misuse, match="pooler in transaction mode"):
            broker.subscribe(make_table("advisory"))
