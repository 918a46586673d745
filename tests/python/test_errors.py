"""Bad table descriptions and bad URLs."""

from __future__ import annotations

import pytest

import libqueue

from helpers import make_table


def test_missing_table(db, broker, form) -> None:
    table = make_table(form, name="no_such_jobs")
    with pytest.raises(libqueue.SchemaError) as info:
        broker.subscribe(table)
    assert "no_such_jobs" in str(info.value)
    assert info.value.status == libqueue.Status.SCHEMA


ROLES = ["payload", "attempt", "group", "partition_key", "priority", "retry_after",
         "processed_at", "headers"]


@pytest.mark.parametrize("role", ROLES + ["id"])
def test_missing_column(db, broker, form, role) -> None:
    """Every column the description names is checked when a subscription opens."""
    db.create_table(make_table(form, **{r: r for r in ROLES}))
    if role == "id":
        bad = make_table(form, id="no_such_id")
    else:
        bad = make_table(form, **{role: "no_such_" + role})
    with pytest.raises(libqueue.SchemaError) as info:
        broker.subscribe(bad, **({"group": "g"} if role == "group" else {}))
    assert "no_such_" + role in str(info.value)


@pytest.mark.parametrize("role", ["id", "attempt"])
def test_a_column_of_the_wrong_type_is_refused(db, broker, form, role) -> None:
    """Types are checked too, at a subscription's open and a broker's first
    publish to the table: an id of text would take no generated id, and its
    rows would wait unclaimed."""
    db.create_table(make_table(form, partition_key="grp"))
    bad = make_table(form, partition_key="grp", **{role: "grp"})
    for call in (lambda: broker.subscribe(bad), lambda: broker.publish(bad, b"x")):
        with pytest.raises(libqueue.SchemaError) as info:
            call()
        assert 'column "grp" (%s)' % role in info.value.message
        assert "does not hold an integer" in info.value.message
    assert db.count("jobs") == 0


def test_advisory_template_with_unknown_column(db, broker) -> None:
    """Refused even after the broker found the table fit for a description
    that differs only in its key."""
    db.create_table(make_table("advisory"))
    broker.publish(make_table("advisory"), b"x")
    bad = make_table("advisory", advisory_lock="job-{account}")
    with pytest.raises(libqueue.SchemaError) as info:
        broker.subscribe(bad)
    assert "account" in str(info.value)


@pytest.mark.parametrize("options", [{}, {"partition_concurrency": 1}, {"concurrency": 2}])
def test_row_lock_form_where_the_database_has_row_locks(db, broker, options) -> None:
    """SQLite has no row locks and refuses the form, naming the two it serves,
    before any option the form would take; the servers take it."""
    table = libqueue.Table("jobs", payload="payload", attempt="attempt",
                           partition_key="account")
    db.create_table(table)
    if db.dialect != "sqlite":
        broker.subscribe(table, **options).close()
        return
    with pytest.raises(libqueue.DialectError) as info:
        broker.subscribe(table, **options)
    message = str(info.value).lower()
    assert "no row locks" in message
    assert "lease" in message or "locked_until" in message
    assert "advisory" in message


@pytest.mark.parametrize("url, error", [
    ("nosuchdb:///tmp/x.db", libqueue.DialectError),
    ("sqlite:", libqueue.Misuse),
    ("sqlite://", libqueue.Misuse),
    ("not a url", (libqueue.Misuse, libqueue.DialectError)),
    ("", libqueue.Misuse),
])
def test_bad_urls(url: str, error: type) -> None:
    with pytest.raises(error):
        libqueue.Broker(url)


def test_unreachable_database(tmp_path) -> None:
    with pytest.raises(libqueue.ConnectError):
        libqueue.Broker("sqlite://%s/no/such/dir/q.db" % tmp_path)


def test_relative_sqlite_url(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with libqueue.Broker("sqlite:rel.db") as broker:
        assert broker.dialect == "sqlite"
    assert (tmp_path / "rel.db").exists()
