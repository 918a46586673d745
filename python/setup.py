"""Build of the libqueue Python package (metadata: pyproject.toml).

The C core is compiled straight into the cffi extension (see
``libqueue_build.py``), from ``csrc/``: in a checkout its entries link to the
repository's ``libqueue/src``, ``libqueue/include`` and
``bindings/gen_cdef.py``; an sdist holds copies of them (MANIFEST.in), so it
builds on its own. No earlier build or install of the C library is needed.
"""

import os
import re

from setuptools import setup

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "include", "libqueue.h")


def header_version(path: str = HEADER) -> str:
    """"major.minor.patch" from the header's LQ_VERSION_* lines, the one
    place the version is written."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        found = re.search(r"^#define LQ_VERSION_%s (\d+)$" % part, text, re.M)
        if not found:
            raise SystemExit("libqueue: %s has no \"#define LQ_VERSION_%s <number>\" line"
                             % (path, part))
        parts.append(found.group(1))
    return ".".join(parts)


setup(
    version=header_version(),
    packages=["libqueue"],
    package_data={"libqueue": ["py.typed"]},
    include_package_data=False,
    cffi_modules=["libqueue_build.py:ffibuilder"],
    zip_safe=False,
)
