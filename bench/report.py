#!/usr/bin/env python3
"""Turns the records of a bench/run (one JSON object per line, from lq_bench,
the raw_* programs, w1.py and w1.lua) into the figures.

  report.py emit RECORDS --skip K      the figure lines of the library records
                                       after the first K (prints them; bench/run
                                       calls it after each cell)
  report.py final RECORDS OUTDIR       latest.json (every figure), latest.md
                                       (tables, targets), latest.png (gnuplot)
  report.py callgrind OUTFILE N        the cost per job in a callgrind output
                                       file (JSON on stdout)
  report.py median RECORDS [WORKLOAD]  the median of repeated runs (one record)
  report.py median RECORDS --against C_RECORDS
                                       the same, with the C driver's runs made
                                       in turn with them (as "c_runs")
  report.py cpu-record DB FORM N LIB RAW [WORKLOAD [LIB_N]]
                                       the client CPU record of a library and
                                       a raw callgrind output; LIB_N: the jobs
                                       the library's count covers, if not N

A figure pairs a library record with the raw record of the same database,
form and workload from the same run: {"db", "form", "binding", "workload",
"jobs_per_s", "p50_ms", "p99_ms", "raw_jobs_per_s", "ratio"} (null where not
applicable), followed by extras: n, max_ms (W3), vs_c (Python, Lua: the
median of their runs' rates over those of the C driver's runs made in turn
with them, same database and form), note, and the client CPU and memory
fields.
"""

import json
import os
import re
import subprocess
import sys
from collections import defaultdict

#: The bindings whose W1 runs in turn with C runs of their own, by how the
#: targets name them.
BINDINGS = {"python": "Python", "python-asyncio": "Python asyncio", "lua": "Lua"}
KEYS = ["db", "form", "binding", "workload", "jobs_per_s", "p50_ms", "p99_ms", "raw_jobs_per_s", "ratio"]
EXTRAS = ["n", "runs", "raw_runs", "c_runs", "max_ms", "vs_c", "poll_ms", "workers", "batch", "coalesce", "claims", "empty_claims", "max_lease_ahead_s",
          "instr_per_job", "raw_instr_per_job", "instr_ratio", "allocs_per_job", "libqueue_allocs_per_job",
          "raw_allocs_per_job", "cpu_us_per_job", "raw_cpu_us_per_job", "ctx_per_job", "raw_ctx_per_job",
          "futex_per_job", "raw_futex_per_job", "syscalls_per_job", "raw_syscalls_per_job", "rss_100k_kb", "rss_1m_kb", "rss_growth_pct",
          "anon_100k_kb", "anon_1m_kb", "sqlite_100k_kb", "sqlite_1m_kb", "note"]
DB_ORDER = {"sqlite": 0, "postgresql": 1, "mariadb": 2}


def load(path):
    records = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass
    return records


def raw_for(records, rec):
    """The raw record of the same database, form and workload (the latest);
    a variant of the library's settings (W1-nocoalesce) compares with W1."""
    found = None
    workload = rec.get("workload", "").replace("-nocoalesce", "")
    for r in records:
        if r.get("kind") == "raw" and r.get("db") == rec.get("db") and \
                r.get("workload") == workload and \
                (r.get("form") == rec.get("form") or rec.get("workload", "").startswith("W2")):
            found = r
    return found


def c_rate(records, rec):
    for r in records:
        if r.get("kind") == "lib" and r.get("binding") == "c" and r.get("db") == rec["db"] and \
                r.get("form") == rec["form"] and r.get("workload") == rec["workload"]:
            return r.get("jobs_per_s")
    return None


