"""``QueueStats``: a snapshot of one queue, read by ``Broker.stats``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Optional

__all__ = ["QueueStats", "DEFAULT_CAP", "ATTEMPT_BUCKETS"]

#: Where each count stops: a count that reaches it means "this many or
#: more" (``QueueStats.capped``).
DEFAULT_CAP = 100_000
#: Attempt counts kept apart; the last bucket holds that many or more.
ATTEMPT_BUCKETS = 10


@dataclass(frozen=True)
class QueueStats:
    """How a queue stands now. ``None`` where the table cannot tell: rows in
    work in the row lock and advisory forms (only their runs' locks know),
    dead letters without a destination, the head's age without a due row or
    a ``retry_after`` column, attempts without an ``attempt`` column.

    Attributes:
        table: the table's name (and ``group``, where it has groups).
        due: rows due now and free to claim (in the row lock and advisory
            forms, rows in work too).
        delayed: rows due later (``retry_after``).
        in_work: rows leased now (lease form).
        dead_letters: rows in the dead-letter table or group.
        head_age_s: how long the next row in claim order has been due, in
            seconds.
        attempts: ``{attempt: rows}`` over the first ``cap`` rows in claim
            order; the key ``ATTEMPT_BUCKETS - 1`` counts that many or more.
        cap: the most rows any count read; ``capped`` when one reached it.
        paused: whether the queue's claims are paused (``Broker.pause``).
    """

    table: str
    group: Optional[str]
    due: int
    delayed: int
    in_work: Optional[int]
    dead_letters: Optional[int]
    head_age_s: Optional[float]
    attempts: Optional[Dict[int, int]] = field(default=None)
    cap: int = DEFAULT_CAP
    paused: bool = False

    @property
    def capped(self) -> bool:
        counts = [self.due, self.delayed, self.in_work or 0, self.dead_letters or 0]
        return any(c >= self.cap for c in counts)

    def as_dict(self) -> Dict[str, Any]:
        """The snapshot as plain JSON-ready values (attempt keys as strings)."""
        out = asdict(self)
        if self.attempts is not None:
            out["attempts"] = {str(k): v for k, v in self.attempts.items()}
        out["capped"] = self.capped
        return out
