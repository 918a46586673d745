"""``Metrics``: a snapshot of a subscription's counters, gauges and
histograms, read by ``Subscription.metrics`` from the core's memory. Taking
one runs no statement, so an exporter may poll it as often as it scrapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

from libqueue._ffi import ffi, lib
from libqueue.enums import Stat
from libqueue.errors import check

__all__ = ["Histogram", "Metrics", "BOUNDS"]

#: Upper bounds of the histograms' buckets in seconds; the last is infinite.
BOUNDS: Tuple[float, ...] = tuple(lib.lq_histogram_bound(i) for i in range(lib.LQ_HISTOGRAM_BUCKETS))


@dataclass(frozen=True)
class Histogram:
    """Observations in seconds. ``counts[i]`` is how many fell in bucket
    ``i`` (at or below ``BOUNDS[i]``, above the bound before): per bucket,
    not cumulative."""

    counts: Tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> Tuple[Tuple[float, int], ...]:
        """``(bound, observations at or below it)`` for every bucket, as
        Prometheus writes them."""
        out, total = [], 0
        for bound, n in zip(BOUNDS, self.counts):
            total += n
            out.append((bound, total))
        return tuple(out)


@dataclass(frozen=True)
class Metrics:
    """What a subscription has done and holds, at one moment.

    Attributes:
        stats: every ``Stat`` by its lower-case name: counters (``claims``,
            ``empty_claims``, ``claimed``, ``delivered``, ``acked``,
            ``retried``, ``dead_lettered``, ``lease_lost``,
            ``settle_errors``, ...) and gauges (``in_work``, ``waiting``,
            ``pool_in_use``, ``pool_idle``, ``poll_interval_ms``, ``paused``).
        claim: how long each claim took.
        wait: how long each row claimed had waited since it was due to start
            (its ``retry_after``, or its ``created_at``); empty for a table
            with neither column.
    """

    stats: Dict[str, int]
    claim: Histogram
    wait: Histogram

    def __getitem__(self, name: str) -> int:
        return self.stats[name]

    def __contains__(self, name: object) -> bool:
        return name in self.stats

    def as_dict(self) -> Dict[str, Any]:
        """Plain JSON-ready values; bounds as strings (the last "+Inf")."""
        def hist(h: Histogram) -> Dict[str, Any]:
            return {"buckets": {_bound_text(b): n for b, n in zip(BOUNDS, h.counts)},
                    "count": h.count, "sum": h.sum}
        return {"stats": dict(self.stats), "claim": hist(self.claim), "wait": hist(self.wait)}


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def take(pointer: Any) -> Metrics:
    """The snapshot of the subscription at ``pointer`` (its C handle)."""
    out = ffi.new("lq_metrics **")
    check(lib.lq_subscription_metrics(out, pointer), "metrics")
    m = out[0]
    try:
        stats = {s.name.lower(): int(lib.lq_metrics_stat(m, int(s))) for s in Stat}

        def hist(which: int) -> Histogram:
            counts = tuple(int(lib.lq_metrics_count(m, which, i)) for i in range(len(BOUNDS)))
            return Histogram(counts, float(lib.lq_metrics_sum(m, which)))

        return Metrics(stats, hist(lib.LQ_HISTOGRAM_CLAIM), hist(lib.LQ_HISTOGRAM_WAIT))
    finally:
        lib.lq_metrics_free(m)
