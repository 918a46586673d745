"""``libqueue``: the command line of an operator, on one database and one table.

    libqueue --url sqlite:///q.db --table jobs init
    libqueue --url sqlite:///q.db --table jobs enqueue hello world
    libqueue --url sqlite:///q.db --table jobs worker handlers:resize
    libqueue --url sqlite:///q.db --table jobs stats --json
    libqueue --url sqlite:///q.db --table jobs doctor

``--table NAME`` alone describes the library's default lease table of that
name (``default_table``); ``--table-file`` reads a description from JSON or
TOML. Output is for people, or JSON with ``--json``. Errors are one line on
stderr; the exit codes are in ``EXIT_CODES``.
"""

from __future__ import annotations

import argparse
import base64
import functools
import importlib
import json
import math
import os
import re
import shlex
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from libqueue.broker import Broker
from libqueue.delivery import Delivery
from libqueue.doctor import format_findings, has_problems
from libqueue.errors import DialectError, Error, NotFound, SchemaError
from libqueue.stats import DEFAULT_CAP, QueueStats
from libqueue.table import ROLE_NAMES, Table

__all__ = ["main", "default_table", "EXIT_CODES"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 3
#: What each exit status means.
EXIT_CODES = {
    EXIT_OK: "done",
    EXIT_FAILED: "the database or the library refused (the message says why); nothing changed",
    EXIT_USAGE: "bad usage: an unknown command or option, a missing URL or table, a form the "
                "database has not, a --metrics address that cannot be listened on",
    EXIT_NOT_FOUND: "nothing to act on: a row to cancel that is not queued or in work, a dead "
                    "letter to replay or purge that is not there",
}
EXIT_PROBLEMS = 4
EXIT_CODES[EXIT_PROBLEMS] = "doctor found a problem (a finding of level \"problem\")"

#: Keys a table file may hold: Table's keyword arguments, and its name.
_TABLE_KEYS = ("name", "schema", "id", "id_generated", "fifo", "advisory_lock", "isolation",
               "dead_letter") + ROLE_NAMES


class UsageError(Exception):
    """Bad usage the parser cannot see: exit status 2."""


def default_table(name: str, form: str = "lease") -> Table:
    """The table ``--table NAME`` means: a payload, an attempt count, a due
    time and, in the lease form, a lease; dead letters in ``NAME_dead``.
    ``form`` "row_lock" drops the lease; "advisory" locks the key
    ``NAME-{id}`` instead."""
    roles: Dict[str, Any] = dict(payload="payload", attempt="attempt", retry_after="retry_after",
                                 dead_letter=name + "_dead")
    if form == "lease":
        roles["locked_until"] = "locked_until"
    elif form == "advisory":
        roles["advisory_lock"] = name + "-{id}"
    elif form != "row_lock":
        raise UsageError("unknown form %r (lease, row_lock or advisory)" % form)
    return Table(name, **roles)


def _read_table_file(path: str) -> Table:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UsageError("table file %s: %s" % (path, e.strerror)) from None
    try:
        if path.endswith(".toml"):
            try:
                import tomllib
            except ImportError:  # Python before 3.11
                raise UsageError("table file %s: TOML needs Python 3.11 or later; "
                                 "write it as JSON" % path) from None
            spec = tomllib.loads(raw.decode())
        else:
            spec = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError("table file %s: %s" % (path, e)) from None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise UsageError("table file %s: needs a table name (\"name\")" % path)
    unknown = sorted(set(spec) - set(_TABLE_KEYS))
    if unknown:
        raise UsageError("table file %s: unknown key%s %s (known: %s)" % (
            path, "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(_TABLE_KEYS)))
    name = spec.pop("name")
    try:
        return Table(name, **spec)
    except TypeError as e:
        raise UsageError("table file %s: %s" % (path, e)) from None


def _table_of(args: argparse.Namespace) -> Table:
    if args.table_file:
        if args.table:
            raise UsageError("--table and --table-file both describe the table: give one")
        return _read_table_file(args.table_file)
    if not args.table:
        raise UsageError("no table: pass --table NAME or --table-file PATH")
    return default_table(args.table, args.form)


def _read_url_file(path: str) -> str:
    """The first line of a file holding the URL (kept out of the process list
    and the environment, where other users of the host may read them)."""
    try:
        with open(path, encoding="utf-8") as f:
            url = f.readline().strip()
    except OSError as exc:
        raise UsageError("cannot read the URL file %s: %s" % (path, exc.strerror))
    if not url:
        raise UsageError("the URL file %s is empty" % path)
    return url


def _url_of(args: argparse.Namespace) -> str:
    if getattr(args, "url", None) and getattr(args, "url_file", None):
        raise UsageError("--url and --url-file both give the database: give one")
    if getattr(args, "url_file", None):
        return _read_url_file(args.url_file)
    url = getattr(args, "url", None)
    if not url and os.environ.get("LIBQUEUE_URL") and os.environ.get("LIBQUEUE_URL_FILE"):
        raise UsageError("LIBQUEUE_URL and LIBQUEUE_URL_FILE both give the database: unset one "
                         "(or pass --url or --url-file, which come first)")
    url = url or os.environ.get("LIBQUEUE_URL")
    if not url and os.environ.get("LIBQUEUE_URL_FILE"):
        return _read_url_file(os.environ["LIBQUEUE_URL_FILE"])
    if not url:
        raise UsageError("no database URL: pass --url-file PATH or --url, or set "
                         "LIBQUEUE_URL_FILE or LIBQUEUE_URL "
                         "(sqlite:///path/q.db, postgresql://..., mysql://...)")
    return url


def _print_json(value: Any) -> None:
    print(json.dumps(value, sort_keys=True))


def _aligned(rows: List[List[str]], left: Sequence[int] = (0,)) -> str:
    """Columns aligned: those of `left` to the left, the others (numbers) to
    the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.ljust(w) if i in left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# -- the commands -------------------------------------------------------------


def cmd_init(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    try:  # a table no worker could serve
        table.check_form(broker.dialect)
    except DialectError as e:
        raise UsageError("%s; here: --form lease or --form advisory" % e.message) from None
    broker.create_table(table)
    if args.json:
        _print_json({"table": table.name, "ready": True})
    else:
        print("table %s is ready (%s form)" % (table.name, table.form.name.lower()))
    return EXIT_OK


def _payloads(args: argparse.Namespace) -> List[bytes]:
    if args.payloads:
        return [p.encode() for p in args.payloads]
    return [line.rstrip(b"\r\n") for line in sys.stdin.buffer if line.strip()]


def _headers(pairs: Sequence[str]) -> Optional[Dict[str, str]]:
    if not pairs:
        return None
    headers = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError("--header takes NAME=VALUE, got %r" % pair)
        headers[name] = value
    return headers


def cmd_enqueue(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    fields: Dict[str, Any] = {}
    for key in ("group", "partition_key", "priority", "delay_ms", "dedup_key"):
        value = getattr(args, key)
        if value is not None:
            fields[key] = value
    headers = _headers(args.header)
    if headers:
        fields["headers"] = headers
    payloads = _payloads(args)
    if not payloads:
        raise UsageError("nothing to enqueue: give payloads as arguments or lines on stdin")
    ids: List[int] = []
    for start in range(0, len(payloads), 1000):  # one transaction per thousand
        batch = [dict(fields, payload=p) for p in payloads[start:start + 1000]]
        ids.extend(broker.publish_many(table, batch))
    if args.json:
        _print_json({"table": table.name, "ids": ids})
    else:
        print("\n".join(str(i) for i in ids))
    return EXIT_OK


def _show_stats(stats: QueueStats) -> str:
    def count(value: Optional[int]) -> str:
        if value is None:
            return "-"
        return "%d+" % value if value >= stats.cap else str(value)

    age = "-" if stats.head_age_s is None else "%.1fs" % stats.head_age_s
    name = stats.table if stats.group is None else "%s/%s" % (stats.table, stats.group)
    text = _aligned([["queue", "due", "delayed", "in work", "dead letters", "head age"],
                     [name, count(stats.due), count(stats.delayed), count(stats.in_work),
                      count(stats.dead_letters), age]])
    if stats.paused:
        text += "\npaused: nothing is claimed until `libqueue resume`"
    if stats.attempts:
        last = max(stats.attempts)
        text += "\nattempts: " + "  ".join(
            "%d%s: %d" % (a, "+" if a == last and a >= 9 else "", n)
            for a, n in sorted(stats.attempts.items()))
    return text


def cmd_stats(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    try:
        return _stats_loop(broker, table, args)
    except KeyboardInterrupt:  # how --watch ends
        return EXIT_OK


def _stats_loop(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    while True:
        try:
            stats = broker.stats(table, group=args.group, cap=args.cap)
        except Error as e:
            if not args.watch:
                raise
            # An outage: say so, and watch on until the database is back.
            print("libqueue: %s" % " ".join(str(e).split()), file=sys.stderr, flush=True)
            time.sleep(1.0)
            continue
        if args.json:
            _print_json(stats.as_dict())
        elif args.watch and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[J" + _show_stats(stats) + "\n")
        else:
            print(_show_stats(stats))
        sys.stdout.flush()
        if not args.watch:
            return EXIT_OK
        time.sleep(1.0)


def cmd_doctor(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    findings = broker.doctor(table)
    if args.json:
        _print_json({"table": table.name, "findings": [f.as_dict() for f in findings]})
    else:
        print(format_findings(findings))
    return EXIT_PROBLEMS if has_problems(findings) else EXIT_OK


def cmd_cancel(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    missing = [i for i in args.ids if not broker.cancel(table, i)]
    done = [i for i in args.ids if i not in missing]
    if args.json:
        _print_json({"table": table.name, "cancelled": done, "not_found": missing})
    else:
        for i in done:
            print("cancelled %d" % i)
    for i in missing:
        print("libqueue: row %d of %s is neither queued nor in work" % (i, table.name),
              file=sys.stderr)
    return EXIT_NOT_FOUND if missing else EXIT_OK


def cmd_pause(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    pausing = args.command == "pause"
    (broker.pause if pausing else broker.resume)(table, group=args.group)
    paused = broker.paused(table, group=args.group)
    name = table.name if args.group is None else "%s/%s" % (table.name, args.group)
    if args.json:
        _print_json({"table": table.name, "group": args.group, "paused": paused})
    elif pausing:
        print("paused %s: no process claims from it until `libqueue resume`" % name)
    elif paused:
        print("resumed %s, which is still paused by a pause of its whole table" % name)
    else:
        print("resumed %s" % name)
    return EXIT_OK


def _shown_payload(payload: Optional[bytes], width: int = 60) -> str:
    if payload is None:
        return "-"
    try:
        shown = payload.decode()
        if not shown.isprintable():
            shown = repr(shown)
    except UnicodeDecodeError:
        shown = repr(payload)
    return shown if len(shown) <= width else shown[:width - 3] + "..."


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration_s(text: str) -> float:
    """A DURATION: 30s, 15m, 12h, 7d, or a plain number of seconds."""
    unit = _DURATION_UNITS.get(text[-1:], 1)
    try:
        value = float(text[:-1] if text[-1:] in _DURATION_UNITS else text)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise UsageError("--older-than takes a duration such as 30s, 15m, 12h, 7d or a number "
                         "of seconds, got %r" % text)
    return value * unit


def cmd_prune(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    older_than = _duration_s(args.older_than)
    if args.dead_letters:
        deleted = broker.prune_dead_letters(table, older_than, group=args.group)
    else:
        deleted = broker.prune(table, older_than, group=args.group)
    what = "dead letters" if args.dead_letters else "finished rows"
    if args.json:
        _print_json({"table": table.name, "group": args.group, "older_than_s": older_than,
                     "dead_letters": args.dead_letters, "deleted": deleted})
    else:
        print("deleted %d %s older than %s" % (deleted, what, args.older_than))
    return EXIT_OK


def cmd_dead_letters(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = broker.dead_letters(table, group=args.group, after=args.after, limit=args.limit)
        if args.json:
            for row in rows:
                if "payload" in row:
                    try:
                        row["payload"] = row["payload"].decode()
                    except UnicodeDecodeError:
                        row["payload_base64"] = base64.b64encode(row.pop("payload")).decode()
            _print_json(rows)
        elif rows:
            print(_aligned([["id", "attempt", "payload"]] + [
                [str(r["id"]), str(r.get("attempt", "-")), _shown_payload(r.get("payload"))]
                for r in rows], left=(2,)))
        return EXIT_OK
    if bool(args.id) == bool(args.all):
        raise UsageError("dead-letters %s takes --id ID (one or more) or --all" % args.action)
    ids = None if args.all else args.id
    if args.action == "replay":
        moved = broker.replay_dead_letters(table, ids, group=args.group)
    else:
        moved = broker.purge_dead_letters(table, ids, group=args.group)
    verb = "replayed" if args.action == "replay" else "purged"
    if args.json:
        _print_json({"table": table.name, verb: moved})
    else:
        print("%s %d" % (verb, moved))
    if ids is not None and moved < len(set(ids)):
        print("libqueue: %d of the ids given are not dead letters of %s" % (
            len(set(ids)) - moved, table.name), file=sys.stderr)
        return EXIT_NOT_FOUND
    return EXIT_OK


def _load_handler(spec: str) -> Callable[[Delivery], Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError("the handler is module:function, got %r" % spec)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError("cannot import %s: %s" % (module_name, e)) from None
    handler = module
    for part in attr.split("."):
        handler = getattr(handler, part, None)
        if handler is None:
            raise UsageError("module %s has no %s" % (module_name, attr))
    if not callable(handler):
        raise UsageError("%s is not callable" % spec)
    return handler  # type: ignore[return-value]


def _exit_status(e: BaseException) -> int:
    """The status Python would exit with: sys.exit's code, 130 for Ctrl-C."""
    if isinstance(e, KeyboardInterrupt):
        return 130
    code = getattr(e, "code", None)
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) else EXIT_FAILED


class _Tally:
    """What the worker's handlers did, for its progress line and summary; and
    the exit a handler asked for (sys.exit, KeyboardInterrupt), which stops
    the worker."""

    def __init__(self) -> None:
        self.done = 0
        self.failed = 0
        self.exit_status: Optional[int] = None
        self.exit_asked = threading.Event()
        #: The subscription's stop, which a handler's thread may start.
        self.stop: Optional[Callable[[], None]] = None

    def wrap(self, handler: Callable[[Delivery], Any]) -> Callable[[Delivery], Any]:
        name = getattr(handler, "__qualname__", repr(handler))

        @functools.wraps(handler)  # the log names the handler, not this wrapper
        def counted(delivery: Delivery) -> Any:
            try:
                result = handler(delivery)
            except (SystemExit, KeyboardInterrupt) as e:
                # The process is asked to end, which a worker thread cannot
                # do: a failed attempt (retried, or dead-lettered at
                # max_attempts), and the worker stops as on SIGTERM. Not
                # re-raised, where it would only retry the row, for ever.
                self.failed += 1
                settled = delivery.settled
                self._exit(e, name, delivery.id, settled)
                if not settled:
                    delivery.retry()
                return None
            except BaseException:
                self.failed += 1
                raise
            self.done += 1
            return result
        return counted

    def _exit(self, e: BaseException, name: str, row: int, settled: bool) -> None:
        code = getattr(e, "code", None)
        if isinstance(e, KeyboardInterrupt):
            what = "raised KeyboardInterrupt"
        else:
            what = "called sys.exit(%s)" % ("" if code is None else repr(code))
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)  # as Python prints sys.exit("why")
        print("libqueue: handler %s %s on row %d: %sthe worker stops" % (
            name, what, row, "" if settled else "the row goes back to the queue (a failed "
            "attempt, dead-lettered at --max-attempts) and "), file=sys.stderr, flush=True)
        if self.exit_status is None:  # the first one says how the worker exits
            self.exit_status = _exit_status(e)
            if self.stop:  # claims end now, before the row goes back to be claimed again
                self.stop()
        self.exit_asked.set()


class _Idle:
    """How long a subscription has had nothing to do: no row in work or
    waiting, and a claim that came back empty since the last delivery (or
    its queue paused). An outage is not an empty queue: while claims fail
    (they count as empty claims too) it is not idle, and after one it is
    idle only from an empty claim that reached the database."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub
        self.delivered = -1
        self.empty_claims = 0
        self.since = time.monotonic()

    def for_s(self) -> float:
        delivered, empty = self.sub.stat("delivered"), self.sub.stat("empty_claims")
        if delivered != self.delivered:
            self.delivered, self.empty_claims, self.since = delivered, empty, time.monotonic()
        busy = self.sub.stat("in_work") or self.sub.stat("waiting")
        if self.sub.health() is not None:
            busy, self.empty_claims = True, empty
        if busy or (empty == self.empty_claims and not self.sub.stat("paused")):
            self.since = time.monotonic()
        return time.monotonic() - self.since


def _serve_metrics(sub: Any, address: str) -> Any:
    """An HTTP server of sub's metrics in Prometheus' text (any path), on
    HOST:PORT or PORT (127.0.0.1), in a thread; shut down by the caller."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise UsageError("--metrics takes PORT or HOST:PORT, got %r" % address)
    if not 1 <= int(port) <= 65535:  # bind() raises OverflowError past it; 0 is a port unknown
        raise UsageError("--metrics %s: cannot listen: a port is 1 to 65535" % address)
    try:
        import libqueue.prometheus as exporter
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import MetricsHandler
    except ImportError as e:
        raise UsageError(str(e)) from None
    import http.server
    registry = CollectorRegistry()
    exporter.register(sub, registry=registry)
    try:
        server = http.server.ThreadingHTTPServer((host or "127.0.0.1", int(port)),
                                                 MetricsHandler.factory(registry))
    except OSError as e:
        raise UsageError("--metrics %s: cannot listen: %s" % (address, e.strerror)) from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="libqueue-metrics", daemon=True).start()
    return server


