"""Scaling across processes (W4): one queue drained by 1, 2, 4 and 8 worker
processes, and what an idle fleet costs the server. One JSON record per
figure on stdout (bench/run collects them):

    python scale.py --url URL --lq-bench PATH [--raw DIR] [--pool P] [--n 20000] [--processes 1,2,4,8]
                    [--forms row_lock,lease] [--repeat K] [--idle-s 10] [--idle-poll-ms 100] [--no-idle]

- W4: N rows preloaded (lq_bench setup, untimed), drained by P processes of
  `lq_bench serve` (workers(4), poll_interval_ms 50, a no-op C handler),
  timed from the go to the last settlement, which the processes report in a
  shared file (so the parent asks the database nothing meanwhile). Server
  CPU per job from /proc (bench/server_load.py), statements per job from
  pg_stat_statements or MariaDB's Questions. Each repeat runs every P in
  turn; rates are medians, "vs_1" the median of each repeat's rate over the
  1-process rate of the same repeat. Target: 8 processes >= 0.95x 1.
  With --raw DIR (where raw_pg and raw_mysql are), each run is paired with
  the raw-SQL baseline's, in turn: P processes of the raw loop, each with the
  sessions that claim and settle in a library process (row lock: 4 threads claiming one row a
  transaction, as the library does; lease: 2 threads claiming 32 rows and
  settling them in one statement), so that its own 8 / 1 tells what of a
  fall is the machine's (the server sharing its cores with more sessions).
  --pool P sets each library process's pool_size (1: one session a process,
  where its claims and settlements take turns).
- W4-idle: 8 processes of workers(8) on an empty queue, poll_interval_ms I,
  for S seconds after 2 s to settle: claims/s by the processes' own counts
  and at the server, all statements/s, the server's CPU share. Bound: one
  claim per poll interval per subscription, 8 x 1000 / I claims/s.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from server_load import ServerLoad, delta  # bench/server_load.py, beside this file

SLOT = struct.Struct("=qq")  # settled, claims: as lq_bench serve writes them


def started(commands: List[List[str]], what: str) -> List[subprocess.Popen]:
    """The processes of `commands`, once each said "ready" (else all are
    ended, and the run with them)."""
    procs = [subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for c in commands]
    if any(p.stdout.readline().strip() != "ready" for p in procs):
        for p in procs:
            p.kill()
            p.wait()
        raise SystemExit("%s did not start" % what)
    return procs


def go(procs: List[subprocess.Popen]) -> None:
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def median_low(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


class Fleet:
    """P processes of lq_bench serve, opened and ready, not yet running."""

    def __init__(self, args: argparse.Namespace, form: str, processes: int, workers: int,
                 poll_ms: int) -> None:
        fd, self.path = tempfile.mkstemp(prefix="lq_scale.")
        os.write(fd, b"\0" * SLOT.size * processes)
        os.close(fd)
        try:
            self.procs = started(
                [[args.lq_bench, "serve", "--url", args.url, "--form", form, "--workers",
                  str(workers), "--poll-ms", str(poll_ms), "--pool", str(args.pool), "--progress",
                  self.path, "--slot", str(i)] for i in range(processes)], "lq_bench serve")
        except SystemExit:
            os.unlink(self.path)
            raise

    def go(self) -> None:
        go(self.procs)

    def counts(self) -> List[int]:
        """Settled and claims, summed over the processes."""
        with open(self.path, "rb") as f:
            data = f.read()
        slots = [SLOT.unpack_from(data, i * SLOT.size) for i in range(len(self.procs))]
        return [sum(s[0] for s in slots), sum(s[1] for s in slots)]

    def stop(self) -> List[Dict[str, Any]]:
        records = []
        for p in self.procs:
            p.stdin.close()
        for p in self.procs:
            out = p.stdout.read()
            p.wait()
            records += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        os.unlink(self.path)
        return records


class RawFleet:
    """P processes of the raw loop (raw_pg or raw_mysql --fleet), connected
    and ready, not yet running."""

    # A raw process has the sessions that claim and settle in one of
    # lq_bench serve (one a thread): the row lock form's four workers each
    # hold a transaction; the lease form's process claims on one connection
    # and settles on another.
    THREADS = {"row_lock": 4, "lease": 2}
    BATCH = {"row_lock": 1, "lease": 32}

    def __init__(self, args: argparse.Namespace, db: str, form: str, processes: int) -> None:
        program = os.path.join(args.raw, "raw_pg" if db == "postgresql" else "raw_mysql")
        self.procs = started(
            [[program, "--url", args.url, "--form", form, "--n", str(args.n), "--threads",
              str(self.THREADS[form]), "--batch", str(self.BATCH[form]), "--workload", "W4",
              "--fleet"]] * processes, program + " --fleet")

    def go(self) -> None:
        go(self.procs)

    def finish(self, limit_s: float) -> List[Dict[str, Any]]:
        """Waits for every process to drain, for limit_s at most (then ends
        them: a stalled run has no rate); their records."""
        records, deadline = [], time.monotonic() + limit_s
        for p in self.procs:
            try:  # closes its stdin, which it no longer reads
                out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            records += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return records


def per_job(args: argparse.Namespace, value: Optional[float], scale: float = 1.0) -> Optional[float]:
    """A run's total over its N rows (None stays None)."""
    return None if value is None else round(value * scale / args.n, 2)


