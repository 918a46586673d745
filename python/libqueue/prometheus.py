"""An exporter of subscriptions' metrics to ``prometheus_client`` (Debian's
``python3-prometheus-client``; the rest of the package does not need it).

    from prometheus_client import start_http_server
    import libqueue.prometheus
    libqueue.prometheus.register(sub)          # in the default registry
    start_http_server(9100)

Each scrape takes ``Subscription.metrics()`` of every subscription
registered: memory only, no statement. Every family carries the labels
``queue`` (the table's name) and ``group`` ("" without one):

- ``libqueue_jobs_total{outcome}``: settlements by outcome, ``acked``,
  ``retried``, ``dead_lettered``, ``lease_lost``, ``error``, and
  ``expired_unstarted`` (rows past their expiry, never started);
- ``libqueue_claims_total``, ``libqueue_empty_claims_total``,
  ``libqueue_claimed_rows_total``, ``libqueue_contention_total``,
  ``libqueue_lease_extensions_total``, ``libqueue_timeouts_total``;
- gauges ``libqueue_jobs_in_work``, ``libqueue_jobs_waiting``,
  ``libqueue_pool_connections{state="in_use"|"idle"}``,
  ``libqueue_poll_interval_seconds``, ``libqueue_paused``;
- histograms ``libqueue_claim_duration_seconds`` and
  ``libqueue_job_wait_seconds`` (due to claimed).

A subscription closed since is left out of the next scrape. The collector
holds its subscriptions weakly: it keeps none alive.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Iterator, List, Optional, Tuple

try:
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)
    from prometheus_client.registry import REGISTRY
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError("libqueue.prometheus needs prometheus_client "
                      "(Debian: apt-get install python3-prometheus-client)") from e

from libqueue.metrics import Metrics
from libqueue.subscription import Subscription

__all__ = ["Collector", "register"]

_LABELS = ["queue", "group"]

#: outcome label -> stat
_OUTCOMES = (("acked", "acked"), ("retried", "retried"), ("dead_lettered", "dead_lettered"),
             ("lease_lost", "lease_lost"), ("error", "settle_errors"),
             ("expired_unstarted", "expired_unstarted"))

#: (name without _total, stat, help)
_COUNTERS = (
    ("libqueue_claims", "claims", "Claim statements run."),
    ("libqueue_empty_claims", "empty_claims", "Claims that took no row."),
    ("libqueue_claimed_rows", "claimed", "Rows claimed."),
    ("libqueue_contention", "contention", "Claims that met a conflict the database reported."),
    ("libqueue_lease_extensions", "extensions", "Lease extensions written."),
    ("libqueue_timeouts", "expired", "Runs that passed timeout_ms."),
)

_GAUGES = (
    ("libqueue_jobs_in_work", "in_work", 1, "Deliveries handed out, not yet settled."),
    ("libqueue_jobs_waiting", "waiting", 1, "Rows claimed, waiting for a worker."),
    ("libqueue_poll_interval_seconds", "poll_interval_ms", 1000, "The poll interval now."),
    ("libqueue_paused", "paused", 1, "1 while the queue is paused."),
)


class Collector:
    """A ``prometheus_client`` collector of subscriptions' metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: List[Tuple["weakref.ref[Subscription]", Tuple[str, str]]] = []

    def add(self, sub: Subscription, queue: Optional[str] = None) -> None:
        """Exports ``sub``, labelled with ``queue`` (default: its table's
        name) and its group."""
        labels = (queue if queue is not None else sub.table.name, sub.group or "")
        with self._lock:
            self._subs.append((weakref.ref(sub), labels))

    def remove(self, sub: Subscription) -> None:
        with self._lock:
            self._subs = [(s, l) for s, l in self._subs if s() is not sub]

    def _snapshots(self) -> List[Tuple[Tuple[str, str], Metrics]]:
        with self._lock:
            kept, live = [], []
            for ref, labels in self._subs:
                sub = ref()
                if sub is not None and not sub.closed:
                    kept.append((ref, labels))
                    live.append((sub, labels))
            self._subs = kept
        out = []
        for sub, labels in live:
            try:
                out.append((labels, sub.metrics()))
            except Exception:  # closed between the check and the read
                continue
        return out

    def collect(self) -> Iterator[Any]:
        snaps = self._snapshots()
        jobs = CounterMetricFamily("libqueue_jobs", "Settlements, by outcome.",
                                   labels=_LABELS + ["outcome"])
        for labels, m in snaps:
            for outcome, stat in _OUTCOMES:
                jobs.add_metric(list(labels) + [outcome], m[stat])
        yield jobs
        for name, stat, help_text in _COUNTERS:
            family = CounterMetricFamily(name, help_text, labels=_LABELS)
            for labels, m in snaps:
                family.add_metric(list(labels), m[stat])
            yield family
        for name, stat, scale, help_text in _GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=_LABELS)
            for labels, m in snaps:
                family.add_metric(list(labels), m[stat] / scale)
            yield family
        pool = GaugeMetricFamily("libqueue_pool_connections",
                                 "The broker's connections, lent out or idle.",
                                 labels=_LABELS + ["state"])
        for labels, m in snaps:
            pool.add_metric(list(labels) + ["in_use"], m["pool_in_use"])
            pool.add_metric(list(labels) + ["idle"], m["pool_idle"])
        yield pool
        for name, which, help_text in (
                ("libqueue_claim_duration_seconds", "claim", "How long each claim took."),
                ("libqueue_job_wait_seconds", "wait", "How long each row waited from due to claimed.")):
            family = HistogramMetricFamily(name, help_text, labels=_LABELS)
            for labels, m in snaps:
                h = getattr(m, which)
                buckets = [("+Inf" if b == float("inf") else repr(b), n) for b, n in h.cumulative()]
                family.add_metric(list(labels), buckets, sum_value=h.sum)
            yield family


_default: Optional[Collector] = None
_default_lock = threading.Lock()


def register(sub: Subscription, queue: Optional[str] = None, registry: Any = None) -> Collector:
    """Exports ``sub`` through a collector registered once in ``registry``
    (default: prometheus_client's ``REGISTRY``); returns that collector."""
    global _default
    if registry is not None and registry is not REGISTRY:
        collector = Collector()
        registry.register(collector)
        collector.add(sub, queue)
        return collector
    with _default_lock:
        if _default is None:
            _default = Collector()
            REGISTRY.register(_default)
        _default.add(sub, queue)
        return _default
