"""SQLite's write-ahead log under readers that never pause: the library's
connections restart the log after it passes a bound, so it does not grow
with every commit."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time

import pytest

import libqueue

from helpers import make_table


@pytest.mark.dialect("sqlite")
def test_the_log_starts_over_while_readers_never_pause(db) -> None:
    table = make_table("lease")
    db.create_table(table)
    stop = threading.Event()
    reading = [threading.Event(), threading.Event()]

    def reader(me: int) -> None:
        """Read transactions, each begun before the other reader's ends, so
        some reader always holds a snapshot of the log."""
        conn = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
        other = reading[1 - me]
        while not stop.is_set():
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM jobs").fetchone()
            reading[me].set()
            time.sleep(0.002)
            other.wait(1)
            reading[me].clear()
            conn.execute("COMMIT")
        conn.close()

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        with libqueue.Broker(db.url) as broker:
            for i in range(12000):  # a commit each: some 12k pages of log
                broker.publish(table, b"%d" % i)
            stop.set()
            for t in threads:
                t.join()
            # The pages in the log now (read while the broker keeps the file
            # open: the last connection to close removes the log).
            with contextlib.closing(sqlite3.connect(db.path)) as conn:
                _, pages, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        stop.set()
        for t in threads:
            t.join()
    # Restarts begin at 4000 pages: the log started over at least once, so it
    # holds fewer pages than the commits wrote (about 12.4k with no restart).
    assert 0 <= pages < 9000, "%d pages in the log" % pages
    assert db.count("jobs") == 12000
