"""Bad input gets one clear error and changes nothing: timeouts, header
names, and handles of failed opens."""

from __future__ import annotations

import math

import pytest

import libqueue

from helpers import POLL_MS, make_table


@pytest.mark.parametrize("timeout", [-1, -0.001, math.nan])
def test_a_negative_or_nan_timeout_is_refused(db, broker, timeout: float) -> None:
    table = make_table("lease")
    db.create_table(table)
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        for pull in (sub.next, sub.next_batch):
            with pytest.raises(ValueError, match="None for no limit"):
                pull(timeout)
        with pytest.raises(ValueError):
            next(sub.deliveries(timeout))
        with sub.next(timeout=5) as delivery:  # nothing was taken meanwhile
            assert delivery.payload == b"x"
            delivery.ack()


def test_a_zero_timeout_takes_what_is_ready(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        assert sub.next(timeout=0) is None
        assert sub.next_batch(timeout=0) == []


def test_a_timeout_of_the_wrong_type_is_a_type_error(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with broker.subscribe(table, poll_interval_ms=POLL_MS) as sub:
        with pytest.raises(TypeError):
            sub.next("1")


def test_an_empty_header_name_is_refused(db, broker) -> None:
    table = make_table("lease", headers="headers")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="a header needs a name"):
        broker.publish(table, b"x", headers={"": "v"})
    assert db.count("jobs") == 0


@pytest.mark.parametrize("field", ["delay_ms", "priority", "id", "expires_in_ms"])
def test_a_bool_for_an_int_field_is_refused_naming_it(db, broker, field: str) -> None:
    table = make_table("lease", priority="priority", expires_at="expires_at")
    db.create_table(table)
    for value in (True, False):
        with pytest.raises(TypeError, match=r"^%s takes an int, not a bool \(%s\)$"
                           % (field, value)):
            broker.publish(table, b"x", **{field: value})
        with pytest.raises(TypeError, match="^%s takes an int, not a bool" % field):
            broker.publish_many(table, [{"payload": b"x", field: value}])
    assert db.count("jobs") == 0


def test_a_bool_for_an_int_option_is_refused_naming_it_and_a_switch_takes_one(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    broker.publish(table, b"x")
    with pytest.raises(TypeError, match=r"option 'max_attempts' takes an int, not a bool \(True\)"):
        broker.subscribe(table, max_attempts=True)
    with pytest.raises(TypeError, match=r"option 'pool_size' takes an int, not a bool"):
        libqueue.Broker(db.url, pool_size=True)
    with broker.subscribe(table, poll_interval_ms=POLL_MS, coalesce=False) as sub:
        with sub.next(timeout=5) as delivery:
            with pytest.raises(TypeError, match=r"delay_ms takes an int, not a bool"):
                delivery.retry_after(True)
            delivery.ack()
    assert db.count("jobs") == 0