def cmd_worker(broker: Broker, table: Table, args: argparse.Namespace) -> int:
    handler = _load_handler(args.handler)
    options: Dict[str, Any] = {"workers": args.workers}
    for key in ("group", "max_attempts", "lease_ms", "poll_interval_ms"):
        value = getattr(args, key)
        if value is not None:
            options[key] = value
    stopping: List[int] = []  # a flag the signal handler may set: it takes no lock

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signum)
        signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    tally = _Tally()
    live = sys.stderr.isatty() and not args.json
    try:
        with broker.subscribe(table, **options) as sub:
            server = _serve_metrics(sub, args.metrics) if args.metrics else None
            tally.stop = sub.stop
            sub.run(tally.wrap(handler))
            idle = _Idle(sub)
            while not stopping and not tally.exit_asked.wait(0.1):
                if live:
                    sys.stderr.write("\r%s: %d done, %d failed, %d in work " % (
                        table.name, tally.done, tally.failed, sub.stat("in_work")))
                    sys.stderr.flush()
                if args.until_idle is not None and idle.for_s() >= args.until_idle:
                    break
            sub.stop()  # running handlers finish; rows claimed and not begun go back
            # Settlements the database did not take: their rows come back.
            unsettled = sub.stat("settle_errors") + sub.stat("lease_lost")
            if server:
                server.shutdown()
                server.server_close()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if live:
        sys.stderr.write("\n")
    if args.json:
        _print_json({"table": table.name, "done": tally.done, "failed": tally.failed,
                     "unsettled": unsettled})
    else:
        print("%s: %d done, %d failed%s" % (
            table.name, tally.done, tally.failed,
            "; %d not settled, to run again" % unsettled if unsettled else ""))
    return EXIT_OK if tally.exit_status is None else tally.exit_status