def paired_median(runs, base_runs):
    """Of runs made in turn with base runs (each just after its base), the
    median of their ratios, which cancels the machine's drift better than a
    ratio of medians; None unless both are whole and of one length."""
    if not runs or not base_runs or len(runs) != len(base_runs) or not all(runs) or not all(base_runs):
        return None
    ratios = sorted(a / b for a, b in zip(runs, base_runs))
    return round(ratios[(len(ratios) - 1) // 2], 3)


def rnd(v, digits=1):
    return None if v is None else round(v, digits)


def figure(records, rec):
    kind = rec.get("kind")
    out = {k: None for k in KEYS}
    for k in ("db", "form", "binding", "workload", "p50_ms", "p99_ms", "jobs_per_s"):
        out[k] = rec.get(k)
    if kind == "lib":
        raw = raw_for(records, rec) if rec.get("workload", "").startswith(("W1", "W2")) else None
        if raw:
            out["raw_jobs_per_s"] = raw.get("jobs_per_s")
            if out["jobs_per_s"] and out["raw_jobs_per_s"]:
                out["ratio"] = round(out["jobs_per_s"] / out["raw_jobs_per_s"], 3)
            # Repeated in turn: each library run over the raw run just before it.
            paired = paired_median(rec.get("runs"), raw.get("runs")) if rec.get("binding") == "c" else None
            if paired is not None:
                out["ratio"] = paired
                out["raw_runs"] = raw.get("runs")
        if rec.get("binding") in BINDINGS:
            # Run in turn with the C driver's own runs; else over its median.
            out["vs_c"] = paired_median(rec.get("runs"), rec.get("c_runs"))
            c = c_rate(records, rec)
            if out["vs_c"] is None and c and rec.get("jobs_per_s"):
                out["vs_c"] = round(rec["jobs_per_s"] / c, 3)
    for k in EXTRAS:
        if k in rec and k not in out:
            out[k] = rec[k]
    if rec.get("workload") == "W1-rss":
        a, b = rec.get("rss_at_100000_kb"), rec.get("rss_at_1000000_kb")
        out["rss_100k_kb"], out["rss_1m_kb"] = a, b
        out["rss_growth_pct"] = round((b - a) / a * 100, 2) if a and b and a > 0 and b > 0 else None
        out["anon_100k_kb"] = rec.get("anon_at_100000_kb")
        out["anon_1m_kb"] = rec.get("anon_at_1000000_kb")
        out["sqlite_100k_kb"] = rec.get("sqlite_at_100000_kb")
        out["sqlite_1m_kb"] = rec.get("sqlite_at_1000000_kb")
        out["raw_jobs_per_s"] = out["ratio"] = None
    return out


def figures(records):
    """The figures of the records, in order; flow control's come as measured."""
    measured = ("flow", "ops", "retention", "pooler", "scale", "bigtable")  # as their programs made them
    return [figure(records, r) if r.get("kind") not in measured else r
            for r in records if r.get("kind") in ("lib", "cpu") + measured]


def cpu_record(db, form, n, lib_out, raw_out, workload="W1-cpu", lib_n=None):
    """The W1-cpu record from the callgrind outputs of the library and raw runs
    (the library's covering lib_n jobs, when it counted after a warm-up)."""
    rec = {"kind": "cpu", "db": db, "form": form, "binding": "c", "workload": workload, "n": int(n),
           "jobs_per_s": None}
    notes = []
    try:
        lib = callgrind(lib_out, int(lib_n or n))
        rec.update(instr_per_job=lib["instr_per_job"], allocs_per_job=lib["allocs_per_job"],
                   libqueue_allocs_per_job=lib["libqueue_allocs_per_job"])
        notes.append("library self cost/job by object: " + ", ".join(
            "%s %s" % (k, v) for k, v in lib["self_ir_per_job_by_object"].items()))
    except (OSError, ValueError) as e:
        notes.append("library run failed: %s" % e)
    try:
        raw = callgrind(raw_out, n)
        rec.update(raw_instr_per_job=raw["instr_per_job"], raw_allocs_per_job=raw["allocs_per_job"])
        if rec.get("instr_per_job"):
            rec["instr_ratio"] = round(rec["instr_per_job"] / raw["instr_per_job"], 2)
    except (OSError, ValueError) as e:
        notes.append("raw run failed: %s" % e)
    rec["note"] = "; ".join(notes)
    return rec


def emit(path, skip):
    records = load(path)
    figs = figures(records)
    for f in figs[skip:]:
        print(json.dumps(f), flush=True)


# ---------------------------------------------------------------- callgrind

def callgrind(path, n):
    """Total Ir of the instrumented part, per job; calls to the allocator,
    all of them and those made by libqueue's own code; self cost by object."""
    names = {}
    obj_names = {}
    cur_ob = cur_fn = None
    fn_ob = {}
    self_ir = defaultdict(int)
    incl_calls = defaultdict(int)  # inclusive cost of calls made by fn to callee
    allocs = 0
    lq_allocs = 0
    after_calls = False
    callee = None
    total = None
    alloc_names = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc"}

    def resolve(table, text):
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), text)

    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                cur_ob = resolve(obj_names, line[3:])
            elif line.startswith("cob="):
                resolve(obj_names, line[4:])
            elif line.startswith("fn="):
                cur_fn = resolve(names, line[3:])
                fn_ob.setdefault(cur_fn, cur_ob)
            elif line.startswith("cfn="):
                callee = resolve(names, line[4:])
            elif line.startswith("calls="):
                count = int(line[6:].split()[0])
                after_calls = True
                if callee in alloc_names:
                    allocs += count
                    if cur_ob and "libqueue" in cur_ob:
                        lq_allocs += count
            elif line.startswith(("totals:", "summary:")):
                total = int(line.split()[1])
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if len(parts) < 2:
                    continue
                ir = int(parts[1])
                if after_calls:
                    incl_calls[(cur_fn, callee)] += ir
                    after_calls = False
                else:
                    self_ir[cur_fn] += ir
    by_object = defaultdict(int)
    for fn, ir in self_ir.items():
        ob = fn_ob.get(fn) or "?"
        by_object[os.path.basename(ob)] += ir
    if total is None:
        total = sum(self_ir.values())
    n = max(int(n), 1)
    top = sorted(by_object.items(), key=lambda kv: -kv[1])[:8]
    return {
        "total_ir": total,
        "instr_per_job": round(total / n),
        "allocs_per_job": round(allocs / n, 1),
        "libqueue_allocs_per_job": round(lq_allocs / n, 1),
        "self_ir_per_job_by_object": {k: round(v / n) for k, v in top},
    }


