"""Exceptions: ``Error`` and one subclass per ``lq_status`` code.

The subclasses are made mechanically from the status enum of the compiled
header and the names ``lq_status_name()`` gives (``LQ_LEASE_LOST`` ->
``LeaseLost``); ``_RENAMES`` only adds a suffix where the bare word would read
badly or shadow a builtin. ``LQ_ERROR`` is ``Error`` itself. A code this
binding does not know (a newer core) raises ``Error`` with that status.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Type

from libqueue._ffi import ffi, lib, text

__all__ = ["Error", "check", "last_error", "make_error", "error_class"]  # + the subclasses


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


#: Where the mechanical CamelCase name would be unclear or shadow a builtin.
_RENAMES = {
    "NOMEM": "NoMemory",
    "CONNECT": "ConnectError",
    "BACKEND": "BackendError",
    "SCHEMA": "SchemaError",
    "DIALECT": "DialectError",
}

_BY_STATUS: Dict[int, Type[Error]] = {lib.LQ_ERROR: Error}


def _class_name(c_name: str) -> str:
    bare = c_name[3:] if c_name.startswith("LQ_") else c_name
    return _RENAMES.get(bare) or "".join(w.capitalize() for w in bare.split("_"))


def _make_classes() -> None:
    for value in sorted(ffi.typeof("lq_status").relements.values()):
        if value in (lib.LQ_OK, lib.LQ_ERROR):
            continue
        c_name = text(lib.lq_status_name(value))
        name = _class_name(c_name)
        doc = "%s: %s" % (c_name, text(lib.lq_status_describe(value)))
        cls = type(name, (Error,), {"status": value, "__doc__": doc, "__module__": __name__})
        _BY_STATUS[value] = cls
        globals()[name] = cls
        __all__.append(name)


_make_classes()

if TYPE_CHECKING:  # what _make_classes() makes, spelled out for static analysis
    class Misuse(Error): ...
    class NoMemory(Error): ...
    class ConnectError(Error): ...
    class BackendError(Error): ...
    class SchemaError(Error): ...
    class DialectError(Error): ...
    class ServerTooOld(Error): ...
    class ConnectionLimit(Error): ...
    class Timeout(Error): ...
    class Closed(Error): ...
    class LeaseLost(Error): ...
    class Contention(Error): ...
    class AlreadySubscribed(Error): ...
    class BatchRolledBack(Error): ...
    class Duplicate(Error): ...
    class NotFound(Error): ...
    class Cancelled(Error): ...


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
