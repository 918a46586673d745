"""Works a real queue on SQLite through the Python package.

Publishes N jobs, works them with a pool of workers, shows a live progress
line, and ends with one JSON line counted from the database:
{"jobs": N, "processed": N, "seconds": S, "jobs_per_s": R}
"""

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time

import libqueue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--db", help="SQLite file (default: a new temporary one)")
    args = parser.parse_args()

    path = args.db or os.path.join(tempfile.mkdtemp(prefix="libqueue-demo-"), "demo.db")
    jobs = libqueue.Table("jobs", payload="payload", attempt="attempt",
                          locked_until="locked_until", processed_at="processed_at")

    def processed() -> int:
        with sqlite3.connect(path) as db:
            return db.execute("SELECT count(*) FROM jobs WHERE processed_at IS NOT NULL").fetchone()[0]

    with libqueue.Broker("sqlite:" + path) as broker:
        broker.create_table(jobs)  # creates it if missing, else checks it
        payloads = [json.dumps({"job": i, "task": "resize", "size": [640, 480]}).encode()
                    for i in range(args.jobs)]
        for start in range(0, len(payloads), 1000):
            broker.publish_many(jobs, payloads[start:start + 1000])
        print(f"published {args.jobs} jobs into {path}", file=sys.stderr)

        started = time.monotonic()
        with broker.subscribe(jobs, workers=args.workers, poll_interval_ms=100) as sub:
            sub.run(lambda delivery: json.loads(delivery.payload))  # returning acks
            done = 0
            while done < args.jobs:
                time.sleep(0.2)
                done = processed()
                rate = done / max(time.monotonic() - started, 1e-9)
                print(f"\r{done}/{args.jobs} processed, {rate:,.0f} jobs/s", end="",
                      file=sys.stderr, flush=True)
        seconds = time.monotonic() - started
        print(file=sys.stderr)

    done = processed()
    print(json.dumps({"jobs": args.jobs, "processed": done, "seconds": round(seconds, 3),
                      "jobs_per_s": round(done / seconds, 1)}))
    return 0 if done == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
