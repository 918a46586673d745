"""Retention (lq_queue_prune, lq_dead_letters_prune): finished rows and dead
letters older than the cut are deleted, a thousand to a statement, and
nothing else is: rows younger than the cut, queued or in work stay; on
every database, times backdated in SQL."""

from __future__ import annotations

import datetime
from typing import Any, List

import pytest

import libqueue
from helpers import make_table

HOUR = datetime.timedelta(hours=1)


def _finish(broker: libqueue.Broker, table: libqueue.Table, count: int, **options: Any) -> List[int]:
    """Claims and acks `count` rows: they stay, marked processed."""
    with broker.subscribe(table, workers=1, **options) as sub:
        done = []
        for _ in range(count):
            d = sub.next(timeout=10)
            done.append(d.id)
            d.ack()
    return done


def _ids_in(ids: List[int]) -> str:
    return "(%s)" % ", ".join(str(int(i)) for i in ids)


def _index_exists(db: Any, table: str, index: str) -> bool:
    if db.dialect == "sqlite":
        sql = "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?"
        return db.scalar(sql, [index]) == 1
    if db.dialect == "postgresql":
        sql = ("SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() "
               "AND tablename = ? AND indexname = ?")
    else:
        sql = ("SELECT count(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS "
               "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?")
    return int(db.scalar(sql, [table, index])) == 1


def test_finished_rows_past_the_cut_go_and_nothing_else(db: Any, broker: libqueue.Broker,
                                                        form: str) -> None:
    table = make_table(form, processed_at="processed_at")
    broker.create_table(table)
    ids = broker.publish_many(table, [b"%d" % i for i in range(6)])
    finished = _finish(broker, table, 4)
    db.execute("UPDATE jobs SET processed_at = %s WHERE id IN %s" % (db.past, _ids_in(finished[:2])))
    with broker.subscribe(table, workers=1) as sub:
        in_work = sub.next(timeout=10)  # held while the prunes run
        assert broker.prune(table, HOUR) == 2
        assert sorted(r[0] for r in db.query("SELECT id FROM jobs")) == sorted(
            set(ids) - set(finished[:2]))
        assert broker.prune(table, 3600) == 0  # seconds, as a number
        assert broker.prune(table, 0) == 2  # every finished row: acked before now
        left = sorted(r[0] for r in db.query("SELECT id FROM jobs"))
        assert left == sorted(set(ids) - set(finished)) and in_work.id in left
        assert db.count("jobs", "processed_at IS NULL") == 2  # one in work, one queued
        in_work.ack()
    assert broker.stats(table).due == 1


@pytest.mark.forms("lease")
def test_more_than_one_batch(db: Any, broker: libqueue.Broker, form: str) -> None:
    table = make_table(form, processed_at="processed_at")
    broker.create_table(table)
    queued = broker.publish_many(table, [b"q"] * 3)
    for start in range(0, 2500, 500):  # finished rows written straight into the table
        db.execute("INSERT INTO jobs (id, payload, attempt, processed_at) VALUES " + ", ".join(
            "(%d, ?, 1, %s)" % (i + 100, db.past) for i in range(start, start + 500)), [b"p"] * 500)
    assert broker.prune(table, HOUR) == 2500
    assert sorted(r[0] for r in db.query("SELECT id FROM jobs")) == sorted(queued)
    assert broker.prune(table, HOUR) == 0


@pytest.mark.forms("lease")
def test_one_group_or_every_group(db: Any, broker: libqueue.Broker, form: str) -> None:
    table = make_table(form, group="queue", processed_at="processed_at")
    broker.create_table(table)
    for group in ("a", "b"):
        broker.publish_many(table, [{"payload": b"x", "group": group}] * 3)
        _finish(broker, table, 2, group=group)
    db.execute("UPDATE jobs SET processed_at = %s WHERE processed_at IS NOT NULL" % db.past)
    assert broker.prune(table, HOUR, group="a") == 2
    assert db.count("jobs", "processed_at IS NOT NULL") == 2
    assert db.count("jobs", "%s = 'a'" % db.quote("queue")) == 1
    assert broker.prune(table, HOUR) == 2
    assert db.count("jobs") == 2  # the queued row of each group
    with pytest.raises(libqueue.Misuse, match="no group column"):
        broker.prune(make_table(form, processed_at="processed_at"), HOUR, group="a")


def _dead_places(form: str) -> List[Any]:
    in_table = make_table(form, "jobs", retry_after="retry_after", processed_at="processed_at",
                          dead_letter="jobs_dead")
    in_group = make_table(form, "grouped", retry_after="retry_after", group="queue",
                          dead_letter="dead")
    return [(in_table, None, "jobs_dead", "1 = 1"), (in_group, "work", "grouped", "queue = 'dead'")]


@pytest.fixture(params=["table", "group"])
def dead_place(request: Any, form: str) -> Any:
    return _dead_places(form)[0 if request.param == "table" else 1]


