"""SQLite keeps advisory keys in the process: a file's key space is one
process's while that process's advisory subscriptions use it, held by a lock
on a file beside the database ("<file>-lqkeys") that ends with the process.
Another process's advisory subscription on the file is refused, naming the
holder; the lease form is shared as before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import libqueue

from helpers import POLL_MS, make_table
from test_processes import WORKER, table_json

pytestmark = pytest.mark.dialect("sqlite")

TRY_SUBSCRIBE = """
import json, sys
import libqueue
url, roles = sys.argv[1], json.loads(sys.argv[2])
table = libqueue.Table(roles.pop("name"), **roles)
try:
    with libqueue.Broker(url) as broker, broker.subscribe(table, poll_interval_ms=50) as sub:
        row = sub.next(5)
        print(json.dumps({"opened": True, "row": row and row.id}))
        if row:
            row.ack()
except libqueue.Error as e:
    print(json.dumps({"opened": False, "error": type(e).__name__, "message": str(e)}))
"""


def try_subscribe(db, table: libqueue.Table, url: str = "") -> dict:
    """An advisory (or lease) subscription opened in another process."""
    done = subprocess.run([sys.executable, "-c", TRY_SUBSCRIBE, url or db.url, table_json(table)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_another_process_is_refused_the_advisory_form_while_one_runs_it(db) -> None:
    table = make_table("advisory")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        ids = broker.publish_many(table, [b"a", b"b"])
        with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub, sub.next(5) as held:
            other = [i for i in ids if i != held.id]
            refused = try_subscribe(db, table)
            assert refused["opened"] is False and refused["error"] == "Misuse", refused
            assert "another process (pid %d)" % os.getpid() in refused["message"], refused
            assert "lease form" in refused["message"], refused
            held.ack()
        # Let go with the process's last advisory subscription (and the last
        # delivery of it released): the other row is the other process's.
        assert try_subscribe(db, table) == {"opened": True, "row": other[0]}
    assert db.count("jobs") == 0


def test_one_process_may_run_the_advisory_form_on_a_file_from_several_subscriptions(db) -> None:
    table = make_table("advisory")
    db.create_table(table)
    with libqueue.Broker(db.url) as first, libqueue.Broker(db.url) as second:
        one = first.subscribe(table, poll_interval_ms=POLL_MS)
        two = second.subscribe(table, poll_interval_ms=POLL_MS)
        one.close()
        assert try_subscribe(db, table)["opened"] is False  # `two` holds it still
        two.close()
    assert try_subscribe(db, table)["opened"] is True


def test_a_killed_holder_lets_the_key_space_go(db) -> None:
    table = make_table("advisory")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"held by a process that dies"])
    holder = subprocess.Popen([sys.executable, WORKER, db.url, table_json(table), os.devnull,
                               "hold", json.dumps({"poll_interval_ms": POLL_MS})],
                              stdout=subprocess.PIPE, text=True)
    try:
        row = int(holder.stdout.readline())
        with libqueue.Broker(db.url) as broker:
            with pytest.raises(libqueue.Misuse, match="pid %d" % holder.pid):
                broker.subscribe(table, poll_interval_ms=POLL_MS)
            holder.send_signal(signal.SIGKILL)
            holder.wait(30)
            with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
                again = sub.next(10)  # its key died with its process too
                assert again is not None and again.id == row
                again.ack()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)


def test_the_lease_form_is_shared_by_processes_while_one_runs_the_advisory_form(db) -> None:
    advisory, lease = make_table("advisory"), make_table("lease", name="leased")
    db.create_table(advisory)
    db.create_table(lease)
    with libqueue.Broker(db.url) as broker:
        broker.publish(lease, b"for the other process")
        with broker.subscribe(advisory, poll_interval_ms=POLL_MS):
            assert try_subscribe(db, lease)["opened"] is True


def test_the_lock_file_lives_beside_the_database_and_names_its_holder(db) -> None:
    table = make_table("advisory")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker, broker.subscribe(table, poll_interval_ms=POLL_MS):
        with open(db.path + "-lqkeys") as f:
            assert f.read().strip() == str(os.getpid())


def test_a_link_to_the_file_names_the_same_key_space(db, tmp_path) -> None:
    table = make_table("advisory")
    db.create_table(table)
    link = tmp_path / "another-name.db"
    os.symlink(db.path, link)
    with libqueue.Broker(db.url) as broker, broker.subscribe(table, poll_interval_ms=POLL_MS):
        refused = try_subscribe(db, table, "sqlite://" + str(link))
        assert refused["opened"] is False and refused["error"] == "Misuse", refused


def test_a_child_forked_from_the_holder_keeps_no_hold_of_its_own(db) -> None:
    """A forked child shares its parent's open files: were the lock file's
    copy kept open in it, the parent's lock would outlive the parent's
    subscription, and another process would be refused."""
    table = make_table("advisory")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        sub = broker.subscribe(table, poll_interval_ms=POLL_MS)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child only waits to be killed
            time.sleep(60)
            os._exit(0)
        try:
            sub.close()
            assert try_subscribe(db, table)["opened"] is True
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)


CANCEL = """
import json, logging, sys
import libqueue
url, roles, row = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
table = libqueue.Table(roles.pop("name"), **roles)
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger("libqueue").addHandler(Keep())
logging.getLogger("libqueue").setLevel(logging.INFO)
with libqueue.Broker(url) as broker:
    print(json.dumps({"cancelled": broker.cancel(table, row), "said": said}))
"""


def test_a_cancel_from_another_process_says_the_run_is_out_of_its_sight(db) -> None:
    """The keys of the run are the holder's, in its process: the other
    process's cancel takes the row out without them, and says so."""
    table = make_table("advisory")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        row = broker.publish(table, b"x")
        with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
            held = sub.next(5)
            assert held is not None and held.id == row
            done = subprocess.run([sys.executable, "-c", CANCEL, db.url, table_json(table), str(row)],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            out = json.loads(done.stdout)
            assert out["cancelled"] is True, out
            assert any("another process holds its file's advisory keys" in m for m in out["said"]), out
            with pytest.raises(libqueue.Cancelled):
                held.ack()
            assert try_subscribe(db, table)["opened"] is False  # still the holder's
    assert db.count("jobs") == 0


def test_a_cancel_lets_the_key_space_go_after_it(db) -> None:
    """A cancel holds the file's key space only while it takes the row's key."""
    table = make_table("advisory")
    db.create_table(table)
    with libqueue.Broker(db.url) as broker:
        gone, kept = broker.publish_many(table, [b"gone", b"kept"])
        assert broker.cancel(table, gone) is True
        assert try_subscribe(db, table) == {"opened": True, "row": kept}
    assert db.count("jobs") == 0