# -- the parser -----------------------------------------------------------------


def _add_common(p: argparse.ArgumentParser, default: Any) -> None:
    """The options every command takes, before or after its name. After it,
    they default to SUPPRESS, so as not to undo what came before."""
    unset = dict(default=argparse.SUPPRESS) if default is argparse.SUPPRESS else {}
    p.add_argument("--url", help="the database (default: $LIBQUEUE_URL); a password in it is "
                   "seen in the process list: prefer --url-file", **unset)
    p.add_argument("--url-file", metavar="PATH", help="a file whose first line is the database "
                   "URL (default: $LIBQUEUE_URL_FILE)", **unset)
    p.add_argument("--table", metavar="NAME", help="the default table of this name", **unset)
    p.add_argument("--table-file", metavar="PATH", help="a table description in JSON or TOML",
                   **unset)
    p.add_argument("--form", choices=("lease", "row_lock", "advisory"),
                   help="the default table's claim form (default: lease)",
                   **(unset or dict(default="lease")))
    p.add_argument("--group", help="the group, for a table with a group column", **unset)
    p.add_argument("--json", action="store_true", help="output for machines",
                   **(unset or dict(default=False)))
    p.add_argument("--notify", action="store_true",
                   help="PostgreSQL: enqueue sends a NOTIFY, and worker listens for them and wakes "
                   "at once instead of at its next poll (the broker option listen_notify)",
                   **(unset or dict(default=False)))


