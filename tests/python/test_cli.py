"""The ``libqueue`` command line on every database: a newcomer's whole path
from a fresh folder, each command's output and JSON, and each command's bad
input (one line on stderr, a non-zero exit status, nothing changed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, List, Optional
from urllib.parse import urlsplit

import pytest

import libqueue
from helpers import wait_until
from relay import Relay
from test_create_table import table_exists

REPO = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "libqueue"
TIMEOUT_S = 60


class Ran:
    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.status = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self) -> Any:
        """The JSON line, after what handlers printed."""
        return json.loads(self.out.splitlines()[-1])

    def __repr__(self) -> str:
        return "<exit %d, stdout %r, stderr %r>" % (self.status, self.out, self.err)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A fresh folder holding a copy of examples/, as a checkout's root does."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    return tmp_path


def cli(folder: Path, db: Any, *args: str, stdin: str = "", url: Optional[str] = None,
        script: bool = False, timeout: float = TIMEOUT_S) -> Ran:
    argv: List[str] = [str(CONSOLE_SCRIPT)] if script else [sys.executable, "-m", "libqueue"]
    env = dict(os.environ, LIBQUEUE_URL=url or db.url)
    proc = subprocess.run(argv + list(args), cwd=folder, env=env, input=stdin, text=True,
                          capture_output=True, timeout=timeout)
    return Ran(proc)


def refused(ran: Ran, status: int, *words: str) -> None:
    """A refusal as the command line promises it: the status, and one line
    on stderr naming what to fix."""
    assert ran.status == status, ran
    assert ran.err.count("\n") == 1 and ran.err.startswith("libqueue: "), ran
    for word in words:
        assert word in ran.err, ran


def test_a_newcomers_path(folder: Path, db: Any) -> None:
    assert CONSOLE_SCRIPT.exists(), "pip install puts the console script beside the interpreter"
    ran = cli(folder, db, "--table", "jobs", "init", script=True)
    assert ran.status == 0 and "ready" in ran.out, ran
    ran = cli(folder, db, "--table", "jobs", "enqueue", stdin="cat.png\ndog.png\nowl.png\n",
              script=True)
    assert ran.status == 0 and len(ran.out.split()) == 3, ran
    ran = cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize",
              "--until-idle", "0.5", script=True)
    assert ran.status == 0, ran
    assert sorted(line for line in ran.out.splitlines() if line.startswith("resizing")) == \
        ["resizing cat.png", "resizing dog.png", "resizing owl.png"]
    ran = cli(folder, db, "--table", "jobs", "stats", "--json", script=True)
    stats = ran.json()
    assert (stats["due"], stats["delayed"], stats["in_work"], stats["dead_letters"]) == \
        (0, 0, 0, 0), ran


def test_python_dash_m_is_the_same_command(folder: Path, db: Any) -> None:
    ran = cli(folder, db, "--help")
    assert ran.status == 0 and "exit status" in ran.out and "worker" in ran.out


def test_init_is_safe_to_repeat_and_creates_the_dead_letters(folder: Path, db: Any) -> None:
    for _ in range(2):
        assert cli(folder, db, "--table", "jobs", "init").status == 0
    assert db.scalar("SELECT count(*) FROM %s" % db.quote("jobs_dead")) == 0


def test_init_refuses_a_table_of_other_columns(folder: Path, db: Any) -> None:
    db.execute("CREATE TABLE %s (%s INTEGER PRIMARY KEY, %s VARCHAR(10))" % (
        db.quote("jobs"), db.quote("id"), db.quote("body")))
    ran = cli(folder, db, "--table", "jobs", "init")
    refused(ran, 1, "LQ_SCHEMA", "payload", "attempt")
    assert [r[0] for r in db.query("SELECT %s FROM %s" % (db.quote("id"), db.quote("jobs")))] == []


def test_init_refuses_a_form_the_database_cannot_serve(folder: Path, db: Any) -> None:
    ran = cli(folder, db, "--table", "jobs", "--form", "row_lock", "init")
    if db.dialect != "sqlite":
        assert ran.status == 0 and "row_lock form" in ran.out, ran
        return
    refused(ran, 2, "no row locks", "--form lease")
    assert not table_exists(db, "jobs")


def test_enqueue_takes_arguments_or_lines_and_its_options(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    ran = cli(folder, db, "--table", "jobs", "enqueue", "a", "b", "--json")
    assert ran.status == 0 and len(ran.json()["ids"]) == 2, ran
    ran = cli(folder, db, "--table", "jobs", "enqueue", "--delay-ms", "3600000",
              stdin="later\n\nlater too\n")
    assert ran.status == 0 and len(ran.out.split()) == 2, ran  # the blank line is no row
    stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
    assert (stats["due"], stats["delayed"]) == (2, 2)


def test_enqueue_refuses_numbers_and_text_the_library_cannot_take(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    huge = "99999999999999999999"
    refused(cli(folder, db, "--table", "jobs", "enqueue", "--delay-ms", huge, "x"), 2,
            "--delay-ms", huge)
    refused(cli(folder, db, "--table", "jobs", "enqueue", "--priority", "-" + huge, "x"), 2,
            "--priority")
    refused(cli(folder, db, "--table", "jobs", "cancel", huge), 2, "ID")
    # Bytes that are not UTF-8 in argv reach Python as lone surrogates.
    not_utf8 = os.fsdecode(b"\xff\xfe")
    refused(cli(folder, db, "--table", "jobs", "enqueue", "ok", not_utf8), 2,
            "PAYLOAD", "not valid UTF-8", "stdin")
    refused(cli(folder, db, "--table", "jobs", "enqueue", "--dedup-key", not_utf8, "x"), 2,
            "--dedup-key", "not valid UTF-8")
    assert cli(folder, db, "--table", "jobs", "stats", "--json").json()["due"] == 0
    # As stdin says: there the bytes are taken as they are.
    proc = subprocess.run([sys.executable, "-m", "libqueue", "--table", "jobs", "enqueue"],
                          cwd=folder, env=dict(os.environ, LIBQUEUE_URL=db.url),
                          input=b"\xff\xfe\n", capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc
    assert cli(folder, db, "--table", "jobs", "stats", "--json").json()["due"] == 1


def test_enqueue_refuses_an_unknown_table_and_creates_nothing(folder: Path, db: Any) -> None:
    refused(cli(folder, db, "--table", "jobs", "enqueue", "a"), 1, "does not exist",
            "libqueue --table jobs init")
    with pytest.raises(Exception):
        db.scalar("SELECT count(*) FROM %s" % db.quote("jobs"))


ON_A_TABLE = [["enqueue", "a"], ["stats"], ["cancel", "1"], ["pause"], ["resume"], ["doctor"],
              ["dead-letters", "list"], ["dead-letters", "purge", "--all"],
              ["prune", "--older-than", "1d"],
              ["worker", "examples.handlers:resize", "--until-idle", "0"]]


def test_a_missing_table_is_named_with_the_init_that_makes_it(folder: Path, db: Any) -> None:
    """In the command line's words: the library's verify_only is no option
    of the command line."""
    for command in ON_A_TABLE:
        ran = cli(folder, db, "--table", "jobs", *command)
        refused(ran, 1, "table jobs does not exist: create it with `libqueue --table jobs init`")
        assert "verify_only" not in ran.err and "create table" not in ran.err, ran
    ran = cli(folder, db, "--table", "jobs", "--form", "advisory", "stats")
    refused(ran, 1, "create it with `libqueue --table jobs --form advisory init`")
    (folder / "t.json").write_text('{"name": "other", "payload": "body"}')
    ran = cli(folder, db, "--table-file", "t.json", "stats")
    refused(ran, 1, "table other does not exist: create it with "
                    "`libqueue --table-file t.json init`")
    assert not table_exists(db, "jobs") and not table_exists(db, "other")
    # Its dead letters' table, which init makes too.
    cli(folder, db, "--table", "jobs", "init")
    db.execute("DROP TABLE %s" % db.quote("jobs_dead"))
    refused(cli(folder, db, "--table", "jobs", "stats"), 1,
            "table jobs_dead does not exist: create it with `libqueue --table jobs init`")
    assert cli(folder, db, "--table", "jobs", "init").status == 0
    assert cli(folder, db, "--table", "jobs", "stats").status == 0


def test_enqueue_refuses_a_field_the_table_lacks(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    refused(cli(folder, db, "--table", "jobs", "enqueue", "a", "--priority", "3"), 1,
            "priority")
    refused(cli(folder, db, "--table", "jobs", "enqueue", "a", "--header", "novalue"), 2,
            "NAME=VALUE")
    refused(cli(folder, db, "--table", "jobs", "enqueue"), 2, "nothing to enqueue")
    assert cli(folder, db, "--table", "jobs", "stats", "--json").json()["due"] == 0


def test_stats_shows_a_table_and_its_cap(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", stdin="x\n" * 7)
    ran = cli(folder, db, "--table", "jobs", "stats", "--cap", "5")
    head, row, attempts = ran.out.splitlines()
    assert head.split()[:3] == ["queue", "due", "delayed"]
    assert row.split()[:5] == ["jobs", "5+", "0", "0", "0"]
    assert attempts == "attempts: 1: 5"
    stats = cli(folder, db, "--table", "jobs", "stats", "--cap", "5", "--json").json()
    assert stats["capped"] and stats["due"] == 5


def test_stats_watch_redraws_until_interrupted(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    # SIGINT as a terminal gives it, even where the suite runs with SIGINT
    # ignored (started in the background), which the child would inherit.
    proc = subprocess.Popen([sys.executable, "-m", "libqueue", "--table", "jobs", "stats",
                             "--watch"], cwd=folder, env=dict(os.environ, LIBQUEUE_URL=db.url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(2.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    assert out.count("queue  ") >= 2


@pytest.fixture
def relay(db: Any) -> Any:
    """A TCP relay to the test server, to cut for an outage."""
    parts = urlsplit(db.url)
    r = Relay(parts.hostname, parts.port)
    yield r
    r.close()


@pytest.mark.dialect("postgresql", "mysql")
def test_stats_watch_goes_on_through_an_outage(folder: Path, db: Any, relay: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    out, err = folder / "out", folder / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "libqueue", "--table", "jobs", "stats",
                                 "--watch", "--json"], cwd=folder,
                                env=dict(os.environ, LIBQUEUE_URL=relay.url(db.url)),
                                stdout=stdout, stderr=stderr, text=True,
                                # SIGINT as a terminal gives it (see above)
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        def figures() -> List[Any]:
            return [json.loads(line) for line in out.read_text().splitlines()]
        wait_until(figures, what="the first figures")
        relay.cut()
        wait_until(lambda: err.read_text(), what="the failed read said")
        cli(folder, db, "--table", "jobs", "enqueue", "a")  # straight to the server
        time.sleep(1.5)  # more failed reads
        assert proc.poll() is None, err.read_text()
        relay.restore()
        wait_until(lambda: figures()[-1]["due"] == 1, what="the figures once the server is back")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err.read_text()
    assert figures()[0]["due"] == 0
    lines = err.read_text().splitlines()
    assert lines and all(line.startswith("libqueue: ") for line in lines), lines


def test_stats_refuses_a_cap_below_one_as_bad_usage(folder: Path, db: Any) -> None:
    refused(cli(folder, db, "--table", "jobs", "stats", "--cap", "0"), 2, "--cap")


def test_notify_is_bad_usage_but_on_postgresql(folder: Path, db: Any) -> None:
    ran = cli(folder, db, "--table", "jobs", "--notify", "init")
    if db.dialect == "postgresql":
        assert ran.status == 0, ran
    else:
        refused(ran, 2, "--notify is PostgreSQL's")


def test_cancel_takes_a_row_to_the_dead_letters(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    first, second = cli(folder, db, "--table", "jobs", "enqueue", "a", "b").out.split()
    ran = cli(folder, db, "--table", "jobs", "cancel", first)
    assert ran.status == 0 and ran.out == "cancelled %s\n" % first, ran
    stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
    assert (stats["due"], stats["dead_letters"]) == (1, 1)
    refused(cli(folder, db, "--table", "jobs", "cancel", first), 3, "row %s" % first)
    refused(cli(folder, db, "--table", "jobs", "cancel", "123456"), 3, "neither queued")
    assert cli(folder, db, "--table", "jobs", "stats", "--json").json()["due"] == 1


def test_pause_stops_every_worker_until_resume(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", "cat.png")
    ran = cli(folder, db, "--table", "jobs", "pause")
    assert ran.status == 0 and ran.out.startswith("paused jobs"), ran
    stats = cli(folder, db, "--table", "jobs", "stats")
    assert "paused" in stats.out, stats
    assert cli(folder, db, "--table", "jobs", "stats", "--json").json()["paused"] is True
    ran = cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize",
              "--until-idle", "0.5", "--json")
    assert ran.status == 0 and ran.json()["done"] == 0, ran
    ran = cli(folder, db, "--table", "jobs", "resume", "--json")
    assert ran.status == 0 and ran.json() == {"table": "jobs", "group": None, "paused": False}, ran
    ran = cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize",
              "--until-idle", "0.5", "--json")
    assert ran.status == 0 and ran.json()["done"] == 1, ran
    refused(cli(folder, db, "--table", "jbos", "pause"), 1, "jbos")
    refused(cli(folder, db, "--table", "jobs", "--group", "a", "pause"), 1, "group")


@pytest.mark.dialect("postgresql", "mysql")
def test_worker_until_idle_does_not_count_an_outage_as_idle(folder: Path, db: Any,
                                                            relay: Any) -> None:
    """Claims that fail are not an empty queue: the worker waits the outage
    out, then works what came meanwhile, then ends once idle."""
    (folder / "marking.py").write_text(MARKING_HANDLER)
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", "first")
    proc = subprocess.Popen([sys.executable, "-m", "libqueue", "--table", "jobs", "worker",
                             "marking:mark", "--until-idle", "2", "--poll-interval-ms", "100",
                             "--json"], cwd=folder,
                            env=dict(os.environ, LIBQUEUE_URL=relay.url(db.url)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: db.count("jobs") == 0, what="the first row acked")
        relay.cut()  # before the 2 s idle end
        cli(folder, db, "--table", "jobs", "enqueue", "second")  # straight to the server
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=5)  # claims fail: not idle
        relay.restore()
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert (folder / "handled-second").exists(), err
    assert json.loads(out.splitlines()[-1])["done"] == 2, out
    assert db.count("jobs") == 0


def test_worker_retries_what_fails_and_dead_letters_at_max_attempts(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", "cat.png", "notes.txt")
    ran = cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize",
              "--max-attempts", "2", "--until-idle", "1", "--json")
    assert ran.status == 0, ran
    assert ran.json() == {"table": "jobs", "done": 1, "failed": 2, "unsettled": 0}, ran
    stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
    assert (stats["due"], stats["dead_letters"]) == (0, 1)


QUITTING = """
import sys
import time

