"""cffi build script: the ``libqueue._lq`` extension (API mode, out of line).

The cdef is generated from the public header by ``bindings/gen_cdef.py``; the
C core (every ``.c`` under ``libqueue/src/``) is compiled into the extension
itself.

Where the sources are: ``csrc/`` beside this file. In a checkout its entries
are links into the repository (``src`` and ``include`` of ``libqueue/``,
``gen_cdef.py`` of ``bindings/``); an sdist carries copies of them, so it
builds on its own.

Extra native libraries (beyond sqlite3 and pthread):

* ``$LQ_EXTRA_LIBS``: names or ``-l`` flags, separated by spaces or commas,
  e.g. ``LQ_EXTRA_LIBS="pq mariadb"``;
* detected: a core source that includes ``libpq-fe.h`` brings libpq, one that
  includes ``mysql.h`` brings libmariadb (flags from ``pkg-config`` when it
  knows the package; see ``DETECTED_LIBS``);
* ``$LQ_EXTRA_CFLAGS`` / ``$LQ_EXTRA_LDFLAGS``: more compiler / linker flags.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
import re
import shlex
import subprocess
import sys
from typing import Dict, List, Tuple

from cffi import FFI

CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
SRC = os.path.join(CSRC, "src")
INCLUDE = os.path.join(CSRC, "include")
HEADER = os.path.join(INCLUDE, "libqueue.h")

#: Always linked.
BASE_LIBS = ["sqlite3", "pthread"]

#: Header included by a core source -> (pkg-config package, fallback library).
DETECTED_LIBS: Dict[str, Tuple[str, str]] = {
    "libpq-fe.h": ("libpq", "pq"),
    "mysql.h": ("libmariadb", "mariadb"),
}

for path in (SRC, HEADER, os.path.join(CSRC, "gen_cdef.py")):
    if not os.path.exists(path):
        sys.exit(
            "libqueue: %s not found. Build from a checkout of the libqueue "
            "repository (pip install ./python) or from its sdist; a copy of "
            "python/ alone needs its links followed (cp -rL)." % path
        )

sys.path.insert(0, CSRC)
import gen_cdef  # noqa: E402

sys.path.remove(CSRC)


#: Dialects a build may leave out, by the environment variable that mirrors
#: the CMake option (LQ_WITH_MYSQL=OFF): their sources are then not compiled,
#: their client libraries not linked, and their URL schemes refused at open.
OPTIONAL_DIALECTS = {"LQ_WITH_POSTGRESQL": "postgres.c", "LQ_WITH_MYSQL": "mysql.c"}


def dialect_enabled(option: str) -> bool:
    return os.environ.get(option, "ON").strip().upper() not in ("0", "OFF", "NO", "FALSE")


def core_sources() -> List[str]:
    """Every C source of the core that this build compiles, sorted, relative
    to the working directory (setuptools refuses absolute source paths; it
    runs a build in the directory of setup.py)."""
    left_out = {os.path.join(SRC, "dialects", source)
                for option, source in OPTIONAL_DIALECTS.items() if not dialect_enabled(option)}
    found = sorted(glob.glob(os.path.join(SRC, "**", "*.c"), recursive=True))
    return [os.path.relpath(path) for path in found if path not in left_out]


def _split_words(value: str) -> List[str]:
    return [w for w in re.split(r"[\s,]+", value) if w]


def _pkg_config(package: str) -> Tuple[List[str], List[str]] | None:
    """(cflags, libs) of a pkg-config package, or None when unknown."""
    try:
        cflags = subprocess.run(["pkg-config", "--cflags", package], capture_output=True,
                                text=True, check=True).stdout
        libs = subprocess.run(["pkg-config", "--libs", package], capture_output=True,
                              text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(cflags), shlex.split(libs)


def native_flags(sources: List[str]) -> Tuple[List[str], List[str], List[str], List[str]]:
    """(libraries, include_dirs, extra_compile_args, extra_link_args) beyond the base."""
    libraries: List[str] = []
    include_dirs: List[str] = []
    cflags: List[str] = []
    ldflags: List[str] = []

    def add_lib(name: str) -> None:
        if name not in libraries and name not in BASE_LIBS:
            libraries.append(name)

    needed = set()
    for source in sources:
        with open(source, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for header in DETECTED_LIBS:
            if re.search(r'#\s*include\s*[<"](?:[\w-]+/)?%s[>"]' % re.escape(header), text):
                needed.add(header)
    for header in sorted(needed):
        package, fallback = DETECTED_LIBS[header]
        flags = _pkg_config(package)
        if flags is None:
            # A core source may include the header under a build option; link
            # the library only where it is there to link.
            if ctypes.util.find_library(fallback):
                add_lib(fallback)
            else:
                sys.stderr.write("libqueue: %s is included by the core, but neither pkg-config "
                                 "(%s) nor the linker knows lib%s; set LQ_EXTRA_LIBS/"
                                 "LQ_EXTRA_CFLAGS if it is needed\n" % (header, package, fallback))
            continue
        for flag in flags[0]:
            if flag.startswith("-I"):
                include_dirs.append(flag[2:])
            else:
                cflags.append(flag)
        for flag in flags[1]:
            if flag.startswith("-l"):
                add_lib(flag[2:])
            else:
                ldflags.append(flag)

    for word in _split_words(os.environ.get("LQ_EXTRA_LIBS", "")):
        add_lib(word[2:] if word.startswith("-l") else word)
    cflags += shlex.split(os.environ.get("LQ_EXTRA_CFLAGS", ""))
    ldflags += shlex.split(os.environ.get("LQ_EXTRA_LDFLAGS", ""))
    return libraries, include_dirs, cflags, ldflags


SOURCES = core_sources()
_libs, _incs, _cflags, _ldflags = native_flags(SOURCES)

#: C of the binding's own, beside the header's ABI:
#:
#: * the push handlers the core calls, which call the Python ones with the
#:   deliveries' payloads: every C call from Python lets the GIL go, which
#:   the other workers' handlers wait for, so the payloads are better read
#:   here;
#: * the log sink the binding installs at interpreter exit, so that a core
#:   thread that logs after it never calls into Python (and never sees a
#:   NULL sink while it is swapped).
BINDING_C = r"""
#include <stdio.h>
#include "libqueue.h"

