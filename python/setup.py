"""Build of the libqueue Python package.

The C core is compiled straight into the cffi extension from the sources of
the repository this directory sits in (see ``libqueue_build.py``), so no
earlier build or install of the C library is needed.
"""

from setuptools import setup

setup(
    name="libqueue",
    version="0.1.0",
    description="Task queues kept in a service's own SQL tables (Python binding of libqueue)",
    packages=["libqueue"],
    package_data={"libqueue": ["py.typed"]},
    python_requires=">=3.8",
    install_requires=["cffi>=1.15"],
    cffi_modules=["libqueue_build.py:ffibuilder"],
    entry_points={"console_scripts": ["libqueue = libqueue.cli:main"]},
    zip_safe=False,
)
