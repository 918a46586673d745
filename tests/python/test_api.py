"""The binding itself: errors, enums, tables, options, version."""

from __future__ import annotations

import pickle

import pytest

import libqueue
from libqueue._ffi import ffi, lib, text

from helpers import SqliteDB, make_table

EXPECTED_CLASSES = {
    "LQ_MISUSE": "Misuse",
    "LQ_NOMEM": "NoMemory",
    "LQ_CONNECT": "ConnectError",
    "LQ_BACKEND": "BackendError",
    "LQ_SCHEMA": "SchemaError",
    "LQ_DIALECT": "DialectError",
    "LQ_SERVER_TOO_OLD": "ServerTooOld",
    "LQ_CONNECTION_LIMIT": "ConnectionLimit",
    "LQ_TIMEOUT": "Timeout",
    "LQ_CLOSED": "Closed",
    "LQ_LEASE_LOST": "LeaseLost",
    "LQ_CONTENTION": "Contention",
    "LQ_ALREADY_SUBSCRIBED": "AlreadySubscribed",
    "LQ_BATCH_ROLLED_BACK": "BatchRolledBack",
    "LQ_DUPLICATE": "Duplicate",
    "LQ_NOT_FOUND": "NotFound",
    "LQ_CANCELLED": "Cancelled",
}


def test_one_exception_class_per_status() -> None:
    for c_name, value in ffi.typeof("lq_status").relements.items():
        if c_name in ("LQ_OK", "LQ_ERROR"):
            continue
        cls = getattr(libqueue, EXPECTED_CLASSES[c_name])
        assert issubclass(cls, libqueue.Error)
        assert cls.status == value
        assert libqueue.errors.error_class(value) is cls
    assert libqueue.errors.error_class(lib.LQ_ERROR) is libqueue.Error
    assert libqueue.errors.error_class(9999) is libqueue.Error


def test_error_carries_status_and_codes() -> None:
    e = libqueue.errors.make_error(lib.LQ_SCHEMA, "column x is missing", "42703", 7)
    assert isinstance(e, libqueue.SchemaError)
    assert (e.status, e.sqlstate, e.native_code) == (libqueue.Status.SCHEMA, "42703", 7)
    assert e.status_name == "LQ_SCHEMA"
    assert "column x is missing" in str(e)


#: The classes that are also a builtin exception, and that builtin.
BUILTIN_BASES = {
    libqueue.Misuse: ValueError,
    libqueue.NoMemory: MemoryError,
    libqueue.ConnectError: ConnectionError,
    libqueue.ConnectionLimit: ValueError,
    libqueue.Timeout: TimeoutError,
    libqueue.NotFound: LookupError,
}


@pytest.mark.parametrize("cls", [getattr(libqueue, name) for name in EXPECTED_CLASSES.values()],
                         ids=lambda cls: cls.__name__)
def test_an_error_is_the_builtin_that_fits(cls: type) -> None:
    """Caught as libqueue.Error and, where one fits, as the builtin; the rest
    are no builtin's; either way they pickle whole."""
    e = libqueue.errors.make_error(cls.status, "what failed", "42000", 5)
    builtin = BUILTIN_BASES.get(cls)
    if builtin is None:
        assert cls.__bases__ == (libqueue.Error,)
    else:
        with pytest.raises(builtin) as info:
            raise e
        assert info.value is e
    with pytest.raises(libqueue.Error):
        raise e
    assert str(e) == "%s: what failed (SQLSTATE 42000, code 5)" % e.status_name
    copy = pickle.loads(pickle.dumps(e))
    assert type(copy) is cls
    assert (copy.message, copy.status, copy.sqlstate, copy.native_code) == (
        "what failed", cls.status, "42000", 5)
    assert cls.__doc__ == "%s: %s" % (e.status_name, text(lib.lq_status_describe(cls.status)))


def test_the_core_s_errors_are_caught_as_builtins(tmp_path) -> None:
    raised = []
    for builtin, url, options in [
            (ValueError, "", {}),
            (ConnectionError, "sqlite://%s/no/such/dir/q.db" % tmp_path, {}),
            (ValueError, "sqlite://%s/q.db" % tmp_path, {"pool_size": 4, "connection_limit": 2})]:
        with pytest.raises(builtin) as info:
            libqueue.Broker(url, **options)
        raised.append(type(info.value))
    assert raised == [libqueue.Misuse, libqueue.ConnectError, libqueue.ConnectionLimit]


