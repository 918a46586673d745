"""What a sender can make a worker hold: a row whose payload or headers pass
the subscription's max_payload_bytes / max_headers_bytes reaches no handler;
it goes to the dead letters unread, with a warning naming its size."""

from __future__ import annotations

import logging

import pytest

import libqueue

from helpers import POLL_MS, make_table, wait_until


def dead_letter_table(db, form: str, **roles) -> libqueue.Table:
    table = make_table(form, dead_letter="jobs_dead", headers="headers", **roles)
    db.create_table(table)
    db.create_table(table, name="jobs_dead")
    return table


def test_an_oversized_payload_is_dead_lettered_unread(db, broker, form, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="libqueue")
    table = dead_letter_table(db, form)
    broker.publish_many(table, [b"small", b"x" * 5000, b"also small"])
    got = []
    with broker.subscribe(table, poll_interval_ms=POLL_MS, max_payload_bytes=100) as sub:
        for delivery in sub.deliveries(timeout=1.0):
            got.append(delivery.payload)
            delivery.ack()
    assert sorted(got) == [b"also small", b"small"]
    assert db.count("jobs") == 0
    assert db.scalar("SELECT payload FROM jobs_dead") == b"x" * 5000
    assert "payload of 5000 bytes passes max_payload_bytes (100)" in caplog.text


def test_oversized_headers_are_dead_lettered_in_push_mode(db, broker, form, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="libqueue")
    table = dead_letter_table(db, form)
    broker.publish(table, b"fine", headers={"a": "b"})
    broker.publish(table, b"heavy", headers={"big": "y" * 2000})
    seen = []
    with broker.subscribe(table, poll_interval_ms=POLL_MS, workers=2,
                          max_headers_bytes=200) as sub:
        sub.run(lambda d: seen.append(d.payload))
        wait_until(lambda: db.count("jobs") == 0, what="the table to drain")
    assert seen == [b"fine"]
    assert db.count("jobs_dead") == 1
    assert "headers of" in caplog.text and "max_headers_bytes (200)" in caplog.text


def test_a_text_payload_counts_bytes_not_characters(db, broker) -> None:
    table = dead_letter_table(db, "lease")
    broker.publish(table, "é" * 60)  # 60 characters, 120 bytes
    with broker.subscribe(table, poll_interval_ms=POLL_MS, max_payload_bytes=100) as sub:
        assert sub.next(timeout=0.5) is None
    assert db.count("jobs_dead") == 1


def test_a_limit_needs_a_dead_letter_destination(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match="dead-letter destination"):
        broker.subscribe(table, max_payload_bytes=100)
