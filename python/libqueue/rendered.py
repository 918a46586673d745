"""Publishing on a connection of any DB-API driver: the insert that
``lq_publish_sql`` renders, converted to the driver's paramstyle and run on
the caller's connection, in the caller's transaction.

The C library renders ``$1``, ``$2``, .. on PostgreSQL and ``?`` on MySQL and
SQLite, and tells where each placeholder is, so the conversion replaces
exactly those and nothing inside a quoted identifier. Drivers whose
paramstyle is ``format`` or ``pyformat`` read every ``%`` of the text (those
of identifiers too) as the start of a placeholder, so there each literal
``%`` is doubled.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple, Union

from libqueue._ffi import ffi, lib
from libqueue.errors import check, make_error

__all__ = ["Rendered", "render", "convert", "connection_kind", "execute", "payload_is_text",
           "PARAMSTYLES"]

#: The DB-API paramstyles a rendered statement converts to, and ``None``: as
#: the C library renders it ($n on PostgreSQL, ? elsewhere).
PARAMSTYLES = ("qmark", "numeric", "named", "format", "pyformat")

Params = Union[Tuple[Any, ...], Dict[str, Any]]


class Rendered:
    """One rendered insert: its text as rendered, its values, where each
    placeholder starts, and whether it returns the new id."""

    __slots__ = ("raw", "values", "offsets", "returns_id")

    def __init__(self, raw: bytes, values: List[Any], offsets: List[int], returns_id: bool) -> None:
        #: The UTF-8 text: the offsets count its bytes.
        self.raw, self.values, self.offsets, self.returns_id = raw, values, offsets, returns_id

    @property
    def sql(self) -> str:
        return self.raw.decode("utf-8")


def _value(handle: Any, i: int) -> Any:
    kind = lib.lq_rendered_sql_param_type(handle, i)
    if kind == lib.LQ_SQL_INT64:
        return int(lib.lq_rendered_sql_param_int64(handle, i))
    if kind == lib.LQ_SQL_DOUBLE:
        return float(lib.lq_rendered_sql_param_double(handle, i))
    if kind in (lib.LQ_SQL_TEXT, lib.LQ_SQL_BYTES):
        data = ffi.buffer(ffi.cast("const char *", lib.lq_rendered_sql_param_data(handle, i)),
                          lib.lq_rendered_sql_param_size(handle, i))[:]
        return data.decode("utf-8") if kind == lib.LQ_SQL_TEXT else data
    return None


def render(dialect: str, table: Any, message: Any, notify: bool = True,
           payload_text: bool = False) -> Rendered:
    """The insert of ``message`` (an ``lq_message *``) into ``table`` for
    ``dialect``, as ``lq_publish_sql`` renders it; with ``payload_text``, the
    payload as str (its UTF-8 decoded), for a text column
    (``payload_is_text``)."""
    out = ffi.new("lq_rendered_sql **")
    flags = 0 if notify else lib.LQ_PUBLISH_SQL_NO_NOTIFY
    check(lib.lq_publish_sql(out, dialect.encode(), table._ptr, message, flags),
          "publish_sql to %r" % table.name)
    handle = ffi.gc(out[0], lib.lq_rendered_sql_free)
    try:
        count = lib.lq_rendered_sql_param_count(handle)
        values = [_value(handle, i) for i in range(count)]
        if payload_text:  # the payload is the one bytes value
            values = [_as_text(table, v) if isinstance(v, bytes) else v for v in values]
        return Rendered(ffi.string(lib.lq_rendered_sql_text(handle)), values,
                        [int(lib.lq_rendered_sql_param_offset(handle, i)) for i in range(count)],
                        bool(lib.lq_rendered_sql_returns_id(handle)))
    finally:
        ffi.release(handle)


def _as_text(table: Any, payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as e:
        raise make_error(lib.LQ_MISUSE, "publish_on: %s's payload column %r keeps text, and this "
                         "payload is not UTF-8 (%s); a BYTEA column keeps any bytes"
                         % (table.name, table.columns["payload"], e.reason)) from None


def _quoted(name: str) -> str:
    return '"%s"' % name.replace('"', '""')


def payload_is_text(connection: Any, paramstyle: str, table: Any) -> bool:
    """PostgreSQL: whether ``table``'s payload column keeps text rather than
    bytes, read from the catalog on the caller's connection. A driver sends
    a bytes value as BYTEA, which the server writes into a text column as
    its hex form (``\\x616263`` for ``abc``): such a column gets the payload
    as str instead, the text ``publish`` writes. False where the table or
    the column is not there: the insert then says so."""
    if "payload" not in table.columns:
        return False
    relation = (_quoted(table.schema) + "." if table.schema else "") + _quoted(table.name)
    sql = ("SELECT COALESCE(NULLIF(t.typbasetype, 0), t.oid) <> 'bytea'::regtype "
           "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
           "WHERE a.attrelid = to_regclass(%s) AND a.attname = %s AND NOT a.attisdropped"
           % (_placeholder(paramstyle, 1), _placeholder(paramstyle, 2)))
    values = (relation, table.columns["payload"])
    params: Params = ({"p1": values[0], "p2": values[1]} if paramstyle in ("named", "pyformat")
                      else values)
    if hasattr(connection, "exec_driver_sql"):
        row = connection.exec_driver_sql(sql, params).fetchone()
    else:
        cursor = connection.cursor()
        try:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        finally:
            cursor.close()
    return bool(row and row[0])


def _placeholder(style: str, number: int) -> str:
    if style == "qmark":
        return "?"
    if style == "numeric":
        return ":%d" % number
    if style == "named":
        return ":p%d" % number
    if style == "format":
        return "%s"
    return "%%(p%d)s" % number


def convert(rendered: Rendered, paramstyle: Optional[str]) -> Tuple[str, Params]:
    """The statement in ``paramstyle`` (one of PARAMSTYLES, or None for the
    text as rendered) and its parameters: a tuple, or a dict for the named
    styles (keys ``p1``, ``p2``, ..)."""
    values = rendered.values
    if paramstyle is None:
        return rendered.sql, tuple(values)
    if paramstyle not in PARAMSTYLES:
        raise make_error(lib.LQ_MISUSE, "paramstyle is one of %s, or None; not %r"
                         % (", ".join(PARAMSTYLES), paramstyle))
    raw = rendered.raw
    percent = paramstyle in ("format", "pyformat")
    pieces: List[bytes] = []
    at = 0
    for number, offset in enumerate(rendered.offsets, 1):
        end = offset + 1
        if raw[offset:offset + 1] == b"$":  # "$" and its digits
            while raw[end:end + 1].isdigit():
                end += 1
        piece = raw[at:offset]
        pieces.append(piece.replace(b"%", b"%%") if percent else piece)
        pieces.append(_placeholder(paramstyle, number).encode())
        at = end
    tail = raw[at:]
    pieces.append(tail.replace(b"%", b"%%") if percent else tail)
    sql = b"".join(pieces).decode("utf-8")
    if paramstyle in ("named", "pyformat"):
        return sql, {"p%d" % n: v for n, v in enumerate(values, 1)}
    return sql, tuple(values)


#: A DB-API module's name -> the database its connections reach.
_DRIVERS = {"psycopg2": "postgresql", "psycopg": "postgresql", "pymysql": "mysql",
            "MySQLdb": "mysql", "sqlite3": "sqlite"}
#: SQLAlchemy's dialect names -> libqueue's.
_SQLALCHEMY_DIALECTS = {"postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql",
                        "sqlite": "sqlite"}


def connection_kind(connection: Any) -> Tuple[str, str, Any]:
    """(database, paramstyle, runner) of a connection: a psycopg2, psycopg,
    PyMySQL, mysqlclient (MySQLdb) or sqlite3 connection, or a SQLAlchemy
    ``Connection`` or ``Session``; the runner is the connection to execute
    on (a Session's connection). TypeError for anything else."""
    module = type(connection).__module__ or ""
    if module.startswith("sqlalchemy."):
        if not hasattr(connection, "exec_driver_sql"):  # a Session: its transaction's connection
            connection = connection.connection()
        database = _SQLALCHEMY_DIALECTS.get(connection.dialect.name)
        if database is None:
            raise TypeError("publish_on: SQLAlchemy dialect %r is not one libqueue serves"
                            % connection.dialect.name)
        return database, connection.dialect.dbapi.paramstyle, connection
    top = module.split(".")[0]
    database = _DRIVERS.get(top)
    if database is None:
        raise TypeError("publish_on takes a psycopg2, psycopg, PyMySQL, MySQLdb, sqlite3 or "
                        "SQLAlchemy connection, not %s.%s; publish_sql renders the statement for "
                        "any other driver" % (module, type(connection).__name__))
    return database, sys.modules[top].paramstyle, connection


def execute(connection: Any, paramstyle: str, rendered: Rendered,
            given_id: Optional[int]) -> Optional[int]:
    """Runs the statement on the connection (a DB-API connection, or a
    SQLAlchemy Connection); returns the new row's id where the database can
    tell it: the statement's RETURNING, the driver's lastrowid (MySQL), or
    the message's own id."""
    sql, params = convert(rendered, paramstyle)
    if hasattr(connection, "exec_driver_sql"):
        result = connection.exec_driver_sql(sql, params)
        if rendered.returns_id:
            return int(result.fetchone()[0])
        return given_id if given_id is not None else result.lastrowid
    cursor = connection.cursor()
    try:
        cursor.execute(sql, params)
        if rendered.returns_id:
            return int(cursor.fetchone()[0])
        return given_id if given_id is not None else cursor.lastrowid
    finally:
        cursor.close()