# ------------------------------------------------------------------ tables

def fmt(v, digits=0):
    if v is None:
        return "-"
    if isinstance(v, float) and digits:
        return "%.*f" % (digits, v)
    if isinstance(v, (int, float)):
        return "{:,.0f}".format(v) if abs(v) >= 100 else "%.2f" % v
    return str(v)


def find(figs, **want):
    for f in figs:
        if all(f.get(k) == v for k, v in want.items()):
            return f
    return None


def targets(figs):
    """(figure, target, measured, met, by how much) rows."""
    rows = []

    def add(name, target, measured, met, margin):
        rows.append((name, target, measured, "yes" if met else ("n/a" if met is None else "**no**"), margin))

    def ratio_target(name, want, minimum, label="raw"):
        f = find(figs, **want)
        if not f or f.get("ratio") is None:
            note = (f or {}).get("note") or "not measured"
            add(name, ">= %.2fx %s" % (minimum, label), note, None if not f else False, "")
            return
        r = f["ratio"]
        add(name, ">= %.2fx %s" % (minimum, label),
            "%s/s vs %s/s = %.2fx" % (fmt(f["jobs_per_s"]), fmt(f["raw_jobs_per_s"]), r),
            r >= minimum, "%+.0f%% of the target" % ((r / minimum - 1) * 100))

    def abs_target(name, want, minimum):
        f = find(figs, **want)
        if not f or f.get("jobs_per_s") is None:
            add(name, ">= %s/s" % fmt(minimum), (f or {}).get("note") or "not measured", None, "")
            return
        v = f["jobs_per_s"]
        add(name, ">= %s/s" % fmt(minimum), "%s/s" % fmt(v), v >= minimum,
            "%.2fx the target" % (v / minimum))

    ratio_target("PG W1 row lock, 4 workers", dict(db="postgresql", form="row_lock", binding="c", workload="W1"), 0.9)
    for f in (f for f in figs if f.get("kind") == "flow"):
        name = "%s %s %s" % (f["db"], f["workload"], f.get("form", "lease"))
        if f["workload"] == "F-limit" and f.get("ratio") is not None:
            add(name, ">= 0.90x unlimited", "%.2fx" % f["ratio"], f["ratio"] >= 0.9,
                "%+.0f%% of the target" % ((f["ratio"] / 0.9 - 1) * 100))
        elif f["workload"] == "F-util":
            add(name, ">= 0.90 busy", "%.2f" % f["busy_fraction"], f["busy_fraction"] >= 0.9, "")
        elif f["workload"] == "F-rate":
            ok = 0.95 <= f["ratio"] <= 1.0 and f.get("window_ok")
            add(name, "0.95-1.00, window kept", "%.2f" % f["ratio"], ok, "")
    for f in (f for f in figs if f.get("kind") == "ops"):
        add("%s O-stats, %d rows" % (f["db"], f["rows"]), "< 1000 ms", "%.0f ms" % f["stats_ms"],
            f["stats_ms"] < 1000, "%.2fx raw exact counts" % f["ratio"])
    for f in (f for f in figs if f.get("workload") == "W4-scale"):
        add("%s W4 %s, 1 -> 8 processes%s" % (f["db"], f["form"], ", pool_size %d" % f["pool"]
                                                   if f.get("pool") else ""),
            "no fall (8 >= 0.95x 1)",
            "%.2fx" % f["ratio"] if f.get("ratio") else "-", f.get("ok"),
            "raw loop %.2fx" % f["raw_ratio"] if f.get("raw_ratio") else "")
    for f in (f for f in figs if f.get("workload") == "W4-idle"):
        add("%s W4 idle fleet %s, 8 x workers(8)" % (f["db"], f["form"]),
            "<= %s claims/s" % fmt(f["bound_per_s"]), "%s claims/s (server: %s)" % (
                fmt(f["claims_per_s"], 1), fmt(f.get("server_claims_per_s"), 1)), f.get("ok"), "")
    for f in (f for f in figs if f.get("workload") == "B-bigtable"):
        add("%s B-claim %s, %s rows %s" % (f["db"], f["form"], fmt(f["rows"]), f["state"]),
            ">= 0.80x empty", "%.2fx" % f["ratio"], f.get("ok"), "")
    for f in (f for f in figs if f.get("workload") == "R-retention"):
        add("%s R-retention, %d finished rows" % (f["db"], f["finished_rows"]), ">= 0.90x empty",
            "%.2fx" % f["lib_ratio"], f["lib_ratio"] >= 0.9, "raw loop %.2fx" % f["raw_ratio"])
    abs_target("PG W1 lease, 4 workers (coalesced settlements)", dict(db="postgresql", form="lease", binding="c", workload="W1"), 15000)
    for form in ("row_lock", "lease"):
        ratio_target("PG W1 best settings (%s, batch 100)" % form,
                     dict(db="postgresql", form=form, binding="c", workload="W1-batch"), 0.85, "raw batch loop")
    ratio_target("PG W2 single", dict(db="postgresql", binding="c", workload="W2-single"), 0.9)
    abs_target("PG W2 bulk (2x graphile-worker 25k/s)", dict(db="postgresql", binding="c", workload="W2-bulk"), 50000)
    f = find(figs, db="postgresql", binding="c", workload="W3-notify")
    if f and f.get("p50_ms") is not None:
        add("PG W3 with NOTIFY p50 / p99", "<= 2 / <= 8 ms", "%.2f / %.2f ms (%s)" % (f["p50_ms"], f["p99_ms"], f.get("form")),
            f["p50_ms"] <= 2 and f["p99_ms"] <= 8, "p50 %.2fx, p99 %.2fx the bound" % (f["p50_ms"] / 2, f["p99_ms"] / 8))
    else:
        add("PG W3 with NOTIFY p50 / p99", "<= 2 / <= 8 ms", "not measured", None, "")
    ratio_target("MariaDB W1 row lock, 4 workers", dict(db="mariadb", form="row_lock", binding="c", workload="W1"), 0.9)
    ratio_target("MariaDB W1 best (row lock, batch 100)", dict(db="mariadb", form="row_lock", binding="c", workload="W1-batch"), 0.85, "raw batch loop")
    abs_target("SQLite W1 lease, 4 workers", dict(db="sqlite", form="lease", binding="c", workload="W1"), 30000)
    w1 = find(figs, db="sqlite", form="lease", binding="c", workload="W1-w1")
    w8 = find(figs, db="sqlite", form="lease", binding="c", workload="W1-w8")
    if w1 and w8 and w1.get("jobs_per_s") and w8.get("jobs_per_s"):
        r = w8["jobs_per_s"] / w1["jobs_per_s"]
        add("SQLite W1, 1 -> 8 workers", "no fall (8 >= 0.95x 1)", "%s/s -> %s/s (%.2fx)" % (fmt(w1["jobs_per_s"]), fmt(w8["jobs_per_s"]), r),
            r >= 0.95, "%+.0f%%" % ((r - 1) * 100))
    ratio_target("SQLite W2 single", dict(db="sqlite", binding="c", workload="W2-single"), 0.9)
    for f in figs:
        if f.get("binding") in BINDINGS and f.get("workload") == "W1":
            v = f.get("vs_c")
            add("%s no-op handler vs C, %s %s" % (BINDINGS[f["binding"]], f["db"], f["form"]), ">= 0.70x C",
                "%s/s = %.2fx C" % (fmt(f.get("jobs_per_s")), v) if v is not None else (f.get("note") or "-"),
                None if v is None else v >= 0.7, "" if v is None else "%+.0f%%" % ((v / 0.7 - 1) * 100))
    for f in figs:
        if f.get("workload") == "W1-cpu" and f.get("db") == "postgresql" and f.get("form") == "row_lock":
            v = f.get("instr_per_job")
            add("client CPU per job, PG row lock", "<= 15k instructions", "%s instructions" % fmt(v),
                v is not None and v <= 15000, "%.2fx the bound" % (v / 15000) if v else "")
    f = find(figs, workload="W1-rss")
    if f and f.get("rss_growth_pct") is not None:
        g = f["rss_growth_pct"]
        add("RSS growth 100k -> 1M jobs (SQLite)", "<= 5%", "%s kB -> %s kB (%+.1f%%)" % (fmt(f["rss_100k_kb"]), fmt(f["rss_1m_kb"]), g),
            g <= 5, "")
    else:
        add("RSS growth 100k -> 1M jobs (SQLite)", "<= 5%", "not measured (full run only)", None, "")
    return rows


