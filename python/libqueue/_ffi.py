"""The compiled cffi extension: ``ffi`` and ``lib`` of the C core.

Every other module reaches the C ABI through here, so the extension is loaded
in one place.
"""

from libqueue._lq import ffi, lib  # type: ignore[import]  # built by libqueue_build.py

__all__ = ["ffi", "lib", "text", "ctext"]


def text(pointer: object) -> str:
    """A ``const char *`` from the core as ``str`` (``""`` for NULL)."""
    if pointer == ffi.NULL:
        return ""
    return ffi.string(pointer).decode("utf-8", "replace")


def ctext(value: str, what: str = "") -> bytes:
    """A ``str`` as the UTF-8 bytes of a C string; refuses embedded NULs.
    ``what`` names the value in the refusal."""
    if not isinstance(value, str):
        raise TypeError("%sexpected str, got %s" % (what and what + ": ", type(value).__name__))
    data = value.encode("utf-8")
    if b"\0" in data:
        raise ValueError("string contains a NUL character: %r" % value)
    return data
