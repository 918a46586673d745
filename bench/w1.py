"""W1 drain through the Python package: a no-op handler in push mode, or
with ``--asyncio`` a no-op ``async def`` handler under ``run_async`` (as many
at once as workers), on the event loop.

The table is preloaded by ``lq_bench setup`` (untimed). The clock starts when
``sub.run`` is called and stops when the subscription has settled N
deliveries (its ``settled`` counter); bench/run then checks the table is
empty. Prints one JSON record, as lq_bench does::

    python w1.py --url URL --form lease --n 20000 [--workers 4] [--poll-ms 50] [--asyncio]
"""

import argparse
import asyncio
import json
import sys
import time

import libqueue


def table(form: str) -> libqueue.Table:
    columns = dict(payload="payload", attempt="attempt")
    if form == "lease":
        columns["locked_until"] = "locked_until"
    if form == "advisory":
        columns["advisory_lock"] = "job-{id}"
    return libqueue.Table("lq_bench_jobs", **columns)


def db_name(url: str) -> str:
    if url.startswith("sqlite:"):
        return "sqlite"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql"
    return "mariadb"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--form", required=True)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--poll-ms", type=int, default=50)
    parser.add_argument("--asyncio", action="store_true")
    args = parser.parse_args()
    if args.asyncio:
        return asyncio.run(drain_async(args))

    def noop(delivery: libqueue.Delivery) -> None:
        delivery.payload  # read it, as the C driver does

    record = {"kind": "lib", "db": db_name(args.url), "form": args.form, "binding": "python",
              "workload": "W1", "n": args.n}
    with libqueue.Broker(args.url) as broker:
        with broker.subscribe(table(args.form), workers=args.workers,
                              poll_interval_ms=args.poll_ms) as sub:
            started = time.monotonic()
            sub.run(noop)
            settled, last, last_change = 0, -1, started
            while settled < args.n:
                time.sleep(0.002)
                settled = sub.stat("settled")
                now = time.monotonic()
                if settled != last:
                    last, last_change = settled, now
                elif now - last_change > 60:
                    break
            seconds = time.monotonic() - started
            record.update(claims=sub.stat("claims"), empty_claims=sub.stat("empty_claims"))
    record.update(seconds=round(seconds, 3), workers=args.workers, poll_ms=args.poll_ms,
                  jobs_per_s=round(args.n / seconds, 1) if settled >= args.n else None,
                  note=None if settled >= args.n else "stalled: %d of %d settled" % (settled, args.n))
    print(json.dumps(record), flush=True)
    return 0 if settled >= args.n else 1


async def drain_async(args: argparse.Namespace) -> int:
    async def noop(delivery: libqueue.Delivery) -> None:
        delivery.payload  # read it, as the C driver does

    record = {"kind": "lib", "db": db_name(args.url), "form": args.form,
              "binding": "python-asyncio", "workload": "W1", "n": args.n}
    with libqueue.Broker(args.url) as broker:
        with broker.subscribe(table(args.form), workers=args.workers,
                              poll_interval_ms=args.poll_ms) as sub:
            started = time.monotonic()
            runner = asyncio.ensure_future(sub.run_async(noop, concurrency=args.workers))
            settled, last, last_change = 0, -1, started
            while settled < args.n and not runner.done():
                await asyncio.sleep(0.002)
                settled = sub.stat("settled")
                now = time.monotonic()
                if settled != last:
                    last, last_change = settled, now
                elif now - last_change > 60:
                    break
            seconds = time.monotonic() - started
            record.update(claims=sub.stat("claims"), empty_claims=sub.stat("empty_claims"))
            sub.stop()
            await runner
    record.update(seconds=round(seconds, 3), workers=args.workers, poll_ms=args.poll_ms,
                  jobs_per_s=round(args.n / seconds, 1) if settled >= args.n else None,
                  note=None if settled >= args.n else "stalled: %d of %d settled" % (settled, args.n))
    print(json.dumps(record), flush=True)
    return 0 if settled >= args.n else 1


if __name__ == "__main__":
    sys.exit(main())