def setup(args: argparse.Namespace, form: str, rows: int) -> None:
    subprocess.run([args.lq_bench, "setup", "--url", args.url, "--form", form, "--n", str(rows)],
                   check=True, stdout=subprocess.DEVNULL)


def remaining(args: argparse.Namespace) -> Optional[int]:
    out = subprocess.run([args.lq_bench, "count", "--url", args.url], capture_output=True,
                         text=True).stdout
    return json.loads(out).get("remaining") if out.startswith("{") else None


def drain(args: argparse.Namespace, load: ServerLoad, form: str, processes: int) -> Dict:
    """One W4 run: the rate, and what the server spent a job."""
    setup(args, form, args.n)
    fleet = Fleet(args, form, processes, 4, 50)
    before = load.reading()
    started = time.perf_counter()
    fleet.go()
    last, last_progress = 0, started
    while True:
        settled = fleet.counts()[0]
        now = time.perf_counter()
        if settled >= args.n:
            break
        if settled != last:
            last, last_progress = settled, now
        elif now - last_progress > 60:
            break  # stalled: no rate, a note
        time.sleep(0.002)
    seconds = now - started
    spent = delta(before, load.reading())
    records = fleet.stop()
    left = remaining(args)
    ok = settled >= args.n and left == 0
    return {"jobs_per_s": round(args.n / seconds) if ok else None, "seconds": round(seconds, 3),
            "server_cpu_us_per_job": per_job(args, spent["cpu_s"], 1e6),
            "statements_per_job": per_job(args, spent["statements"]),
            "server_claims_per_job": per_job(args, spent["claims"]),
            "claims": sum(r.get("claims", 0) for r in records),
            "empty_claims": sum(r.get("empty_claims", 0) for r in records),
            "note": None if ok else "%d of %d settled, %s rows left" % (settled, args.n, left)}


def raw_drain(args: argparse.Namespace, load: ServerLoad, form: str, processes: int) -> Dict:
    """One W4 run of the raw loop: the rate, and what the server spent a job."""
    setup(args, form, args.n)
    fleet = RawFleet(args, load.db, form, processes)
    before = load.reading()
    started = time.monotonic()  # CLOCK_MONOTONIC, as the processes' ended_at_us
    fleet.go()
    records = fleet.finish(limit_s=300)
    spent = delta(before, load.reading())
    settled = sum(r.get("settled") or 0 for r in records)
    ended = max((r.get("ended_at_us") or 0 for r in records), default=0) / 1e6
    seconds = ended - started if ended else None
    left = remaining(args)
    errors = [r["note"] for r in records if r.get("note")]
    ok = len(records) == processes and not errors and settled == args.n and left == 0
    return {"jobs_per_s": round(args.n / seconds) if ok and seconds and seconds > 0 else None,
            "seconds": None if seconds is None else round(seconds, 3),
            "server_cpu_us_per_job": per_job(args, spent["cpu_s"], 1e6),
            "statements_per_job": per_job(args, spent["statements"]),
            "batch": RawFleet.BATCH[form], "threads": RawFleet.THREADS[form],
            "note": None if ok else "; ".join(errors) or "%d of %d settled, %s rows left" % (
                settled, args.n, left)}


