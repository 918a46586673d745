"""An outage is not an empty queue: a pull that times out while the claims
cannot reach the database raises their failure, and health() tells it."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until
from relay import Relay


@pytest.fixture
def relay(db):
    parts = urlsplit(db.url)
    r = Relay(parts.hostname, parts.port)
    yield r
    r.close()


@pytest.mark.dialect("postgresql", "mysql")
def test_a_pull_during_an_outage_raises_and_health_says_why(db, relay) -> None:
    table = make_table("lease")
    db.create_table(table)
    with libqueue.Broker(relay.url(db.url), connect_timeout_ms=2000,
                         statement_timeout_ms=2000) as broker:
        with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
            assert sub.next(timeout=0.2) is None  # empty, and reachable
            assert sub.health() is None
            relay.cut()
            wait_until(lambda: sub.health() is not None, what="a failed claim")
            with pytest.raises(libqueue.Error, match="claims have failed for") as err:
                sub.next(timeout=1.0)
            assert err.value.status_name in ("LQ_CONNECT", "LQ_TIMEOUT", "LQ_BACKEND")
            assert sub.health().failing_for >= 1.0
            relay.restore()
            wait_until(lambda: sub.health() is None, timeout=30, what="claims to work again")
            assert sub.next(timeout=0.2) is None  # an empty queue again, not an error
            db.execute("INSERT INTO jobs (payload) VALUES (%s)" % (
                "'x'" if db.dialect == "mysql" else "'x'::bytea"))
            with sub.next(timeout=10) as delivery:
                delivery.ack()


def test_health_is_none_while_claims_work(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.next(timeout=0.1)
        assert sub.health() is None
