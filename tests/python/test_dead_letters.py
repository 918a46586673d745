"""Dead letters as an operator handles them (lq_dead_letters_list, _replay,
_purge): listed in id order with their payloads, put back in the queue due
and counted anew, or deleted; named rows in one transaction, all of them in
batches; in a dead-letter table and in a dead-letter group, on every
database and form."""

from __future__ import annotations

from typing import Any, List

import pytest

import libqueue
from helpers import make_table


def _tables(form: str) -> List[Any]:
    in_table = make_table(form, "jobs", retry_after="retry_after", headers="headers",
                          dead_letter="jobs_dead")
    in_group = make_table(form, "grouped", retry_after="retry_after", group="queue",
                          dead_letter="dead")
    return [(in_table, None), (in_group, "work")]


def _dead(broker: libqueue.Broker, table: libqueue.Table, group: Any, payloads: List[bytes]) -> List[int]:
    extra = {"group": group} if group else {}
    ids = broker.publish_many(table, [dict(extra, payload=p) for p in payloads])
    with broker.subscribe(table, group=group, workers=1) as sub:
        for _ in payloads:
            sub.next(timeout=10).dead_letter()
    return ids


@pytest.fixture(params=["table", "group"])
def place(request: Any, form: str) -> Any:
    return _tables(form)[0 if request.param == "table" else 1]


def test_listed_in_id_order_with_their_payloads(broker: libqueue.Broker, place: Any) -> None:
    table, group = place
    broker.create_table(table)
    ids = _dead(broker, table, group, [b"one", b"\xff\x00binary", "żółw".encode()])
    rows = broker.dead_letters(table, group=group)
    assert [r["id"] for r in rows] == ids
    assert [r["payload"] for r in rows] == [b"one", b"\xff\x00binary", "żółw".encode()]
    assert all(r["attempt"] >= 1 for r in rows)
    assert [r["id"] for r in broker.dead_letters(table, group=group, after=ids[0], limit=1)] == \
        [ids[1]]
    assert broker.dead_letters(table, group=group, after=ids[-1]) == []


def test_replay_puts_named_rows_back_due_and_counted_anew(broker: libqueue.Broker,
                                                          place: Any) -> None:
    table, group = place
    broker.create_table(table)
    ids = _dead(broker, table, group, [b"a", b"b", b"c"])
    assert broker.replay_dead_letters(table, [ids[0], ids[2], 10**9], group=group) == 2
    assert [r["id"] for r in broker.dead_letters(table, group=group)] == [ids[1]]
    with broker.subscribe(table, group=group, workers=2) as sub:
        back = [sub.next(timeout=10) for _ in range(2)]
        assert sorted(d.id for d in back) == [ids[0], ids[2]]
        assert [d.attempt for d in back] == [1, 1]
        for d in back:
            d.ack()
    assert broker.stats(table, group=group).dead_letters == 1


def test_replay_and_purge_every_one_in_batches(broker: libqueue.Broker, place: Any) -> None:
    table, group = place
    broker.create_table(table)
    ids = _dead(broker, table, group, [b"%d" % i for i in range(5)])
    assert broker.replay_dead_letters(table, group=group) == 5
    stats = broker.stats(table, group=group)
    assert (stats.due, stats.dead_letters) == (5, 0)
    _dead(broker, table, group, [b"x"] * 5)
    assert broker.purge_dead_letters(table, group=group) == 5
    assert broker.stats(table, group=group).dead_letters == 0
    assert broker.purge_dead_letters(table, [ids[0]], group=group) == 0  # no longer a dead letter


@pytest.mark.forms("lease")
def test_more_than_a_batch_goes_back(broker: libqueue.Broker, db: Any, form: str) -> None:
    table = make_table(form, "jobs", retry_after="retry_after", dead_letter="jobs_dead")
    broker.create_table(table)
    for start in range(0, 2500, 500):  # dead letters written straight into their table
        db.execute("INSERT INTO jobs_dead (id, payload, attempt, retry_after) VALUES " + ", ".join(
            "(%d, ?, 9, %s)" % (i + 1, db.past) for i in range(start, start + 500)),
            [b"p"] * 500)
    assert broker.stats(table).dead_letters == 2500
    assert broker.replay_dead_letters(table) == 2500
    stats = broker.stats(table)
    assert (stats.due, stats.dead_letters, stats.attempts) == (2500, 0, {1: 2500})


@pytest.mark.forms("lease")
def test_a_replay_that_meets_a_live_id_changes_nothing(broker: libqueue.Broker, db: Any,
                                                        form: str) -> None:
    table = make_table(form, "jobs", retry_after="retry_after", dead_letter="jobs_dead")
    broker.create_table(table)
    ids = _dead(broker, table, None, [b"a", b"b"])
    live = broker.publish(table, b"live")
    db.execute("INSERT INTO jobs_dead (id, payload, attempt, retry_after) VALUES (?, ?, 3, %s)"
               % db.past, (live, b"clash"))
    with pytest.raises(libqueue.Error):
        broker.replay_dead_letters(table, [ids[0], live])
    assert [r["id"] for r in broker.dead_letters(table)] == ids + [live]
    assert broker.stats(table).due == 1


def test_bad_calls_are_refused(broker: libqueue.Broker) -> None:
    plain = libqueue.Table("plain", payload="payload", locked_until="locked_until")
    broker.create_table(plain)
    with pytest.raises(libqueue.Misuse, match="declares no dead letters"):
        broker.dead_letters(plain)
    with pytest.raises(libqueue.Misuse, match="declares no dead letters"):
        broker.replay_dead_letters(plain)
    table, _ = _tables("lease")[0]
    grouped, _ = _tables("lease")[1]
    broker.create_table(table)
    broker.create_table(grouped)
    with pytest.raises(libqueue.Misuse, match="limit"):
        broker.dead_letters(table, limit=0)
    with pytest.raises(libqueue.Misuse, match="no group column"):
        broker.purge_dead_letters(table, group="g")
    with pytest.raises(libqueue.Misuse, match="name the group"):
        broker.replay_dead_letters(grouped)
    assert broker.replay_dead_letters(table, []) == 0  # nothing named, nothing done
    broker.close()
    with pytest.raises(libqueue.Closed):
        broker.purge_dead_letters(table)
