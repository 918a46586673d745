"""``Table``: the description of a queue table (``lq_table``)."""

from __future__ import annotations

from typing import Dict, Optional, Union

from libqueue._ffi import ctext, ffi, lib, text
from libqueue.enums import Form, Isolation, Role
from libqueue.errors import check, make_error

__all__ = ["Table"]

#: Keyword arguments of ``Table`` that give a role to a column, in role order.
ROLE_NAMES = tuple(role.name.lower() for role in Role)


def _isolation_value(isolation: Union[int, str, Isolation]) -> int:
    if isinstance(isolation, str):
        key = isolation.strip().upper().replace(" ", "_").replace("-", "_")
        try:
            return int(Isolation[key])
        except KeyError:
            raise make_error(lib.LQ_MISUSE, "unknown isolation level %r (one of %s)" % (
                isolation, ", ".join(m.name.lower() for m in Isolation))) from None
    return int(isolation)


class Table:
    """The description of a queue table.

    Each role keyword names the column that plays it; a role left ``None``
    switches its behaviour off. The form follows from the description: a
    ``locked_until`` column selects the lease form, an ``advisory_lock`` key
    template (``"job-{id}"``) the advisory lock form, neither the row lock form
    (which SQLite cannot serve). Nothing is checked against the database
    here: a subscription checks every name when it opens.

    Args:
        name: the table's name, unquoted (the core quotes every identifier).
        schema: the schema (PostgreSQL) or database (MySQL) qualifying it.
        id: the integer id column.
        id_generated: whether the database generates ids; when not, every
            published message must carry ``id=``.
        payload, attempt, locked_until, group, partition_key, priority,
            retry_after, processed_at, headers, dedup_key, expires_at, created_at,
            dead_reason: column names of the roles.
        fifo: one row of a group in work at a time, in claim order.
        advisory_lock: key template of the advisory lock form.
        isolation: isolation level of claim and handler transactions
            (``Isolation`` member, its int, or a name like ``"serializable"``).
        dead_letter: a group name (tables with a group column) or a table of
            the same columns (``"table"`` or ``"schema.table"``).

    A Table is immutable once made.
    """

    def __init__(self, name: str, *, schema: Optional[str] = None, id: str = "id",
                 id_generated: bool = True, payload: Optional[str] = None,
                 attempt: Optional[str] = None, locked_until: Optional[str] = None,
                 group: Optional[str] = None, fifo: bool = False,
                 partition_key: Optional[str] = None, priority: Optional[str] = None,
                 retry_after: Optional[str] = None, processed_at: Optional[str] = None,
                 headers: Optional[str] = None, dedup_key: Optional[str] = None,
                 expires_at: Optional[str] = None, created_at: Optional[str] = None,
                 dead_reason: Optional[str] = None,
                 advisory_lock: Optional[str] = None,
                 isolation: Union[int, str, Isolation, None] = None,
                 dead_letter: Optional[str] = None) -> None:
        out = ffi.new("lq_table **")
        check(lib.lq_table_new(out, ctext(name, "name")), "table %r" % name)
        self._ptr = ffi.gc(out[0], lib.lq_table_free)
        self.name = name
        self.schema = schema
        self.id = id
        self.id_generated = bool(id_generated)
        self.fifo = bool(fifo)
        self.advisory_lock = advisory_lock
        self.isolation = isolation
        self.dead_letter = dead_letter
        given = dict(payload=payload, attempt=attempt, locked_until=locked_until, group=group,
                     partition_key=partition_key, priority=priority, retry_after=retry_after,
                     processed_at=processed_at, headers=headers, dedup_key=dedup_key,
                     expires_at=expires_at, created_at=created_at, dead_reason=dead_reason)
        #: role name -> column, for the roles that are set.
        self.columns: Dict[str, str] = {k: v for k, v in given.items() if v is not None}

        p = self._ptr
        if schema is not None:
            check(lib.lq_table_set_schema(p, ctext(schema, "schema")), "schema %r" % schema)
        if id != "id" or not id_generated:
            check(lib.lq_table_set_id(p, ctext(id, "id"), 1 if id_generated else 0),
                  "id column %r" % id)
        for role, column in self.columns.items():
            role_value = int(Role[role.upper()])
            check(lib.lq_table_set_column(p, role_value, ctext(column, role)),
                  "%s column %r" % (role, column))
        if fifo:
            check(lib.lq_table_set_fifo(p, 1), "fifo")
        if advisory_lock is not None:
            check(lib.lq_table_set_advisory_lock(p, ctext(advisory_lock, "advisory_lock")),
                  "advisory lock template %r" % advisory_lock)
        if isolation is not None:
            check(lib.lq_table_set_isolation(p, _isolation_value(isolation)), "isolation")
        if dead_letter is not None:
            check(lib.lq_table_set_dead_letter(p, ctext(dead_letter, "dead_letter")),
                  "dead letter destination %r" % dead_letter)

    @property
    def form(self) -> Form:
        """The form this description selects."""
        return Form(lib.lq_table_form(self._ptr))

    def has(self, role: str) -> bool:
        """Whether a column plays ``role`` ("payload", "attempt", ...)."""
        return role in self.columns

    def check_form(self, dialect: str) -> None:
        """Raises ``DialectError``, saying why and what to use instead, when
        ``dialect`` ("sqlite", "postgresql", "mysql") cannot serve this
        description's form, as a subscription's open would."""
        check(lib.lq_table_check_form(self._ptr, ctext(dialect)), "check_form(%r)" % dialect)

    def create_sql(self, dialect: str) -> str:
        """The recommended CREATE TABLE / CREATE INDEX statements for
        ``dialect`` ("sqlite", "postgresql", "mysql"), separated by ``";\\n"``.
        Runs as is with ``sqlite3.Connection.executescript``."""
        out = ffi.new("char **")
        check(lib.lq_table_create_sql(out, self._ptr, ctext(dialect)), "create_sql(%r)" % dialect)
        try:
            return text(out[0])
        finally:
            lib.lq_free(out[0])

    def __repr__(self) -> str:
        parts = [repr(self.name)]
        if self.schema:
            parts.append("schema=%r" % self.schema)
        parts += ["%s=%r" % kv for kv in self.columns.items()]
        if self.advisory_lock:
            parts.append("advisory_lock=%r" % self.advisory_lock)
        if self.dead_letter:
            parts.append("dead_letter=%r" % self.dead_letter)
        return "Table(%s)" % ", ".join(parts)