def summary(runs: Dict[int, List[Dict]], counts: List[int], p: int) -> Dict:
    """The median run of P processes, its rates, and the median of each
    repeat's rate over the same repeat's first count."""
    rates = [r["jobs_per_s"] for r in runs[p]]
    good = sorted((r for r in runs[p] if r["jobs_per_s"]), key=lambda r: r["jobs_per_s"])
    rec = dict(good[(len(good) - 1) // 2]) if good else dict(runs[p][-1])
    base = [r["jobs_per_s"] for r in runs[counts[0]]]
    ratios = [a / b for a, b in zip(rates, base) if a and b]
    rec.update(runs=rates, vs_1=round(median_low(ratios), 3) if ratios else None)
    return rec


def scaling(args: argparse.Namespace, load: ServerLoad, form: str) -> List[Dict]:
    counts = [int(p) for p in args.processes.split(",")]
    runs: Dict[int, List[Dict]] = {p: [] for p in counts}
    raw_runs: Dict[int, List[Dict]] = {p: [] for p in counts}
    for _ in range(args.repeat):
        for p in counts:
            runs[p].append(drain(args, load, form, p))
            line = "W4 %s %s %d processes: %s/s" % (load.db, form, p, runs[p][-1]["jobs_per_s"])
            if args.raw:
                raw_runs[p].append(raw_drain(args, load, form, p))
                line += ", raw %s/s" % raw_runs[p][-1]["jobs_per_s"]
            print(line, file=sys.stderr, flush=True)
    records = []
    for p in counts:
        rec = dict(summary(runs, counts, p), kind="scale", db=load.db, form=form, binding="c",
                   workload="W4", n=args.n, processes=p, workers=4, poll_ms=50, pool=args.pool)
        if args.raw:
            raw = summary(raw_runs, counts, p)
            paired = [a / b for a, b in zip(rec["runs"], raw["runs"]) if a and b]
            rec.update(raw_jobs_per_s=raw["jobs_per_s"], raw_runs=raw["runs"],
                       raw_vs_1=raw["vs_1"], raw_batch=raw["batch"], raw_threads=raw["threads"],
                       raw_server_cpu_us_per_job=raw["server_cpu_us_per_job"],
                       raw_statements_per_job=raw["statements_per_job"],
                       ratio=round(median_low(paired), 3) if paired else None)
        records.append(rec)
    last = records[-1]
    records.append(dict(kind="scale", db=load.db, form=form, binding="c", workload="W4-scale",
                        processes=[counts[0], counts[-1]], pool=args.pool, ratio=last["vs_1"],
                        raw_ratio=last.get("raw_vs_1"), target=0.95,
                        ok=last["vs_1"] is not None and last["vs_1"] >= 0.95))
    return records


def idle(args: argparse.Namespace, load: ServerLoad, form: str) -> Dict:
    """The idle fleet: what it asks of the server, against the bound."""
    processes, workers, poll_ms = 8, 8, args.idle_poll_ms
    setup(args, form, 0)
    fleet = Fleet(args, form, processes, workers, poll_ms)
    fleet.go()
    time.sleep(2)  # the pools open, the first claims
    claims0, before, started = fleet.counts()[1], load.reading(), time.perf_counter()
    time.sleep(args.idle_s)
    claims1, spent, seconds = fleet.counts()[1], delta(before, load.reading()), \
        time.perf_counter() - started
    fleet.stop()
    bound = processes * 1000.0 / poll_ms
    claims_per_s = (claims1 - claims0) / seconds
    per_s = lambda v: None if v is None else round(v / seconds, 1)
    server_claims = per_s(spent["claims"])
    return dict(kind="scale", db=load.db, form=form, binding="c", workload="W4-idle",
                processes=processes, workers=workers, poll_ms=poll_ms, pool=args.pool,
                seconds=round(seconds, 1),
                claims_per_s=round(claims_per_s, 1), server_claims_per_s=server_claims,
                statements_per_s=per_s(spent["statements"]),
                server_cpu_pct=round(spent["cpu_s"] / seconds * 100, 2), bound_per_s=bound,
                ok=claims_per_s <= bound * 1.05 and (server_claims is None or
                                                     server_claims <= bound * 1.05),
                note=load.note)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--lq-bench", required=True)
    parser.add_argument("--raw", help="the directory of raw_pg and raw_mysql: a raw-SQL baseline")
    parser.add_argument("--pool", type=int, default=0,
                        help="each process's pool_size (0: the library's default)")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--forms", default="row_lock,lease")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--idle-s", type=float, default=10)
    parser.add_argument("--idle-poll-ms", type=int, default=100)
    parser.add_argument("--no-idle", action="store_true", help="no idle fleet")
    args = parser.parse_args()
    if args.n <= 0 or args.repeat <= 0 or args.idle_s <= 0 or args.idle_poll_ms <= 0:
        parser.error("--n, --repeat, --idle-s and --idle-poll-ms must be positive")
    load = ServerLoad(args.url)
    for form in args.forms.split(","):
        if form not in ("row_lock", "lease", "advisory"):
            parser.error("unknown form %r" % form)
        for rec in scaling(args, load, form) + ([] if args.no_idle else [idle(args, load, form)]):
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
