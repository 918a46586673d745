"""Schedules (Broker.schedule): each tick of a cron expression or an interval
is enqueued exactly once among every broker and process that takes part,
whichever of them are up; ticks no broker was up for follow the schedule's
catch-up; bad timings are refused, naming the field, and write nothing."""

from __future__ import annotations

import datetime
import glob
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

import libqueue

from helpers import make_table, wait_until

PROCESS = os.path.join(os.path.dirname(__file__), "schedule_process.py")


def scheduled_table(form: str = "lease", **roles: Any) -> libqueue.Table:
    return make_table(form, headers="headers", **roles)


def drain(broker: libqueue.Broker, table: libqueue.Table) -> List[Dict[str, str]]:
    """The headers of every row of the table, acked (once nothing schedules
    into it)."""
    seen = []
    with broker.subscribe(table, workers=8, poll_interval_ms=50) as sub:
        while True:
            d = sub.next(1)
            if d is None:
                return seen
            seen.append(dict(d.headers))
            d.ack()


def ticks_ms(rows: List[Dict[str, str]], name: str) -> List[int]:
    return sorted(int(datetime.datetime.fromisoformat(r["lq-scheduled-for"]).timestamp() * 1000)
                  for r in rows if r["lq-schedule"] == name)


def assert_each_tick_once(ticks: List[int], period_ms: int) -> None:
    assert ticks, "no tick was enqueued"
    assert len(ticks) == len(set(ticks)), "a tick was enqueued twice: %r" % ticks
    expected = list(range(ticks[0], ticks[-1] + 1, period_ms))
    assert ticks == expected, "ticks missing: %r" % sorted(set(expected) - set(ticks))


