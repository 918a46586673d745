"""The bad-input catalogue: every integer option just outside its range,
hostile identifiers, and payloads that are empty, large or not UTF-8. Each
is refused with one clear line, or round-trips exactly; nothing crashes and
nothing is half written."""

from __future__ import annotations

import re
from typing import Tuple

import pytest

import libqueue
from libqueue._ffi import ctext, ffi, lib
from libqueue.options import build_options

from helpers import POLL_MS, make_table

RANGE = re.compile(r"option (\w+) must be between (-?\d+) and (-?\d+), not")


def int_options() -> list:
    kind = ffi.new("int *")
    names = []
    for option in libqueue.Option:
        name = option.name.lower()
        assert lib.lq_option_find(ffi.NULL, kind, ctext(name)) == lib.LQ_OK, name
        if kind[0] == lib.LQ_OPTION_INT:
            names.append(name)
    return names


def scope(name: str) -> str:
    """The call that reads the option."""
    option, scope_of = ffi.new("int *"), ffi.new("int *")
    assert lib.lq_option_find(option, ffi.NULL, ctext(name)) == lib.LQ_OK, name
    assert lib.lq_option_scope_of(scope_of, option[0]) == lib.LQ_OK, name
    return {lib.LQ_SCOPE_BROKER: "broker", lib.LQ_SCOPE_SUBSCRIPTION: "subscription",
            lib.LQ_SCOPE_SCHEDULE: "schedule"}[scope_of[0]]


def range_of(name: str) -> Tuple[int, int]:
    """The option's range, as the refusal of a value past every range says it."""
    with pytest.raises(libqueue.Misuse) as refused:
        build_options({name: 2 ** 62}, scope(name))
    found = RANGE.search(str(refused.value))
    assert found and found.group(1) == name, str(refused.value)
    return int(found.group(2)), int(found.group(3))


@pytest.mark.parametrize("name", int_options())
def test_an_int_option_takes_its_range_and_refuses_past_either_end(name: str) -> None:
    low, high = range_of(name)
    for value in (low, high):
        assert build_options({name: value}, scope(name)) != ffi.NULL
    for value in (low - 1, high + 1):
        with pytest.raises(libqueue.Misuse, match="option %s must be between %d and %d, not %d"
                           % (name, low, high, value)):
            build_options({name: value}, scope(name))


STRING_OPTIONS = {"group", "cron", "tz", "catch_up", "pgbouncer", "listen_url"}


def test_every_option_has_a_name_the_bindings_find() -> None:
    names = {option.name.lower() for option in libqueue.Option}
    assert names - set(int_options()) == STRING_OPTIONS


HOSTILE = [
    'we"ird',          # a double quote: PostgreSQL's and SQLite's identifier quote
    "back`tick",       # MySQL's identifier quote
    "semi;colon--",    # statement separator and comment
    "it's",            # a string literal's quote
    "spa ce",
    "ünïcødé",
]


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_identifiers_are_quoted_everywhere(db, broker, form, name: str) -> None:
    """A table and columns named to break out of quoting: created, published,
    claimed and acked like any other, and nothing else in the schema touched."""
    table = libqueue.Table(name, payload=name + "_p", attempt=name + "_a",
                           **({"locked_until": name + "_l"} if form == "lease" else {}),
                           **({"advisory_lock": "k-{%s_p}" % name} if form == "advisory" else {}))
    broker.create_table(table)
    ids = broker.publish_many(table, [b"one", b"two"])
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        got = []
        for delivery in sub.deliveries(timeout=0.5):
            got.append((delivery.id, delivery.payload))
            delivery.ack()
    assert sorted(got) == sorted(zip(ids, [b"one", b"two"]))
    assert db.count(name) == 0


@pytest.mark.parametrize("payload", [b"", b"\xff\xfe\x00\x80 not utf-8 \xc3\x28",
                                     bytes(range(256)) * 64],
                         ids=["empty", "invalid-utf8", "all-bytes"])
def test_payloads_round_trip_exactly(db, broker, form, payload: bytes) -> None:
    table = make_table(form)
    broker.create_table(table)
    broker.publish(table, payload)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        delivery = sub.next(10)
        assert delivery is not None and delivery.payload == payload
        delivery.ack()


def test_a_16_mib_payload_round_trips_or_is_refused_naming_the_limit(db, broker) -> None:
    """16 MiB: where the server takes it (SQLite, PostgreSQL) it round-trips;
    MariaDB's max_allowed_packet (16 MiB by default, with the statement
    around it) refuses it before it is sent, and says so."""
    table = make_table("lease")
    broker.create_table(table)
    payload = bytes(range(256)) * (16 * 1024 * 1024 // 256)
    try:
        broker.publish(table, payload)
    except libqueue.Error as e:
        assert db.dialect == "mysql", "refused where it should fit: %s" % e
        assert "max_allowed_packet" in str(e)
        assert db.count("jobs") == 0
        return
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        delivery = sub.next(30)
        assert delivery is not None and delivery.payload == payload
        delivery.ack()


def test_nul_characters_in_names_are_refused() -> None:
    with pytest.raises(ValueError, match="NUL character"):
        libqueue.Table("jo\x00bs", payload="payload")


SWITCHES = {"listen_notify", "transactional", "coalesce"}  # ranges ending at 1: 1 on, 0 off


@pytest.mark.parametrize("name", int_options())
def test_a_bool_is_refused_by_an_int_option_unless_it_is_a_switch(name: str) -> None:
    for value in (True, False):
        if name in SWITCHES:
            assert build_options({name: value}, scope(name)) != ffi.NULL
        else:
            with pytest.raises(TypeError, match=r"option '%s' takes an int, not a bool \(%s\)"
                               % (name, value)):
                build_options({name: value}, scope(name))


def test_the_switches_are_the_int_options_whose_range_ends_at_1() -> None:
    assert {name for name in int_options() if range_of(name)[1] == 1} == SWITCHES