def _parser() -> argparse.ArgumentParser:
    codes = "\n".join("  %d  %s" % item for item in EXIT_CODES.items())
    p = argparse.ArgumentParser(
        prog="libqueue", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Operate a libqueue queue table.",
        epilog="--table NAME alone means the default lease table of that name: columns id, "
               "payload, attempt, retry_after, locked_until; dead letters in NAME_dead.\n\n"
               "The database URL comes from --url-file, --url, $LIBQUEUE_URL or "
               "$LIBQUEUE_URL_FILE, in that order; a file (mode 0600) keeps a password out "
               "of the process list and the environment. Printed URLs show it as ***.\n\n"
               "exit status:\n" + codes + "\n  a worker whose handler called sys.exit or "
               "raised KeyboardInterrupt: the status Python gives it (sys.exit(n): n; 130)")
    _add_common(p, None)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, argparse.SUPPRESS)
    commands = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    commands.add_parser("init", parents=[common], help="create the table (and its index and dead letters), or "
                                     "check the one there")
    e = commands.add_parser("enqueue", parents=[common], help="publish payloads given as arguments, or one per "
                                            "line on stdin")
    e.add_argument("payloads", nargs="*", metavar="PAYLOAD")
    e.add_argument("--delay-ms", type=int)
    e.add_argument("--priority", type=int)
    e.add_argument("--partition-key")
    e.add_argument("--dedup-key")
    e.add_argument("--header", action="append", default=[], metavar="NAME=VALUE")

    s = commands.add_parser("stats", parents=[common], help="rows due, delayed, in work, dead letters; the head's "
                                          "age; attempts")
    s.add_argument("--watch", action="store_true", help="redraw every second")
    s.add_argument("--cap", type=int, default=DEFAULT_CAP,
                   help="rows each count reads at most (default %d)" % DEFAULT_CAP)

    c = commands.add_parser("cancel", parents=[common], help="take rows out of the queue (lq_cancel)")
    c.add_argument("ids", nargs="+", type=int, metavar="ID")

    commands.add_parser("pause", parents=[common], help="stop every process claiming from the queue "
                        "(with --group: that group); deliveries in work finish")
    commands.add_parser("resume", parents=[common], help="end a pause")
    commands.add_parser("doctor", parents=[common], help="the table's health from the database's "
                        "statistics, and what to do (exit status 4 on a problem)")

    d = commands.add_parser("dead-letters", parents=[common],
                            help="list, replay (back into the queue) or purge the dead letters")
    actions = d.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="the dead letters, by id")
    listing.add_argument("--after", type=int, default=0, metavar="ID",
                         help="those of ids above this one")
    listing.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    for action, what in (("replay", "put back in the queue, due now, attempts counted anew"),
                         ("purge", "delete")):
        a = actions.add_parser(action, parents=[common], help=what)
        a.add_argument("--id", type=int, action="append", metavar="ID", help="this row (repeat)")
        a.add_argument("--all", action="store_true", help="every dead letter")

    pr = commands.add_parser("prune", parents=[common], help="delete finished rows (kept by a "
                             "processed_at column), or dead letters, older than DURATION")
    pr.add_argument("--older-than", required=True, metavar="DURATION",
                    help="30s, 15m, 12h, 7d, or a number of seconds")
    pr.add_argument("--dead-letters", action="store_true",
                    help="the dead letters instead, by when they were dead-lettered")

    w = commands.add_parser("worker", parents=[common], help="work the queue with a Python handler, "
                                           "module:function")
    w.add_argument("handler", metavar="MODULE:FUNCTION")
    w.add_argument("--workers", type=int, default=4, help="handlers at once (default 4)")
    w.add_argument("--max-attempts", type=int, help="dead-letter after this many")
    w.add_argument("--lease-ms", type=int)
    w.add_argument("--poll-interval-ms", type=int)
    w.add_argument("--until-idle", type=float, metavar="SECONDS",
                   help="stop once nothing came for this long; time the database "
                        "cannot be reached does not count")
    w.add_argument("--metrics", metavar="[HOST:]PORT",
                   help="serve the subscription's metrics to Prometheus on this port "
                        "(127.0.0.1 unless HOST; needs python3-prometheus-client)")
    return p


