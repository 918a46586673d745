"""Scaling across processes (W4): one queue drained by 1, 2, 4 and 8 worker
processes, and what an idle fleet costs the server. One JSON record per
figure on stdout (bench/run collects them):

    python scale.py --url URL --lq-bench PATH [--n 20000] [--processes 1,2,4,8]
                    [--forms row_lock,lease] [--repeat K] [--idle-s 10] [--idle-poll-ms 100]

- W4: N rows preloaded (lq_bench setup, untimed), drained by P processes of
  `lq_bench serve` (workers(4), poll_interval_ms 50, a no-op C handler),
  timed from the go to the last settlement, which the processes report in a
  shared file (so the parent asks the database nothing meanwhile). Server
  CPU per job from /proc (bench/server_load.py), statements per job from
  pg_stat_statements or MariaDB's Questions. Each repeat runs every P in
  turn; rates are medians, "vs_1" the median of each repeat's rate over the
  1-process rate of the same repeat. Target: 8 processes >= 0.95x 1.
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


class Fleet:
    """P processes of lq_bench serve, opened and ready, not yet running."""

    def __init__(self, args: argparse.Namespace, form: str, processes: int, workers: int,
                 poll_ms: int) -> None:
        fd, self.path = tempfile.mkstemp(prefix="lq_scale.")
        os.write(fd, b"\0" * SLOT.size * processes)
        os.close(fd)
        self.procs = [subprocess.Popen(
            [args.lq_bench, "serve", "--url", args.url, "--form", form, "--workers", str(workers),
             "--poll-ms", str(poll_ms), "--progress", self.path, "--slot", str(i)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(processes)]
        for p in self.procs:
            if p.stdout.readline().strip() != "ready":
                self.stop()
                raise SystemExit("lq_bench serve did not start")

    def go(self) -> None:
        for p in self.procs:
            p.stdin.write("go\n")
            p.stdin.flush()

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
    per_job = lambda v, scale=1.0: None if v is None else round(v * scale / args.n, 2)
    return {"jobs_per_s": round(args.n / seconds) if ok else None, "seconds": round(seconds, 3),
            "server_cpu_us_per_job": per_job(spent["cpu_s"], 1e6),
            "statements_per_job": per_job(spent["statements"]),
            "server_claims_per_job": per_job(spent["claims"]),
            "claims": sum(r.get("claims", 0) for r in records),
            "empty_claims": sum(r.get("empty_claims", 0) for r in records),
            "note": None if ok else "%d of %d settled, %s rows left" % (settled, args.n, left)}


def scaling(args: argparse.Namespace, load: ServerLoad, form: str) -> List[Dict]:
    counts = [int(p) for p in args.processes.split(",")]
    runs: Dict[int, List[Dict]] = {p: [] for p in counts}
    for _ in range(args.repeat):
        for p in counts:
            runs[p].append(drain(args, load, form, p))
            print("W4 %s %s %d processes: %s/s" % (load.db, form, p, runs[p][-1]["jobs_per_s"]),
                  file=sys.stderr, flush=True)
    records = []
    for p in counts:
        rates = [r["jobs_per_s"] for r in runs[p]]
        good = sorted((r for r in runs[p] if r["jobs_per_s"]), key=lambda r: r["jobs_per_s"])
        rec = dict(good[(len(good) - 1) // 2]) if good else dict(runs[p][-1])
        base = [r["jobs_per_s"] for r in runs[counts[0]]]
        ratios = sorted(a / b for a, b in zip(rates, base) if a and b)
        rec.update(kind="scale", db=load.db, form=form, binding="c", workload="W4", n=args.n,
                   processes=p, workers=4, poll_ms=50, runs=rates,
                   vs_1=round(ratios[(len(ratios) - 1) // 2], 3) if ratios else None)
        records.append(rec)
    last = records[-1]
    records.append(dict(kind="scale", db=load.db, form=form, binding="c", workload="W4-scale",
                        processes=[counts[0], counts[-1]], ratio=last["vs_1"], target=0.95,
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
                processes=processes, workers=workers, poll_ms=poll_ms, seconds=round(seconds, 1),
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
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--forms", default="row_lock,lease")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--idle-s", type=float, default=10)
    parser.add_argument("--idle-poll-ms", type=int, default=100)
    args = parser.parse_args()
    if args.n <= 0 or args.repeat <= 0 or args.idle_s <= 0 or args.idle_poll_ms <= 0:
        parser.error("--n, --repeat, --idle-s and --idle-poll-ms must be positive")
    load = ServerLoad(args.url)
    for form in args.forms.split(","):
        if form not in ("row_lock", "lease", "advisory"):
            parser.error("unknown form %r" % form)
        for rec in scaling(args, load, form) + [idle(args, load, form)]:
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
