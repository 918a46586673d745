"""Private PostgreSQL and MariaDB servers that a test may crash, stop,
freeze and start again, apart from the shared servers of the run.

Made as scripts/lib/servers.sh makes the shared ones (lq_start_postgres,
lq_start_mariadb): a data folder of their own, loopback only, a free port,
PostgreSQL as the postgres user when run as root, MariaDB as the mysql user.
Their folders go under $LQ_CHAOS_SERVERS when set (scripts/chaos sets it and
stops whatever is left there at exit), else under a temporary folder.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

import pytest


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def base_folder(name: str) -> str:
    root = os.environ.get("LQ_CHAOS_SERVERS") or tempfile.gettempdir()
    os.makedirs(root, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="lq-chaos-%s-" % name, dir=root)
    os.chmod(folder, 0o755)
    return folder


def _as_user(user: str) -> List[str]:
    return ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []


def _run(cmd: List[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def _must(cmd: List[str], what: str, timeout: float = 120) -> None:
    """Runs ``cmd``; the test fails (with the end of its output) if it does."""
    r = _run(cmd, timeout)
    if r.returncode:
        pytest.fail("%s failed: %s" % (what, r.stdout[-2000:]))


def _children(pid: int) -> List[int]:
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.split("/")[2]))
    return out


def pg_bin() -> Optional[str]:
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin")):
        if os.access(os.path.join(folder, "initdb"), os.X_OK):
            return folder
    return None


class _PrivateServer:
    """What both servers share: a folder of their own (``folder``, with the
    data folder ``data`` and the server's log ``log`` in it), a free
    ``port``, ``ensure_up()``, ``log_tail()`` and ``close()``. A subclass
    checks that its server is installed, calls this ``__init__``, makes the
    data folder, starts the server and makes database lqchaos (``_must``
    for each step); it has ``start()``, ``running()``, ``thaw()`` and
    ``_crash()`` (a stop with no shutdown)."""

    def __init__(self, name: str, data: str) -> None:
        self.folder = base_folder(name)
        self.data = os.path.join(self.folder, data)
        self.log = os.path.join(self.folder, "server.log")
        self.port = free_port()

    def start(self) -> float:
        raise NotImplementedError

    def running(self) -> bool:
        raise NotImplementedError

    def thaw(self) -> None:
        raise NotImplementedError

    def _crash(self) -> None:
        raise NotImplementedError

    def ensure_up(self) -> None:
        """Thawed and running (after a test that failed mid-fault)."""
        self.thaw()
        if not self.running():
            self.start()

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def close(self) -> None:
        self._crash()
        shutil.rmtree(self.folder, ignore_errors=True)


class PrivatePostgres(_PrivateServer):
    """``start()``, ``stop_immediate()`` (pg_ctl stop -m immediate: a crash
    to the clients, recovery at the next start), ``stop()`` (fast),
    ``freeze()`` / ``thaw()`` (SIGSTOP / SIGCONT to the postmaster and every
    backend), ``close()``. ``url``: a superuser URL on database lqchaos."""

    def __init__(self) -> None:
        self.bin = pg_bin()
        if not self.bin:
            pytest.skip("no PostgreSQL server installed")
        super().__init__("pg", "db")
        self.frozen: List[int] = []
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        run = _as_user("postgres")
        _must(run + [os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "postgres",
                     "-A", "trust", "--no-sync", "-E", "UTF8"], "initdb")
        self.start()
        _must(run + [os.path.join(self.bin, "psql"), "-q", "-h", "127.0.0.1", "-p",
                     str(self.port), "-U", "postgres", "-d", "postgres",
                     "-c", "CREATE DATABASE lqchaos"], "CREATE DATABASE")
        self.url = "postgresql://postgres@127.0.0.1:%d/lqchaos?sslmode=disable" % self.port

    def _ctl(self, *args: str) -> subprocess.CompletedProcess:
        return _run(_as_user("postgres") + [os.path.join(self.bin, "pg_ctl"), "-D", self.data]
                    + list(args))

    def start(self) -> float:
        """Starts it and waits until it takes connections; returns the
        monotonic time it does."""
        options = ("-c listen_addresses=127.0.0.1 -p %d -c unix_socket_directories=%s "
                   "-c max_connections=100 -c shared_buffers=32MB -c fsync=on "
                   "-c synchronous_commit=on" % (self.port, self.folder))
        r = self._ctl("-l", self.log, "-w", "-t", "60", "start", "-o", options)
        if r.returncode:
            pytest.fail("PostgreSQL did not start: %s\n%s" % (r.stdout, self.log_tail()))
        return time.monotonic()

    def running(self) -> bool:
        return self._ctl("status").returncode == 0

    def stop_immediate(self) -> None:
        self.thaw()
        self._ctl("-m", "immediate", "-w", "stop")

    _crash = stop_immediate

    def stop(self) -> None:
        self.thaw()
        self._ctl("-m", "fast", "-w", "-t", "60", "stop")

    def postmaster(self) -> Optional[int]:
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def freeze(self) -> None:
        """SIGSTOP to the postmaster first (it forks no more), then to each
        of its children."""
        main = self.postmaster()
        if main is None:
            pytest.fail("PostgreSQL is not running")
        os.kill(main, signal.SIGSTOP)
        self.frozen = [main]
        for child in _children(main):
            try:
                os.kill(child, signal.SIGSTOP)
                self.frozen.append(child)
            except ProcessLookupError:
                pass

    def thaw(self) -> None:
        for pid in reversed(self.frozen):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.frozen = []


class PrivateMariaDB(_PrivateServer):
    """``start()``, ``kill9()`` (SIGKILL: InnoDB recovers at the next start),
    ``stop()`` (SIGTERM, a clean shutdown), ``freeze()`` / ``thaw()``
    (SIGSTOP / SIGCONT), ``close()``. ``url``: user lq on database lqchaos."""

    def __init__(self) -> None:
        self.server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        if not os.access(self.server, os.X_OK) or not shutil.which("mariadb-install-db"):
            pytest.skip("no MariaDB server installed")
        super().__init__("mariadb", "data")
        self.socket = os.path.join(self.folder, "mysqld.sock")
        self.pid_file = os.path.join(self.folder, "mariadbd.pid")
        self.proc: Optional[subprocess.Popen] = None
        self.user = "root"
        if os.geteuid() == 0:
            try:
                shutil.chown(self.folder, "mysql", "mysql")
                self.user = "mysql"
            except (LookupError, OSError):
                self.user = "root"
        else:
            import pwd
            self.user = pwd.getpwuid(os.geteuid()).pw_name
        _must(["mariadb-install-db", "--no-defaults", "--datadir=" + self.data,
               "--user=" + self.user, "--skip-test-db",
               "--auth-root-authentication-method=socket"], "mariadb-install-db", timeout=180)
        self.start()
        _must(["mariadb", "--no-defaults", "--socket=" + self.socket, "-u", "root", "-e",
               "CREATE DATABASE lqchaos; "
               "CREATE USER 'lq'@'127.0.0.1' IDENTIFIED BY 'lq'; "
               "GRANT ALL ON *.* TO 'lq'@'127.0.0.1';"], "MariaDB set-up")
        self.url = "mysql://lq:lq@127.0.0.1:%d/lqchaos" % self.port

    def start(self) -> float:
        """Starts it and waits until it answers; returns the monotonic time
        it does."""
        self.proc = subprocess.Popen(
            [self.server, "--no-defaults", "--datadir=" + self.data, "--user=" + self.user,
             "--port=%d" % self.port, "--bind-address=127.0.0.1", "--skip-name-resolve",
             "--socket=" + self.socket, "--pid-file=" + self.pid_file,
             "--log-error=" + self.log,
             "--innodb-flush-log-at-trx-commit=1", "--innodb-buffer-pool-size=32M",
             "--max-connections=300"] + self.server_flags(),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail("MariaDB ended at start: %s" % self.log_tail())
            r = _run(["mariadb-admin", "--no-defaults", "--socket=" + self.socket, "-u", "root",
                      "ping"], timeout=10)
            if r.returncode == 0:
                # Ping answers from the socket; the TCP port is open by then too.
                return time.monotonic()
            time.sleep(0.1)
        pytest.fail("MariaDB did not start within 120 s: %s" % self.log_tail())

    def server_flags(self) -> List[str]:
        """The server's flags of its role, past the common ones (a replica's
        and a Galera node's modules have others)."""
        return ["--skip-log-bin"]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(60)

    _crash = kill9

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.kill9()

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