def flow_measured(f):
    """A flow control figure in words."""
    if f["workload"] == "F-limit":
        return "W1 with concurrency=1000 %s/s, without %s/s: %.2fx" % (
            fmt(f.get("jobs_per_s")), fmt(f.get("unlimited_jobs_per_s")), f.get("ratio") or 0)
    if f["workload"] == "F-util":
        return "concurrency=4, 3 processes x 4 workers, 20 ms handlers: %.2f of the limit busy" % (
            f.get("busy_fraction") or 0)
    return "rate_limit=20/s, 2 processes, %d s: %d starts of %d allowed (%.2f), window %s" % (
        f.get("seconds", 0), f.get("starts", 0), f.get("allowed", 0), f.get("ratio") or 0,
        "kept" if f.get("window_ok") else "**broken**")


def markdown(figs, meta):
    lines = ["# libqueue benchmarks: latest run", ""]
    if meta:
        lines += ["%s" % meta, ""]
    lines += ["## Throughput (W1 drain, W2 enqueue)", "",
              "| db | form | binding | workload | jobs/s | raw jobs/s | lib / raw | vs C | p50 ms | p99 ms | note |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    order = sorted((f for f in figs if f["workload"].startswith(("W1", "W2")) and f.get("kind") != "pooler"
                    and f["workload"] not in ("W1-cpu", "W1-batch-cpu", "W1-rss", "W1-sys")),
                   key=lambda f: (DB_ORDER.get(f["db"], 9), f["workload"].startswith("W2"), f.get("form") or "",
                                  f["workload"], ["c", "python", "python-asyncio", "lua"].index(f["binding"]) if f["binding"] in ("c", "python", "python-asyncio", "lua") else 9))
    for f in order:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            f["db"], f.get("form") or "-", f["binding"], f["workload"], fmt(f["jobs_per_s"]),
            fmt(f["raw_jobs_per_s"]), "-" if f["ratio"] is None else "%.2f" % f["ratio"],
            "-" if f.get("vs_c") is None else "%.2f" % f["vs_c"], fmt(f["p50_ms"], 2), fmt(f["p99_ms"], 2),
            (f.get("note") or "").replace("|", "/")))
    lat = [f for f in figs if f["workload"].startswith("W3")]
    if lat:
        lines += ["", "## Latency (W3: enqueue to handler start, another process publishing)", "",
                  "| db | form | wake-up | poll interval ms | p50 ms | p99 ms | max ms | note |",
                  "|---|---|---|---:|---:|---:|---:|---|"]
        for f in sorted(lat, key=lambda f: (DB_ORDER.get(f["db"], 9), f.get("form") or "", f["workload"])):
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                f["db"], f.get("form"), "LISTEN/NOTIFY" if f["workload"] == "W3-notify" else "polling",
                fmt(f.get("poll_ms")), fmt(f["p50_ms"], 2), fmt(f["p99_ms"], 2), fmt(f.get("max_ms"), 2), f.get("note") or ""))
    cpu = [f for f in figs if f["workload"] in ("W1-cpu", "W1-batch-cpu")]
    if cpu:
        lines += ["", "## Client CPU per delivered job (callgrind, W1 N=2000, the drain only)", "",
                  "| db | form | workload | library instructions/job | raw loop instructions/job | library / raw | allocations/job (libqueue's own) | raw allocations/job |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        for f in cpu:
            lines.append("| %s | %s | %s | %s | %s | %s | %s (%s) | %s |" % (
                f["db"], f["form"], "W1" if f["workload"] == "W1-cpu" else "W1-batch (100)", fmt(f.get("instr_per_job")), fmt(f.get("raw_instr_per_job")),
                "-" if not f.get("instr_ratio") else "%.2f" % f["instr_ratio"], fmt(f.get("allocs_per_job"), 1),
                fmt(f.get("libqueue_allocs_per_job"), 1), fmt(f.get("raw_allocs_per_job"), 1)))
    sysf = [f for f in figs if f["workload"] == "W1-sys"]
    if sysf:
        lines += ["", "## Client cost per job in the kernel's view (perf stat, software counters, W1 at full speed)", "",
                  "| db | form | CPU µs/job lib / raw | context switches/job lib / raw | futex calls/job lib / raw | system calls/job lib / raw |",
                  "|---|---|---:|---:|---:|---:|"]
        for f in sysf:
            pairs = []
            for key in ("cpu_us_per_job", "ctx_per_job", "futex_per_job", "syscalls_per_job"):
                pairs.append("%s / %s" % (fmt(f.get(key), 1), fmt(f.get("raw_" + key), 1)))
            lines.append("| %s | %s | %s |" % (f["db"], f["form"], " | ".join(pairs)))
    rss = [f for f in figs if f["workload"] == "W1-rss"]
    for f in rss:
        lines += ["", "## Memory (W1 on SQLite lease, one process)", "",
                  "RSS after 100k jobs: %s kB; after 1M jobs: %s kB; growth %+.1f%%. Of it anonymous "
                  "memory (the heaps, RssAnon): %s kB and %s kB, of which SQLite held %s kB and %s kB "
                  "(sqlite3_memory_used); the rest maps files (code, SQLite's WAL index)." % (
                      fmt(f.get("rss_100k_kb")), fmt(f.get("rss_1m_kb")), f.get("rss_growth_pct") or 0,
                      fmt(f.get("anon_100k_kb")), fmt(f.get("anon_1m_kb")),
                      fmt(f.get("sqlite_100k_kb")), fmt(f.get("sqlite_1m_kb")))]
    flow = [f for f in figs if f.get("kind") == "flow"]
    if flow:
        lines += ["", "## Flow control", "",
                  "| db | figure | form | measured |", "|---|---|---|---|"]
        for f in sorted(flow, key=lambda f: (DB_ORDER.get(f["db"], 9), f["workload"],
                                             f.get("form", ""))):
            lines.append("| %s | %s | %s | %s |" % (f["db"], f["workload"], f.get("form", "lease"),
                                                    flow_measured(f)))
    pooled = [f for f in figs if f.get("kind") == "pooler"]
    if pooled:
        lines += ["", "## Through PgBouncer (transaction pooling, W1, C driver)", "",
                  "| db | form | through PgBouncer jobs/s | direct jobs/s | pooled / direct |",
                  "|---|---|---:|---:|---:|"]
        for f in pooled:
            lines.append("| %s | %s | %s | %s | %s |" % (
                f["db"], f["form"], fmt(f.get("jobs_per_s")), fmt(f.get("direct_jobs_per_s")),
                "-" if f.get("ratio") is None else "%.2f" % f["ratio"]))
    scale = [f for f in figs if f.get("workload") == "W4"]
    if scale:
        lines += ["", "## Processes on one queue (W4: each process workers(4), C handler)", "",
                  "| db | form | pool_size | processes | jobs/s | vs 1 process | server CPU µs/job | statements/job | claims/job at the server "
                  "| raw jobs/s | raw vs 1 process | raw server CPU µs/job |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for f in sorted(scale, key=lambda f: (DB_ORDER.get(f["db"], 9), f["form"], f.get("pool") or 0,
                                              f["processes"])):
            lines.append("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                f["db"], f["form"], f.get("pool") or "default", f["processes"], fmt(f.get("jobs_per_s")), fmt(f.get("vs_1"), 2),
                fmt(f.get("server_cpu_us_per_job"), 1), fmt(f.get("statements_per_job"), 2),
                fmt(f.get("server_claims_per_job"), 2), fmt(f.get("raw_jobs_per_s")),
                fmt(f.get("raw_vs_1"), 2), fmt(f.get("raw_server_cpu_us_per_job"), 1)))
    for f in (f for f in figs if f.get("workload") == "W4-idle"):
        lines += ["", "Idle fleet, %s %s: %d processes x workers(%d), poll interval %d ms, %s s: "
                  "%s claims/s by the processes' counts, %s at the server, %s statements/s, "
                  "server CPU %s%% of a core; bound %s claims/s." % (
                      f["db"], f["form"], f["processes"], f["workers"], f["poll_ms"], f["seconds"],
                      fmt(f["claims_per_s"], 1), fmt(f.get("server_claims_per_s"), 1),
                      fmt(f.get("statements_per_s"), 1), fmt(f.get("server_cpu_pct"), 2),
                      fmt(f["bound_per_s"]))]
    big = [f for f in figs if f.get("workload") == "B-claim"]
    if big:
        lines += ["", "## Claims on big tables (B-claim: workers(4), Python no-op handler)", "",
                  "| db | form | state | rows besides the run's | jobs/s | runs |", "|---|---|---|---:|---:|---|"]
        for f in big:
            lines.append("| %s | %s | %s | %s | %s | %s |" % (
                f["db"], f["form"], f["state"], "{:,}".format(f["finished_rows"] + f["queued_rows"]),
                fmt(f["jobs_per_s"]), ", ".join(fmt(r) for r in f.get("runs", []))))
        for f in (f for f in big if f.get("explain")):
            e = f["explain"]
            lines += ["", "The claim on %s %s, %s queued rows, and its EXPLAIN:" % (
                f["db"], f["form"], "{:,}".format(f["queued_rows"])), "",
                "    " + (e.get("statement") or e.get("note") or "")]
            lines += [""] + ["    " + line for line in e.get("plan", [])]
    lines += ["", "## Targets", "", "| figure | target | measured | met | margin |", "|---|---|---|---|---|"]
    for row in targets(figs):
        lines.append("| %s | %s | %s | %s | %s |" % row)
    lines.append("")
    return "\n".join(lines)


