"""Shared pieces of the chaos suite: quick/long counts, the figures each test
reports, worker processes, and the log they write."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import pytest

import libqueue

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "chaos_worker.py")

#: Set by conftest.py from --long or LQ_CHAOS_LONG=1.
LONG = os.environ.get("LQ_CHAOS_LONG", "") not in ("", "0")


def pick(quick: Any, long: Any) -> Any:
    """The quick mode's count, or the long mode's."""
    return long if LONG else quick


#: (test id, figures) for the terminal summary (conftest.py).
FIGURES: List[Tuple[str, Dict[str, Any]]] = []


def report(name: str, **figures: Any) -> None:
    """Records figures for the summary at the end of the run, and prints them
    (seen with -s)."""
    FIGURES.append((name, figures))
    print("chaos %s: %s" % (name, json.dumps(figures, sort_keys=True)), flush=True)


def now_ns() -> int:
    return time.monotonic_ns()


def deadline_loop(timeout: float, what: str, interval: float = 0.05) -> Iterable[float]:
    """Yields the time left until ``timeout`` seconds pass, then fails the
    test: ``for _ in deadline_loop(30, "x"): if done: break``."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            pytest.fail("timed out after %gs waiting for %s" % (timeout, what))
        yield left
        time.sleep(interval)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.05) -> Any:
    for _ in deadline_loop(timeout, what, interval):
        value = predicate()
        if value:
            return value


def wait_progress(predicate: Callable[[], Any], log: "Log", stall_s: float, timeout: float,
                  what: str, worker: Optional["Worker"] = None) -> Any:
    """Waits for ``predicate``; fails when no handler finished a row for
    ``stall_s`` seconds (a stall), or after ``timeout``; then with the
    blocked threads of ``worker`` (their frames in libqueue and libpq)."""
    end = time.monotonic() + timeout
    last, last_at = log.poll().done_count, time.monotonic()
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        done = log.poll().done_count
        if done != last:
            last, last_at = done, now
        if now - last_at > stall_s or now > end:
            blocked = ""
            if worker is not None and worker.alive():
                frames = [l for l in worker.dump_stacks().splitlines()
                          if any(k in l for k in ("libqueue/src", "PQ", "mysql_", "recv", "poll"))]
                blocked = "; the worker's threads are in:\n" + "\n".join(frames[:40])
            if now - last_at > stall_s:
                pytest.fail("no row done for %gs while waiting for %s (%d done in all)%s"
                            % (stall_s, what, done, blocked))
            pytest.fail("timed out after %gs waiting for %s%s" % (timeout, what, blocked))
        time.sleep(0.25)


def table_spec(table: libqueue.Table) -> Dict[str, Any]:
    """The keyword arguments that make ``table`` again (for a worker)."""
    spec: Dict[str, Any] = dict(name=table.name, **table.columns)
    if table.schema:
        spec["schema"] = table.schema
    if table.advisory_lock:
        spec["advisory_lock"] = table.advisory_lock
    if table.dead_letter:
        spec["dead_letter"] = table.dead_letter
    if table.fifo:
        spec["fifo"] = True
    return spec