def test_dead_letters_go_by_when_they_were_dead_lettered(db: Any, broker: libqueue.Broker,
                                                         dead_place: Any) -> None:
    table, group, dead_table, dead_where = dead_place
    dead_where = dead_where.replace("queue", db.quote("queue"))
    broker.create_table(table)
    extra = {"group": group} if group else {}
    ids = broker.publish_many(table, [dict(extra, payload=b"%d" % i) for i in range(4)])
    # Due long ago: what dead-lettering writes must be its own time, not this.
    db.execute("UPDATE %s SET retry_after = %s" % (table.name, db.past))
    with broker.subscribe(table, group=group, workers=1) as sub:
        for _ in range(3):
            sub.next(timeout=10).dead_letter()
    assert broker.prune_dead_letters(table, HOUR, group=group) == 0  # dead-lettered just now
    dead = [r["id"] for r in broker.dead_letters(table, group=group)]
    assert len(dead) == 3
    db.execute("UPDATE %s SET retry_after = %s WHERE %s AND id IN %s" % (
        dead_table, db.past, dead_where, _ids_in(dead[:2])))
    assert broker.prune_dead_letters(table, HOUR, group=group) == 2
    assert [r["id"] for r in broker.dead_letters(table, group=group)] == dead[2:]
    # A replay makes it due now: in the queue again, it is no dead letter.
    assert broker.replay_dead_letters(table, dead[2:], group=group) == 1
    assert broker.prune_dead_letters(table, 0, group=group) == 0
    stats = broker.stats(table, group=group)
    assert (stats.due, stats.dead_letters) == (2, 0)
    # The queue's own rows, long due, are never dead letters to prune.
    assert sorted(d for d in ids if d not in dead[:2]) == sorted(
        r[0] for r in db.query("SELECT id FROM %s" % table.name) if r[0] in ids)


def test_a_cancel_stamps_its_dead_letter(db: Any, broker: libqueue.Broker,
                                         dead_place: Any) -> None:
    table, group, dead_table, dead_where = dead_place
    dead_where = dead_where.replace("queue", db.quote("queue"))
    broker.create_table(table)
    extra = {"group": group} if group else {}
    [row] = broker.publish_many(table, [dict(extra, payload=b"x")])
    db.execute("UPDATE %s SET retry_after = %s" % (table.name, db.past))
    assert broker.cancel(table, row)
    assert broker.prune_dead_letters(table, HOUR, group=group) == 0
    db.execute("UPDATE %s SET retry_after = %s WHERE %s" % (dead_table, db.past, dead_where))
    assert broker.prune_dead_letters(table, HOUR, group=group) == 1
    assert broker.dead_letters(table, group=group) == []


@pytest.mark.forms("lease")
def test_the_index_of_finished_rows(db: Any, broker: libqueue.Broker, form: str) -> None:
    table = make_table(form, processed_at="processed_at")
    for dialect in ("sqlite", "postgresql", "mysql"):
        assert "jobs_processed" in table.create_sql(dialect)
    db.create_table(table)  # made elsewhere, without it
    assert not _index_exists(db, "jobs", "jobs_processed")
    assert broker.prune(table, HOUR) == 0
    assert _index_exists(db, "jobs", "jobs_processed")
    assert broker.prune(table, HOUR) == 0  # there already: made once
    made = make_table(form, "made", processed_at="processed_at")
    broker.create_table(made)
    assert _index_exists(db, "made", "made_processed")


def test_tables_that_cannot_be_pruned_are_refused(db: Any, broker: libqueue.Broker) -> None:
    plain = make_table("lease", dead_letter="jobs_dead")  # no processed_at: acks delete
    broker.create_table(plain)
    broker.publish_many(plain, [b"a", b"b"])
    _finish(broker, plain, 1)
    with pytest.raises(libqueue.Misuse, match="no processed_at column"):
        broker.prune(plain, 0)
    with pytest.raises(libqueue.Misuse, match="no retry_after column"):
        broker.prune_dead_letters(plain, 0)
    assert db.count("jobs") == 1  # nothing changed
    with pytest.raises(libqueue.Misuse, match="declares no dead letters"):
        broker.prune_dead_letters(make_table("lease", retry_after="retry_after"), 0)
    missing = make_table("lease", "nowhere", processed_at="processed_at", retry_after="retry_after",
                         dead_letter="nowhere_dead")
    with pytest.raises(libqueue.SchemaError, match="nowhere"):
        broker.prune(missing, 0)
    with pytest.raises(libqueue.SchemaError, match="nowhere_dead"):
        broker.prune_dead_letters(missing, 0)
    with pytest.raises(ValueError):
        broker.prune(plain, -1)
    with pytest.raises(TypeError):
        broker.prune(plain, "7d")
    broker.close()
    with pytest.raises(libqueue.Closed):
        broker.prune(make_table("lease", processed_at="processed_at"), 0)
