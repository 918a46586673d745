"""A subscription's metrics (lq_subscription_metrics, Subscription.metrics,
libqueue.prometheus): settlements counted once each by outcome, claims and
waits in histograms, the wait measured from when a row was due (retry_after,
or the created_at column publish writes), and a snapshot that runs no
statement (counted on the wire); the exporter's text as Prometheus scrapes it."""

from __future__ import annotations

import datetime
import gc
import time
import weakref
from typing import Any, Dict

import pytest

import libqueue
from helpers import make_table
from relay import Relay

prometheus_client = pytest.importorskip("prometheus_client")
import libqueue.prometheus  # noqa: E402  (needs prometheus_client)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def _time_literal(db: Any, seconds_ago: float) -> str:
    """A time `seconds_ago` before now, as a SQL literal of db's time columns."""
    t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds_ago)
    if db.dialect == "mysql":
        return "'%s'" % t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return "'%s+00:00'" % t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def test_settlements_are_counted_once_each_by_outcome(db: Any, broker: libqueue.Broker,
                                                      form: str) -> None:
    table = make_table(form, retry_after="retry_after", dead_letter="jobs_dead")
    broker.create_table(table)
    broker.publish_many(table, [b"a", b"b", b"c", b"d"])
    with broker.subscribe(table, workers=4, max_attempts=2, poll_interval_ms=50) as sub:
        got = {}
        for _ in range(4):
            d = sub.next(timeout=10)
            got[bytes(d.payload)] = d
        got[b"a"].ack()
        got[b"b"].retry()                 # attempt 1 of 2: back to the queue
        got[b"c"].dead_letter()
        if form == "lease":               # another holder's lease now: the ack is refused
            db.execute("UPDATE jobs SET locked_until = %s WHERE id = %d"
                       % (_time_literal(db, -3600), got[b"d"].id))
            with pytest.raises(libqueue.LeaseLost):
                got[b"d"].ack()
        else:
            got[b"d"].ack()
        again = sub.next(timeout=10)
        assert bytes(again.payload) == b"b" and again.attempt == 2
        again.retry()                     # the last attempt: to the dead letters
        sub.stop()                        # no claim runs while the figures are compared
        m = sub.metrics()
    lost = 1 if form == "lease" else 0
    assert (m["acked"], m["retried"], m["dead_lettered"], m["lease_lost"], m["settle_errors"]) \
        == (2 - lost, 1, 2, lost, 0)
    assert m["claimed"] == m["delivered"] == 5 and m["settled"] == 5
    assert m["in_work"] == 0 and m["claims"] >= 2
    assert m.claim.count == m["claims"] and m.claim.sum > 0
    assert m.wait.count == 5  # retry_after: each row's wait since it was due


def test_the_wait_counts_from_when_the_row_was_due(db: Any, broker: libqueue.Broker) -> None:
    table = make_table("lease", retry_after="retry_after", created_at="created_at")
    broker.create_table(table)
    before = time.time()
    (first,) = broker.publish_many(table, [b"late"])
    created = db.scalar("SELECT created_at FROM jobs WHERE id = %d" % first)
    assert created is not None  # written by the publish
    # Published 100 s ago and due 7 s ago (a retry's time): it waited 7 s.
    db.execute("UPDATE jobs SET created_at = %s, retry_after = %s"
               % (_time_literal(db, 100), _time_literal(db, 7)))
    with broker.subscribe(table, workers=1) as sub:
        sub.next(timeout=10).ack()
        wait = sub.metrics().wait
    assert wait.count == 1 and 6 <= wait.sum <= 7 + (time.time() - before) + 1
    bucket = next(i for i, n in enumerate(wait.counts) if n)
    assert libqueue.metrics.BOUNDS[bucket] == 10.0

    # created_at alone: due from its publish.
    alone = make_table("lease", name="alone", created_at="created_at")
    broker.create_table(alone)
    broker.publish_many(alone, [b"x"])
    db.execute("UPDATE alone SET created_at = %s" % _time_literal(db, 30))
    with broker.subscribe(alone, workers=1) as sub:
        sub.next(timeout=10).ack()
        wait = sub.metrics().wait
    assert wait.count == 1 and 29 <= wait.sum <= 32 + (time.time() - before)

    # Neither column: no wait to measure; the claims are still timed.
    bare = make_table("lease", name="bare")
    broker.create_table(bare)
    broker.publish_many(bare, [b"y"])
    with broker.subscribe(bare, workers=1) as sub:
        sub.next(timeout=10).ack()
        m = sub.metrics()
    assert m.wait.count == 0 and m.claim.count >= 1 and m["acked"] == 1


