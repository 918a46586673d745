#!/usr/bin/env python3
"""Generate a cffi ``cdef`` string from ``libqueue/include/libqueue.h``.

The public header is the single source of truth for the C ABI, so the binding
never carries a hand-written copy of it. This script turns the header into
text that ``cffi.FFI().cdef()`` accepts:

* preprocessor directives are dropped, except ``#define NAME <integer>``
  lines (cffi accepts integer constants; ``LQ_VERSION_*`` are the ones that
  matter);
* anything inside ``#ifdef __cplusplus`` blocks (the ``extern "C"`` guards) is
  dropped;
* function-like macros the header defines (the X-macro list of the status
  codes and the enumerator it is expanded with) are expanded where used, so
  the enum reaches cffi as plain enumerators;
* the ``LQ_API`` decoration is removed;
* comments are removed;
* the ``extern "Python"`` declarations of the binding's two callbacks are
  appended.

Usage::

    python3 bindings/gen_cdef.py [path/to/libqueue.h]   # prints the cdef

or, from Python, ``gen_cdef.cdef_from_header(path)``.
"""

from __future__ import annotations

import os
import re
import sys
from typing import List

#: Callbacks the Python binding implements with ``@ffi.def_extern``.
PYTHON_CALLBACKS = (
    'extern "Python" int _lq_py_handler(lq_delivery *, const char *, size_t, void *);\n'
    'extern "Python" int _lq_py_batch_handler(lq_delivery *const *, const char *const *,\n'
    '                                           const size_t *, size_t, void *);\n'
    'extern "Python" void _lq_py_log(int, const char *, void *);\n'
)

#: Decorations that expand to attributes and mean nothing to cffi.
DECORATIONS = ("LQ_API",)

_INT_DEFINE = re.compile(
    r"^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)\s+(-?(?:0[xX][0-9a-fA-F]+|\d+))[uUlL]*\s*$"
)
_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_FUNCTION_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\(([^)]*)\)\s*(.*)$")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")


def default_header_path() -> str:
    """The header of the source tree this script lives in."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, os.pardir, "libqueue", "include", "libqueue.h")


def _strip_comments(text: str) -> str:
    # Keep line structure: replace each comment by as many newlines as it held.
    text = _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n") or " ", text)
    return _LINE_COMMENT.sub("", text)


def _join_continuations(text: str) -> str:
    return text.replace("\\\n", " ")


class _Macro:
    def __init__(self, params: List[str], body: str) -> None:
        self.params, self.body = params, body


def _split_args(text: str, start: int) -> "tuple[List[str], int] | None":
    """The arguments of a call whose "(" is at ``start``, split at top-level
    commas (strings and nested parentheses kept whole), and the index after
    its ")"; None when it does not close."""
    args, depth, begin, quoted, escaped = [], 0, start + 1, False, False
    for i in range(start, len(text)):
        c = text[i]
        if quoted:
            quoted = escaped or c != '"'
            escaped = not escaped and c == "\\"
        elif c == '"':
            quoted = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                args.append(text[begin:i].strip())
                return args, i + 1
        elif c == "," and depth == 1:
            args.append(text[begin:i].strip())
            begin = i + 1
    return None


def _expand(text: str, macros: "dict[str, _Macro]") -> str:
    """Expands calls of ``macros`` in ``text`` until none is left (the C
    preprocessor's rescan, without its corner cases: the header uses none)."""
    call = re.compile(r"\b(%s)\s*\(" % "|".join(map(re.escape, macros))) if macros else None
    while call and (found := call.search(text)):
        split = _split_args(text, found.end() - 1)
        if split is None:
            break
        args, end = split
        macro = macros[found.group(1)]
        body = macro.body
        for param, arg in zip(macro.params, args):
            body = re.sub(r"\b%s\b" % re.escape(param), lambda _m, a=arg: a, body)
        text = text[:found.start()] + body + text[end:]
    return text


def cdef_from_text(header: str) -> str:
    """Return the cdef for the header text ``header``."""
    text = _join_continuations(_strip_comments(header))
    macros = {}
    for line in text.splitlines():
        f = _FUNCTION_DEFINE.match(line)
        if f:
            macros[f.group(1)] = _Macro([p.strip() for p in f.group(2).split(",")], f.group(3))
    out: List[str] = []
    # Stack of booleans: is the current conditional block dropped?
    dropping: List[bool] = []
    for line in text.splitlines():
        m = _DIRECTIVE.match(line)
        if m:
            directive, rest = m.group(1), m.group(2).strip()
            if directive in ("if", "ifdef", "ifndef"):
                # Only C++ guards are dropped; everything else in the header
                # is unconditional by its own rules (include guard, LQ_API).
                dropping.append("__cplusplus" in rest)
            elif directive in ("else", "elif"):
                # The header has none; treat the alternative of a C++ block
                # as kept and anything else as dropped, to be safe.
                if dropping:
                    dropping[-1] = not dropping[-1]
            elif directive == "endif":
                if dropping:
                    dropping.pop()
            elif directive == "define" and not any(dropping):
                d = _INT_DEFINE.match(line)
                if d:
                    out.append("#define %s %s" % (d.group(1), d.group(2)))
            # include, error, pragma, undef, other defines: dropped.
            continue
        if any(dropping):
            continue
        for word in DECORATIONS:
            line = re.sub(r"\b%s\b\s*" % re.escape(word), "", line)
        line = _expand(line, macros)
        if line.strip():
            out.append(line.rstrip())
    return "\n".join(out) + "\n\n" + PYTHON_CALLBACKS


def cdef_from_header(path: str | None = None) -> str:
    """Return the cdef for the header at ``path`` (default: this tree's)."""
    with open(path or default_header_path(), encoding="utf-8") as f:
        return cdef_from_text(f.read())


def main(argv: List[str]) -> int:
    path = argv[1] if len(argv) > 1 else None
    sys.stdout.write(cdef_from_header(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