def chart(figs, outdir):
    """latest.png: library (C handler) vs raw loop per database, log scale."""
    dbs = sorted({f["db"] for f in figs if f.get("raw_jobs_per_s") or f.get("jobs_per_s")}, key=lambda d: DB_ORDER.get(d, 9))
    panels = []
    for db in dbs:
        rows = []
        for f in sorted(figs, key=lambda f: (f["workload"].startswith("W2"), f["workload"], f.get("form") or "")):
            if f["db"] != db or f["binding"] != "c" or not f["workload"].startswith(("W1", "W2")) or f.get("kind") == "pooler":
                continue
            if f["workload"] in ("W1-cpu", "W1-batch-cpu", "W1-rss", "W1-sys") or (f["jobs_per_s"] is None and f["raw_jobs_per_s"] is None):
                continue
            label = "%s %s" % (f["workload"], f.get("form") or "")
            rows.append((label.strip().replace("_", "-"), f["jobs_per_s"], f["raw_jobs_per_s"], f.get("ratio")))
        if rows:
            panels.append((db, rows))
    if not panels:
        return None
    script = ["set terminal pngcairo size %d,520 font 'sans,9'" % (480 * len(panels)),
              "set output '%s'" % os.path.join(outdir, "latest.png"),
              "set datafile missing '-'", "set style data histograms", "set style histogram clustered gap 1",
              "set style fill solid 0.85 border -1", "set boxwidth 0.9", "set logscale y", "set grid ytics",
              "set ylabel 'jobs/s (log scale)'", "set xtics rotate by -40 nomirror", "set key below",
              "set yrange [100:1000000]", "set offsets 0.5, 0.5, 0, 0",
              "set multiplot layout 1,%d title 'libqueue vs raw SQL loop, same statements, same run'" % len(panels)]
    for db, rows in panels:
        data = os.path.join(outdir, "latest-%s.dat" % db)
        with open(data, "w") as f:
            for label, lib, raw, paired in rows:
                ratio = "%.2fx" % (paired if paired else lib / raw) if lib and raw else "-"
                top = max(v for v in (lib, raw, 100) if v)
                f.write('"%s" %s %s %.1f "%s"\n' % (label, "-" if lib is None else "%.1f" % lib,
                                                   "-" if raw is None else "%.1f" % raw, top * 1.5, ratio))
        script += ["set title '%s (labels: library / raw, as in latest.md)'" % db,
                   "plot '%s' using 2:xtic(1) title 'library (C handler)' lc rgb '#3b6ea5', "
                   "'' using 3 title 'raw SQL loop' lc rgb '#c8553d', "
                   "'' using 0:4:5 with labels font 'sans,8' notitle" % data]
    script.append("unset multiplot")
    path = os.path.join(outdir, "latest.gp")
    with open(path, "w") as f:
        f.write("\n".join(script) + "\n")
    try:
        subprocess.run(["gnuplot", path], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write("gnuplot failed: %s\n" % getattr(e, "stderr", e))
        return None
    finally:
        for db, _ in panels:
            try:
                os.remove(os.path.join(outdir, "latest-%s.dat" % db))
            except OSError:
                pass
        os.remove(path)
    return os.path.join(outdir, "latest.png")


def final(path, outdir):
    records = load(path)
    figs = figures(records)
    meta = next((r.get("text") for r in records if r.get("kind") == "meta"), "")
    with open(os.path.join(outdir, "latest.json"), "w") as f:
        for fig in figs:
            f.write(json.dumps(fig) + "\n")
    with open(os.path.join(outdir, "latest.md"), "w") as f:
        f.write(markdown(figs, meta))
    chart(figs, outdir)


def perf_counts(path):
    """Counters of a `perf stat -x,` output file: {event: value}."""
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) < 3 or line.startswith("#"):
                continue
            try:
                counts[parts[2]] = float(parts[0])
            except ValueError:
                pass
    return counts


