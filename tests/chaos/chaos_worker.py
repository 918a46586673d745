"""A worker process of the chaos suite.

    chaos_worker.py SPEC_JSON

SPEC_JSON is one JSON object:

    url        the database URL
    table      libqueue.Table keyword arguments (name, payload, ...)
    log        a log file, opened O_APPEND (lines of several processes and of
               the test interleave whole)
    mode       "drain", "fence_pull" or "fence_push"
    options    subscription options (workers, lease_ms, ...)
    broker     broker options (statement_timeout_ms, ...)
    sleep      [low, high]: a drain handler sleeps uniform(low, high) seconds
    log_payload  drain: "start" and "done" lines end with the payload (text)
    count      fence_pull: how many deliveries to pull
    kinds      fence_pull: the settlement of each pulled delivery, in order

Every line it logs is "<kind> <field> <pid> <monotonic ns> ...":

    start <id> <pid> <ns>          a drain handler began the row (fsync'd)
    done <id> <pid> <ns>           a drain handler finished it (fsync'd),
                                   before the core acks it
    log <LEVEL> <pid> <ns> <msg>   a record of the "libqueue" logger

CLOCK_MONOTONIC is one clock for every process of the machine, so the test
compares these times with its own (time.monotonic_ns()).

MODE "drain": push mode, until SIGTERM (then it stops, closes and exits 0).
Prints "ready" once its subscription runs.

MODE "fence_pull": pulls ``count`` deliveries, prints "held <id> <expiry ms>"
for each and "ready"; then waits for a "go" line on stdin, settles each
delivery with its kind (ack, retry, retry_after, dead_letter) and prints
"result <id> <kind> ok" or "result <id> <kind> <status name> <message>",
then "end"; exits at "quit" or the end of stdin.

MODE "fence_push": push mode; each handler prints "held <id>", waits for
"go" on stdin, then returns (payload "return") or raises (payload "raise"),
printing "returning <id>" or "raising <id>" first. The libqueue log records
are also printed, as "log <LEVEL> <msg>". Exits at "quit" or the end of
stdin.

The process dies with its parent (PR_SET_PDEATHSIG), so a test that is
itself killed leaves no worker behind.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import logging
import os
import random
import signal
import sys
import threading
import time

import libqueue

_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass
    if os.getppid() == 1:
        os._exit(3)


class LogFile:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pid = os.getpid()

    def write(self, kind: str, field: str, rest: str = "", sync: bool = True) -> None:
        line = "%s %s %d %d%s\n" % (kind, field, self.pid, time.monotonic_ns(),
                                    (" " + rest) if rest else "")
        os.write(self.fd, line.encode("utf-8", "replace"))
        if sync:
            os.fsync(self.fd)


class ToLogFile(logging.Handler):
    """libqueue's log records as "log" lines of the log file (and, when
    ``echo``, on stdout)."""

    def __init__(self, log: LogFile, echo: bool = False) -> None:
        super().__init__(logging.DEBUG)
        self.log = log
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                message += " | %r" % (record.exc_info[1],)
            message = " ".join(message.split())
            self.log.write("log", record.levelname, message, sync=False)
            if self.echo:
                say("log %s %s" % (record.levelname, message))
        except Exception:  # noqa: BLE001 - never into the core
            pass


def drain(spec: dict, log: LogFile) -> int:
    low, high = spec.get("sleep", [0.0, 0.005])
    # A flag, not an Event: a handler that takes the Event's lock while the
    # main thread holds it in wait() deadlocks.
    stop: list = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    table = libqueue.Table(**spec["table"])
    with libqueue.Broker(spec["url"], **spec.get("broker", {})) as broker:
        with broker.subscribe(table, **spec.get("options", {})) as sub:

            def handle(delivery: libqueue.Delivery) -> None:
                row = str(delivery.id)
                payload = delivery.payload.decode() if spec.get("log_payload") else ""
                log.write("start", row, payload)
                if high > 0:
                    time.sleep(random.uniform(low, high))
                log.write("done", row, payload)

            sub.run(handle)
            say("ready")
            while not stop:
                time.sleep(0.05)
    return 0


def _settle(delivery: libqueue.Delivery, kind: str) -> None:
    if kind == "ack":
        delivery.ack()
    elif kind == "retry":
        delivery.retry()
    elif kind == "retry_after":
        delivery.retry_after(60000)
    elif kind == "dead_letter":
        delivery.dead_letter()
    else:
        raise ValueError(kind)


def _wait_for_stdin(word: str) -> bool:
    for line in sys.stdin:
        if line.strip() == word:
            return True
        if line.strip() == "quit":
            return False
    return False


def fence_pull(spec: dict, log: LogFile) -> int:
    table = libqueue.Table(**spec["table"])
    kinds = spec["kinds"]
    with libqueue.Broker(spec["url"], **spec.get("broker", {})) as broker:
        with broker.subscribe(table, **spec.get("options", {})) as sub:
            held = []
            deadline = time.monotonic() + 30
            while len(held) < spec["count"] and time.monotonic() < deadline:
                delivery = sub.next(timeout=1.0)
                if delivery is not None:
                    held.append(delivery)
                    say("held %d %d" % (delivery.id, delivery.lease_expiry_ms))
            say("ready" if len(held) == spec["count"] else "short")
            if not _wait_for_stdin("go"):
                return 0
            for delivery, kind in zip(held, kinds):
                try:
                    _settle(delivery, kind)
                    say("result %d %s ok" % (delivery.id, kind))
                except libqueue.Error as e:
                    say("result %d %s %s %s" % (delivery.id, kind, e.status_name,
                                                " ".join(str(e).split())))
                delivery.release()
            say("end")
            _wait_for_stdin("quit")
    return 0


def fence_push(spec: dict, log: LogFile) -> int:
    table = libqueue.Table(**spec["table"])
    go = threading.Event()
    quit_ = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
            elif line.strip() == "quit":
                break
        go.set()
        quit_.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    with libqueue.Broker(spec["url"], **spec.get("broker", {})) as broker:
        with broker.subscribe(table, **spec.get("options", {})) as sub:

            def handle(delivery: libqueue.Delivery) -> None:
                say("held %d %d" % (delivery.id, delivery.lease_expiry_ms))
                go.wait(120)
                if delivery.payload == b"raise":
                    say("raising %d" % delivery.id)
                    raise RuntimeError("chaos: the handler of row %d raises" % delivery.id)
                say("returning %d" % delivery.id)

            sub.run(handle)
            say("ready")
            quit_.wait(300)
    return 0


def main() -> int:
    die_with_parent()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    spec = json.loads(sys.argv[1])
    log = LogFile(spec["log"])
    logger = logging.getLogger("libqueue")
    logger.setLevel(logging.INFO)
    logger.addHandler(ToLogFile(log, echo=spec["mode"] != "drain"))
    logger.propagate = False
    mode = {"drain": drain, "fence_pull": fence_pull, "fence_push": fence_push}[spec["mode"]]
    return mode(spec, log)


if __name__ == "__main__":
    sys.exit(main())
