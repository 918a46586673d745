"""Flow control, measured: what a queue-wide limit costs, how busy it keeps
its slots, and how close a rate limit comes to its rate. One JSON record per
figure on stdout (bench/run collects them):

    python flow.py --url URL --lq-bench PATH [--quick] [--repeat K]

- F-limit: the W1 drain (lq_bench w1, lease form, workers(4), a no-op C
  handler) with concurrency=1000, which never binds, against the same drain
  without it, run in turn K times; "ratio" is the median of the paired
  ratios (limited / unlimited). Target: at least 0.9.
- F-util: concurrency=4 over 3 processes of 4 workers each, 20 ms handlers;
  "busy_fraction" is the mean of the handlers running at once while the
  backlog lasts, over 4. Target: at least 0.9.
- F-rate: rate_limit=20 per second over 2 processes for 10 s (3 s with
  --quick), in each form of --forms (the lease form by default);
  "ratio" is the starts achieved over those allowed, and "window_ok"
  whether no 21 handlers started within a second (less the allowance of
  tests/python/test_concurrency.py for the hand-off). Target: 0.95-1.0.
"""

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

import libqueue

from c_driver import lq_bench_w1  # bench/c_driver.py, beside this file
from w1 import db_name  # bench/w1.py, beside this file

#: The bench table's roles in each form.
TABLES = {"lease": dict(payload="payload", attempt="attempt", locked_until="locked_until"),
          "row_lock": dict(payload="payload", attempt="attempt"),
          "advisory": dict(payload="payload", attempt="attempt", advisory_lock="job-{id}")}
#: What a handler's start may lag its start on the database's clock (s).
HAND_OFF_S = 0.1


def bench_table(form: str) -> libqueue.Table:
    return libqueue.Table("lq_flow_" + form, **TABLES[form])


def overhead(args: argparse.Namespace) -> Dict[str, Any]:
    n = 2000 if args.quick else 20000
    unlimited, limited = [], []
    for _ in range(args.repeat):
        unlimited.append(lq_bench_w1(args.lq_bench, args.url, n))
        limited.append(lq_bench_w1(args.lq_bench, args.url, n, "--concurrency", "1000"))
    ratios = [lim / free for lim, free in zip(limited, unlimited) if free]
    return dict(workload="F-limit", form="lease", n=n, jobs_per_s=statistics.median(limited),
                unlimited_jobs_per_s=statistics.median(unlimited), runs=limited,
                unlimited_runs=unlimited, ratio=statistics.median(ratios) if ratios else None,
                target=0.9)


def worker(url: str, form: str, options: Dict[str, int], sleep_s: float,
           stop_at: float, spans: Any) -> None:
    """One process: a push subscription whose handler records its span. The
    spans go to the parent at the end: a put per span, between one handler
    and the next, would count the queue's own work (a feeder thread taking
    the interpreter's lock from the workers) as time the slot stood idle."""
    table = bench_table(form)
    mine: List[Tuple[float, float]] = []
    with libqueue.Broker(url) as broker, broker.subscribe(table, **options) as sub:
        def handle(d: libqueue.Delivery) -> None:
            start = time.monotonic()
            time.sleep(sleep_s)
            mine.append((start, time.monotonic()))
        sub.run(handle)
        while time.monotonic() < stop_at:
            time.sleep(0.05)
    spans.put(mine)


def drain(url: str, form: str, rows: int, processes: int, options: Dict[str, int],
          sleep_s: float, seconds: float) -> List[Tuple[float, float]]:
    """Publishes `rows`, runs the processes for `seconds`, returns the spans."""
    table = bench_table(form)
    with libqueue.Broker(url) as broker:
        broker.create_table(table)
        with broker.subscribe(table) as sub:  # empties what an earlier run left
            for d in sub.deliveries(timeout=0.2):
                d.ack()
        broker.publish_many(table, [b"x"] * rows)
    spans: Any = multiprocessing.Queue()
    stop_at = time.monotonic() + seconds
    procs = [multiprocessing.Process(target=worker, args=(url, form, options, sleep_s, stop_at,
                                                           spans)) for _ in range(processes)]
    for p in procs:
        p.start()
    got = []
    while any(p.is_alive() for p in procs) or not spans.empty():
        try:
            got.extend(spans.get(timeout=0.2))
        except Exception:  # queue.Empty
            pass
    for p in procs:
        p.join()
    return got


def busy_fraction(spans: List[Tuple[float, float]], limit: int) -> float:
    """The mean of the spans open at once from the first start to the last, over limit."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    first, last_start = min(s for s, _ in spans), max(s for s, _ in spans)
    area, open_now, at = 0.0, 0, first
    for t, step in events:
        if at < last_start:
            area += open_now * (min(t, last_start) - at)
        at = t
        open_now += step
    return area / (last_start - first) / limit


def utilization(args: argparse.Namespace, form: str) -> Dict[str, Any]:
    rows = 200 if args.quick else 600
    spans = drain(args.url, form, rows, 3, dict(workers=4, concurrency=4, poll_interval_ms=50),
                  0.02, rows * 0.02 / 4 * 1.5 + 3)
    return dict(workload="F-util", form=form, processes=3, workers=4, limit=4, rows=rows,
                handled=len(spans), busy_fraction=busy_fraction(spans, 4), target=0.9)


def rate_accuracy(args: argparse.Namespace, form: str) -> Dict[str, Any]:
    seconds = 3 if args.quick else 10
    spans = drain(args.url, form, 20 * seconds * 3, 2,
                  dict(workers=4, rate_limit=20, rate_period_ms=1000, poll_interval_ms=50), 0,
                  seconds)
    starts = sorted(s for s, _ in spans)
    gaps = [starts[i + 20] - starts[i] for i in range(len(starts) - 20)]
    first = starts[0]
    achieved = sum(1 for s in starts if s - first < seconds - 1)
    allowed = 20 * (seconds - 1)
    return dict(workload="F-rate", form=form, rate_limit=20, period_ms=1000, seconds=seconds,
                starts=achieved, allowed=allowed, ratio=achieved / allowed,
                shortest_window_s=min(gaps) if gaps else None,
                window_ok=all(g >= 1.0 - HAND_OFF_S for g in gaps), target=[0.95, 1.0])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--lq-bench", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forms", default="lease", help="F-util's and F-rate's forms, comma-separated")
    args = parser.parse_args()
    db = db_name(args.url)
    figures: List[Tuple[Any, str]] = [(overhead, "c")]
    # SQLite has no row lock form, and its advisory keys live in one process.
    forms = [form for form in args.forms.split(",") if db != "sqlite" or form == "lease"]
    figures += [(lambda a, f=form: utilization(a, f), "python") for form in forms]
    figures += [(lambda a, f=form: rate_accuracy(a, f), "python") for form in forms]
    for figure, binding in figures:
        print(json.dumps(dict(kind="flow", db=db, binding=binding, **figure(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
