"""Brokers that open one new SQLite file at once: each moves the file to WAL,
and none is refused because another was doing the same."""

from __future__ import annotations

import sqlite3
import threading

import libqueue


def test_six_brokers_open_one_new_file_at_once(tmp_path) -> None:
    errors: list[str] = []
    for round_ in range(40):
        path = tmp_path / ("queue_%d.db" % round_)
        start = threading.Barrier(6)

        def open_broker() -> None:
            start.wait()
            try:
                with libqueue.Broker("sqlite://" + str(path)):
                    pass
            except libqueue.Error as e:
                errors.append(str(e))

        threads = [threading.Thread(target=open_broker) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
