"""The cron parser and next tick of the C core (libqueue/src/base/cron.c)
against croniter (Debian's python3-croniter), on a few thousand random
expressions and instants, a good share of them near changes of offset in
zones with DST (Europe/Berlin, America/New_York, Australia/Lord_Howe's half
hour, America/Santiago's midnight changes), and zones without (Asia/Tokyo,
Asia/Kolkata, UTC).

Where no change of offset lies within a day of the instant or of either
answer, the C core and croniter must agree exactly. Near a change the C core
keeps its own rules (base/cron.h: a missing fixed time ticks as the gap
ends, a repeated one once, a "*" or stepped hour at every real hour), which
croniter does not always follow: there it must agree with `rule_next` below,
a slow reading of those rules written from the zone data of Python's
zoneinfo, and how often croniter agrees too is only counted.

croniter is asked as it is meant to be: with a six-field expression's
second last, and with pytz's zones (zoneinfo's after 2037, where pytz's data
ends). Its known slips are counted apart, each by the reason found: near a
change of offset; after 2037 across one (zoneinfo's zones meet croniter's
DST correction twice); the 1st of a month it passes after a day-of-month the
month before lacks; no tick at all when a day-of-month that never comes is
or'ed with a day-of-week. Any other difference fails the test.

The C side is the test helper cron_oracle of the CMake build named by
LQ_BUILD_DIR.
"""

from __future__ import annotations

import bisect
import datetime as dt
import importlib
import os
import random
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple
from zoneinfo import ZoneInfo

import pytest

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago",
         "Asia/Tokyo", "Asia/Kolkata", "UTC"]
CASES = 4000
SEED = 20270328
# croniter's zones: pytz (what croniter was written for) up to 2037, where
# pytz's data ends (it reads no footer rule); zoneinfo's after.
PYTZ_UNTIL = dt.datetime(2037, 1, 1, tzinfo=dt.timezone.utc).timestamp()
NEAR = 26 * 3600


def _required(what: str) -> None:
    if os.environ.get("LQ_REQUIRE_SERVERS"):
        pytest.fail("LQ_REQUIRE_SERVERS is set but %s" % what)
    pytest.skip(what)


@pytest.fixture(scope="module")
def oracle() -> Path:
    build = os.environ.get("LQ_BUILD_DIR")
    if not build:
        _required("LQ_BUILD_DIR (the CMake build directory) is not set")
    path = Path(build) / "tests" / "cron_oracle"
    if not path.exists():
        _required("%s is not built" % path)
    return path


@pytest.fixture(scope="module")
def croniter_mod():
    try:
        import croniter
        importlib.import_module("pytz")  # croniter's own dependency, used below
    except ImportError:
        _required("croniter is not installed (Debian: apt-get install python3-croniter)")
    return croniter


# ---------------------------------------------------------------------------
# Random expressions, each with the sets of values it names.

FIELDS = [("second", 0, 59), ("minute", 0, 59), ("hour", 0, 23), ("day-of-month", 1, 31),
          ("month", 1, 12), ("day-of-week", 0, 7)]
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def _value(rng: random.Random, index: int, lo: int, hi: int) -> int:
    if index == 2 and rng.random() < 0.5:
        return rng.choice([0, 1, 2, 3, 23])  # the hours clocks change in
    return rng.randint(lo, hi)


def _text(rng: random.Random, index: int, v: int) -> str:
    if index == 4 and rng.random() < 0.3:
        return MONTHS[v - 1].upper() if rng.random() < 0.5 else MONTHS[v - 1]
    if index == 5 and v < 7 and rng.random() < 0.3:
        return DAYS[v].capitalize()
    return str(v)


def _item(rng: random.Random, index: int) -> Tuple[str, Set[int]]:
    _, lo, hi = FIELDS[index]
    kind = rng.random()
    if kind < 0.45:
        v = _value(rng, index, lo, hi)
        return _text(rng, index, v), {v}
    if kind < 0.65:
        a, b = sorted((_value(rng, index, lo, hi), _value(rng, index, lo, hi)))
        return "%s-%s" % (_text(rng, index, a), _text(rng, index, b)), set(range(a, b + 1))
    step = rng.randint(1, max(1, (hi - lo) // 2))
    if kind < 0.85:
        return "*/%d" % step, set(range(lo, hi + 1, step))
    a = _value(rng, index, lo, hi)
    if kind < 0.92:
        return "%d/%d" % (a, step), set(range(a, hi + 1, step))
    b = rng.randint(a, hi)
    return "%d-%d/%d" % (a, b, step), set(range(a, b + 1, step))


def _field(rng: random.Random, index: int, star: float) -> Tuple[str, Set[int], bool]:
    _, lo, hi = FIELDS[index]
    if rng.random() < star:
        return "*", set(range(lo, hi + 1)), True
    items = [_item(rng, index) for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 3))]
    values: Set[int] = set().union(*(v for _, v in items))
    stepped = any("*" in t or "/" in t for t, _ in items)
    return ",".join(t for t, _ in items), values, stepped


