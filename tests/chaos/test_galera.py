"""A multi-primary cluster: MariaDB Galera, three nodes of the test's own
(chaos_galera.py), a broker on each node draining one queue.

In the lease form a claim commits its lease before the handler runs, and the
cluster certifies that commit against the other nodes': of two claims of one
row, one commits and the other fails with error 1213 (LQ_CONTENTION), backs
off and claims again. Asserted: every published row ran exactly once (lost
0, duplicates 0), no row was retried, dead-lettered or failed to settle
because of a conflict, and the table ends empty; the conflicts met are
counted (the subscriptions' "contention" stat) and reported.

The forms and options that rest on locks, which Galera keeps on one node,
are refused at subscribe with LQ_MISUSE, each naming why: the row lock and
advisory forms, the queue-wide limits, FIFO groups.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Iterator

import pytest

import libqueue

from chaos_galera import GaleraCluster
from chaos_util import pick, report
from helpers import make_table

#: A few minutes at most, the cluster's start included.
pytestmark = pytest.mark.watchdog(300)


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    c = GaleraCluster(3)
    yield c
    c.close()


def _count(broker: libqueue.Broker, table: libqueue.Table) -> int:
    """Rows left in the queue: due, delayed or in work."""
    s = broker.stats(table)
    return s.due + s.delayed + (s.in_work or 0)


def test_drain_on_every_node_runs_each_row_once(cluster: GaleraCluster) -> None:
    rows = pick(900, 9000)
    table = make_table("lease", "galera_jobs")
    runs: collections.Counter = collections.Counter()
    by_node: collections.Counter = collections.Counter()
    lock = threading.Lock()
    brokers = [libqueue.Broker(url) for url in cluster.urls]
    try:
        brokers[0].create_table(table)
        # Every node works before the rows come, and each run takes a few
        # ms, so the drain outlasts many polls of every node: no node finds
        # the queue drained by the others before its first claim.
        subs = []
        for node, broker in enumerate(brokers):
            sub = broker.subscribe(table, workers=4, lease_ms=30000, poll_interval_ms=20)

            def handle(delivery: libqueue.Delivery, node: int = node) -> None:
                with lock:
                    runs[delivery.id] += 1
                    by_node[node] += 1
                time.sleep(0.005)

            sub.run(handle)
            subs.append(sub)
        # Published on every node: each node's inserts take ids of its own
        # (auto_increment_offset), and all of them replicate.
        published = set()
        for i, broker in enumerate(brokers):
            share = range(i * rows // 3, (i + 1) * rows // 3)
            published.update(broker.publish_many(table, [b"job-%d" % n for n in share]))
        assert len(published) == rows
        end = time.monotonic() + 120
        while time.monotonic() < end:
            with lock:
                if len(runs) == rows:
                    break
            time.sleep(0.05)
        # The last acks commit behind the handlers.
        while _count(brokers[0], table) and time.monotonic() < end:
            time.sleep(0.05)
        for sub in subs:
            sub.stop()
        stat = {name: sum(sub.stat(name) for sub in subs)
                for name in ("delivered", "acked", "retried", "dead_lettered", "contention",
                             "settle_errors", "lease_lost")}
        for sub in subs:
            sub.close()
        left = _count(brokers[0], table)
    finally:
        for broker in brokers:
            broker.close()

    lost = sorted(published - set(runs))
    twice = sorted(i for i, n in runs.items() if n > 1)
    report("galera_drain", rows=rows, lost=len(lost), duplicates=len(twice), left=left,
           rows_by_node=[by_node[n] for n in range(3)], **stat)
    assert not lost, "rows never run: %s" % lost[:20]
    # A lease commits before its handler runs: a row claimed on two nodes
    # is run only by the node whose commit was certified.
    assert not twice, "rows run twice: %s" % twice[:20]
    assert left == 0, "rows left in the table"
    assert stat["acked"] == rows
    # A conflict is contention, backed off and claimed again: it never
    # fails a row.
    assert stat["retried"] == stat["dead_lettered"] == 0
    assert stat["settle_errors"] == stat["lease_lost"] == 0
    assert all(by_node[n] > 0 for n in range(3)), "a node ran no row: %s" % by_node


REFUSED = [
    ("row_lock", {}, {}, "row lock form"),
    ("advisory", {}, {}, "advisory form: GET_LOCK is local"),
    ("lease", {}, {"concurrency": 2}, "concurrency, rate_limit"),
    ("lease", {}, {"rate_limit": 10}, "concurrency, rate_limit"),
    ("lease", {"partition_key": "pkey"}, {"partition_concurrency": 1},
     "partition_concurrency"),
    ("lease", {"group": "grp", "fifo": True}, {"group": "a"}, "FIFO groups"),
]


@pytest.mark.parametrize("form,roles,options,says", REFUSED,
                         ids=["row_lock", "advisory", "concurrency", "rate_limit",
                              "partition_concurrency", "fifo"])
def test_lock_based_claims_are_refused(cluster: GaleraCluster, form: str, roles: Any,
                                       options: Any, says: str, request: Any) -> None:
    table = make_table(form, "galera_refused_%s" % request.node.callspec.id, **roles)
    with libqueue.Broker(cluster.urls[1]) as broker:
        broker.create_table(table)
        with pytest.raises(libqueue.Error) as caught:
            broker.subscribe(table, workers=2, **options).close()
    assert caught.value.status_name == "LQ_MISUSE", caught.value
    message = str(caught.value)
    assert "Galera cluster" in message and says in message, message
    # And what to use instead.
    assert "use " in message, message