def perf_record(db, form, n, lib_path, raw_path):
    """The W1-sys record: client CPU time, context switches and system calls
    per job, library vs raw loop, from perf's software counters."""
    n = max(int(n), 1)
    rec = {"kind": "cpu", "db": db, "form": form, "binding": "c", "workload": "W1-sys", "n": n,
           "jobs_per_s": None}
    names = {"task-clock": "cpu_us_per_job", "context-switches": "ctx_per_job",
             "syscalls:sys_enter_futex": "futex_per_job", "raw_syscalls:sys_enter": "syscalls_per_job"}
    for prefix, path in (("", lib_path), ("raw_", raw_path)):
        try:
            counts = perf_counts(path)
        except OSError:
            continue
        for event, key in names.items():
            if event in counts:
                v = counts[event] / n
                rec[prefix + key] = round(v * 1000 if event == "task-clock" else v, 1)  # msec -> us
    rec["note"] = ("the library driver polls its counter every millisecond (about one "
                   "syscall and one context switch per ms of the run)")
    return rec


def median(path, workload=None, against=None):
    """Of the records in a file (the repeats of one measurement), the one with
    the median rate, with every rate in "runs". A failed repeat (no rate) is
    kept when every repeat failed. With `against`, the file of the C driver's
    runs made in turn with these: their rates go in "c_runs"."""
    records = [r for r in load(path) if workload is None or r.get("workload") == workload]
    if not records:
        return
    good = sorted((r for r in records if r.get("jobs_per_s")), key=lambda r: r["jobs_per_s"])
    if not good:
        print(json.dumps(records[-1]))
        return
    rec = dict(good[(len(good) - 1) // 2])
    rec["runs"] = [r.get("jobs_per_s") for r in records]
    if against:
        rec["c_runs"] = [r.get("jobs_per_s") for r in load(against)]
    elif len(records) == 1:
        del rec["runs"]
    print(json.dumps(rec))


def main(argv):
    if len(argv) >= 3 and argv[1] == "emit":
        skip = int(argv[argv.index("--skip") + 1]) if "--skip" in argv else 0
        emit(argv[2], skip)
    elif len(argv) == 5 and argv[1] == "median" and argv[3] == "--against":
        median(argv[2], against=argv[4])
    elif len(argv) in (3, 4) and argv[1] == "median":
        median(argv[2], argv[3] if len(argv) == 4 else None)
    elif len(argv) == 4 and argv[1] == "final":
        final(argv[2], argv[3])
    elif len(argv) == 7 and argv[1] == "perf-record":
        print(json.dumps(perf_record(*argv[2:7])))
    elif len(argv) in (7, 8, 9) and argv[1] == "cpu-record":
        print(json.dumps(cpu_record(*argv[2:])))
    elif len(argv) == 4 and argv[1] == "callgrind":
        print(json.dumps(callgrind(argv[2], argv[3])))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