def ran(delivery):
    sys.stdout.write("ran %d attempt %d\\n" % (delivery.id, delivery.attempt))
    sys.stdout.flush()

def bye(delivery):
    ran(delivery)
    sys.exit(3)

def bye_why(delivery):
    ran(delivery)
    sys.exit("the disk is full")

def interrupted(delivery):
    ran(delivery)
    raise KeyboardInterrupt

def done_then_bye(delivery):
    ran(delivery)
    delivery.ack()
    sys.exit()
"""


def test_a_handler_that_exits_fails_its_attempt_and_stops_the_worker(folder: Path,
                                                                   db: Any) -> None:
    """sys.exit or KeyboardInterrupt in a handler asks the process to end: the
    row goes back as a failed attempt, under the retry policy, and the
    worker stops as on SIGTERM with the status Python would exit with."""
    (folder / "quitting.py").write_text(QUITTING)
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", "x")
    worker = ["--table", "jobs", "worker", "--workers", "1"]  # the poll: 1 s, past the stop

    def work(handler: str, *more: str) -> Ran:
        return cli(folder, db, *worker, "quitting:" + handler, *more, timeout=20)

    for attempt, (handler, status, said) in enumerate([
            ("bye", 3, "handler bye called sys.exit(3) on row 1"),
            ("interrupted", 130, "handler interrupted raised KeyboardInterrupt on row 1"),
            ("bye_why", 1, "handler bye_why called sys.exit('the disk is full') on row 1")],
            start=1):
        ran = work(handler)
        assert ran.status == status, ran
        assert ran.out.splitlines() == ["ran 1 attempt %d" % attempt,  # once, not again and again
                                        "jobs: 0 done, 1 failed"], ran
        assert said + ": the row goes back to the queue (a failed attempt" in ran.err, ran
        assert "Traceback" not in ran.err, ran
        stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
        assert (stats["due"], stats["in_work"] or 0, stats["dead_letters"]) == (1, 0, 0), ran
    assert "the disk is full\n" in ran.err
    # Under the retry policy: at --max-attempts the failed attempt dead-letters it.
    ran = work("bye", "--max-attempts", "4", "--json")
    assert ran.status == 3 and ran.json()["failed"] == 1, ran
    stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
    assert (stats["due"], stats["dead_letters"]) == (0, 1), ran
    # A handler that settled its row first: the settlement stands.
    cli(folder, db, "--table", "jobs", "enqueue", "y")
    ran = work("done_then_bye")
    assert ran.status == 0 and "called sys.exit() on row" in ran.err, ran
    assert "goes back" not in ran.err, ran
    stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
    assert (stats["due"], stats["dead_letters"]) == (0, 1), ran


def test_dead_letters_are_listed_replayed_and_purged(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", "a.txt", "b.txt", "cat.png")
    cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize", "--max-attempts", "1",
        "--until-idle", "1")
    ran = cli(folder, db, "--table", "jobs", "dead-letters", "list")
    head, *rows = ran.out.splitlines()
    assert head.split() == ["id", "attempt", "payload"]
    assert [r.split()[2] for r in rows] == ["a.txt", "b.txt"], ran
    listed = cli(folder, db, "--table", "jobs", "dead-letters", "list", "--json").json()
    assert [r["payload"] for r in listed] == ["a.txt", "b.txt"]
    first, second = (r["id"] for r in listed)
    ran = cli(folder, db, "--table", "jobs", "dead-letters", "replay", "--id", str(first))
    assert ran.status == 0 and ran.out == "replayed 1\n", ran
    stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
    assert (stats["due"], stats["dead_letters"]) == (1, 1)
    refused(cli(folder, db, "--table", "jobs", "dead-letters", "replay", "--id", str(first)), 3,
            "not dead letters")
    refused(cli(folder, db, "--table", "jobs", "dead-letters", "purge"), 2, "--all")
    refused(cli(folder, db, "--table", "jobs", "dead-letters", "purge", "--all", "--id", "1"), 2,
            "--all")
    ran = cli(folder, db, "--table", "jobs", "dead-letters", "purge", "--all", "--json")
    assert ran.json() == {"table": "jobs", "purged": 1}, ran
    assert cli(folder, db, "--table", "jobs", "dead-letters", "list").out == ""
    assert cli(folder, db, "--table", "jobs", "stats", "--json").json()["due"] == 1
    refused(cli(folder, db, "--table", "missing", "dead-letters", "list"), 1, "does not exist")


def test_prune_deletes_what_is_older_than_a_duration(folder: Path, db: Any) -> None:
    (folder / "done.json").write_text(json.dumps({
        "name": "done", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after",
        "locked_until": "locked_until", "processed_at": "processed_at",
        "dead_letter": "done_dead"}))
    done = ["--table-file", "done.json"]
    cli(folder, db, *done, "init")
    cli(folder, db, *done, "enqueue", "a.txt", "b.txt", "cat.png")
    cli(folder, db, *done, "worker", "examples.handlers:resize", "--max-attempts", "1",
        "--until-idle", "1")  # cat.png done and kept, the others dead letters
    ran = cli(folder, db, *done, "prune", "--older-than", "1h")
    assert ran.status == 0 and ran.out == "deleted 0 finished rows older than 1h\n", ran
    db.execute("UPDATE done SET processed_at = %s WHERE processed_at IS NOT NULL" % db.past)
    ran = cli(folder, db, *done, "prune", "--older-than", "7d", "--json")
    assert ran.json() == {"table": "done", "group": None, "older_than_s": 7 * 86400.0,
                          "dead_letters": False, "deleted": 1}, ran
    assert cli(folder, db, *done, "prune", "--dead-letters", "--older-than", "30s").out == \
        "deleted 0 dead letters older than 30s\n"
    db.execute("UPDATE done_dead SET retry_after = %s" % db.past)
    ran = cli(folder, db, *done, "prune", "--dead-letters", "--older-than", "15m")
    assert ran.status == 0 and ran.out == "deleted 2 dead letters older than 15m\n", ran
    assert cli(folder, db, *done, "prune", "--older-than", "3600").status == 0  # seconds
    assert db.count("done") == 0 and db.count("done_dead") == 0
    for bad in ("7x", "-5", "d", "", "inf", "1e999s"):
        refused(cli(folder, db, *done, "prune", "--older-than", bad), 2, "--older-than")
    assert cli(folder, db, *done, "prune").status == 2  # no duration
    cli(folder, db, "--table", "jobs", "init")  # the default table keeps no finished rows
    refused(cli(folder, db, "--table", "jobs", "prune", "--older-than", "1d"), 1, "processed_at")


SLOW_HANDLER = '''
import time
import urllib.request
from pathlib import Path

def slow(delivery):
    with open("started", "a") as f:
        f.write("%d\\n" % delivery.id)
    time.sleep(1.0)
    with open("finished", "a") as f:
        f.write("%d\\n" % delivery.id)
'''


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_worker_stops_cleanly_on_a_signal(folder: Path, db: Any, signum: int) -> None:
    (folder / "slow_handlers.py").write_text(SLOW_HANDLER)
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", stdin="x\n" * 6)
    proc = subprocess.Popen([sys.executable, "-m", "libqueue", "--table", "jobs", "worker",
                             "slow_handlers:slow", "--workers", "2"], cwd=folder,
                            env=dict(os.environ, LIBQUEUE_URL=db.url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: (folder / "started").exists(), what="a handler started")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    started = (folder / "started").read_text().split()
    finished = (folder / "finished").read_text().split()
    assert sorted(started) == sorted(finished), "a running handler was cut short"
    stats = cli(folder, db, "--table", "jobs", "stats", "--json").json()
    assert stats["in_work"] == 0, "rows not begun went back at once"
    assert stats["due"] == 6 - len(finished), "every row is done or back in the queue"


MARKING_HANDLER = '''
from pathlib import Path

def mark(delivery):
    Path("handled-" + delivery.payload.decode()).touch()
'''


@pytest.mark.dialect("postgresql")
def test_notify_wakes_a_worker_long_before_its_next_poll(folder: Path, db: Any) -> None:
    """A worker polling once a minute handles a row enqueued with --notify at once."""
    (folder / "marking.py").write_text(MARKING_HANDLER)
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", "first")
    proc = subprocess.Popen([sys.executable, "-m", "libqueue", "--table", "jobs", "--notify",
                             "worker", "marking:mark", "--poll-interval-ms", "60000"], cwd=folder,
                            env=dict(os.environ, LIBQUEUE_URL=db.url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (folder / "handled-first").exists(), what="the first row handled")
        time.sleep(0.5)  # its claim that found nothing more is done: it waits for a minute now
        assert cli(folder, db, "--table", "jobs", "--notify", "enqueue", "second").status == 0
        wait_until(lambda: (folder / "handled-second").exists(), timeout=20,
                   what="the notified row handled before the next poll")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err


def test_other_forms_and_a_table_file(folder: Path, db: Any) -> None:
    forms = ["advisory"] + (["row_lock"] if db.dialect != "sqlite" else [])
    for form in forms:
        name = "jobs_" + form
        assert cli(folder, db, "--table", name, "--form", form, "init").status == 0
        cli(folder, db, "--table", name, "--form", form, "enqueue", "cat.png")
        ran = cli(folder, db, "--table", name, "--form", form, "worker",
                  "examples.handlers:resize", "--until-idle", "0.5", "--json")
        assert ran.status == 0 and ran.json()["done"] == 1, ran
        stats = cli(folder, db, "--table", name, "--form", form, "stats", "--json").json()
        assert (stats["due"], stats["in_work"]) == (0, None)
    (folder / "mail.toml").write_text('name = "mail"\npayload = "body"\nlocked_until = "lease"\n'
                                      'group = "queue"\n')
    (folder / "mail.json").write_text(json.dumps({"name": "mail", "payload": "body",
                                                  "locked_until": "lease", "group": "queue"}))
    for path in ("mail.toml", "mail.json"):
        assert cli(folder, db, "--table-file", path, "init").status == 0
        assert cli(folder, db, "--table-file", path, "--group", "out", "enqueue", "hi").status == 0
    stats = cli(folder, db, "--table-file", "mail.json", "--group", "out", "stats", "--json").json()
    assert stats["due"] == 2 and stats["group"] == "out"
    refused(cli(folder, db, "--table-file", "mail.json", "stats"), 1, "group")


BAD_USAGE = {
    "no-table": (["stats"], "no table"),
    "two-tables": (["--table", "a", "--table-file", "t.json", "stats"], "give one"),
    "missing-file": (["--table-file", "nowhere.json", "stats"], "nowhere.json"),
    "unknown-key": (["--table-file", "bad.json", "stats"], "unknown key colour"),
    "not-json": (["--table-file", "broken.json", "stats"], "broken.json"),
    "handler-not-importable": (["--table", "jobs", "worker", "no_such_module:f"], "no_such_module"),
    "handler-missing": (["--table", "jobs", "worker", "examples.handlers:nope"], "no nope"),
    "handler-malformed": (["--table", "jobs", "worker", "examples.handlers"], "module:function"),
    "negative-idle": (["--table", "jobs", "worker", "examples.handlers:resize", "--until-idle", "-1"],
                      "--until-idle takes seconds"),
    "column-not-a-name": (["--table-file", "number.json", "stats"], "payload: expected str"),
}


@pytest.mark.parametrize("args,words", BAD_USAGE.values(), ids=BAD_USAGE.keys())
def test_bad_usage_is_one_line_and_status_2(folder: Path, db: Any, args: List[str],
                                             words: str) -> None:
    (folder / "bad.json").write_text('{"name": "jobs", "colour": "blue"}')
    (folder / "broken.json").write_text('{"name": ')
    (folder / "number.json").write_text('{"name": "jobs", "payload": 5}')
    cli(folder, db, "--table", "jobs", "init")
    refused(cli(folder, db, *args), 2, words)


def test_a_missing_url_and_a_wrong_one(folder: Path, db: Any) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LIBQUEUE_URL"}
    proc = subprocess.run([sys.executable, "-m", "libqueue", "--table", "jobs", "stats"],
                          cwd=folder, env=env, text=True, capture_output=True, timeout=TIMEOUT_S)
    refused(Ran(proc), 2, "LIBQUEUE_URL")
    refused(cli(folder, db, "--table", "jobs", "stats", url="bogus://x"), 1, "LQ_DIALECT")
    refused(cli(folder, db, "--table", "jobs", "init", url="sqlite:///no/such/dir/q.db"), 1,
            "LQ_CONNECT")


def test_an_unknown_command_or_option_is_usage(folder: Path, db: Any) -> None:
    assert cli(folder, db, "--table", "jobs", "frobnicate").status == 2
    assert cli(folder, db, "--table", "jobs", "stats", "--colour").status == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_worker_serves_its_metrics(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    cli(folder, db, "--table", "jobs", "enqueue", "cat.png", "dog.png")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "libqueue", "--table", "jobs", "worker",
                             "examples.handlers:resize", "--workers", "1",
                             "--metrics", str(port)], cwd=folder,
                            env=dict(os.environ, LIBQUEUE_URL=db.url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def scrape() -> str:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                return ""
            return text if 'outcome="acked",queue="jobs"} 2.0' in text else ""
        text = wait_until(scrape, what="both rows acked, as the worker's metrics say")
        assert "libqueue_job_wait_seconds_count" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    assert "jobs: 2 done, 0 failed" in out


def test_worker_metrics_refuses_a_bad_address(folder: Path, db: Any) -> None:
    cli(folder, db, "--table", "jobs", "init")
    refused(cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize",
                "--metrics", "here"), 2, "--metrics", "PORT")
    for address in ("1.2.3.4:99999", "99999", "0"):  # past a port, or none known
        refused(cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize",
                    "--metrics", address), 2, "--metrics %s" % address, "65535")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        refused(cli(folder, db, "--table", "jobs", "worker", "examples.handlers:resize",
                    "--metrics", "127.0.0.1:%d" % port), 2, "cannot listen")


def test_the_url_from_a_file(folder: Path, db: Any, tmp_path: Path) -> None:
    """--url-file (or $LIBQUEUE_URL_FILE) keeps the URL out of the process
    list and the environment."""
    url_file = tmp_path / "db.url"
    url_file.write_text(db.url + "\n")
    url_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != "LIBQUEUE_URL"}

    def run(*args: str, extra: Optional[dict] = None) -> Ran:
        proc = subprocess.run([sys.executable, "-m", "libqueue", "--table", "jobs"] + list(args),
                              cwd=folder, env=dict(env, **(extra or {})), text=True,
                              capture_output=True, timeout=TIMEOUT_S)
        return Ran(proc)

    assert run("--url-file", str(url_file), "init").status == 0
    assert run("enqueue", "a", extra={"LIBQUEUE_URL_FILE": str(url_file)}).status == 0
    ran = run("--url-file", str(url_file), "stats", "--json")
    assert ran.status == 0 and json.loads(ran.out)["due"] == 1, ran
    refused(run("--url-file", str(tmp_path / "missing"), "stats"), 2, "cannot read the URL file")
    (tmp_path / "empty").write_text("")
    refused(run("--url-file", str(tmp_path / "empty"), "stats"), 2, "is empty")
    refused(run("--url-file", str(url_file), "--url", db.url, "stats"), 2, "give one")
    both = {"LIBQUEUE_URL": db.url, "LIBQUEUE_URL_FILE": str(tmp_path / "missing")}
    refused(run("stats", extra=both), 2, "unset one")
    assert run("--url-file", str(url_file), "stats", extra=both).status == 0  # the flag first
    assert "--url-file" in run("--help").out
