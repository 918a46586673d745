"""The chaos suite: workers killed, stopped and continued, servers crashed
and frozen, connections made half-open, slow and cut (README.md in this
folder). Quick by default; ``--long`` or LQ_CHAOS_LONG=1 for the full counts.

Databases: SQLite always; PostgreSQL and MariaDB when LQ_TEST_PG_URL and
LQ_TEST_MARIADB_URL name servers (scripts/chaos starts them). The
server-fault tests start servers of their own (chaos_servers.py).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import uuid
from typing import Any, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)

import pytest  # noqa: E402

import chaos_util  # noqa: E402
from backend_mariadb import MariaDB  # noqa: E402  (tests/python)
from helpers import PostgresDB, SqliteDB  # noqa: E402  (tests/python)

#: backend -> (dialect, variable naming its server or None).
BACKENDS = {"sqlite": ("sqlite", None), "pg": ("postgresql", "LQ_TEST_PG_URL"),
            "mariadb": ("mysql", "LQ_TEST_MARIADB_URL")}

#: The longest a test may take before the watchdog dumps every thread and
#: ends the run (each test also bounds each of its own waits).
WATCHDOG_S = {False: 420, True: 3600}


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="the chaos suite's full counts (also LQ_CHAOS_LONG=1)")


def pytest_configure(config: Any) -> None:
    if config.getoption("--long"):
        os.environ["LQ_CHAOS_LONG"] = "1"
        chaos_util.LONG = True
    config.addinivalue_line("markers", "watchdog(seconds): this test's own watchdog")


def make_db(name: str, tmp_path: Any) -> Any:
    dialect, env = BACKENDS[name]
    if env and not os.environ.get(env):
        if os.environ.get("LQ_REQUIRE_SERVERS"):
            pytest.fail("LQ_REQUIRE_SERVERS is set but %s is not" % env)
        pytest.skip("%s is not set" % env)
    if name == "sqlite":
        return SqliteDB(str(tmp_path / "queue.db"))
    if name == "pg":
        return PostgresDB(os.environ[env], "lq_" + uuid.uuid4().hex[:12])
    return MariaDB(os.environ[env])


@pytest.fixture
def db(request: Any, tmp_path: Any) -> Iterator[Any]:
    """A database of the backend named by the test's parameter ("sqlite",
    "pg", "mariadb"): a file, a schema or a database of its own."""
    backend = make_db(request.param, tmp_path)
    yield backend
    # Workers first: a worker's open transaction would hold the DROP.
    chaos_util.kill_leftover_workers()
    chaos_util.drop(backend)


@pytest.fixture
def log(tmp_path: Any) -> Iterator[chaos_util.Log]:
    log = chaos_util.Log(str(tmp_path / "effects.log"))
    yield log
    log.close()


@pytest.fixture(autouse=True)
def _bounded(request: Any) -> Iterator[None]:
    """Every test ends by itself: a watchdog dumps the threads and ends the
    run if one passes its bound (and SIGALRM a minute later, if that could
    not), and the workers a test leaves are killed."""
    marker = request.node.get_closest_marker("watchdog")
    limit = marker.args[0] if marker else WATCHDOG_S[chaos_util.LONG]
    faulthandler.dump_traceback_later(limit, exit=True)
    # A backstop the kernel keeps: SIGALRM, whose default action ends the
    # process whatever state its threads are in.
    signal.alarm(int(limit) + 60)
    try:
        yield
    finally:
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        chaos_util.kill_leftover_workers()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not chaos_util.FIGURES:
        return
    terminalreporter.section("chaos figures (%s mode)" % ("long" if chaos_util.LONG else "quick"))
    for name, figures in chaos_util.FIGURES:
        terminalreporter.write_line("%s: %s" % (name, ", ".join(
            "%s=%s" % (k, figures[k]) for k in sorted(figures))))
