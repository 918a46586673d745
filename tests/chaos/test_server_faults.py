"""Server faults during a drain by a worker process (4 push workers), on
servers of this module's own (chaos_servers.py), never the shared ones:

* PostgreSQL stopped with ``pg_ctl stop -m immediate`` (a crash: recovery at
  the next start) and started again; MariaDB killed with SIGKILL and started
  again;
* either stopped cleanly for a while (quick: 10 s, long: 30 s) and started
  again;
* either frozen with SIGSTOP past the statement timeout (statement_timeout_ms
  1000), then continued: the client's deadlines fire while it is frozen
  (errors logged, no hang), and work resumes after SIGCONT.

Asserted each time: the worker survives (it is still running, and ends
cleanly at SIGTERM), every published row is done (lost 0) and the table ends
empty (stuck 0). Reported, not asserted: the time from the server being up
(or continued) to the first handler that starts, the errors logged, rows
done twice (a handler done whose ack the fault lost: at-least-once).
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Tuple

import pytest

from backend_mariadb import MariaDB
from chaos_servers import PrivateMariaDB, PrivatePostgres
from chaos_util import drain_through, drop, kill_leftover_workers, now_ns, pick
from helpers import PostgresDB

#: Forms each fault runs in: quick mode, long mode.
CRASH_FORMS = pick(("lease", "row_lock"), ("lease", "row_lock", "advisory"))
OTHER_FORMS = pick(("lease",), ("lease", "row_lock", "advisory"))


@pytest.fixture(scope="module")
def own_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    yield server
    server.close()


@pytest.fixture(scope="module")
def own_mariadb() -> Iterator[PrivateMariaDB]:
    server = PrivateMariaDB()
    yield server
    server.close()


@pytest.fixture
def server(request: Any) -> Iterator[Tuple[str, Any, Any]]:
    """("pg" | "mariadb", the private server, a database of its own on it)."""
    name = request.param
    srv = request.getfixturevalue("own_pg" if name == "pg" else "own_mariadb")
    srv.ensure_up()
    import uuid
    db = (PostgresDB(srv.url, "lq_" + uuid.uuid4().hex[:12]) if name == "pg"
          else MariaDB(srv.url))
    yield name, srv, db
    kill_leftover_workers()
    srv.ensure_up()
    drop(db)


@pytest.mark.parametrize("form", CRASH_FORMS)
@pytest.mark.parametrize("server", ["pg", "mariadb"], indirect=True)
def test_a_server_crash_and_restart_during_a_drain(server, form, log) -> None:
    """PostgreSQL: pg_ctl stop -m immediate; MariaDB: kill -9. Then started
    again at once."""
    name, srv, db = server

    def crash() -> Tuple[int, int]:
        at = now_ns()
        if name == "pg":
            srv.stop_immediate()
        else:
            srv.kill9()
        srv.start()
        return at, now_ns()

    drain_through(name, db, form, log, crash, "crash")


@pytest.mark.parametrize("form", OTHER_FORMS)
@pytest.mark.parametrize("server", ["pg", "mariadb"], indirect=True)
def test_a_server_down_for_a_while_during_a_drain(server, form, log) -> None:
    name, srv, db = server
    down_s = pick(10, 30)

    def down() -> Tuple[int, int]:
        at = now_ns()
        srv.stop()
        time.sleep(max(0.0, down_s - (now_ns() - at) / 1e9))
        srv.start()
        return at, now_ns()

    figures = drain_through(name, db, form, log, down, "down_%ds" % down_s)
    assert figures["errors_during_fault"] >= 1, "claims failed for %ds and nothing was logged" % down_s


@pytest.mark.parametrize("form", OTHER_FORMS)
@pytest.mark.parametrize("server", ["pg", "mariadb"], indirect=True)
def test_a_frozen_server_fires_the_deadlines_and_work_resumes(server, form, log) -> None:
    """SIGSTOP past the statement timeout: the client's deadlines (about
    statement_timeout_ms + 2 s) fire while the server is frozen, so errors
    are logged before SIGCONT; work resumes after it."""
    name, srv, db = server
    frozen_s = pick(8, 20)

    def freeze() -> Tuple[int, int]:
        at = now_ns()
        srv.freeze()
        time.sleep(frozen_s)
        srv.thaw()
        return at, now_ns()

    figures = drain_through(name, db, form, log, freeze, "frozen_%ds" % frozen_s)
    assert figures["errors_during_fault"] >= 1, (
        "no deadline fired in %ds of a frozen server (statement_timeout_ms 1000): the client "
        "hung until SIGCONT" % frozen_s)
