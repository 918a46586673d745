"""Routes the core's log messages to ``logging.getLogger("libqueue")``.

The core's levels (``LQ_LOG_DEBUG`` = 10 ... ``LQ_LOG_ERROR`` = 40) are the
``logging`` module's, so they pass through unchanged. The callback may run on
any of the core's threads; nothing it raises reaches the C side.
"""

from __future__ import annotations

import logging
import sys

from libqueue._ffi import ffi, lib

__all__ = ["logger", "install", "uninstall"]

logger = logging.getLogger("libqueue")


def _on_log_error(exc_type, exc_value, tb) -> None:
    try:
        sys.stderr.write("libqueue: log callback failed: %r\n" % (exc_value,))
    except Exception:
        pass


@ffi.def_extern(onerror=_on_log_error)
def _lq_py_log(level: int, message, userdata) -> None:
    text = ffi.string(message).decode("utf-8", "replace") if message != ffi.NULL else ""
    logger.log(int(level), "%s", text)


def install() -> None:
    """Make the core log through ``logging`` (done at import)."""
    lib.lq_set_log(lib._lq_py_log, ffi.NULL)


def uninstall() -> None:
    """Log to stderr from C from now on; used at exit, when core threads must
    no longer call into Python. (A C sink rather than NULL: a core thread may
    be reading the sink while it changes.)"""
    lib.lq_set_log(ffi.addressof(lib, "lq_py_stderr_log"), ffi.NULL)