_COMMANDS = {"init": cmd_init, "enqueue": cmd_enqueue, "stats": cmd_stats,
             "cancel": cmd_cancel, "worker": cmd_worker, "dead-letters": cmd_dead_letters,
             "pause": cmd_pause, "resume": cmd_pause, "doctor": cmd_doctor, "prune": cmd_prune}


def _init_command(args: argparse.Namespace) -> str:
    """The `init` that makes the table these arguments describe."""
    if args.table_file:
        return "libqueue --table-file %s init" % shlex.quote(args.table_file)
    form = "" if args.form == "lease" else " --form " + args.form
    return "libqueue --table %s%s init" % (shlex.quote(args.table), form)


def _verify(broker: Broker, table: Table, args: argparse.Namespace) -> None:
    try:
        broker.create_table(table, verify_only=True)
    except SchemaError as e:
        # The core's words name create_table's verify_only, which no command
        # line user set: say what is missing and which command makes it.
        missing = re.search(r".*table (.+?) does not exist \(and verify_only creates none\)",
                            e.message)
        if missing:  # the table, or its dead letters' table: init makes both
            name = missing.group(1)
            raise SchemaError("table %s does not exist: create it with `%s`"
                              % (name, _init_command(args)), e.status) from None
        if "does not exist" in e.message:  # a schema: init makes tables, not schemas
            raise
        raise SchemaError("%s; --table-file describes a table of other columns" % e.message,
                          e.status) from None


