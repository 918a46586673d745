"""A private primary and its replica, for failover tests: the primary is
stopped and the replica promoted in the middle of a drain.

* PostgreSQL: a streaming replica made with ``pg_basebackup -R`` from the
  primary (loopback, free ports), synchronous (``synchronous_standby_names``
  '*', ``synchronous_commit`` as asked: a commit waits for the replica) or
  asynchronous; promoted with ``pg_ctl promote``.
* MariaDB: a binlog replica (GTID) of a primary with log_bin; promoted with
  ``STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0``.

Each server lives in a folder named as chaos_servers.py names its own
(``lq-chaos-pg-*``, ``lq-chaos-mariadb-*`` under $LQ_CHAOS_SERVERS), so
scripts/lib/chaos.sh's lq_stop_chaos_servers stops what a run cut short
leaves behind.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any, List

import pytest

from chaos_servers import PrivateMariaDB, PrivatePostgres, _as_user, _must, _PrivateServer, _run


def _wait(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail("timed out after %gs waiting for %s" % (timeout, what))


class _Pair:
    """What both pairs share: ``primary`` and ``replica`` (servers with
    ``count(table)`` and ``promote()``), ``stop_primary()`` (a crash: the
    server's own), ``promote()``, ``count(table)`` on the primary of the
    moment, ``close()``."""

    primary: Any
    replica: Any = None
    promoted = False

    def stop_primary(self) -> None:
        self.primary._crash()
        if self.primary.running():
            pytest.fail("the primary still runs after its crash")

    def promote(self) -> None:
        self.replica.promote()
        self.promoted = True

    def count(self, table: str) -> int:
        return (self.replica if self.promoted else self.primary).count(table)

    def close(self) -> None:
        if self.replica is not None:
            self.replica.close()
        self.primary.close()


# --------------------------------------------------------------------------
# PostgreSQL


class PostgresPrimary(PrivatePostgres):
    """A PrivatePostgres whose ``psql()`` runs one statement (as postgres)."""

    def psql(self, sql: str, database: str = "postgres") -> str:
        r = _run(_as_user("postgres") + [os.path.join(self.bin, "psql"), "-XAtq", "-h",
                                         "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                                         "-d", database, "-c", sql], timeout=30)
        if r.returncode:
            pytest.fail("psql on port %d: %s: %s" % (self.port, sql, r.stdout[-2000:]))
        return r.stdout.strip()

    def count(self, table: str) -> int:
        return int(self.psql("SELECT count(*) FROM %s" % table, "lqchaos"))


class PostgresReplica(PostgresPrimary):
    """A streaming replica of ``primary``: its data folder is a
    pg_basebackup of the primary's with standby.signal and primary_conninfo
    (-R); it is started and streams before this returns."""

    def __init__(self, primary: PostgresPrimary) -> None:
        self.bin = primary.bin
        _PrivateServer.__init__(self, "pg-replica", "db")
        self.frozen: List[int] = []
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        _must(_as_user("postgres") + [os.path.join(self.bin, "pg_basebackup"), "-h", "127.0.0.1",
                                      "-p", str(primary.port), "-U", "postgres", "-D", self.data,
                                      "-R", "-X", "stream", "-c", "fast", "--no-sync"],
              "pg_basebackup")
        self.start()
        self.url = "postgresql://postgres@127.0.0.1:%d/lqchaos?sslmode=disable" % self.port

    def in_recovery(self) -> bool:
        return self.psql("SELECT pg_is_in_recovery()") == "t"

    def promote(self) -> None:
        """pg_ctl promote, waiting until it takes writes."""
        r = self._ctl("-w", "-t", "60", "promote")
        if r.returncode:
            pytest.fail("pg_ctl promote failed: %s\n%s" % (r.stdout, self.log_tail()))
        if self.in_recovery():
            pytest.fail("the replica is still in recovery after pg_ctl promote")


class PostgresPair(_Pair):
    """A primary and its streaming replica. ``synchronous``: the primary
    names the replica in synchronous_standby_names ('*') with
    synchronous_commit ``commit`` (on or remote_apply), so a commit returns
    only once the replica has it; else replication is asynchronous.
    ``url``: a libpq multi-host URL on both, target_session_attrs=read-write
    (libpq tries them in order and keeps the one that takes writes)."""

    def __init__(self, synchronous: bool, commit: str = "on") -> None:
        self.primary = PostgresPrimary()
        try:
            self.replica = PostgresReplica(self.primary)
            _wait(lambda: self.primary.psql(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == "1",
                60, "the replica to stream")
            if synchronous:
                self.primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
                self.primary.psql("ALTER SYSTEM SET synchronous_commit = '%s'" % commit)
                self.primary.psql("SELECT pg_reload_conf()")
                _wait(lambda: self.primary.psql(
                    "SELECT sync_state FROM pg_stat_replication") == "sync",
                    60, "the replica to be synchronous")
        except BaseException:
            self.close()
            raise
        self.synchronous = synchronous
        self.url = ("postgresql://postgres@127.0.0.1:%d,127.0.0.1:%d/lqchaos?sslmode=disable"
                    "&target_session_attrs=read-write" % (self.primary.port, self.replica.port))

    def cut_replication(self) -> None:
        """The replica gets nothing more (as behind a broken link): the
        primary refuses replication connections and ends the one it has."""
        hba = os.path.join(self.primary.data, "pg_hba.conf")
        with open(hba) as f:
            rules = f.read()
        with open(hba, "w") as f:
            f.write("host replication all 0.0.0.0/0 reject\nhost replication all ::/0 reject\n"
                    + rules)
        self.primary.psql("SELECT pg_reload_conf()")
        self.primary.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_replication")
        _wait(lambda: self.primary.psql("SELECT count(*) FROM pg_stat_replication") == "0",
              30, "the replication connection to end")

    def replica_takes_writes(self) -> bool:
        assert self.replica is not None
        return not self.replica.in_recovery() and self.replica.psql(
            "CREATE TABLE lq_written (); DROP TABLE lq_written; SELECT 1", "lqchaos") == "1"



# --------------------------------------------------------------------------
# MariaDB


class MariaDBReplicating(PrivateMariaDB):
    """A PrivateMariaDB with a server id of its own: the primary writes a
    binlog (``binlog``), a replica follows a primary (``replicate_from``).
    ``sql()`` runs statements as root on its socket."""

    def __init__(self, server_id: int, binlog: bool) -> None:
        self.server_id = server_id
        self.binlog = binlog
        super().__init__()

    def server_flags(self) -> List[str]:
        flags = ["--server-id=%d" % self.server_id,
                 "--relay-log=%s" % os.path.join(self.folder, "relay")]
        if self.binlog:
            return flags + ["--log-bin=%s" % os.path.join(self.folder, "binlog"),
                            "--binlog-format=ROW"]
        return flags + ["--skip-log-bin"]

    def sql(self, statements: str, names: bool = False) -> str:
        """The output of ``statements`` (with the column names when
        ``names``: as SHOW ... \\G prints them)."""
        r = _run(["mariadb", "--no-defaults", "--socket=" + self.socket, "-u", "root", "-B",
                  "-e", statements] + ([] if names else ["-N"]), timeout=30)
        if r.returncode:
            pytest.fail("mariadb on port %d: %s: %s" % (self.port, statements, r.stdout[-2000:]))
        return r.stdout.strip()

    def count(self, table: str) -> int:
        return int(self.sql("SELECT count(*) FROM lqchaos.%s" % table))

    def replication_status(self) -> str:
        return self.sql("SHOW SLAVE STATUS\\G", names=True)

    def replicate_from(self, primary: "MariaDBReplicating") -> None:
        """Follows ``primary`` from its binlog's current end; read-only."""
        file, position = primary.sql("SHOW MASTER STATUS").split()[:2]
        self.sql("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='lq', "
                 "MASTER_PASSWORD='lq', MASTER_LOG_FILE='%s', MASTER_LOG_POS=%d, "
                 "MASTER_CONNECT_RETRY=1; START SLAVE; SET GLOBAL read_only = 1; "
                 # As an application's user: read_only holds for it.
                 "REVOKE SUPER, READ_ONLY ADMIN ON *.* FROM 'lq'@'127.0.0.1';"
                 % (primary.port, file, int(position)))
        _wait(lambda: all(("%s: Yes" % k) in self.replication_status()
                          for k in ("Slave_IO_Running", "Slave_SQL_Running")),
              60, "the MariaDB replica to run")

    def promote(self) -> None:
        """Applies what it received, stops replicating and takes writes."""
        self.sql("STOP SLAVE IO_THREAD")
        # The SQL thread goes on with the relay log it has.
        _wait(lambda: "Slave has read all relay log" in self.replication_status(),
              60, "the replica to apply its relay log")
        self.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0;")
        if self.sql("SELECT @@GLOBAL.read_only") != "0":
            pytest.fail("the MariaDB replica is still read-only after its promotion")


class MariaDBPair(_Pair):
    """A MariaDB primary and its asynchronous binlog replica (read_only).
    ``url``: a mysql URL with both hosts, the replica first: before the
    failover each connect passes it over (read-only), after it takes it."""

    def __init__(self) -> None:
        self.primary = MariaDBReplicating(1, binlog=True)
        try:
            self.replica = MariaDBReplicating(2, binlog=False)
            self.replica.replicate_from(self.primary)
        except BaseException:
            self.close()
            raise
        self.url = "mysql://lq:lq@127.0.0.1:%d,127.0.0.1:%d/lqchaos" % (self.replica.port,
                                                                        self.primary.port)

    def cut_replication(self) -> None:
        """The replica gets nothing more (its I/O thread stops)."""
        assert self.replica is not None
        self.replica.sql("STOP SLAVE IO_THREAD")

    def replica_takes_writes(self) -> bool:
        """Read-only off, and no replication left configured."""
        assert self.replica is not None
        return (self.replica.sql("SELECT @@GLOBAL.read_only") == "0"
                and self.replica.replication_status() == "")