class Expr:
    def __init__(self, rng: random.Random) -> None:
        self.six = rng.random() < 0.3
        stars = [0.1, 0.3, 0.35, 0.75, 0.75, 0.75]
        parts = [_field(rng, i, stars[i]) for i in range(6)]
        if not self.six:
            parts[0] = ("0", {0}, False)
        self.fields = [p[0] for p in parts]
        self.sets = [p[1] for p in parts]
        self.hours_interval = parts[2][2] or len(parts[2][1]) == 24
        self.sets[5] = {0 if d == 7 else d for d in self.sets[5]}

    def text(self) -> str:
        return " ".join(self.fields if self.six else self.fields[1:])

    def croniter_text(self) -> str:
        # croniter takes the second last; and with six fields it reads a
        # day-of-week 7 as no day at all, so it gets the days as a list.
        fields = list(self.fields)
        if self.six and len(self.sets[5]) < 7:
            fields[5] = ",".join(str(d) for d in sorted(self.sets[5]))
        elif self.six:
            fields[5] = "*"
        return " ".join(fields[1:] + ([fields[0]] if self.six else []))

    def day_matches(self, day: dt.date) -> bool:
        mdays, wdays = self.sets[3], self.sets[5]
        mday, wday = day.day in mdays, day.isoweekday() % 7 in wdays
        if len(mdays) == 31 or len(wdays) == 7:
            return mday and wday
        return mday or wday

    def mdays_come(self) -> bool:
        longest = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        return any(d <= longest[m - 1] for m in self.sets[4] for d in self.sets[3])

    def fires(self) -> bool:
        return len(self.sets[3]) == 31 or len(self.sets[5]) < 7 or self.mdays_come()


# ---------------------------------------------------------------------------
# The zones' changes of offset, and the rules of base/cron.h read slowly.

def changes(zone: str) -> List[int]:
    """Every instant from 1970 to 2050 where `zone`'s offset changes."""
    tz = ZoneInfo(zone)

    def offset(u: int) -> Optional[dt.timedelta]:
        return dt.datetime.fromtimestamp(u, tz).utcoffset()

    found, u = [], 0
    end = int(dt.datetime(2050, 1, 1, tzinfo=dt.timezone.utc).timestamp())
    while u < end:
        nxt = u + 86400
        if offset(u) != offset(nxt):
            lo, hi = u, nxt  # offset(lo) != offset(hi): find the first second of hi's offset
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if offset(mid) == offset(lo):
                    lo = mid
                else:
                    hi = mid
            found.append(hi)
        u = nxt
    return found


def instants(tz: ZoneInfo, wall: dt.datetime) -> List[int]:
    """The instants whose wall time in `tz` is `wall`, earliest first."""
    found = set()
    for fold in (0, 1):
        u = int(wall.replace(tzinfo=tz, fold=fold).timestamp())
        if dt.datetime.fromtimestamp(u, tz).replace(tzinfo=None) == wall:
            found.add(u)
    return sorted(found)


