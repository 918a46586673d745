"""The Python package as a user installs it without the repository or a
package index: the sdist built from python/ carries the C core and the
version written in libqueue.h, builds on its own into a fresh virtual
environment (Debian's cffi and setuptools seen through
--system-site-packages), and the package it installs works a job and brings
the ``libqueue`` command. Slow: it compiles the core."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any, List

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
STEP_TIMEOUT_S = 1800

#: Run by the venv's interpreter, away from the checkout.
JOB = r"""
import importlib.metadata
import sys

import libqueue

assert libqueue.__file__.startswith(sys.prefix), libqueue.__file__
jobs = libqueue.Table("jobs", payload="payload", attempt="attempt", locked_until="locked_until")
with libqueue.Broker("sqlite:" + sys.argv[1]) as broker:
    broker.create_table(jobs)
    broker.publish(jobs, b"from-the-sdist")
    with broker.subscribe(jobs) as sub:
        with sub.next(timeout=60) as delivery:
            payload = delivery.payload
            delivery.ack()
    assert broker.stats(jobs).due == 0
print(payload.decode(), importlib.metadata.version("libqueue"), libqueue.__version__)
"""


def header_version() -> str:
    text = (REPO / "libqueue" / "include" / "libqueue.h").read_text()
    return ".".join(re.search(r"^#define LQ_VERSION_%s (\d+)$" % part, text, re.M).group(1)
                    for part in ("MAJOR", "MINOR", "PATCH"))


def fresh_python_tree(dest: Path) -> Path:
    """python/ as a fresh checkout has it, under ``dest``: without the build,
    dist and egg-info of earlier builds (setuptools would take the file list
    an egg-info holds into the sdist), and with what its links point to at
    the same places, so that they resolve there as in the repository."""
    source = REPO / "python"
    shutil.copytree(source, dest / "python", symlinks=True, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", "_lq*"))
    for folder, dirs, files in os.walk(source):
        for name in dirs + files:
            link = Path(folder, name)
            if link.is_symlink():
                target = link.resolve()
                copy = dest / target.relative_to(REPO)
                copy.parent.mkdir(parents=True, exist_ok=True)
                if target.is_dir():
                    shutil.copytree(target, copy)
                else:
                    shutil.copy2(target, copy)
    return dest / "python"


def run(command: List[Any], cwd: Path) -> str:
    """Runs a step as a user would, offline: no PYTHONPATH, no pip
    configuration of this machine; its output is the failure's message."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    done = subprocess.run([str(c) for c in command], cwd=str(cwd), env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=STEP_TIMEOUT_S)
    assert done.returncode == 0, "%s failed:\n%s" % (command, done.stdout[-6000:])
    return done.stdout


def test_the_sdist_installs_offline_into_a_fresh_venv_and_works_a_job(tmp_path: Path) -> None:
    version = header_version()
    dist = tmp_path / "dist"
    tree = fresh_python_tree(tmp_path / "checkout")
    run([SYSTEM_PYTHON, "-m", "build", "--sdist", "--no-isolation", "--outdir", dist, tree],
        cwd=tmp_path)
    sdist = dist / ("libqueue-%s.tar.gz" % version)
    assert [p.name for p in dist.iterdir()] == [sdist.name]

    top = "libqueue-%s/" % version
    with tarfile.open(sdist) as tar:
        members = {m.name: m for m in tar.getmembers()}
        metadata = tar.extractfile(top + "PKG-INFO").read().decode()
    assert all(m.isfile() or m.isdir() for m in members.values())  # no links left
    src = REPO / "libqueue" / "src"
    core = sorted(str(p.relative_to(src.parent)) for p in src.rglob("*") if p.is_file())
    for name in ["LICENSE", "README.md", "libqueue_build.py", "csrc/include/libqueue.h",
                 "csrc/gen_cdef.py"] + ["csrc/" + path for path in core]:
        assert top + name in members, name
    assert "Version: %s\n" % version in metadata
    assert "License: MIT\n" in metadata
    assert "Classifier: License :: OSI Approved :: MIT License\n" in metadata

    venv = tmp_path / "venv"
    run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", venv], cwd=tmp_path)
    run([venv / "bin" / "pip", "install", "--no-build-isolation", "--no-index", "--no-cache-dir",
         sdist], cwd=tmp_path)

    out = run([venv / "bin" / "python", "-c", JOB, tmp_path / "queue.db"], cwd=tmp_path)
    assert out.split() == ["from-the-sdist", version, version]
    usage = run([venv / "bin" / "libqueue", "--help"], cwd=tmp_path)
    assert usage.startswith("usage: libqueue")