def test_version() -> None:
    assert libqueue.HEADER_VERSION[0] == lib.lq_version_number() // 10000
    assert libqueue.__version__ == "%d.%d.%d" % libqueue.HEADER_VERSION


def test_enums_come_from_the_header() -> None:
    assert libqueue.Form.LEASE == lib.LQ_FORM_LEASE
    assert libqueue.Form.ADVISORY == lib.LQ_FORM_ADVISORY
    assert libqueue.Stat.WAITING == lib.LQ_STAT_WAITING
    assert libqueue.LogLevel.WARNING == 30


@pytest.mark.parametrize("form, expected", [("lease", libqueue.Form.LEASE),
                                            ("advisory", libqueue.Form.ADVISORY)])
def test_table_form(form: str, expected: libqueue.Form) -> None:
    assert make_table(form).form == expected


def test_table_without_form_column_is_row_lock() -> None:
    assert libqueue.Table("jobs", payload="payload").form == libqueue.Form.ROW_LOCK


def test_malformed_advisory_template_is_misuse() -> None:
    with pytest.raises(libqueue.Misuse):
        libqueue.Table("jobs", advisory_lock="job-{id")


def test_unknown_isolation_name_is_misuse() -> None:
    with pytest.raises(libqueue.Misuse):
        libqueue.Table("jobs", locked_until="locked_until", isolation="sloppy")


def test_isolation_by_name() -> None:
    t = libqueue.Table("jobs", locked_until="locked_until", isolation="serializable")
    assert t.form == libqueue.Form.LEASE


@pytest.mark.parametrize("form", ["lease", "advisory"])
def test_create_sql_runs_on_sqlite(tmp_path, form: str) -> None:
    table = make_table(form, retry_after="retry_after", processed_at="processed_at",
                       group="grp", partition_key="partition_key", priority="priority",
                       headers="headers")
    sql = table.create_sql("sqlite")
    assert "jobs" in sql
    db = SqliteDB(str(tmp_path / "c.db"))
    db.executescript(sql)
    columns = {row[1] for row in db.query("PRAGMA table_info(jobs)")}
    assert set(table.columns.values()) | {"id"} <= columns
    # And a broker can work with it.
    with libqueue.Broker(db.url) as broker:
        broker.publish(table, b"x", group="g")
        with broker.subscribe(table, group="g", poll_interval_ms=50) as sub:
            with sub.next(5) as d:
                assert d.payload == b"x"
                d.ack()


def test_create_sql_unknown_dialect() -> None:
    with pytest.raises(libqueue.Error):
        make_table("lease").create_sql("oracle")


@pytest.mark.parametrize("form", ["lease", "advisory", "row_lock"])
@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_check_form_says_which_forms_a_database_serves(form: str, dialect: str) -> None:
    table = make_table(form)
    if form == "row_lock" and dialect == "sqlite":
        with pytest.raises(libqueue.DialectError) as info:
            table.check_form(dialect)
        assert info.value.message == (
            "table jobs: sqlite has no row locks, so it cannot serve the row lock form: give "
            "the table a locked_until column (lease form) or an advisory lock key template "
            "(advisory form)")
    else:
        table.check_form(dialect)
    with pytest.raises(libqueue.DialectError, match="unknown dialect"):
        table.check_form("oracle")


def test_broker_options_by_name(db) -> None:
    with libqueue.Broker(db.url, pool_size=4, connect_timeout_ms=5000) as broker:
        assert broker.dialect == db.dialect


def test_unknown_option_is_misuse(db) -> None:
    with pytest.raises(libqueue.Misuse) as info:
        libqueue.Broker(db.url, no_such_option=1)
    assert "no_such_option" in str(info.value)


def test_option_of_wrong_type(db) -> None:
    with pytest.raises(TypeError):
        libqueue.Broker(db.url, pool_size="four")


def test_an_integer_past_64_bits_is_refused_by_its_name(db, broker) -> None:
    with pytest.raises(OverflowError, match="option 'pool_size': 1180591620717411303424 does"):
        libqueue.Broker(db.url, pool_size=2**70)
    table = make_table("lease", priority="priority")
    db.create_table(table)
    with pytest.raises(OverflowError, match="priority: 9223372036854775808 does not fit"):
        broker.publish(table, b"x", priority=2**63)
    assert db.count("jobs") == 0


