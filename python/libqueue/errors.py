"""Exceptions: ``Error`` and one subclass per ``lq_status`` code.

Each class is named after its status (``LQ_LEASE_LOST`` -> ``LeaseLost``; a
suffix where the bare word would read badly or shadow a builtin) and takes its
docstring from the header's description of it. Where a builtin exception
means the same, the class is one of those too, so that code catching the
builtin catches it: ``Misuse`` and ``ConnectionLimit`` are ``ValueError``,
``NoMemory`` is ``MemoryError``, ``ConnectError`` is ``ConnectionError``,
``Timeout`` is ``TimeoutError``, ``NotFound`` is ``LookupError``.
``LQ_ERROR`` is ``Error`` itself. A code this binding does not know (a newer
core) raises ``Error`` with that status.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple, Type

from libqueue._ffi import lib, text

__all__ = ["Error", "check", "last_error", "make_error", "error_class",
           "Misuse", "NoMemory", "ConnectError", "BackendError", "SchemaError", "DialectError",
           "ServerTooOld", "ConnectionLimit", "Timeout", "Closed", "LeaseLost", "Contention",
           "AlreadySubscribed", "BatchRolledBack", "Duplicate", "NotFound", "Cancelled"]


class Error(Exception):
    """A failure reported by libqueue.

    Attributes:
        status: the ``lq_status`` code (``libqueue.Status``).
        message: the core's message naming what failed.
        sqlstate: the server's five-character SQLSTATE, or ``""``.
        native_code: the database's own error number (SQLite extended
            result code, MySQL errno), or 0.
    """

    status: int = lib.LQ_ERROR

    def __init__(self, message: str = "", status: Optional[int] = None,
                 sqlstate: str = "", native_code: int = 0) -> None:
        if status is not None:
            self.status = status
        self.message = message or text(lib.lq_status_describe(self.status))
        self.sqlstate = sqlstate
        self.native_code = native_code
        super().__init__(self.message)

    @property
    def status_name(self) -> str:
        """The C name of the status, e.g. ``"LQ_SCHEMA"``."""
        return text(lib.lq_status_name(self.status))

    def __str__(self) -> str:
        extra = []
        if self.sqlstate:
            extra.append("SQLSTATE %s" % self.sqlstate)
        if self.native_code:
            extra.append("code %d" % self.native_code)
        tail = " (%s)" % ", ".join(extra) if extra else ""
        return "%s: %s%s" % (self.status_name, self.message, tail)

    def __reduce__(self):  # keep subclasses picklable
        return (type(self), (self.message, self.status, self.sqlstate, self.native_code))


class Misuse(Error, ValueError):
    status = lib.LQ_MISUSE


class NoMemory(Error, MemoryError):
    status = lib.LQ_NOMEM


class ConnectError(Error, ConnectionError):
    status = lib.LQ_CONNECT


class BackendError(Error):
    status = lib.LQ_BACKEND


class SchemaError(Error):
    status = lib.LQ_SCHEMA


class DialectError(Error):
    status = lib.LQ_DIALECT


class ServerTooOld(Error):
    status = lib.LQ_SERVER_TOO_OLD


class ConnectionLimit(Error, ValueError):
    status = lib.LQ_CONNECTION_LIMIT


class Timeout(Error, TimeoutError):
    status = lib.LQ_TIMEOUT


class Closed(Error):
    status = lib.LQ_CLOSED


class LeaseLost(Error):
    status = lib.LQ_LEASE_LOST


class Contention(Error):
    status = lib.LQ_CONTENTION


class AlreadySubscribed(Error):
    status = lib.LQ_ALREADY_SUBSCRIBED


class BatchRolledBack(Error):
    status = lib.LQ_BATCH_ROLLED_BACK


class Duplicate(Error):
    status = lib.LQ_DUPLICATE


class NotFound(Error, LookupError):
    status = lib.LQ_NOT_FOUND


class Cancelled(Error):
    status = lib.LQ_CANCELLED


_SUBCLASSES: Tuple[Type[Error], ...] = (
    Misuse, NoMemory, ConnectError, BackendError, SchemaError, DialectError, ServerTooOld,
    ConnectionLimit, Timeout, Closed, LeaseLost, Contention, AlreadySubscribed, BatchRolledBack,
    Duplicate, NotFound, Cancelled)

_BY_STATUS: Dict[int, Type[Error]] = {cls.status: cls for cls in (Error,) + _SUBCLASSES}

for _cls in _SUBCLASSES:  # the header's words, not a copy of them
    _cls.__doc__ = "%s: %s" % (text(lib.lq_status_name(_cls.status)),
                               text(lib.lq_status_describe(_cls.status)))


def error_class(status: int) -> Type[Error]:
    """The exception class for a status code (``Error`` when unknown)."""
    return _BY_STATUS.get(status, Error)


def make_error(status: int, message: str = "", sqlstate: str = "", native_code: int = 0) -> Error:
    """An exception for ``status`` made on the Python side."""
    return error_class(status)(message, status, sqlstate, native_code)


def last_error(status: int, context: str = "") -> Error:
    """The exception describing the failure just reported on this thread.

    Must be called right after the failing call: the core's error state is
    per thread and cleared by the next call. ``context`` is the message when
    the core gave none.
    """
    message = text(lib.lq_errmsg())
    sqlstate = text(lib.lq_errcode_sqlstate())
    native = int(lib.lq_errcode_native())
    if not message:  # the core's message names what failed; this is a fallback
        message = context
    return make_error(status, message, sqlstate, native)


def check(status: int, context: str = "") -> None:
    """Raise the matching ``Error`` unless ``status`` is ``LQ_OK``."""
    if status != lib.LQ_OK:
        raise last_error(status, context)
