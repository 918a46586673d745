"""W1 through PgBouncer in transaction pooling against W1 on the server
itself: the C driver (lq_bench w1, workers(4), a no-op handler) drains a
fresh table of N rows through each URL in turn, K times, in each form of
--forms that works through the pooler. One JSON record per form on stdout
(bench/run collects them):

    python pooler.py --url DIRECT --pooled-url POOLED --lq-bench PATH [--forms F] [--quick] [--repeat K]

"ratio" is the median of the paired ratios (pooled / direct): what the
pooler's hop and statements sent unnamed, parsed at every run, cost.
"""

import argparse
import json
import statistics
import subprocess
import sys

from c_driver import lq_bench_w1  # bench/c_driver.py, beside this file

POOLED_FORMS = ("row_lock", "lease")


def through_pooler(args: argparse.Namespace, form: str) -> dict:
    n = 2000 if args.quick else 20000
    direct, pooled = [], []
    for _ in range(args.repeat):
        direct.append(lq_bench_w1(args.lq_bench, args.url, n, form=form))
        # The table is set up on the server itself: the driver's loader
        # prepares a named statement, which a pooled session may not keep.
        subprocess.run([args.lq_bench, "setup", "--url", args.url, "--form", form, "--n", str(n)],
                       check=True, capture_output=True)
        pooled.append(lq_bench_w1(args.lq_bench, args.pooled_url, n, "--no-setup", form=form))
    ratios = [p / d for p, d in zip(pooled, direct) if d]
    return dict(kind="pooler", db="postgresql", form=form, binding="c", workload="W1-pgbouncer",
                n=n, jobs_per_s=statistics.median(pooled), direct_jobs_per_s=statistics.median(direct),
                runs=pooled, direct_runs=direct, ratio=statistics.median(ratios) if ratios else None)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="the server itself")
    parser.add_argument("--pooled-url", required=True, help="through PgBouncer, ?pgbouncer=transaction")
    parser.add_argument("--lq-bench", required=True)
    parser.add_argument("--forms", default="row_lock,lease")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for form in args.forms.split(","):
        if form in POOLED_FORMS:
            print(json.dumps(through_pooler(args, form)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