def test_subscription_option_by_name(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse):
        broker.subscribe(table, wrokers=2)
    with broker.subscribe(table, workers=2, poll_interval_ms=50, lease_ms=30000) as sub:
        assert sub.stat("claims") >= 0
        with pytest.raises(libqueue.Misuse):
            sub.stat("no_such_stat")


def test_an_option_given_to_a_call_that_does_not_read_it_is_misuse(db, broker) -> None:
    """An option is read by one call: given to another it is refused, naming
    the call that reads it, rather than silently doing nothing."""
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(libqueue.Misuse, match=r"'workers' belongs to subscribe\(\.\.\.\), "
                                              r"not to Broker"):
        libqueue.Broker(db.url, workers=4)
    with pytest.raises(libqueue.Misuse, match=r"'listen_notify' belongs to Broker"):
        broker.subscribe(table, listen_notify=1)
    with pytest.raises(libqueue.Misuse, match=r"'cron' belongs to schedule"):
        broker.subscribe(table, cron="* * * * *")
    assert db.count("jobs") == 0


@pytest.mark.parametrize("value", [0.5, "5", 1.0])
def test_a_time_in_milliseconds_takes_an_int_only(db, broker, value) -> None:
    """0.5 meant as seconds is refused, not cut to 0 ms."""
    table = make_table("lease", retry_after="retry_after")
    db.create_table(table)
    for field in ("delay_ms", "priority"):
        with pytest.raises(TypeError, match="%s takes an int, got %s" % (field, type(value).__name__)):
            broker.publish(table, b"x", **{field: value})
    assert db.count("jobs") == 0
    broker.publish(table, b"x")
    with broker.subscribe(table, poll_interval_ms=50) as sub:
        d = sub.next(5)
        with pytest.raises(TypeError, match="delay_ms takes an int"):
            d.retry_after(value)
        d.retry_after(60000)  # the delivery is still open: the refusal settled nothing
    assert db.count("jobs") == 1


def test_a_negative_delay_is_named_by_its_keyword(db, broker) -> None:
    table = make_table("lease", retry_after="retry_after", expires_at="expires_at")
    db.create_table(table)
    for field in ("delay_ms", "expires_in_ms"):
        with pytest.raises(libqueue.Misuse, match="^LQ_MISUSE: %s: the delay is negative$" % field):
            broker.publish(table, b"x", **{field: -1})
    assert db.count("jobs") == 0


def test_closed_broker_and_subscription(db) -> None:
    table = make_table("lease")
    db.create_table(table)
    broker = libqueue.Broker(db.url)
    sub = broker.subscribe(table, poll_interval_ms=50)
    sub.close()
    sub.close()  # idempotent
    with pytest.raises(libqueue.Closed):
        sub.next(0)
    broker.close()
    broker.close()
    with pytest.raises(libqueue.Closed):
        broker.publish(table, b"x")
    with pytest.raises(libqueue.Closed):
        broker.subscribe(table)


def test_publish_needs_a_table(broker) -> None:
    with pytest.raises(TypeError):
        broker.publish("jobs", b"x")  # type: ignore[arg-type]


def test_unknown_message_field(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with pytest.raises(TypeError):
        broker.publish_many(table, [{"payload": b"x", "colour": "red"}])
    assert db.count("jobs") == 0


def test_one_subscription_per_queue_and_broker(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with broker.subscribe(table, poll_interval_ms=50):
        with pytest.raises(libqueue.AlreadySubscribed):
            broker.subscribe(table)
    with broker.subscribe(table, poll_interval_ms=50):  # free again once closed
        pass


def test_wait_times_out_while_running(db, broker) -> None:
    table = make_table("lease")
    db.create_table(table)
    with broker.subscribe(table, poll_interval_ms=50) as sub:
        assert sub.wait(0.05) is False
        sub.run(lambda d: None)
        assert sub.running
        with pytest.raises(libqueue.Misuse):
            sub.run(lambda d: None)
        sub.stop()
        assert sub.wait(0) is True
        assert not sub.running
