"""Publishing: payloads, batches, groups, headers, priorities, quoting."""

from __future__ import annotations

import array
import ctypes

import pytest

import libqueue

from helpers import POLL_MS, make_table


def drain(sub: libqueue.Subscription, timeout: float = 0.3) -> list:
    """Pull and ack until nothing comes; returns (id, payload, group) tuples."""
    out = []
    for d in sub.deliveries(timeout):
        with d:
            out.append((d.id, d.payload, d.group))
            d.ack()
    return out


@pytest.mark.parametrize("size", [0, 16 * 1024 * 1024])
def test_payload_sizes(db, broker, form, size) -> None:
    table = make_table(form)
    db.create_table(table)
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]
    row = broker.publish(table, payload)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(10) as d:
            assert d.id == row
            assert len(d.payload) == size
            assert d.payload == payload
            d.ack()


def test_payload_types(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    broker.publish_many(table, [b"b", bytearray(b"ba"), memoryview(b"mv"), "stré"])
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        got = sorted(p for _, p, _ in drain(sub))
    assert got == sorted([b"b", b"ba", b"mv", "stré".encode()])


def buffers() -> list:
    """Objects of the buffer protocol, and the bytes each is published as."""
    numbers = array.array("i", [1, -2, 3])
    return [(numbers, numbers.tobytes()),
            (memoryview(numbers), numbers.tobytes()),
            (memoryview(b"abcdef")[::2], b"ace"),  # strided: its bytes in order
            (ctypes.create_string_buffer(b"c\x00t", 3), b"c\x00t"),
            (array.array("B"), b"")]


def test_any_buffer_is_a_payload_of_its_bytes(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    cases = buffers()
    ids = [broker.publish(table, obj) for obj, _ in cases]
    ids += broker.publish_many(table, [obj for obj, _ in cases])
    ids += broker.publish_many(table, [{"payload": obj} for obj, _ in cases])
    expected = [raw for _, raw in cases] * 3
    assert db.query("SELECT id, payload FROM jobs ORDER BY id") == list(zip(ids, expected))


def test_one_buffer_is_not_taken_for_a_list_of_messages(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(TypeError, match="not one payload \\(array\\)"):
        broker.publish_many(table, array.array("B", b"ab"))
    with pytest.raises(TypeError, match="not one payload \\(c_char_Array_2\\)"):
        broker.publish_many(table, ctypes.create_string_buffer(b"ab", 2))
    assert db.count("jobs") == 0


@pytest.mark.parametrize("payload", [5, 1.5, ["a"], {"a": 1}, object()],
                         ids=["int", "float", "list", "dict", "object"])
def test_a_payload_of_no_buffer_is_a_type_error_naming_what_is_taken(db, broker, payload) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(TypeError, match="payload takes bytes, a str .* buffer protocol .*got %s"
                       % type(payload).__name__):
        broker.publish(table, payload)
    assert db.count("jobs") == 0


def test_publish_many(db, broker, form) -> None:
    table = make_table(form, priority="priority")
    db.create_table(table)
    ids = broker.publish_many(table, [b"one", {"payload": b"two", "priority": 3}, {"payload": b"three"}])
    assert len(ids) == 3 and len(set(ids)) == 3
    assert db.query("SELECT id, payload FROM jobs ORDER BY id") == sorted(
        zip(ids, [b"one", b"two", b"three"]))
    assert broker.publish_many(table, []) == []


def test_publish_many_is_all_or_nothing(db, broker) -> None:
    table = make_table("lease")  # no group column
    db.create_table(table)
    with pytest.raises(libqueue.SchemaError):
        broker.publish_many(table, [b"fine", {"payload": b"bad", "group": "g"}])
    assert db.count("jobs") == 0


def test_one_payload_for_a_list_or_a_list_for_headers_is_refused(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    for payload in ("cat.png", b"cat.png"):  # else one message a character
        with pytest.raises(TypeError, match="a list of messages, not one payload"):
            broker.publish_many(table, payload)
    with pytest.raises(TypeError, match="headers: a mapping of str to str, got list"):
        broker.publish(table, b"x", headers=["k", "v"])
    assert db.count("jobs") == 0


def test_field_without_column_is_schema_error(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.SchemaError):
        broker.publish(table, b"x", headers={"a": "b"})
    assert db.count("jobs") == 0


def test_group_filtering(db, broker, form) -> None:
    table = make_table(form, group="grp")
    db.create_table(table)
    g1 = broker.publish_many(table, [{"payload": b"1", "group": "g1"},
                                     {"payload": b"2", "group": "g1"}])
    g2 = broker.publish(table, b"3", group="g2")
    with broker.subscribe(table, group="g1", poll_interval_ms=POLL_MS) as sub:
        got = drain(sub)
    assert sorted(i for i, _, _ in got) == sorted(g1)
    assert {g for _, _, g in got} == {"g1"}
    assert db.query("SELECT id, grp FROM jobs") == [(g2, "g2")]


def test_group_column_needs_a_group(db, broker, form) -> None:
    table = make_table(form, group="grp")
    db.create_table(table)
    with pytest.raises(libqueue.Error):
        broker.subscribe(table, poll_interval_ms=POLL_MS)


def test_headers_round_trip(db, broker, form) -> None:
    table = make_table(form, headers="headers")
    db.create_table(table)
    headers = {"trace-id": "abc 123", "empty": "", "quote\"d": "va\"lue\\", "ünï": "cödé"}
    broker.publish(table, b"x", headers=headers)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(5) as d:
            assert d.headers == headers
            d.ack()


def test_no_headers_is_empty(db, broker, form) -> None:
    table = make_table(form, headers="headers")
    db.create_table(table)
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with sub.next(5) as d:
            assert d.headers == {}
            d.ack()


def test_partition_key_round_trip(db, broker, form) -> None:
    table = make_table(form, partition_key="partition_key")
    db.create_table(table)
    broker.publish_many(table, [{"payload": b"k", "partition_key": "acct-7"}, b"none"])
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        got = {}
        for d in sub.deliveries(0.3):
            with d:
                got[d.payload] = d.partition_key
                d.ack()
    assert got == {b"k": "acct-7", b"none": None}


def test_priority_order(db, broker, form) -> None:
    table = make_table(form, priority="priority")
    db.create_table(table)
    for p in (5, 1, 3, 2, 4):
        broker.publish(table, b"%d" % p, priority=p)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        got = [p for _, p, _ in drain(sub)]
    assert got == [b"1", b"2", b"3", b"4", b"5"]


def test_identifiers_that_need_quoting(db, broker, form) -> None:
    table = make_table(form, name='we"ird', priority="order", payload="select")
    db.create_table(table)
    row = broker.publish(table, b"q", priority=1)
    assert db.query('SELECT id, "select", "order" FROM "we""ird"') == [(row, b"q", 1)]
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        assert [(i, p) for i, p, _ in drain(sub)] == [(row, b"q")]
    assert db.count('we"ird') == 0


def test_explicit_ids(db, broker, form) -> None:
    table = make_table(form, id="job_id", id_generated=False)
    db.create_table(table)
    assert broker.publish(table, b"x", id=42) == 42
    assert broker.publish_many(table, [{"payload": b"y", "id": 7}]) == [7]
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        assert sorted(i for i, _, _ in drain(sub)) == [7, 42]


def test_iteration_ends_when_stopped(db, broker, form) -> None:
    table = make_table(form)
    db.create_table(table)
    broker.publish_many(table, [b"1", b"2", b"3"])
    seen = []
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        for d in sub:
            with d:
                seen.append(d.payload)
                d.ack()
            if len(seen) == 3:
                sub.stop()
    assert sorted(seen) == [b"1", b"2", b"3"]
