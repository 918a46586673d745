#!/usr/bin/env python3
"""The drain of one queue on a MariaDB Galera cluster, from one node and
from three.

    build/dev/venv/bin/python bench/galera.py [--n 3000] [--workers 4] [--repeat 3]

Starts a private three-node cluster on loopback (tests/chaos/chaos_galera.py;
its folders under $LQ_CHAOS_SERVERS, else a temporary folder), then, for
each run, fills a fresh lease form table with N rows (published untimed)
and drains it with a no-op push handler: "1 node" is one broker on the
first node, "3 nodes" one broker on each node, each with the same workers.
The clock runs from the first subscription's start until every row is
acked; the table must then be empty. Runs alternate between the two, so a
slow moment of the machine weighs on both.

Prints one JSON line per setting (jobs/s, the median of the runs, every run,
the conflicts met: the subscriptions' "contention" stat) and a last line
with the ratio of three nodes to one. Needs the Python package (a build's
venv) and galera-4, rsync and mariadb-server (scripts/lib/common.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "chaos"))

import libqueue  # noqa: E402

from chaos_galera import GaleraCluster  # noqa: E402


def drain(urls: List[str], n: int, workers: int, run: int) -> Dict[str, float]:
    table = libqueue.Table("lq_bench_galera_%d" % run, payload="payload", attempt="attempt",
                           locked_until="locked_until")
    brokers = [libqueue.Broker(url) for url in urls]
    try:
        brokers[0].create_table(table)
        for start in range(0, n, 1000):
            brokers[0].publish_many(table, [b'{"job": %d}' % i
                                            for i in range(start, min(n, start + 1000))])
        subs = [b.subscribe(table, workers=workers, lease_ms=30000, poll_interval_ms=50)
                for b in brokers]
        began = time.monotonic()
        for sub in subs:
            sub.run(lambda delivery: None)
        deadline = began + 600
        while sum(s.stat("acked") for s in subs) < n:
            if time.monotonic() > deadline:
                raise SystemExit("the drain did not end within 600 s")
            time.sleep(0.005)
        seconds = time.monotonic() - began
        contention = sum(s.stat("contention") for s in subs)
        for sub in subs:
            sub.close()
        left = brokers[0].stats(table)
        if left.due + left.delayed + (left.in_work or 0):
            raise SystemExit("rows left in the table after the drain: %r" % left)
        return {"jobs_per_s": n / seconds, "contention": contention}
    finally:
        for broker in brokers:
            broker.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="rows per drain (default 3000)")
    parser.add_argument("--workers", type=int, default=4, help="workers per node (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    args = parser.parse_args()
    if args.n < 1 or args.workers < 1 or args.repeat < 1:
        parser.error("--n, --workers and --repeat take positive numbers")
    cluster = GaleraCluster(3)
    try:
        runs: Dict[int, List[Dict[str, float]]] = {1: [], 3: []}
        run = 0
        for _ in range(args.repeat):
            for nodes in (1, 3):
                run += 1
                runs[nodes].append(drain(cluster.urls[:nodes], args.n, args.workers, run))
    finally:
        cluster.close()
    median = {}
    for nodes in (1, 3):
        rates = [r["jobs_per_s"] for r in runs[nodes]]
        median[nodes] = statistics.median(rates)
        print(json.dumps({"db": "mariadb-galera", "form": "lease", "cluster_nodes": 3,
                          "nodes_draining": nodes, "workers_per_node": args.workers,
                          "n": args.n, "jobs_per_s": round(median[nodes], 1),
                          "runs": [round(r, 1) for r in rates],
                          "contention": [int(r["contention"]) for r in runs[nodes]]}),
              flush=True)
    print(json.dumps({"db": "mariadb-galera", "ratio_3_to_1": round(median[3] / median[1], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
