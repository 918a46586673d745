"""``Broker``: a connection pool to one database; publishes and subscribes."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any, Iterable, List, Mapping, Optional, Tuple, Union

from libqueue import rendered
from libqueue._ffi import ctext, ffi, lib, text
from libqueue.errors import check, make_error
from libqueue.doctor import Finding, findings_from_json
from libqueue.options import build_options, int_argument
from libqueue.stats import ATTEMPT_BUCKETS, DEFAULT_CAP, QueueStats
from libqueue.subscription import Subscription
from libqueue.table import Table

__all__ = ["Broker", "Message", "Payload", "redact_url"]

#: A payload: bytes, or any other object of the buffer protocol (bytearray,
#: memoryview, array.array, ...: its bytes, as ``bytes(x)`` reads them), or a
#: str, written as UTF-8. Typing names no buffer type before Python 3.12.
Payload = Union[bytes, bytearray, memoryview, str]
#: A message for ``publish_many``: a payload alone, or a dict of the keyword
#: arguments of ``Broker.publish`` (``{"payload": b"..", "group": "g"}``).
Message = Union[Payload, Mapping[str, Any]]

_MESSAGE_FIELDS = ("payload", "group", "partition_key", "priority", "delay_ms", "headers", "id",
                   "dedup_key", "on_duplicate", "expires_in_ms")
#: on_duplicate's names.
_ON_DUPLICATE = {"refuse": 0, "existing": 1}


def redact_url(url: str) -> str:
    """``url`` as it may be shown: the password of its user info and of its
    ``password``, ``sslpassword`` and ``tls_passphrase`` parameters as "***"."""
    out = ffi.new("char **")
    check(lib.lq_redact_url(out, ctext(url)), "redact_url")
    try:
        return text(out[0])
    finally:
        lib.lq_free(out[0])


def _cgroup(group: Optional[str]) -> Any:
    return ffi.NULL if group is None else ctext(group)


#: An age for retention: a ``timedelta``, or seconds.
Age = Union[datetime.timedelta, int, float]


def _age_ms(age: Age) -> int:
    if isinstance(age, datetime.timedelta):
        seconds = age.total_seconds()
    elif isinstance(age, (int, float)) and not isinstance(age, bool):
        seconds = float(age)
    else:
        raise TypeError("older_than must be a datetime.timedelta or seconds, got %s"
                        % type(age).__name__)
    if not seconds >= 0:  # also NaN
        raise ValueError("older_than must not be negative, got %r" % age)
    return int(min(seconds * 1000.0, 2.0 ** 62))  # past any time: nothing is that old


def _is_payload(value: Any) -> bool:
    """Whether ``value`` is one payload (a str or a buffer), rather than a
    list of messages, which would be split up."""
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return True
    try:
        with memoryview(value):  # released at once: a bytearray may be resized again
            return True
    except TypeError:
        return False


def _payload_buffer(payload: Payload) -> Any:
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    try:
        view = memoryview(payload)
    except TypeError:
        raise TypeError("payload takes bytes, a str (written as UTF-8) or another object of the "
                        "buffer protocol (bytearray, memoryview, array.array, ...), got %s"
                        % type(payload).__name__) from None
    if not view.c_contiguous:  # a strided view: its bytes in order, as bytes(view) reads them
        return ffi.from_buffer(view.tobytes())
    return ffi.from_buffer(view)


def _build_message(table: Table, fields: Mapping[str, Any]) -> Any:
    """An owned ``lq_message *`` with ``fields`` set."""
    unknown = set(fields) - set(_MESSAGE_FIELDS)
    if unknown:
        raise TypeError("unknown message field(s): %s" % ", ".join(sorted(unknown)))
    out = ffi.new("lq_message **")
    check(lib.lq_message_new(out), "lq_message_new")
    m = ffi.gc(out[0], lib.lq_message_free)

    payload = fields.get("payload")
    if payload is not None:
        data = _payload_buffer(payload)
        # An empty payload is only written to a table that has a payload
        # column, so publishing to one without works with the default b"".
        if len(data) or table.has("payload"):
            check(lib.lq_message_set_payload(m, data, len(data)), "payload")
    if fields.get("id") is not None:
        check(lib.lq_message_set_id(m, int_argument("id", fields["id"])), "id")
    if fields.get("group") is not None:
        check(lib.lq_message_set_group(m, ctext(fields["group"])), "group")
    if fields.get("partition_key") is not None:
        check(lib.lq_message_set_partition_key(m, ctext(fields["partition_key"])), "partition_key")
    if fields.get("priority") is not None:
        check(lib.lq_message_set_priority(m, int_argument("priority", fields["priority"])), "priority")
    if fields.get("delay_ms") is not None:
        check(lib.lq_message_set_delay_ms(m, int_argument("delay_ms", fields["delay_ms"])), "delay_ms")
    if fields.get("expires_in_ms") is not None:
        check(lib.lq_message_set_expires_in_ms(m, int_argument("expires_in_ms", fields["expires_in_ms"])), "expires_in_ms")
    if fields.get("dedup_key") is not None:
        check(lib.lq_message_set_dedup_key(m, ctext(fields["dedup_key"])), "dedup_key")
    on_duplicate = fields.get("on_duplicate")
    if on_duplicate is not None:
        if on_duplicate not in _ON_DUPLICATE:
            raise make_error(lib.LQ_MISUSE, "on_duplicate is %s, not %r" % (
                " or ".join(map(repr, _ON_DUPLICATE)), on_duplicate))
        check(lib.lq_message_set_on_duplicate(m, _ON_DUPLICATE[on_duplicate]), "on_duplicate")
    headers: Optional[Mapping[str, str]] = fields.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise TypeError("headers: a mapping of str to str, got %s" % type(headers).__name__)
    if headers:
        for name, value in headers.items():
            if not isinstance(value, str):
                raise TypeError("header %r: values are str, got %s" % (name, type(value).__name__))
            check(lib.lq_message_set_header(m, ctext(name), ctext(value)), "header %r" % name)
    return m


def _open_psycopg2_transaction(connection: Any) -> None:
    """psycopg2 sends its BEGIN with the first statement it runs: a
    transaction it has not begun yet is begun here, so the rows written on
    its PGconn * commit or roll back with it (not by themselves). Not in
    autocommit mode, where each statement commits on its own."""
    if not connection.autocommit and connection.get_transaction_status() == 0:  # PQTRANS_IDLE
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")


class Broker:
    """A connection pool to one database (``lq_broker``).

    ``url`` is ``sqlite:///abs/path.db`` or ``sqlite:relative.db`` (and, with a
    core built for them, PostgreSQL and MySQL URLs). Keyword options are
    passed by name to the core (``pool_size=4``, ``connect_timeout_ms=...``,
    ``statement_timeout_ms``, ``acquire_timeout_ms``, ``connection_limit``,
    ``listen_notify``, and past PgBouncer in transaction pooling ``pgbouncer="transaction"``
    and ``listen_url``).

    Thread-safe: any thread may publish or subscribe. Use as a context
    manager, or call ``close()``; open subscriptions keep the pool alive until
    they are closed.
    """

    def __init__(self, url: str, **options: Any) -> None:
        #: The URL as it may be shown: its password is "***" (``redact_url``).
        self.url = redact_url(url)
        opts = build_options(options, "broker")
        out = ffi.new("lq_broker **")
        check(lib.lq_broker_open(out, ctext(url), opts), "open %s" % self.url)
        self._ptr: Any = ffi.gc(out[0], lib.lq_broker_close)

    def _live(self) -> Any:
        if self._ptr is None:
            raise make_error(lib.LQ_CLOSED, "broker is closed")
        return self._ptr

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._ptr is None

    @property
    def dialect(self) -> str:
        """``"sqlite"``, ``"postgresql"`` or ``"mysql"``."""
        return text(lib.lq_broker_dialect(self._live()))

    def close(self) -> None:
        """Close the broker (idempotent). It takes no new publishes or
        subscriptions; open subscriptions go on until closed."""
        pointer, self._ptr = self._ptr, None
        if pointer is not None:
            ffi.release(pointer)

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- tables -----------------------------------------------------------

    def create_table(self, table: Table, *, verify_only: bool = False) -> None:
        """Make the database ready for ``table``: create it, its claim-order
        index and its dead-letter table when missing, then check that every
        column the description names exists with a fitting type.

        Safe at every start, from several processes at once. A table that does
        not fit raises ``SchemaError`` naming each column missing or of the
        wrong type, and changes nothing. ``verify_only=True`` creates nothing:
        a missing table raises ``SchemaError`` too."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        flags = lib.LQ_CREATE_VERIFY_ONLY if verify_only else 0
        check(lib.lq_table_create(self._live(), table._ptr, flags), "create_table(%r)" % table.name)

    # -- publishing -------------------------------------------------------

    def publish(self, table: Table, payload: Optional[Payload] = b"", *,
                group: Optional[str] = None, partition_key: Optional[str] = None,
                priority: Optional[int] = None, delay_ms: Optional[int] = None,
                headers: Optional[Mapping[str, str]] = None,
                id: Optional[int] = None, dedup_key: Optional[str] = None,
                on_duplicate: Optional[str] = None, expires_in_ms: Optional[int] = None) -> int:
        """Write one message into ``table``; returns its id. ``payload`` is
        bytes, a str (UTF-8) or any object of the buffer protocol (its bytes).

        A field the table has no column for raises ``SchemaError`` and writes
        nothing. Wakes this process's subscriptions of the table at once.
        While a row holding ``dedup_key`` is queued or in work, raises
        ``Duplicate`` and writes nothing, or with ``on_duplicate="existing"``
        writes nothing and returns that row's id. With ``expires_in_ms`` (an
        ``expires_at`` column) the row is never started after that long: it
        goes to the dead letters unrun, or is finished without a destination."""
        fields = dict(payload=payload, group=group, partition_key=partition_key,
                      priority=priority, delay_ms=delay_ms, headers=headers, id=id,
                      dedup_key=dedup_key, on_duplicate=on_duplicate,
                      expires_in_ms=expires_in_ms)
        return self._publish(table, [fields])[0]

    def publish_many(self, table: Table, messages: Iterable[Message]) -> List[int]:
        """Write many messages in one transaction (all or none); returns their
        ids in order. Each message is a payload or a dict of ``publish``'s
        keyword arguments."""
        if _is_payload(messages):  # would be split up
            raise TypeError("publish_many takes a list of messages, not one payload (%s): "
                            "use publish" % type(messages).__name__)
        batch: List[Mapping[str, Any]] = []
        for message in messages:
            if isinstance(message, Mapping):
                batch.append(message)
            else:
                batch.append({"payload": message})
        return self._publish(table, batch) if batch else []

    def publish_on(self, connection: Any, table: Table, payload: Any = b"", *,
                   group: Optional[str] = None, partition_key: Optional[str] = None,
                   priority: Optional[int] = None, delay_ms: Optional[int] = None,
                   headers: Optional[Mapping[str, str]] = None, id: Optional[int] = None,
                   dedup_key: Optional[str] = None, on_duplicate: Optional[str] = None,
                   expires_in_ms: Optional[int] = None) -> Any:
        """Write a message on a connection of your own, inside whatever
        transaction it has open, so it commits (or rolls back) with your data;
        returns its id. Keywords as ``publish``.

        ``connection`` is a psycopg2, psycopg (3), PyMySQL, mysqlclient
        (``MySQLdb``) or ``sqlite3`` connection, a SQLAlchemy ``Connection``
        or ``Session``, or the address of the database's native handle as an
        int (``PGconn *``, ``MYSQL *``, ``sqlite3 *``). Given a list of
        messages (payloads, or dicts of the keywords) instead of a payload, it
        writes each and returns their ids.

        Nothing is committed here and no subscription of this process is
        woken: your commit decides. On PostgreSQL the statement notifies the
        table's channel, which the server delivers at your commit, so a
        subscription whose broker listens (``listen_notify=1``) claims the
        row at once; elsewhere subscriptions find it by their next claim.

        A dedup key a row holds fails with your driver's integrity error (the
        unique index refuses the insert; on PostgreSQL that aborts your
        transaction), except on the native paths, which raise ``Duplicate``
        and take ``on_duplicate="existing"``."""
        fields = dict(group=group, partition_key=partition_key, priority=priority,
                      delay_ms=delay_ms, headers=headers, id=id, dedup_key=dedup_key,
                      on_duplicate=on_duplicate, expires_in_ms=expires_in_ms)
        many = payload is not None and not _is_payload(payload)
        if many:
            if any(v is not None for v in fields.values()):
                raise TypeError("publish_on: a list of messages carries its fields itself; "
                                "no keyword arguments with it")
            batch = [m if isinstance(m, Mapping) else {"payload": m} for m in payload]
        else:
            fields["payload"] = payload
            batch = [fields]
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        # psycopg2 (and a native handle) go through lq_publish_on, on the
        # PGconn * the connection exposes: the rows are written by libpq with
        # the payload in binary, several messages in multi-row inserts, and a
        # dedup key looked up first (so "existing" works), with no text to
        # convert. Every other driver runs the rendered insert through its
        # own cursor.
        address = getattr(connection, "pgconn_ptr", None) if self.dialect == "postgresql" else None
        if isinstance(connection, int) and not isinstance(connection, bool):
            address = connection
        if address is not None:
            if address == 0:
                raise TypeError("publish_on: the native handle's address is 0")
            if not isinstance(connection, int):
                _open_psycopg2_transaction(connection)
            ids = self._publish(table, batch, native=ffi.cast("void *", address)) if batch else []
        else:
            database, paramstyle, runner = rendered.connection_kind(connection)
            if database != self.dialect:
                raise make_error(lib.LQ_MISUSE, "publish_on: the connection reaches %s, the broker "
                                 "%s" % (database, self.dialect))
            if any(m.get("on_duplicate") == "existing" for m in batch):
                raise make_error(lib.LQ_MISUSE, "publish_on: on_duplicate=\"existing\" looks the "
                                 "key up before the insert, which only psycopg2 connections and "
                                 "native handles get; on this %s connection a held key fails "
                                 "the insert with the driver's integrity error"
                                 % type(connection).__module__.split(".")[0])
            payload_text = self.dialect == "postgresql" and rendered.payload_is_text(
                runner, paramstyle, table)
            ids = []
            for message in batch:
                built = _build_message(table, message)
                statement = rendered.render(self.dialect, table, built, payload_text=payload_text)
                ids.append(rendered.execute(runner, paramstyle, statement, message.get("id")))
        return ids if many else ids[0]

    def publish_sql(self, table: Table, payload: Optional[Payload] = b"", *,
                    paramstyle: Optional[str] = None, notify: bool = True,
                    group: Optional[str] = None, partition_key: Optional[str] = None,
                    priority: Optional[int] = None, delay_ms: Optional[int] = None,
                    headers: Optional[Mapping[str, str]] = None, id: Optional[int] = None,
                    dedup_key: Optional[str] = None, expires_in_ms: Optional[int] = None
                    ) -> Tuple[str, Any]:
        """The insert ``publish`` would run for one message, as ``(sql,
        params)`` to run on a connection of your own, with a driver
        ``publish_on`` does not know. Values are parameters, never spliced.

        ``paramstyle`` None keeps the placeholders as rendered for this
        broker's database (``$1``.. on PostgreSQL, ``?`` on MySQL and SQLite)
        with a tuple; a DB-API paramstyle (``qmark``, ``numeric``, ``named``,
        ``format``, ``pyformat``) converts them, with a dict for the named
        ones (``p1``, ``p2``, ..) and each literal ``%`` doubled for the
        percent ones. The payload is bytes (BYTEA, BLOB), times are text on
        this host's clock now (UTC), so run it soon. The statement returns the
        new id as its one row on PostgreSQL and SQLite; on MySQL read the
        driver's last insert id. On PostgreSQL it notifies the table's channel
        unless ``notify=False``."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        message = _build_message(table, dict(
            payload=payload, group=group, partition_key=partition_key, priority=priority,
            delay_ms=delay_ms, headers=headers, id=id, dedup_key=dedup_key,
            expires_in_ms=expires_in_ms))
        return rendered.convert(rendered.render(self.dialect, table, message, notify), paramstyle)

    def _publish(self, table: Table, batch: List[Mapping[str, Any]], native: Any = None) -> List[int]:
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        built = [_build_message(table, fields) for fields in batch]
        array = ffi.new("lq_message *[]", built)
        ids = ffi.new("int64_t[]", len(built))
        if native is None:
            status = lib.lq_publish(ids, self._live(), table._ptr, array, len(built))
        else:
            status = lib.lq_publish_on(ids, self._live(), native, table._ptr, array, len(built))
        check(status, "publish to %r" % table.name)
        return list(ids)

    def cancel(self, table: Table, id: int) -> bool:
        """Take row ``id`` out of ``table``'s queue: into the dead letters where
        the table declares them, else deleted. Returns False when no row of
        the id is queued or in work. In the lease form a row in work is
        cancelled too: its run sees ``delivery.cancelled`` (at once where the
        cancel is heard of, else at its lease's next extension), and its
        settlement raises ``Cancelled`` and changes nothing. In the advisory
        form likewise, the run told at its settlement (an ack or a dead letter
        raises ``Cancelled``). In the row lock form the run's process takes
        the row out in the run's transaction, at the cancel's request; the
        cancel waits up to 5 s for it, then raises ``Timeout`` having changed
        nothing (a batch or transactional run is not entered)."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        row = int_argument("cancel: id", id)
        status = lib.lq_cancel(self._live(), table._ptr, row)
        if status == lib.LQ_NOT_FOUND:
            return False
        check(status, "cancel row %d of %r" % (row, table.name))
        return True

    def stats(self, table: Table, *, group: Optional[str] = None,
              cap: int = DEFAULT_CAP) -> QueueStats:
        """A snapshot of ``table``'s queue (one ``group`` of it where the table
        has groups): rows due, delayed, in work and dead-lettered, the age of
        the next row due, and the attempts histogram, in one snapshot. Each
        count stops at ``cap`` rows; rows due are read through the claim-order
        index, so a deep backlog costs a bounded read."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        what = "stats of %r" % table.name
        cap = int_argument("stats: cap", cap)
        cgroup = _cgroup(group)
        values = ffi.new("int64_t[]", lib.LQ_QUEUE_STAT_COUNT)
        check(lib.lq_queue_stats(values, lib.LQ_QUEUE_STAT_COUNT, self._live(), table._ptr,
                                 cgroup, int(cap)), what)
        attempts = None
        if table.has("attempt"):
            counts = ffi.new("int64_t[]", ATTEMPT_BUCKETS)
            check(lib.lq_queue_attempts(counts, ATTEMPT_BUCKETS, self._live(), table._ptr,
                                        cgroup, int(cap)), what)
            attempts = {a: int(n) for a, n in enumerate(counts) if n}

        def known(value: int) -> Optional[int]:
            return None if value < 0 else int(value)

        age = values[lib.LQ_QUEUE_HEAD_AGE_MS]
        return QueueStats(table=table.name, group=group, due=int(values[lib.LQ_QUEUE_DUE]),
                          delayed=int(values[lib.LQ_QUEUE_DELAYED]),
                          in_work=known(values[lib.LQ_QUEUE_IN_WORK]),
                          dead_letters=known(values[lib.LQ_QUEUE_DEAD_LETTERS]),
                          head_age_s=None if age < 0 else age / 1000.0,
                          attempts=attempts, cap=int(cap),
                          paused=self.paused(table, group=group))

    # -- pausing ----------------------------------------------------------

    def pause(self, table: Table, *, group: Optional[str] = None) -> None:
        """Pause ``table``'s queue (one ``group`` of it, or with none every
        group): its subscriptions in every process claim nothing until
        ``resume``; deliveries in work finish. Each subscription sees it
        within one poll interval, at once in this broker, and at once on
        PostgreSQL where it listens (``listen_notify``)."""
        self._control(lib.lq_queue_pause, "pause", table, group)

    def resume(self, table: Table, *, group: Optional[str] = None) -> None:
        """End a pause of ``table`` (or of its ``group``), as ``pause`` named
        it: a group paused on its own stays paused when its table resumes."""
        self._control(lib.lq_queue_resume, "resume", table, group)

    def paused(self, table: Table, *, group: Optional[str] = None) -> bool:
        """Whether ``table``'s claims (those of ``group``) are paused now, by
        a pause of their own or of the whole table."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        out = ffi.new("int *")
        check(lib.lq_queue_paused(out, self._live(), table._ptr, _cgroup(group)),
              "paused %r" % table.name)
        return bool(out[0])

    def _control(self, c_call: Any, what: str, table: Table, group: Optional[str]) -> None:
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        check(c_call(self._live(), table._ptr, _cgroup(group)), "%s %r" % (what, table.name))

    # -- health -----------------------------------------------------------

    def doctor(self, table: Table) -> List[Finding]:
        """``table``'s health from the database's own statistics: dead rows
        and vacuum, what holds back vacuum or purge, the claim-order index
        and its use, the WAL file on SQLite. Each ``Finding`` has a level
        ("ok", "warning", "problem") and says what to do. It reads catalogs
        only."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        out = ffi.new("char **")
        check(lib.lq_doctor(out, self._live(), table._ptr), "doctor of %r" % table.name)
        try:
            return findings_from_json(text(out[0]))
        finally:
            lib.lq_free(out[0])

    # -- dead letters -----------------------------------------------------

    def dead_letters(self, table: Table, *, group: Optional[str] = None, after: int = 0,
                     limit: int = 100) -> List[dict]:
        """Up to ``limit`` dead letters of ``table`` with ids above ``after``,
        in id order: dicts of ``id`` and, where the table has them,
        ``attempt``, ``group``, ``partition_key``, ``priority``, ``headers``,
        and ``payload`` (bytes)."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        after = int_argument("dead_letters: after", after)
        limit = int_argument("dead_letters: limit", limit)
        out = ffi.new("char **")
        check(lib.lq_dead_letters_list(out, self._live(), table._ptr, _cgroup(group), after,
                                       limit), "dead letters of %r" % table.name)
        try:
            rows = json.loads(text(out[0]))
        finally:
            lib.lq_free(out[0])
        for row in rows:
            if "payload_base64" in row:
                row["payload"] = base64.b64decode(row.pop("payload_base64"))
            elif "payload" in row:
                row["payload"] = row["payload"].encode()
        return rows

    def _move_dead_letters(self, c_call: Any, what: str, table: Table, ids: Optional[Iterable[int]],
                           group: Optional[str]) -> int:
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        moved = ffi.new("int64_t *")
        if ids is None:
            status = c_call(moved, self._live(), table._ptr, _cgroup(group), ffi.NULL, 0)
        else:
            wanted = [int_argument("%s: ids" % what, i) for i in ids]
            if not wanted:
                return 0
            status = c_call(moved, self._live(), table._ptr, _cgroup(group),
                            ffi.new("int64_t[]", wanted), len(wanted))
        check(status, "%s of %r" % (what, table.name))
        return int(moved[0])

    def replay_dead_letters(self, table: Table, ids: Optional[Iterable[int]] = None, *,
                            group: Optional[str] = None) -> int:
        """Put dead letters back in ``table``'s queue, due now and counted
        from their first attempt again: those of ``ids`` (in one
        transaction), or every one (a thousand to a transaction). Returns
        how many went back. A table with groups replays into ``group``."""
        return self._move_dead_letters(lib.lq_dead_letters_replay, "replay dead letters", table,
                                       ids, group)

    def purge_dead_letters(self, table: Table, ids: Optional[Iterable[int]] = None, *,
                           group: Optional[str] = None) -> int:
        """Delete dead letters of ``table``: those of ``ids``, or every one.
        Returns how many."""
        return self._move_dead_letters(lib.lq_dead_letters_purge, "purge dead letters", table,
                                       ids, group)

    # -- retention --------------------------------------------------------

    def _prune(self, c_call: Any, what: str, table: Table, older_than: Age,
               group: Optional[str]) -> int:
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        deleted = ffi.new("int64_t *")
        check(c_call(deleted, self._live(), table._ptr, _cgroup(group), _age_ms(older_than)),
              "%s of %r" % (what, table.name))
        return int(deleted[0])

    def prune(self, table: Table, older_than: Age, group: Optional[str] = None) -> int:
        """Delete ``table``'s finished rows (acked, kept by a processed_at
        column) acked more than ``older_than`` ago (a ``timedelta``, or
        seconds), of one ``group`` or of all; never a row queued or in work.
        A thousand rows to a statement, each its own transaction. Returns
        how many went."""
        return self._prune(lib.lq_queue_prune, "prune", table, older_than, group)

    def prune_dead_letters(self, table: Table, older_than: Age,
                           group: Optional[str] = None) -> int:
        """Delete ``table``'s dead letters dead-lettered more than
        ``older_than`` ago (dead-lettering writes the time in their
        retry_after column), in batches as ``prune``. Returns how many."""
        return self._prune(lib.lq_dead_letters_prune, "prune dead letters", table, older_than,
                           group)

    # -- schedules --------------------------------------------------------

    def schedule(self, table: Table, name: str, payload: Optional[Payload] = b"", *,
                 cron: Optional[str] = None, every_ms: Optional[int] = None,
                 tz: Optional[str] = None, catch_up: Optional[str] = None,
                 catch_up_ms: Optional[int] = None, group: Optional[str] = None,
                 partition_key: Optional[str] = None, priority: Optional[int] = None,
                 delay_ms: Optional[int] = None, headers: Optional[Mapping[str, str]] = None,
                 dedup_key: Optional[str] = None, expires_in_ms: Optional[int] = None) -> None:
        """Enqueue a message into ``table`` at each tick of ``cron`` (five
        fields, or six with seconds first, or ``@hourly`` and the other
        shorthands; in time zone ``tz``, default UTC) or of ``every_ms``.

        Every broker and process that adds schedule ``name`` takes part, and
        each tick is enqueued exactly once among them. Ticks no broker was up
        for follow ``catch_up``: ``"skip"`` (default), ``"once"`` (the latest
        of them) or ``"all"``, within ``catch_up_ms`` (a day). A table with
        headers gets ``lq-schedule`` and ``lq-scheduled-for`` (the tick, UTC).
        Runs until ``unschedule(name)`` or ``close()``."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        message = _build_message(table, dict(
            payload=payload, group=group, partition_key=partition_key, priority=priority,
            delay_ms=delay_ms, headers=headers, dedup_key=dedup_key,
            expires_in_ms=expires_in_ms))
        opts = build_options(dict(cron=cron, every_ms=every_ms, tz=tz, catch_up=catch_up,
                                  catch_up_ms=catch_up_ms), "schedule")
        check(lib.lq_schedule_add(self._live(), table._ptr, ctext(name), opts, message),
              "schedule %r" % name)

    def unschedule(self, name: str) -> None:
        """Stop this broker's part in schedule ``name``: none of its ticks is
        enqueued here once this returns."""
        check(lib.lq_schedule_remove(self._live(), ctext(name)), "unschedule %r" % name)

    # -- subscribing ------------------------------------------------------

    def subscribe(self, table: Table, **options: Any) -> Subscription:
        """Open a subscription on ``table``. Options by name: ``workers``,
        ``workers_by_key``, ``batch``, ``poll_interval_ms``, ``lease_ms``,
        ``max_attempts``, ``transactional``, ``group`` (required when the table
        has a group column)."""
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        sub = Subscription(self, table, build_options(options, "subscription"))
        sub.group = options.get("group")
        sub._timeout_ms = int(options.get("timeout_ms") or 0)
        return sub

    def __repr__(self) -> str:
        return "<Broker %s%s>" % (self.url, " closed" if self._ptr is None else "")