#include <stdlib.h>

static int _lq_py_handler(lq_delivery *, const char *, size_t, void *);
static int _lq_py_batch_handler(lq_delivery *const *, const char *const *, const size_t *,
                                size_t, void *);

static int lq_py_push(lq_delivery *delivery, void *userdata) {
    return _lq_py_handler(delivery, lq_delivery_payload(delivery),
                          lq_delivery_payload_size(delivery), userdata);
}

/* Without memory for the lists the Python handler reads each payload itself. */
static int lq_py_push_batch(lq_delivery *const *deliveries, size_t count, void *userdata) {
    const char **payloads = malloc(count * sizeof *payloads);
    size_t *sizes = malloc(count * sizeof *sizes);
    if (!payloads || !sizes) {
        free(payloads);
        free(sizes);
        return _lq_py_batch_handler(deliveries, NULL, NULL, count, userdata);
    }
    for (size_t i = 0; i < count; i++) {
        payloads[i] = lq_delivery_payload(deliveries[i]);
        sizes[i] = lq_delivery_payload_size(deliveries[i]);
    }
    int rc = _lq_py_batch_handler(deliveries, payloads, sizes, count, userdata);
    free(payloads);
    free(sizes);
    return rc;
}

static void lq_py_stderr_log(int level, const char *message, void *userdata) {
    (void)userdata;
    if (level >= LQ_LOG_WARNING)
        fprintf(stderr, "libqueue %s: %s\n", level >= LQ_LOG_ERROR ? "error" : "warning",
                message ? message : "");
}
"""
BINDING_CDEF = """
int lq_py_push(lq_delivery *, void *);
int lq_py_push_batch(lq_delivery *const *, size_t, void *);
void lq_py_stderr_log(int, const char *, void *);
"""

ffibuilder = FFI()
ffibuilder.cdef(gen_cdef.cdef_from_header(HEADER) + BINDING_CDEF)
ffibuilder.set_source(
    "libqueue._lq",
    BINDING_C,
    sources=SOURCES,
    include_dirs=[INCLUDE, SRC] + _incs,
    libraries=BASE_LIBS + _libs,
    define_macros=[(option, "1") for option in OPTIONAL_DIALECTS if dialect_enabled(option)],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE"] + _cflags,
    extra_link_args=_ldflags,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
