"""What the database server spent, read beside a measurement: its CPU time
from /proc (the server runs on this machine in bench/run) and the statements
it ran (PostgreSQL: pg_stat_statements, which bench/run's server preloads;
MariaDB: its status counters). Used by bench/scale.py and bench/bigtable.py.
"""

import os
from typing import Dict, List, Optional

from ops import Raw  # bench/ops.py, beside this file

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> List[str]:
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()  # fields from the state on


def _cpu_s(fields: List[str], children: bool) -> float:
    # utime, stime (and cutime, cstime: the children it has reaped) are
    # fields 14-17, 12-15 counting from the state.
    ticks = sum(int(v) for v in fields[11:15 if children else 13])
    return ticks * TICK_S


class ServerLoad:
    """One connection of its own to the server, in autocommit, for readings."""

    def __init__(self, url: str) -> None:
        self.raw = Raw(url)
        self.db = self.raw.db
        self.note: Optional[str] = None
        if self.db == "postgresql":
            self.raw.conn.autocommit = True
            backend = self.raw.run("SELECT pg_backend_pid()")[0]
            self.pid = int(_stat(backend)[1])  # its parent: the postmaster
            try:
                self.raw.run("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                self.raw.run("SELECT count(*) FROM pg_stat_statements")
            except Exception as e:  # not preloaded: no statement counts
                self.note = "pg_stat_statements unavailable: %s" % str(e).strip()
        elif self.db == "mariadb":
            self.raw.conn.autocommit(True)
            with open(self.raw.run("SELECT @@pid_file")[0]) as f:
                self.pid = int(f.read().split()[0])
        else:
            raise SystemExit("server_load: PostgreSQL or MariaDB only, not %s" % self.db)

    def cpu_s(self) -> float:
        """The server's CPU time so far: PostgreSQL's postmaster, the children
        it has reaped and those alive; MariaDB's one process."""
        total = _cpu_s(_stat(self.pid), children=True)
        if self.db == "postgresql":
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    try:
                        fields = _stat(int(entry))
                    except OSError:  # gone meanwhile
                        continue
                    if int(fields[1]) == self.pid:
                        total += _cpu_s(fields, children=False)
        return total

    def statements(self) -> Dict[str, Optional[int]]:
        """Statements run so far, all and claims only, less these readings."""
        if self.db == "postgresql":
            if self.note:
                return {"statements": None, "claims": None}
            # A claim locks with SKIP LOCKED and returns its rows; so locks
            # the lease form's sweep (an UPDATE that returns nothing), which
            # claims nothing.
            row = self.raw.run(
                "SELECT coalesce(sum(calls), 0), coalesce(sum(calls) FILTER (WHERE query LIKE "
                "'%SKIP LOCKED%' AND NOT (query LIKE 'UPDATE %' AND query NOT LIKE '%RETURNING%')), "
                "0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' AND query "
                "NOT LIKE '%pg_backend_pid%'")
            return {"statements": int(row[0]), "claims": int(row[1])}
        cur = self.raw.conn.cursor()
        cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_select')")
        status = {name: int(value) for name, value in cur.fetchall()}
        # MariaDB's claims are its SELECTs (.. FOR UPDATE SKIP LOCKED);
        # Questions counts this SHOW too, and each reading before it.
        self.readings = getattr(self, "readings", 0) + 1
        return {"statements": status["Questions"] - self.readings, "claims": status["Com_select"]}

    def reading(self) -> Dict[str, Optional[float]]:
        out: Dict[str, Optional[float]] = dict(self.statements())
        out["cpu_s"] = self.cpu_s()
        return out


def delta(before: Dict, after: Dict) -> Dict:
    return {k: None if before[k] is None or after[k] is None else after[k] - before[k]
            for k in before}