def spawn(db: Any, table: libqueue.Table, schedules: List[Dict[str, Any]]) -> subprocess.Popen:
    table_json = json.dumps(dict(name=table.name, **table.columns))
    proc = subprocess.Popen([sys.executable, PROCESS, db.url, table_json, json.dumps(schedules)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_each_tick_is_enqueued_once_across_processes_and_a_kill(db, broker) -> None:
    table = scheduled_table()
    broker.create_table(table)
    schedules = [dict(name="every-second", payload="s", cron="* * * * * *"),
                 dict(name="every-200ms", payload="i", every_ms=200)]
    procs = [spawn(db, table, schedules) for _ in range(3)]
    try:
        time.sleep(5)
        procs[0].send_signal(signal.SIGKILL)  # mid-transaction or not, no tick is lost or doubled
        time.sleep(5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(20)
    rows = drain(broker, table)
    seconds, intervals = ticks_ms(rows, "every-second"), ticks_ms(rows, "every-200ms")
    assert_each_tick_once(seconds, 1000)
    assert_each_tick_once(intervals, 200)
    assert len(seconds) >= 8 and len(intervals) >= 40
    assert db.count("lq_schedule_ticks") >= len(seconds) + len(intervals)


@pytest.mark.parametrize("catch_up, expected", [("skip", 0), ("once", 1), ("all", 5)])
def test_ticks_missed_while_no_broker_ran_follow_the_catch_up(db, catch_up, expected) -> None:
    period = 500
    table = scheduled_table()
    with libqueue.Broker(db.url) as first:
        first.create_table(table)
        first.schedule(table, "beat", b"b", every_ms=period, catch_up=catch_up)
        wait_until(lambda: db.count("jobs") >= 1, what="the first tick")
    stopped_ms = int(time.time() * 1000)
    # Every broker is down for five ticks, then one starts halfway to the sixth.
    last = stopped_ms // period * period
    time.sleep((last + 5.5 * period - time.time() * 1000) / 1000)
    with libqueue.Broker(db.url) as second:
        started_ms = int(time.time() * 1000)
        second.schedule(table, "beat", b"b", every_ms=period, catch_up=catch_up)
        time.sleep(0.1)
        second.unschedule("beat")
        rows = drain(second, table)
    ticks = ticks_ms(rows, "beat")
    first_run = [t for t in ticks if t <= stopped_ms]
    missed = [t for t in ticks if stopped_ms < t <= started_ms]
    assert_each_tick_once(first_run, period)
    assert len(missed) == expected, (catch_up, ticks, stopped_ms, started_ms)
    if catch_up == "once":
        assert missed == [started_ms // period * period]  # the latest of them
    if catch_up == "all":
        assert_each_tick_once(first_run + missed, period)


def run_faked(db: Any, table: libqueue.Table, at: str, seconds: float,
              schedules: List[Dict[str, Any]]) -> None:
    """A broker in a process whose clock starts at `at` (UTC), for `seconds`:
    libfaketime preloaded into it (not the faketime command, whose child a
    SIGTERM to it would leave running)."""
    [lib] = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    env = dict(os.environ, TZ="UTC", LD_PRELOAD=lib, FAKETIME="@" + at, FAKETIME_DONT_RESET="1")
    table_json = json.dumps(dict(name=table.name, **table.columns))
    proc = subprocess.Popen([sys.executable, PROCESS, db.url, table_json, json.dumps(schedules)],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(seconds)
    finally:
        proc.terminate()
        proc.wait(20)


def utc_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text + "+00:00").timestamp() * 1000)


def test_a_berlin_schedule_keeps_to_the_wall_clock_across_both_2027_changes(db, broker) -> None:
    table = scheduled_table()
    broker.create_table(table)
    nightly = [dict(name="nightly", payload="n", cron="30 2 * * *", tz="Europe/Berlin")]
    # 2027-03-28: 02:00 CET becomes 03:00 CEST, and 02:30 never comes: the
    # tick is at the end of the gap, 03:00 CEST (01:00 UTC), not 02:30 CET.
    run_faked(db, table, "2027-03-28 00:59:58", 3.5, nightly)
    # 2027-10-31: 03:00 CEST becomes 02:00 CET, and 02:30 comes twice: the
    # tick is at the first, 02:30 CEST (00:30 UTC), and not again an hour later.
    run_faked(db, table, "2027-10-31 00:29:58", 3.5, nightly)
    run_faked(db, table, "2027-10-31 01:29:58", 3.5, nightly)
    ticks = ticks_ms(drain(broker, table), "nightly")
    assert ticks == [utc_ms("2027-03-28 01:00:00"), utc_ms("2027-10-31 00:30:00")]


def test_a_removed_schedule_stops_and_a_closed_broker_enqueues_nothing(db, broker) -> None:
    table = scheduled_table()
    broker.create_table(table)
    broker.schedule(table, "fast", b"f", every_ms=100)
    wait_until(lambda: db.count("jobs") >= 3, what="three ticks")
    broker.unschedule("fast")
    n = db.count("jobs")
    time.sleep(0.5)
    assert db.count("jobs") == n
    with pytest.raises(libqueue.Misuse, match="no schedule of that name"):
        broker.unschedule("fast")
    other = libqueue.Broker(db.url)
    other.schedule(table, "fast", b"f", every_ms=100)
    other.close()
    n = db.count("jobs")
    time.sleep(0.5)
    assert db.count("jobs") == n


def test_a_tick_whose_dedup_key_is_held_enqueues_nothing(db, broker) -> None:
    table = scheduled_table(dedup_key="dedup_key")
    broker.create_table(table)
    broker.schedule(table, "report", b"r", every_ms=100, dedup_key="nightly-report")
    time.sleep(1)
    assert db.count("jobs") == 1  # one held the key at every tick after the first
    assert db.count("lq_schedule_ticks") >= 5  # yet each tick was spent


def test_the_row_carries_the_message_fields_and_its_tick(db, broker) -> None:
    table = scheduled_table(priority="priority", partition_key="pkey")
    broker.create_table(table)
    broker.schedule(table, "nightly", b"payload", cron="@daily", tz="Europe/Berlin")
    broker.schedule(table, "fields", b"x", every_ms=250, priority=7, partition_key="k",
                    headers={"origin": "test"})
    wait_until(lambda: db.count("jobs") >= 1, what="a tick")
    broker.unschedule("fields")
    with broker.subscribe(table) as sub:
        d = sub.next(5)
        assert d.payload == b"x" and d.partition_key == "k"
        assert d.headers["origin"] == "test" and d.headers["lq-schedule"] == "fields"
        tick = datetime.datetime.fromisoformat(d.headers["lq-scheduled-for"])
        assert tick.tzinfo is not None and int(tick.timestamp() * 1000) % 250 == 0
        d.ack()


BAD_TIMINGS = [
    (dict(cron="60 * * * *"), "cron field minute: 60 is out of range 0-59"),
    (dict(cron="* 24 * * *"), "cron field hour: 24 is out of range 0-23"),
    (dict(cron="* * 0 * *"), "cron field day-of-month"),
    (dict(cron="* * * 13 *"), "cron field month"),
    (dict(cron="* * * * 8"), "cron field day-of-week"),
    (dict(cron="*/0 * * * *"), "cron field minute"),
    (dict(cron="61 * * * * *"), "cron field second"),
    (dict(cron="@fortnightly"), "unknown shorthand @fortnightly"),
    (dict(cron="* * *"), "cron"),
    (dict(cron="0 0 30 2 *"), "cron"),
    (dict(cron="* * * * *", tz="Mars/Olympus_Mons"), "tz"),
    (dict(cron="* * * * *", tz="../../etc/passwd"), "tz"),
    (dict(every_ms=0), "every_ms"),
    (dict(every_ms=-5), "every_ms"),
    (dict(every_ms=100, tz="UTC"), "tz"),
    (dict(), "needs cron or every_ms"),
    (dict(cron="* * * * *", every_ms=100), "not both"),
    (dict(cron="* * * * *", catch_up="sometimes"), "catch_up"),
    (dict(cron="* * * * *", catch_up_ms=0), "catch_up_ms"),
]


@pytest.mark.parametrize("timing, message", BAD_TIMINGS, ids=[m for _, m in BAD_TIMINGS])
def test_a_bad_timing_is_refused_naming_the_field(db, broker, timing, message) -> None:
    table = scheduled_table()
    broker.create_table(table)
    with pytest.raises(libqueue.Misuse, match=message.replace("*", r"\*")):
        broker.schedule(table, "bad", b"x", **timing)
    assert db.count("jobs") == 0


def test_a_message_the_table_cannot_hold_or_a_name_taken_is_refused(db, broker) -> None:
    table = scheduled_table()
    broker.create_table(table)
    with pytest.raises(libqueue.SchemaError, match="no group column"):
        broker.schedule(table, "g", b"x", every_ms=100, group="g")
    with pytest.raises(libqueue.Misuse, match="needs a name"):
        broker.schedule(table, "", b"x", every_ms=100)
    broker.schedule(table, "once", b"x", cron="@yearly")
    with pytest.raises(libqueue.Misuse, match="already"):
        broker.schedule(table, "once", b"x", cron="@yearly")
    assert db.count("jobs") == 0


def test_a_schedule_always_due_leaves_the_others_their_turns(db, broker) -> None:
    table = scheduled_table()
    broker.create_table(table)
    broker.schedule(table, "flood", b"f", every_ms=1)  # its writes are slower than 1 ms
    broker.schedule(table, "steady", b"s", every_ms=100)
    wait_until(lambda: db.count("jobs", "payload = %s" % ("X'73'" if db.dialect != "postgresql"
                                                         else "'\\x73'::bytea")) >= 3,
               what="the steady schedule's ticks beside the flood")
    broker.unschedule("flood")  # returns, though the flood was always due
    broker.unschedule("steady")


def test_a_close_does_not_wait_for_a_long_catch_up(db, broker) -> None:
    table = scheduled_table()
    broker.create_table(table)
    first = libqueue.Broker(db.url)
    first.schedule(table, "backlog", b"b", every_ms=10, catch_up="all")
    first.close()
    # Its latest tick an hour ago: 360,000 missed ticks to catch up.
    hour_ago = (int(time.time() * 1000) - 3600 * 1000) // 10 * 10
    db.execute("DELETE FROM lq_schedule_ticks")
    db.execute("DELETE FROM jobs")
    db.execute("INSERT INTO lq_schedule_ticks VALUES ('backlog', %d, 0)" % hour_ago)
    second = libqueue.Broker(db.url)
    second.schedule(table, "backlog", b"b", every_ms=10, catch_up="all", catch_up_ms=7200 * 1000)
    wait_until(lambda: db.count("jobs") > 0, what="the catch-up to begin")
    second.close()
    written = db.count("jobs")
    time.sleep(0.3)
    assert db.count("jobs") == written < 360000  # stopped between turns, not at the end


def test_names_that_differ_in_case_are_two_schedules(db, broker) -> None:
    table = scheduled_table()
    broker.create_table(table)
    broker.schedule(table, "Report", b"R", every_ms=100)
    broker.schedule(table, "report", b"r", every_ms=100)
    time.sleep(0.55)
    broker.unschedule("Report")
    broker.unschedule("report")
    rows = drain(broker, table)
    upper, lower = ticks_ms(rows, "Report"), ticks_ms(rows, "report")
    assert len(upper) >= 3 and len(lower) >= 3
    assert_each_tick_once(upper, 100)
    assert_each_tick_once(lower, 100)