class CountingRelay(Relay):
    """A relay that counts the bytes it forwards, both ways."""

    def __init__(self, host: str, port: int) -> None:
        self.forwarded = 0
        super().__init__(host, port)

    def _pipe(self, source: Any, sink: Any, link: Any = None) -> None:  # type: ignore[override]
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self.forwarded += len(data)
                sink.sendall(data)
        except OSError:
            pass


@pytest.mark.dialect("postgresql", "mysql")
def test_a_snapshot_runs_no_statement(db: Any) -> None:
    host, port = "127.0.0.1", int(db.url.split("@127.0.0.1:")[1].split("/")[0])
    relay = CountingRelay(host, port)
    table = make_table("lease")
    try:
        with libqueue.Broker(relay.url(db.url)) as broker:
            broker.create_table(table)
            broker.publish_many(table, [b"a"])
            with broker.subscribe(table, workers=1) as sub:  # pull: claims from next()
                time.sleep(0.3)
                before = relay.forwarded
                for _ in range(500):
                    sub.metrics()
                    sub.stat("pool_idle")
                time.sleep(0.3)
                assert relay.forwarded == before, "a snapshot reached the server"
                assert sub.next(timeout=10) is not None  # and the link is live
                assert relay.forwarded > before
    finally:
        relay.close()


def _samples(text: str) -> Dict[Any, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_exporter_writes_prometheus_text(db: Any, broker: libqueue.Broker) -> None:
    table = make_table("lease", retry_after="retry_after")
    broker.create_table(table)
    broker.publish_many(table, [b"1", b"2", b"3"])
    registry = prometheus_client.CollectorRegistry()
    with broker.subscribe(table, workers=1) as sub:
        libqueue.prometheus.register(sub, registry=registry)
        sub.next(timeout=10).ack()
        sub.next(timeout=10).ack()
        sub.next(timeout=10).retry()
        sub.stop()  # the retried row is not claimed again between the two reads
        m = sub.metrics()
        got = _samples(prometheus_client.generate_latest(registry).decode())
        q = (("group", ""), ("queue", "jobs"))

        def value(name: str, **labels: str) -> float:
            return got[(name, tuple(sorted(q + tuple(labels.items()))))]

        assert value("libqueue_jobs_total", outcome="acked") == 2
        assert value("libqueue_jobs_total", outcome="retried") == 1
        assert value("libqueue_jobs_total", outcome="dead_lettered") == 0
        assert value("libqueue_claims_total") == m["claims"]
        assert value("libqueue_claimed_rows_total") == m["claimed"]
        assert value("libqueue_pool_connections", state="idle") == m["pool_idle"]
        assert value("libqueue_job_wait_seconds_count") == m.wait.count == m["claimed"]
        buckets = [v for (name, labels), v in sorted(got.items(), key=lambda kv: kv[0])
                   if name == "libqueue_job_wait_seconds_bucket"]
        assert len(buckets) == len(libqueue.metrics.BOUNDS) and max(buckets) == m.wait.count
        assert value("libqueue_job_wait_seconds_bucket", le="+Inf") == m.wait.count
        assert value("libqueue_claim_duration_seconds_sum") == pytest.approx(m.claim.sum)
    # A closed subscription leaves the next scrape.
    text = prometheus_client.generate_latest(registry).decode()
    assert 'queue="jobs"' not in text


def test_the_exporter_keeps_no_subscription_alive(broker: libqueue.Broker) -> None:
    table = make_table("lease")
    broker.create_table(table)
    registry = prometheus_client.CollectorRegistry()
    sub = broker.subscribe(table)
    collector = libqueue.prometheus.register(sub, registry=registry)
    held = weakref.ref(sub)
    sub.close()
    del sub
    gc.collect()
    assert held() is None  # never scraped, and still let go
    assert 'queue="jobs"' not in prometheus_client.generate_latest(registry).decode()
    registry.unregister(collector)


def test_a_snapshot_answers_in(broker: libqueue.Broker) -> None:
    table = make_table("lease")
    broker.create_table(table)
    with broker.subscribe(table) as sub:
        m = sub.metrics()
        assert "acked" in m and m["acked"] == 0
        assert "no_such_stat" not in m and 0 not in m


def test_metrics_of_a_closed_subscription_are_refused(broker: libqueue.Broker) -> None:
    table = make_table("lease")
    broker.create_table(table)
    sub = broker.subscribe(table)
    assert sub.metrics()["claims"] == 0
    sub.close()
    with pytest.raises(libqueue.Closed):
        sub.metrics()
