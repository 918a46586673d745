"""A private MariaDB Galera cluster: three mariadbd nodes on loopback, each
with a port of its own for clients, group communication (gmcast), IST and
SST (rsync), made as chaos_servers.py makes its single MariaDB.

The first node bootstraps the cluster (--wsrep-new-cluster) and makes
database lqchaos and user lq; the others join it and receive the data by
rsync (SST). Each node's folder is named lq-chaos-mariadb-galera-*, with its
mariadbd.pid, so scripts/lib/chaos.sh's lq_stop_chaos_servers stops the
nodes a run cut short leaves, as it stops the single servers.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import List, Optional

import pytest

from chaos_servers import PrivateMariaDB, _must, _PrivateServer, _run, free_port

PROVIDER = "/usr/lib/galera/libgalera_smm.so"


def galera_installed() -> bool:
    return (os.access(PROVIDER, os.R_OK) and shutil.which("rsync") is not None
            and shutil.which("wsrep_sst_rsync") is not None)


class GaleraNode(PrivateMariaDB):
    """One node: ``start()`` joins the cluster named by ``peers`` (the
    gmcast addresses of every node), or bootstraps it when ``bootstrap``;
    ``status(name)`` reads a wsrep status variable; ``url`` as
    PrivateMariaDB's."""

    def __init__(self, index: int, gcomm_ports: List[int], bootstrap: bool) -> None:
        self.server = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        if not os.access(self.server, os.X_OK) or not shutil.which("mariadb-install-db"):
            pytest.skip("no MariaDB server installed")
        if not galera_installed():
            pytest.skip("no Galera provider (galera-4) or rsync installed")
        _PrivateServer.__init__(self, "mariadb-galera%d" % index, "data")
        self.index = index
        self.gcomm_ports = gcomm_ports
        self.bootstrap = bootstrap
        self.ist_port = free_port()
        self.sst_port = free_port()
        self.socket = os.path.join(self.folder, "mysqld.sock")
        self.pid_file = os.path.join(self.folder, "mariadbd.pid")
        self.proc = None
        self.user = "root"
        if os.geteuid() == 0:
            shutil.chown(self.folder, "mysql", "mysql")
            self.user = "mysql"
        if bootstrap:
            _must(["mariadb-install-db", "--no-defaults", "--datadir=" + self.data,
                   "--user=" + self.user, "--skip-test-db",
                   "--auth-root-authentication-method=socket"], "mariadb-install-db",
                  timeout=180)
        else:
            # Filled by the donor's rsync (SST) at the first start.
            os.makedirs(self.data)
            if self.user != "root":
                shutil.chown(self.data, self.user, self.user)
        self.url = "mysql://lq:lq@127.0.0.1:%d/lqchaos" % self.port

    def server_flags(self) -> List[str]:
        gcomm = ",".join("127.0.0.1:%d" % p for p in self.gcomm_ports)
        provider = ("gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;"
                    "gcache.size=64M" % (self.gcomm_ports[self.index], self.ist_port))
        opts = ["--log-bin=" + os.path.join(self.folder, "binlog"), "--binlog-format=ROW",
                "--innodb-autoinc-lock-mode=2", "--wsrep-on=ON",
                "--wsrep-provider=" + PROVIDER,
                "--wsrep-cluster-name=lqchaos", "--wsrep-cluster-address=gcomm://" + gcomm,
                "--wsrep-provider-options=" + provider,
                "--wsrep-node-address=127.0.0.1",
                "--wsrep-node-incoming-address=127.0.0.1:%d" % self.port,
                "--wsrep-sst-method=rsync",
                "--wsrep-sst-receive-address=127.0.0.1:%d" % self.sst_port,
                "--wsrep-slave-threads=2"]
        if self.bootstrap:
            opts.append("--wsrep-new-cluster")
        return opts

    def status(self, name: str) -> Optional[str]:
        r = _run(["mariadb", "--no-defaults", "--socket=" + self.socket, "-u", "root", "-N",
                  "-B", "-e", "SHOW STATUS LIKE '%s'" % name], timeout=10)
        if r.returncode or not r.stdout.strip():
            return None
        return r.stdout.split("\t", 1)[1].strip()

    def wait_synced(self, size: int, timeout: float = 120) -> None:
        """Until this node is Synced in a primary component of ``size``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if (self.status("wsrep_local_state_comment") == "Synced"
                    and self.status("wsrep_cluster_size") == str(size)
                    and self.status("wsrep_ready") == "ON"):
                return
            if not self.running():
                break
            time.sleep(0.2)
        pytest.fail("Galera node %d not synced in a cluster of %d: %s"
                    % (self.index, size, self.log_tail()))


class GaleraCluster:
    """``nodes`` (GaleraNode), ``urls`` (one per node), ``close()``."""

    def __init__(self, size: int = 3) -> None:
        ports = [free_port() for _ in range(size)]
        self.nodes: List[GaleraNode] = []
        try:
            for i in range(size):
                node = GaleraNode(i, ports, bootstrap=i == 0)
                self.nodes.append(node)
                node.start()
                node.bootstrap = False  # a later start joins the others
                if i == 0:
                    _must(["mariadb", "--no-defaults", "--socket=" + node.socket, "-u", "root",
                           "-e", "CREATE DATABASE lqchaos; "
                           "CREATE USER 'lq'@'127.0.0.1' IDENTIFIED BY 'lq'; "
                           "GRANT ALL ON *.* TO 'lq'@'127.0.0.1';"], "MariaDB set-up")
                node.wait_synced(i + 1)
        except BaseException:
            self.close()
            raise
        self.urls = [n.url for n in self.nodes]

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.close()
