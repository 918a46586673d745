"""Dedup keys: a publish whose key a row queued or in work holds is refused
(Duplicate) or, with on_duplicate="existing", gives that row's id; the key
is free again once its row is acked or dead-lettered."""

from __future__ import annotations

import threading
from typing import Any, List

import pytest

import libqueue

from helpers import POLL_MS, make_table


def keyed(form: str, **roles: Any) -> libqueue.Table:
    return make_table(form, dedup_key="dedup_key", **roles)


def test_refused_while_queued(db, broker, form) -> None:
    table = keyed(form)
    broker.create_table(table)
    first = broker.publish(table, b"a", dedup_key="k")
    with pytest.raises(libqueue.Duplicate, match='dedup key "k" is held by row %d' % first):
        broker.publish(table, b"b", dedup_key="k")
    assert db.count("jobs") == 1
    assert broker.publish(table, b"c", dedup_key="other") != first
    assert broker.publish(table, b"d") and broker.publish(table, b"e")  # no key: no limit
    assert db.count("jobs") == 4


def test_refused_while_in_work_and_free_after_the_ack(db, broker, form) -> None:
    table = keyed(form)
    broker.create_table(table)
    broker.publish(table, b"a", dedup_key="k")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        d = sub.next(10)
        assert d is not None
        with pytest.raises(libqueue.Duplicate):
            broker.publish(table, b"b", dedup_key="k")
        d.retry()  # back in the queue: the key is still held
        with pytest.raises(libqueue.Duplicate):
            broker.publish(table, b"b", dedup_key="k")
        d = sub.next(10)
        d.ack()
    again = broker.publish(table, b"c", dedup_key="k")
    assert again and db.count("jobs") == 1


@pytest.mark.parametrize("dead_letter", ["jobs_dead", "group"])
def test_a_dead_lettered_row_frees_its_key(db, broker, dead_letter: str) -> None:
    roles = dict(group="grp", dead_letter="dead") if dead_letter == "group" else dict(
        dead_letter=dead_letter)
    table = keyed("lease", **roles)
    broker.create_table(table)
    fields = dict(group="live") if dead_letter == "group" else {}
    broker.publish(table, b"a", dedup_key="k", **fields)
    with broker.subscribe(table, poll_interval_ms=POLL_MS, **fields) as sub:
        sub.next(10).dead_letter()
    assert broker.publish(table, b"b", dedup_key="k", **fields)
    # A second row of the key can go to the dead letters too.
    with broker.subscribe(table, poll_interval_ms=POLL_MS, **fields) as sub:
        sub.next(10).dead_letter()
    assert broker.publish(table, b"c", dedup_key="k", **fields)


def test_an_acked_row_kept_as_processed_frees_its_key(db, broker) -> None:
    table = keyed("lease", processed_at="processed_at")
    broker.create_table(table)
    broker.publish(table, b"a", dedup_key="k")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        sub.next(10).ack()
    broker.publish(table, b"b", dedup_key="k")
    assert db.count("jobs") == 2  # the processed row stays


def test_existing_gives_the_holders_id(db, broker, form) -> None:
    table = keyed(form)
    broker.create_table(table)
    first = broker.publish(table, b"a", dedup_key="k")
    assert broker.publish(table, b"b", dedup_key="k", on_duplicate="existing") == first
    assert db.count("jobs") == 1
    ids = broker.publish_many(table, [
        dict(payload=b"c", dedup_key="k", on_duplicate="existing"),
        dict(payload=b"d", dedup_key="new", on_duplicate="existing"),
        dict(payload=b"e", dedup_key="new", on_duplicate="existing"),
        dict(payload=b"f")])
    assert ids[0] == first and ids[1] == ids[2] and len(set(ids)) == 3
    assert db.count("jobs") == 3


def test_a_duplicate_in_a_batch_writes_nothing(db, broker) -> None:
    table = keyed("lease")
    broker.create_table(table)
    with pytest.raises(libqueue.Duplicate,
                       match='message 2: dedup key "x" is held by message 0 of this publish'):
        broker.publish_many(table, [dict(payload=b"a", dedup_key="x"),
                                    dict(payload=b"b", dedup_key="y"),
                                    dict(payload=b"c", dedup_key="x")])
    assert db.count("jobs") == 0


@pytest.mark.parametrize("on_duplicate", ["refuse", "existing"])
def test_concurrent_publishes_of_one_key_write_one_row(db, broker, on_duplicate: str) -> None:
    table = keyed("lease")
    broker.create_table(table)
    ids: List[int] = []
    refused: List[Exception] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def publish(i: int) -> None:
        start.wait()
        try:
            got = broker.publish(table, b"%d" % i, dedup_key="one", on_duplicate=on_duplicate)
            with lock:
                ids.append(got)
        except libqueue.Duplicate as e:
            with lock:
                refused.append(e)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert db.count("jobs") == 1
    if on_duplicate == "existing":
        assert len(ids) == 4 and len(set(ids)) == 1
    else:
        assert len(ids) == 1 and len(refused) == 3


def test_bad_dedup_input(db, broker) -> None:
    plain = make_table("lease")
    broker.create_table(plain)
    with pytest.raises(libqueue.SchemaError, match="a dedup key \\(no dedup_key column\\)"):
        broker.publish(plain, b"a", dedup_key="k")
    table = keyed("lease", name="keyed")
    broker.create_table(table)
    with pytest.raises(libqueue.Misuse, match="empty dedup key"):
        broker.publish(table, b"a", dedup_key="")
    with pytest.raises(libqueue.Misuse, match="on_duplicate is 'refuse' or 'existing'"):
        broker.publish(table, b"a", dedup_key="k", on_duplicate="ignore")
    assert db.count("jobs") == 0 and db.count("keyed") == 0


def test_the_created_table_has_the_unique_index(db, broker) -> None:
    """The key is unique in the database itself: an insert behind the
    library's back is refused too."""
    table = keyed("lease")
    broker.create_table(table)
    broker.publish(table, b"a", dedup_key="k")
    with pytest.raises(Exception):
        db.execute("INSERT INTO %s (payload, attempt, dedup_key) VALUES ('x', 1, 'k')"
                   % db.quote("jobs"))
    assert db.count("jobs") == 1