class Worker:
    """A chaos_worker.py process. Its stdout lines are read by a thread into
    a queue (``expect``); stderr goes to a file beside the log."""

    def __init__(self, url: str, table: libqueue.Table, log: str, mode: str, *,
                 options: Optional[Dict[str, Any]] = None,
                 broker: Optional[Dict[str, Any]] = None, **extra: Any) -> None:
        spec = dict(url=url, table=table_spec(table), log=log, mode=mode,
                    options=options or {}, broker=broker or {}, **extra)
        self.stderr_path = "%s.%s.stderr" % (log, mode)
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen([sys.executable, WORKER, json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1)
        self.pid = self.proc.pid
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.seen: List[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        _LIVE.add(self)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: Any, timeout: float = 30.0) -> str:
        """The next stdout line that starts with ``prefix`` (a str or a tuple
        of them; others are kept
        in ``seen``); fails the test after ``timeout`` or at the end of
        output."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                pytest.fail("worker %d: no %r line within %gs; seen %s; stderr: %s" % (
                    self.pid, prefix, timeout, self.seen[-20:], self.stderr_tail()))
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:
                self.lines.put(None)
                pytest.fail("worker %d ended (status %s) before a %r line; seen %s; stderr: %s"
                            % (self.pid, self.proc.poll(), prefix, self.seen[-20:],
                               self.stderr_tail()))
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def drain_lines(self) -> List[str]:
        """Every stdout line read so far and not yet taken."""
        out = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return out
            if line is None:
                self.lines.put(None)
                return out
            self.seen.append(line)
            out.append(line)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL, and wait for the end; returns the time of the end (ns)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        _LIVE.discard(self)
        self._stderr.close()
        return now_ns()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, and the exit status within ``timeout`` (else SIGKILL and
        a failed test)."""
        self.signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            stacks = self.dump_stacks()
            self.kill()
            pytest.fail("worker %d did not end within %gs of SIGTERM; its threads (%s):\n%s\n"
                        "stderr: %s" % (self.pid, timeout, self.stacks_path, stacks[-6000:],
                                        self.stderr_tail()))
        _LIVE.discard(self)
        self._stderr.close()
        return status

    def quit(self, timeout: float = 30.0) -> int:
        try:
            self.send("quit")
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            stacks = self.dump_stacks()
            self.kill()
            pytest.fail("worker %d did not end within %gs of quit; its threads:\n%s" % (
                self.pid, timeout, stacks[-6000:]))
        _LIVE.discard(self)
        self._stderr.close()
        return status

    def dump_stacks(self) -> str:
        """The C stacks of every thread (gdb, when installed) and the Python
        ones (SIGUSR1: faulthandler, to stderr), saved beside the log."""
        self.stacks_path = self.stderr_path + ".stacks"
        text = ""
        if shutil.which("gdb"):
            try:
                text = subprocess.run(
                    ["gdb", "-p", str(self.pid), "-batch", "-ex", "thread apply all bt"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                    timeout=60).stdout
            except (subprocess.TimeoutExpired, OSError):
                pass
        try:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
        except OSError:
            pass
        text = "\n".join(l for l in text.splitlines() if l.startswith(("#", "Thread")))
        with open(self.stacks_path, "w") as f:
            f.write(text + "\n--- python ---\n" + self.stderr_tail(20000))
        return text

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


#: Workers still running: killed at the end of each test (conftest.py).
_LIVE: Set[Worker] = set()


def kill_leftover_workers() -> None:
    for worker in list(_LIVE):
        try:
            worker.proc.send_signal(signal.SIGCONT)
            worker.kill()
        except Exception:  # noqa: BLE001
            pass
    _LIVE.clear()


class Log:
    """The log the workers and the test write (see chaos_worker.py), read as
    it grows. ``events`` keeps every line in file order, as tuples
    (kind, field, pid, ns, rest)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._offset = 0
        self._partial = b""
        self.events: List[Tuple[str, str, int, int, str]] = []
        self.done: Set[int] = set()
        self.done_count = 0
        self.started = 0

    def mark(self, kind: str, field: str = "-", rest: str = "") -> int:
        """Writes a line of the test's own (a kill, a fault), after the
        workers' lines so far; returns its time (ns)."""
        at = now_ns()
        line = "%s %s %d %d%s\n" % (kind, field, os.getpid(), at, (" " + rest) if rest else "")
        os.write(self._fd, line.encode())
        os.fsync(self._fd)
        return at

    def poll(self) -> "Log":
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            parts = raw.decode("utf-8", "replace").split(" ", 4)
            if len(parts) < 4:
                continue
            kind, field, pid, at = parts[:4]
            event = (kind, field, int(pid), int(at), parts[4] if len(parts) > 4 else "")
            self.events.append(event)
            if kind == "done":
                self.done.add(int(field))
                self.done_count += 1
            elif kind == "start":
                self.started += 1
        return self

    def of(self, kind: str, after_ns: int = 0, before_ns: Optional[int] = None) -> List[tuple]:
        return [e for e in self.events if e[0] == kind and e[3] >= after_ns
                and (before_ns is None or e[3] < before_ns)]

    def errors(self, after_ns: int = 0, before_ns: Optional[int] = None) -> List[tuple]:
        """The libqueue log records of level WARNING or worse in a window."""
        return [e for e in self.of("log", after_ns, before_ns)
                if e[1] in ("WARNING", "ERROR", "CRITICAL")]

    def first(self, kind: str, after_ns: int) -> Optional[int]:
        times = [e[3] for e in self.events if e[0] == kind and e[3] >= after_ns]
        return min(times) if times else None

    def close(self) -> None:
        os.close(self._fd)


def duplicates(log: Log) -> Tuple[Dict[int, int], List[str]]:
    """Rows done more than once, and for each pair of successive "done"
    lines of a row that no kill line separates from the "start" of the run
    that made the second one, a description (an unexplained duplicate)."""
    positions: Dict[int, List[Tuple[str, int]]] = {}
    kills: List[int] = []
    for i, (kind, field, _, _, _) in enumerate(log.events):
        if kind in ("start", "done"):
            positions.setdefault(int(field), []).append((kind, i))
        elif kind in ("kill", "fault"):
            kills.append(i)
    dup: Dict[int, int] = {}
    unexplained: List[str] = []
    import bisect
    for row, seq in positions.items():
        dones = [i for k, i in seq if k == "done"]
        if len(dones) < 2:
            continue
        dup[row] = len(dones)
        for a, b in zip(dones, dones[1:]):
            starts = [i for k, i in seq if k == "start" and i < b]
            s = starts[-1] if starts else -1
            j = bisect.bisect_right(kills, a)
            if not (j < len(kills) and kills[j] < s):
                unexplained.append("row %d: done at line %d, done again at line %d (its start at "
                                   "line %d) with no kill or fault between" % (row, a, b, s))
    return dup, unexplained


#: Broker deadlines of the fault tests: the client gives up on a statement
#: about statement_timeout_ms + 2 s after sending it.
DEADLINES = dict(connect_timeout_ms=1000, statement_timeout_ms=1000)
LEASE_MS = 3000


def drain_through(name: str, db: Any, form: str, log: Log,
                  fault: Callable[[], Tuple[int, int]], label: str, *,
                  url: Optional[str] = None, jobs: int = 3000, payload_size: int = 0,
                  broker_options: Dict[str, int] = DEADLINES,
                  stall_s: float = 60.0) -> Dict[str, Any]:
    """Publishes ``jobs`` rows, starts a drain worker (on ``url``, else the
    database's own), runs ``fault`` once a sixth is done (it returns the
    times, ns, the fault began and the server was back), then waits for the
    table to drain, failing when nothing is done for ``stall_s`` seconds;
    asserts the worker survived, lost 0, stuck 0; reports and returns the
    figures. The figures' ``back_to_work_s`` is the time from the server
    being back to the first handler that starts."""
    from helpers import make_table
    table = make_table(form)
    options = dict(workers=4, poll_interval_ms=50)
    if form == "lease":
        options["lease_ms"] = LEASE_MS
    with libqueue.Broker(db.url) as broker:
        broker.create_table(table)
        pad = b"." * payload_size
        published = set()
        for first in range(0, jobs, 1000):
            published.update(broker.publish_many(
                table, [b"job-%d %s" % (i, pad) for i in range(first, min(jobs, first + 1000))]))
    worker = Worker(url or db.url, table, log.path, "drain", options=options,
                    broker=broker_options, sleep=[0.002, 0.008])
    worker.expect("ready", timeout=30)
    wait_for(lambda: log.poll().done_count >= jobs // 6, timeout=60, what="a sixth of the jobs")
    done_before = log.done_count
    fault_ns, back_ns = fault()
    log.mark("fault", label)
    wait_progress(lambda: db.count("jobs") == 0, log, stall_s=stall_s, timeout=300,
                  what="the table to drain after the fault", worker=worker)
    survived = worker.alive()
    status = worker.terminate()
    log.poll()
    lost = sorted(published - log.done)
    stuck = db.count("jobs")
    dup, _ = duplicates(log)
    first_start = log.first("start", back_ns)
    errors_during = log.errors(fault_ns, back_ns)
    errors_after = log.errors(back_ns)
    figures = dict(
        form=form, published=len(published), done_before_fault=done_before,
        lost=len(lost), stuck=stuck, duplicates=len(dup), worker_survived=survived,
        fault_s=round((back_ns - fault_ns) / 1e9, 1),
        back_to_work_s=(round((first_start - back_ns) / 1e9, 2) if first_start else None),
        errors_during_fault=len(errors_during), errors_after_back=len(errors_after),
        first_error_after_s=(round((errors_during[0][3] - fault_ns) / 1e9, 2)
                             if errors_during else None),
        error_kinds=summarize_errors(errors_during + errors_after, 3))
    report("%s[%s-%s]" % (label, name, form), **figures)
    for key in ("fault_s", "back_to_work_s"):
        print("%s %s: %s" % (label, key, figures[key]))
    assert survived, "the worker died: status %s, stderr %s" % (status, worker.stderr_tail())
    assert status == 0, worker.stderr_tail()
    assert not lost, "rows never done: %s" % lost[:20]
    assert stuck == 0
    return figures



def drop(backend: Any) -> None:
    """Drops a test's schema (PostgreSQL) or database (MariaDB) with bounded
    lock waits, ending the sessions still in it on MariaDB (a fault may
    leave one behind, holding a metadata lock the DROP would wait on for
    good). Never fails a test: a server the test broke keeps the leftovers."""
    try:
        if backend.dialect == "postgresql":
            conn = backend.connect(search_path=False)
            try:
                with conn.cursor() as cur:
                    cur.execute("SET lock_timeout = '20s'")
                    cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                "pid <> pg_backend_pid() AND datname = current_database() AND "
                                "query LIKE %s", ("%" + backend.schema + "%",))
                    cur.execute("DROP SCHEMA %s CASCADE" % backend.quote(backend.schema))
            finally:
                conn.close()
        elif backend.dialect == "mysql":
            conn = backend.connect(use_database=False)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s "
                                "AND id <> connection_id()", (backend.database,))
                    for (session,) in cur.fetchall():
                        try:
                            cur.execute("KILL %d" % int(session))
                        except Exception:  # noqa: BLE001 - gone already
                            pass
                    cur.execute("SET SESSION lock_wait_timeout = 20")
                    cur.execute("DROP DATABASE IF EXISTS %s" % backend.quote(backend.database))
            finally:
                conn.close()
    except Exception as e:  # noqa: BLE001
        print("chaos: could not drop the test's database: %r" % (e,))


def summarize_errors(events: List[tuple], limit: int = 4) -> List[str]:
    """The first few distinct error messages, shortened."""
    seen: List[str] = []
    for e in events:
        msg = e[4][:160]
        if msg not in seen:
            seen.append(msg)
        if len(seen) >= limit:
            break
    return seen
