"""Builds an ``lq_options`` set from keyword arguments.

Names are looked up with ``lq_option_find`` ("workers", "pool_size", ...), so
no option needs code of its own here: a new option of the core works as soon
as the core knows it.
"""

from __future__ import annotations

from typing import Any, Mapping

from libqueue._ffi import ctext, ffi, lib
from libqueue.errors import check, last_error

__all__ = ["build_options"]


def build_options(values: Mapping[str, Any]) -> Any:
    """An owned ``lq_options *`` holding ``values`` (``ffi.NULL`` when empty).

    ``None`` values are skipped (the option keeps its default). Booleans are
    integers. An unknown name raises ``Misuse``; a value of the wrong Python
    type raises ``TypeError``.
    """
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return ffi.NULL
    out = ffi.new("lq_options **")
    check(lib.lq_options_new(out), "lq_options_new")
    options = ffi.gc(out[0], lib.lq_options_free)
    option = ffi.new("int *")
    kind = ffi.new("int *")
    for name, value in values.items():
        status = lib.lq_option_find(option, kind, ctext(name))
        if status != lib.LQ_OK:
            raise last_error(status, "unknown option %r" % name)
        if kind[0] == lib.LQ_OPTION_STRING:
            if not isinstance(value, str):
                raise TypeError("option %r takes a str, got %s" % (name, type(value).__name__))
            status = lib.lq_options_set_str(options, option[0], ctext(value))
        else:
            if not isinstance(value, int):  # bool is an int
                raise TypeError("option %r takes an int, got %s" % (name, type(value).__name__))
            status = lib.lq_options_set_int(options, option[0], int(value))
        if status != lib.LQ_OK:
            raise last_error(status, "option %s=%r" % (name, value))
    return options