#: The names of positional arguments, as the usage line shows them.
_SHOWN_AS = {"payloads": "PAYLOAD", "ids": "ID", "handler": "MODULE:FUNCTION"}


def _check_arguments(args: argparse.Namespace) -> None:
    """Arguments the library would refuse with a traceback: an integer past
    the int64_t of its C calls, or text that is not UTF-8 (argv of another
    encoding reaches Python as lone surrogates, which cannot be encoded)."""
    for key, value in vars(args).items():
        name = _SHOWN_AS.get(key, "--" + key.replace("_", "-"))
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and not isinstance(item, bool) \
                    and not -2**63 <= item < 2**63:
                raise UsageError("%s: %d does not fit in 64 bits" % (name, item))
            if isinstance(item, str):
                try:
                    item.encode()
                except UnicodeEncodeError:
                    hint = "; give bytes as lines on stdin" if key == "payloads" else ""
                    raise UsageError("%s %r is not valid UTF-8%s" % (
                        name, item.encode(errors="surrogateescape"), hint)) from None


def _check_usage(args: argparse.Namespace, url: str) -> None:
    """What is bad usage before the database is asked anything."""
    if getattr(args, "cap", 1) < 1:
        raise UsageError("--cap counts rows, from 1: not %d" % args.cap)
    until_idle = getattr(args, "until_idle", None)
    if until_idle is not None and not until_idle >= 0:  # NaN too
        raise UsageError("--until-idle takes seconds, from 0: not %s" % until_idle)
    if args.notify and not url.startswith(("postgresql:", "postgres:")):
        raise UsageError("--notify is PostgreSQL's (LISTEN/NOTIFY); on other databases "
                         "workers poll")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one command; returns its exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        _check_arguments(args)
        table = _table_of(args)
        url = _url_of(args)
        _check_usage(args, url)
        with Broker(url, listen_notify=1 if args.notify else None) as broker:
            if args.command != "init":
                _verify(broker, table, args)
            return _COMMANDS[args.command](broker, table, args)
    except UsageError as e:
        print("libqueue: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    except NotFound as e:
        print("libqueue: %s" % " ".join(str(e).split()), file=sys.stderr)
        return EXIT_NOT_FOUND
    except Error as e:
        print("libqueue: %s" % " ".join(str(e).split()), file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
