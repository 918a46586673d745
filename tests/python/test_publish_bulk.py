"""Bulk publishing: several messages go in multi-row inserts of up to 1000
rows (a full chunk, then the rest), in one transaction; the ids come back in
message order."""

from __future__ import annotations

import json

import pytest

import libqueue

from helpers import POLL_MS, make_table

#: More than two full chunks of 1000 rows, and a remainder.
MANY = 2500


def rows_by_id(db, columns: str) -> dict:
    return {r[0]: r[1:] for r in db.query("SELECT id, %s FROM jobs" % columns)}


def as_headers(value):
    if value is None or isinstance(value, dict):
        return value
    return json.loads(value)


@pytest.mark.parametrize("count", [2, 999, 1000, MANY])
def test_bulk_ids_follow_message_order(db, broker, count) -> None:
    table = make_table("lease")
    db.create_table(table)
    payloads = [b"m%d" % i for i in range(count)]
    ids = broker.publish_many(table, payloads)
    assert len(ids) == count and len(set(ids)) == count
    rows = rows_by_id(db, "payload")
    assert len(rows) == count
    assert [bytes(rows[i][0]) for i in ids] == payloads


def test_bulk_mixed_fields_survive(db, broker) -> None:
    table = make_table("lease", group="grp", priority="priority", retry_after="retry_after",
                       headers="headers", partition_key="pkey")
    db.create_table(table)
    messages = []
    for i in range(1200):
        m = {"payload": b"p%d" % i}
        if i % 3:
            m["group"] = "g%d" % (i % 3)
        if i % 4 == 0:
            m["priority"] = i % 7
        if i % 5 == 0:
            m["delay_ms"] = 3600 * 1000
        if i % 2 == 0:
            m["headers"] = {"n": str(i), "quote\"d": "v\\%d" % i}
        if i % 6 == 0:
            m["partition_key"] = "k%d" % i
        messages.append(m)
    ids = broker.publish_many(table, messages)
    rows = rows_by_id(db, "payload, grp, priority, headers, pkey, retry_after")
    due_now = [rows[ids[i]][5] for i in range(len(messages)) if i % 5]
    for i, (m, row_id) in enumerate(zip(messages, ids)):
        payload, grp, priority, headers, pkey, due = rows[row_id]
        assert bytes(payload) == m["payload"]
        assert grp == m.get("group")
        assert priority == m.get("priority", 0)
        assert (as_headers(headers) or {}) == m.get("headers", {})
        assert pkey == m.get("partition_key")
        if i % 5 == 0:
            assert due > max(due_now), "a delayed row is due after every other"
    # An undelayed row of group g1 with the lowest priority comes first.
    with broker.subscribe(table, group="g1", poll_interval_ms=POLL_MS) as sub:
        with sub.next(10) as d:
            first = min((m.get("priority", 0), i) for i, m in enumerate(messages)
                        if m.get("group") == "g1" and i % 5)
            assert d.id == ids[first[1]]
            assert d.headers == messages[first[1]].get("headers", {})
            d.ack()


def invalid_message() -> tuple:
    """A message the table has no column for, near the end: refused before
    anything is written."""
    messages = [b"fine"] * MANY
    messages[MANY - 10] = {"payload": b"bad", "group": "g"}
    return {}, messages, libqueue.SchemaError


def duplicate_id() -> tuple:
    """The last chunk repeats the first chunk's id: the database fails its
    statement, and the transaction takes back the chunks before it."""
    messages = [{"payload": b"x", "id": i + 1} for i in range(MANY)]
    messages[-1]["id"] = 1
    return {"id_generated": False}, messages, libqueue.Error


@pytest.mark.parametrize("case", [invalid_message, duplicate_id])
def test_bulk_that_fails_writes_nothing(db, broker, case) -> None:
    roles, messages, error = case()
    table = make_table("lease", **roles)
    db.create_table(table)
    with pytest.raises(error):
        broker.publish_many(table, messages)
    assert db.count("jobs") == 0


def test_bulk_with_supplied_ids(db, broker) -> None:
    table = make_table("lease", id_generated=False)
    db.create_table(table)
    given = [10 * MANY - 3 * i for i in range(MANY)]  # descending: not the insert order of ids
    ids = broker.publish_many(table, [{"payload": b"s%d" % i, "id": given[i]}
                                      for i in range(MANY)])
    assert ids == given
    rows = rows_by_id(db, "payload")
    assert {i: bytes(p[0]) for i, p in rows.items()} == {given[i]: b"s%d" % i
                                                         for i in range(MANY)}


def test_bulk_of_large_payloads_splits_its_statements(db, broker) -> None:
    """Rows of large values end a chunk early (about 4 MiB of values a
    statement); ids still follow message order."""
    table = make_table("lease")
    db.create_table(table)
    payloads = [bytes([i]) * (700 * 1024) for i in range(20)]
    ids = broker.publish_many(table, payloads)
    rows = rows_by_id(db, "payload")
    assert [bytes(rows[i][0]) for i in ids] == payloads
