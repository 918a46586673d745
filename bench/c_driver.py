"""The C driver (lq_bench) run from the Python benchmarks."""

import json
import subprocess


def lq_bench_w1(lq_bench: str, url: str, n: int, *extra: str, form: str = "lease") -> float:
    """The rate of one W1 drain of the C driver, on a table it sets up."""
    out = subprocess.run([lq_bench, "w1", "--url", url, "--form", form, "--n", str(n),
                          "--workers", "4", "--poll-ms", "50", *extra],
                         check=True, capture_output=True, text=True).stdout
    rates = [json.loads(line).get("jobs_per_s") for line in out.splitlines()
             if line.startswith("{")]
    return float(rates[-1] or 0.0)
