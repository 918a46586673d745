"""Builds an ``lq_options`` set from keyword arguments.

Names are looked up with ``lq_option_find`` ("workers", "pool_size", ...), so
no option needs code of its own here: a new option of the core works as soon
as the core knows it.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Mapping

from libqueue._ffi import ctext, ffi, lib
from libqueue.errors import check, last_error, make_error

__all__ = ["build_options", "int_argument"]


#: What each scope's call is called here, for the messages.
_CALLS = {"broker": "Broker(...)", "subscription": "subscribe(...)", "schedule": "schedule(...)"}


def int_argument(name: str, value: Any) -> int:
    """``value`` as an int: an integer of any type (NumPy's too), but a float
    or a str is refused rather than cut, so 0.5 meant as seconds does not
    become 0 ms, and a bool is refused rather than taken as 1 or 0, so
    ``delay_ms=True`` or ``max_attempts=True`` is not a number nobody meant."""
    if isinstance(value, bool):
        raise TypeError("%s takes an int, not a bool (%r)" % (name, value))
    try:
        number = operator.index(value)
    except TypeError:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise TypeError("%s takes an int, got %s %s" % (name, type(value).__name__, shown)) \
            from None
    if not -2**63 <= number < 2**63:  # the C calls take int64_t
        raise OverflowError("%s: %d does not fit in 64 bits" % (name, number))
    return number


@functools.lru_cache(maxsize=None)
def _is_switch(option: int) -> bool:
    """Whether an int option is a switch, whose range ends at 1 (1 on, 0 off:
    listen_notify, transactional, coalesce), so that True and False say
    what they mean. Asked of the core, so that no option is listed here."""
    out = ffi.new("lq_options **")
    check(lib.lq_options_new(out), "lq_options_new")
    try:
        return (lib.lq_options_set_int(out[0], option, 1) == lib.LQ_OK
                and lib.lq_options_set_int(out[0], option, 2) != lib.LQ_OK)
    finally:
        lib.lq_options_free(out[0])


def _scope_name(option: int) -> str:
    scope = ffi.new("int *")
    check(lib.lq_option_scope_of(scope, option), "lq_option_scope_of")
    return {lib.LQ_SCOPE_BROKER: "broker", lib.LQ_SCOPE_SUBSCRIPTION: "subscription",
            lib.LQ_SCOPE_SCHEDULE: "schedule"}[scope[0]]


def build_options(values: Mapping[str, Any], scope: str) -> Any:
    """An owned ``lq_options *`` holding ``values`` (``ffi.NULL`` when empty),
    for the call of ``scope`` ("broker", "subscription" or "schedule").

    ``None`` values are skipped (the option keeps its default). A bool is
    taken by a switch (an option of 0 and 1) alone: any other int option
    refuses it with a ``TypeError``, as a float or a str. An unknown name, or one another call reads, raises ``Misuse``;
    a value of the wrong Python type raises ``TypeError``.
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
        if _scope_name(option[0]) != scope:
            raise make_error(lib.LQ_MISUSE, "option %r belongs to %s, not to %s" % (
                name, _CALLS[_scope_name(option[0])], _CALLS[scope]))
        if kind[0] == lib.LQ_OPTION_STRING:
            if not isinstance(value, str):
                raise TypeError("option %r takes a str, got %s" % (name, type(value).__name__))
            status = lib.lq_options_set_str(options, option[0], ctext(value))
        else:
            if isinstance(value, bool) and _is_switch(option[0]):
                value = int(value)
            status = lib.lq_options_set_int(options, option[0], int_argument("option %r" % name, value))
        if status != lib.LQ_OK:
            raise last_error(status, "option %s=%r" % (name, value))
    return options
