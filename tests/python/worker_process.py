"""A worker in a process of its own, for the cross-process tests.

    worker_process.py URL TABLE_JSON LOG MODE [OPTIONS_JSON]

MODE "drain": works the table with push workers, writing a B line when a
handler starts and an E line when it ends (one write(2) each, O_APPEND, so
lines from several processes interleave whole), until SIGTERM. The option
"sleep_ms": [low, high] makes each handler sleep that long (uniform), else
up to 4 ms.
MODE "hold": pulls one delivery, prints its id, and sleeps until killed.
"""

import faulthandler
import json
import os
import random
import signal
import sys
import time
from typing import Dict, List, NamedTuple, Tuple

import libqueue


class Span(NamedTuple):
    """One handler's run, from a drain log."""
    row: int
    pid: int
    start: int  # monotonic ns: one clock for every process of the machine
    end: int
    payload: str


def read_spans(log_path: str) -> List[Span]:
    """The spans a drain log holds, one per B/E pair, in the order they ended;
    fails on a handler that began and never ended."""
    begun: Dict[Tuple[int, int], Tuple[int, str]] = {}
    spans: List[Span] = []
    with open(log_path) as f:
        for line in f:
            kind, row, pid, at, payload = line.split()
            key = (int(row), int(pid))
            if kind == "B":
                begun[key] = (int(at), payload)
            else:
                start, payload = begun.pop(key)
                spans.append(Span(int(row), int(pid), start, int(at), payload))
    assert not begun, "handlers that never ended: %s" % begun
    return spans


def main() -> int:
    faulthandler.enable()  # a crash prints every thread's stack to the test's stderr
    url, table_json, log_path, mode = sys.argv[1:5]
    options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    table = libqueue.Table(**json.loads(table_json))
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pid = os.getpid()

    def write(kind: str, row: int, payload: bytes = b"") -> None:
        line = "%s %d %d %d %s\n" % (kind, row, pid, time.monotonic_ns(), payload.decode() or "-")
        os.write(log, line.encode())

    low, high = options.pop("sleep_ms", (0, 4))
    # A flag, not an Event: a handler that takes the Event's lock while the
    # main thread holds it in wait() deadlocks.
    stop: list = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    with libqueue.Broker(url, **options.pop("broker", {})) as broker:
        with broker.subscribe(table, **options) as sub:
            if mode == "hold":
                delivery = sub.next(30)
                print(delivery.id, flush=True)
                while True:
                    time.sleep(60)

            def handle(delivery: libqueue.Delivery) -> None:
                write("B", delivery.id, delivery.payload)
                time.sleep(random.uniform(low, high) / 1000)
                write("E", delivery.id, delivery.payload)

            sub.run(handle)
            print("ready", flush=True)
            while not stop:
                time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
