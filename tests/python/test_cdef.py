"""The cdef is generated from the public header, and cffi accepts it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import cffi
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
HEADER = os.path.join(ROOT, "libqueue", "include", "libqueue.h")
GEN = os.path.join(ROOT, "bindings", "gen_cdef.py")


@pytest.fixture(scope="module")
def gen_cdef():
    sys.path.insert(0, os.path.dirname(GEN))
    try:
        import gen_cdef as module
    finally:
        sys.path.pop(0)
    return module


@pytest.fixture(scope="module")
def cdef(gen_cdef) -> str:
    return gen_cdef.cdef_from_header(HEADER)


def header_functions() -> set:
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    return set(re.findall(r"\b(lq_\w+)\s*\(", re.sub(r"/\*.*?\*/", "", text, flags=re.S))) - {
        "lq_log_fn", "lq_handler_fn"}


def test_cffi_accepts_the_cdef(cdef: str) -> None:
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    assert ffi.typeof("lq_status").relements["LQ_OK"] == 0


def test_cdef_has_no_preprocessor_or_decorations(cdef: str) -> None:
    assert "LQ_API" not in cdef
    assert "__cplusplus" not in cdef
    assert 'extern "C"' not in cdef
    for line in cdef.splitlines():
        if line.startswith("#"):
            assert re.match(r"#define LQ_\w+ -?\d+$", line), line  # integer constants only


def test_cdef_declares_every_function_of_the_header(cdef: str) -> None:
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    declared = set(re.findall(r"\b(lq_\w+)\s*\(", cdef)) - {"lq_log_fn", "lq_handler_fn"}
    assert declared == header_functions()


def test_cdef_has_the_python_callbacks(cdef: str) -> None:
    assert 'extern "Python" int _lq_py_handler(lq_delivery *, const char *, size_t, void *);' in cdef
    assert 'extern "Python" void _lq_py_log(int, const char *, void *);' in cdef


def test_cdef_keeps_the_version_defines(cdef: str) -> None:
    with open(HEADER, encoding="utf-8") as f:
        major = re.search(r"#define LQ_VERSION_MAJOR (\d+)", f.read()).group(1)
    assert "#define LQ_VERSION_MAJOR %s" % major in cdef


def test_script_prints_the_cdef(cdef: str) -> None:
    out = subprocess.run([sys.executable, GEN], capture_output=True, text=True, check=True).stdout
    assert out == cdef


def test_generator_drops_cplusplus_blocks_and_comments(gen_cdef) -> None:
    text = """
    /* comment with lq_fake( */
    #ifndef X_H
    #define X_H
    #include <stdint.h>
    #ifdef __cplusplus
    extern "C" {
    #endif
    #ifndef LQ_API
    #define LQ_API __attribute__((visibility("default")))
    #endif
    #define LQ_VERSION_MAJOR 3
    LQ_API int lq_thing(int a, /* inline */ int b);
    #ifdef __cplusplus
    }
    #endif
    #endif
    """
    out = gen_cdef.cdef_from_text(text)
    declarations = out.split('extern "Python"')[0]
    assert "lq_fake" not in out
    assert 'extern "C"' not in out and "}" not in declarations
    assert "LQ_API" not in out and "#include" not in out
    assert "#define LQ_VERSION_MAJOR 3" in out
    ffi = cffi.FFI()
    ffi.cdef(declarations)
    assert re.search(r"int lq_thing\(int a,\s+int b\);", declarations)


def test_extension_matches_the_header() -> None:
    """The installed extension exposes every function of the header."""
    from libqueue._ffi import lib

    missing = [name for name in header_functions() if not hasattr(lib, name)]
    assert not missing