def gap_end(tz: ZoneInfo, wall: dt.datetime) -> int:
    """The first instant after the gap that `wall` falls in."""
    lo = int(wall.replace(tzinfo=tz, fold=1).timestamp())  # before the change
    hi = int(wall.replace(tzinfo=tz, fold=0).timestamp())  # after it
    before = dt.datetime.fromtimestamp(lo, tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if dt.datetime.fromtimestamp(mid, tz).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


def walls(e: Expr, start: dt.datetime, stop: dt.datetime):
    """The wall times from `start` to `stop` the expression matches, in order."""
    day = start.date()
    while day <= stop.date():
        if day.month in e.sets[4] and e.day_matches(day):
            for h in sorted(e.sets[2]):
                for m in sorted(e.sets[1]):
                    for s in sorted(e.sets[0]):
                        w = dt.datetime(day.year, day.month, day.day, h, m, s)
                        if start <= w <= stop:
                            yield w
        day += dt.timedelta(days=1)


def rule_next(e: Expr, zone: str, after: int) -> int:
    """The first tick after `after` by the rules of base/cron.h, near a change
    (the wall times searched are those from three hours before `after`'s
    to three hours after the first tick found, more than any change here)."""
    tz = ZoneInfo(zone)
    margin = dt.timedelta(hours=3)
    start = dt.datetime.fromtimestamp(after, tz).replace(tzinfo=None) - margin
    best: Optional[int] = None
    best_wall = dt.datetime.max - margin
    stop = start + dt.timedelta(days=3)
    while best is None or stop < best_wall + margin:
        for w in walls(e, start, stop):
            if w > best_wall + margin:
                break
            got = instants(tz, w)
            if not got:
                ticks = [] if e.hours_interval else [gap_end(tz, w)]
            else:
                ticks = got if e.hours_interval else got[:1]
            for t in ticks:
                if t > after and (best is None or t < best):
                    best = t
                    best_wall = dt.datetime.fromtimestamp(t, tz).replace(tzinfo=None)
        start, stop = stop + dt.timedelta(seconds=1), stop + dt.timedelta(days=400)
    return best


# ---------------------------------------------------------------------------
# The cases.

def make_cases(rng: random.Random, zone_changes: Dict[str, List[int]]) -> List[Tuple[Expr, str, int]]:
    lo = int(dt.datetime(1975, 1, 1, tzinfo=dt.timezone.utc).timestamp())
    hi = int(dt.datetime(2045, 1, 1, tzinfo=dt.timezone.utc).timestamp())
    cases = []
    for _ in range(CASES):
        zone = rng.choice(ZONES)
        near = [c for c in zone_changes[zone] if lo < c < hi]
        if near and rng.random() < 0.6:
            spread = rng.choice([5, 3600, 4 * 3600, 2 * 86400])
            after = rng.choice(near) + rng.randint(-spread, spread)
        else:
            after = rng.randint(lo, hi)
        e = Expr(rng)
        while not e.fires():
            e = Expr(rng)
        cases.append((e, zone, after))
    cases.sort(key=lambda c: c[1])  # the helper keeps one zone loaded at a time
    return cases


def run_oracle(oracle: Path, cases: Sequence[Tuple[Expr, str, int]]) -> List[str]:
    text = "".join("%s\t%s\t%d\n" % (e.text(), zone, after) for e, zone, after in cases)
    done = subprocess.run([str(oracle)], input=text, capture_output=True, text=True, timeout=300,
                          check=True)
    lines = done.stdout.splitlines()
    assert len(lines) == len(cases), done.stderr
    return lines


def croniter_next(croniter_mod, e: Expr, zone: str, after: int) -> Optional[int]:
    import pytz
    tz = pytz.timezone(zone) if after < PYTZ_UNTIL else ZoneInfo(zone)
    start = dt.datetime.fromtimestamp(after, tz)
    try:
        return int(croniter_mod.croniter(e.croniter_text(), start).get_next(float))
    except croniter_mod.CroniterBadDateError:
        return None


def is_near(zone_changes: List[int], *instants_: Optional[int]) -> bool:
    for u in instants_:
        if u is None:
            continue
        i = bisect.bisect_left(zone_changes, u - NEAR)
        if i < len(zone_changes) and zone_changes[i] <= u + NEAR:
            return True
    return False


def explain(e: Expr, zone: str, after: int, ours: int, theirs: Optional[int],
            zone_changes: List[int]) -> Optional[str]:
    """Why croniter may answer otherwise than the rules, or None."""
    if is_near(zone_changes, after, ours, theirs):
        return "near a change of offset"
    tz = ZoneInfo(zone)

    def offset(u: int) -> Optional[dt.timedelta]:
        return dt.datetime.fromtimestamp(u, tz).utcoffset()

    if after >= PYTZ_UNTIL and offset(after) != offset(ours):
        return "after 2037, across a change of offset"
    if theirs is None and not e.mdays_come():
        return "a day-of-month that never comes, or'ed with a day-of-week"
    tick = dt.datetime.fromtimestamp(ours, tz)
    before = (tick.replace(day=1) - dt.timedelta(days=1)).day
    if theirs is None or theirs > ours:
        if tick.day <= 3 and any(d > before for d in e.sets[3]) and len(e.sets[3]) < 31:
            return "a day-of-month beyond the month before's end"
    return None


def test_cron_against_croniter(oracle: Path, croniter_mod) -> None:
    rng = random.Random(SEED)
    zone_changes = {zone: changes(zone) for zone in ZONES}
    cases = make_cases(rng, zone_changes)
    answers = run_oracle(oracle, cases)
    agreed = near = 0
    explained: Dict[str, int] = {}
    wrong: List[str] = []
    for (e, zone, after), answer in zip(cases, answers):
        where = "%s in %s after %d" % (e.text(), zone, after)
        if answer.startswith("error"):
            wrong.append("%s: %s" % (where, answer))
            continue
        ours = int(answer)
        want = rule_next(e, zone, after)
        if ours != want:
            wrong.append("%s: %d, the rules give %d" % (where, ours, want))
            continue
        theirs = croniter_next(croniter_mod, e, zone, after)
        near += is_near(zone_changes[zone], after, ours, theirs)
        if ours == theirs:
            agreed += 1
            continue
        why = explain(e, zone, after, ours, theirs, zone_changes[zone])
        if why is None:
            wrong.append("%s: %d, croniter %s" % (where, ours, theirs))
        else:
            explained[why] = explained.get(why, 0) + 1
    print("cron oracle: %d cases (%d near a change of offset), all by the rules; croniter agrees "
          "on %d, differs on %s" % (len(cases), near, agreed,
                                    ", ".join("%d %s" % (n, why) for why, n in sorted(explained.items()))))
    assert not wrong, "%d wrong:\n%s" % (len(wrong), "\n".join(wrong[:40]))
