"""``Finding``: one result of ``Broker.doctor``, a queue table's health as
the database's own statistics tell it (``lq_doctor`` in libqueue.h lists
the checks and the limits they are judged against)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Sequence, Union

__all__ = ["Finding", "LEVELS", "findings_from_json", "has_problems", "format_findings"]

#: The levels of a finding, mildest first.
LEVELS = ("ok", "warning", "problem")


@dataclass(frozen=True)
class Finding:
    """What one check found.

    Attributes:
        check: the check's name ("dead_tuples", "oldest_xmin", "wal_size", ...).
        level: "ok", "warning" or "problem".
        value: what was measured (a number, or a text such as an index name).
        message: what was found, in words.
        advice: what to do ("nothing to do" when all is well).
    """

    check: str
    level: str
    value: Union[int, str]
    message: str
    advice: str

    @property
    def ok(self) -> bool:
        return self.level == "ok"

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def findings_from_json(text: str) -> List[Finding]:
    """The findings of ``lq_doctor``'s JSON."""
    return [Finding(f["check"], f["level"], f["value"], f["message"], f["advice"])
            for f in json.loads(text)["findings"]]


def has_problems(findings: Sequence[Finding]) -> bool:
    return any(f.level == "problem" for f in findings)


def format_findings(findings: Sequence[Finding]) -> str:
    """One line a finding, level and check aligned, and below each that is
    not ok its advice, under the message."""
    if not findings:
        return "no findings"
    widths = [max(len(f.level) for f in findings), max(len(f.check) for f in findings)]
    indent = " " * (widths[0] + widths[1] + 4)
    lines = []
    for f in findings:
        lines.append("%s  %s  %s" % (f.level.ljust(widths[0]), f.check.ljust(widths[1]), f.message))
        if not f.ok:
            lines.append("%sadvice: %s" % (indent, f.advice))
    return "\n".join(lines)
