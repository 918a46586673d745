"""libqueue: task queues kept in a service's own SQL tables.

Quick start::

    import libqueue

    jobs = libqueue.Table("jobs", payload="payload", attempt="attempt",
                          locked_until="locked_until")
    with libqueue.Broker("sqlite:app.db") as broker:
        broker.create_table(jobs)  # creates it if missing, else checks it
        broker.publish(jobs, b"hello")
        with broker.subscribe(jobs) as sub:
            with sub.next(timeout=5) as delivery:
                print(delivery.payload)
                delivery.ack()

The C core logs through ``logging.getLogger("libqueue")``.
"""

from __future__ import annotations

import atexit as _atexit

from libqueue._ffi import lib as _lib, text as _text
from libqueue import logs as _logs
from libqueue.broker import Broker, Message, Payload, redact_url
from libqueue.delivery import Delivery
from libqueue.doctor import Finding
from libqueue.enums import Form, Isolation, LogLevel, Option, Role, Stat, Status
from libqueue.errors import (  # Error and one class per lq_status
    AlreadySubscribed,
    BackendError,
    BatchRolledBack,
    Cancelled,
    Closed,
    ConnectError,
    ConnectionLimit,
    Contention,
    DialectError,
    Duplicate,
    Error,
    LeaseLost,
    Misuse,
    NoMemory,
    NotFound,
    SchemaError,
    ServerTooOld,
    Timeout,
)
from libqueue.metrics import Histogram, Metrics
from libqueue.stats import QueueStats
from libqueue.subscription import Subscription, stop_all as _stop_all
from libqueue.table import Table
from libqueue.tasks import Queue as Queue  # exported (the "as" says so to type checkers)

#: The linked core's version, "major.minor.patch".
__version__: str = _text(_lib.lq_version_string())
#: The version of the header the binding was compiled against.
HEADER_VERSION = (_lib.LQ_VERSION_MAJOR, _lib.LQ_VERSION_MINOR, _lib.LQ_VERSION_PATCH)


def _check_version() -> None:
    number = _lib.lq_version_number()
    major = number // 10000
    if major != _lib.LQ_VERSION_MAJOR:
        raise ImportError(
            "libqueue: the linked core is version %s (%d), the binding was built for "
            "major version %d" % (__version__, number, _lib.LQ_VERSION_MAJOR))


_check_version()
_logs.install()


def _at_exit() -> None:
    # Stop every subscription while the interpreter still works, then give
    # the core its own logging back: no core thread may call into Python
    # once it finalises.
    try:
        _stop_all()
    finally:
        _logs.uninstall()


_atexit.register(_at_exit)

__all__ = [
    "Broker",
    "Delivery",
    "Subscription",
    "Table",
    "QueueStats",
    "Metrics",
    "Histogram",
    "Finding",
    "Message",
    "Payload",
    "redact_url",
    "Form",
    "Isolation",
    "LogLevel",
    "Option",
    "Role",
    "Stat",
    "Status",
    "HEADER_VERSION",
    "__version__",
    "Error",
    "AlreadySubscribed",
    "BackendError",
    "BatchRolledBack",
    "Cancelled",
    "Closed",
    "ConnectError",
    "ConnectionLimit",
    "Contention",
    "DialectError",
    "Duplicate",
    "LeaseLost",
    "Misuse",
    "NoMemory",
    "NotFound",
    "SchemaError",
    "ServerTooOld",
    "Timeout",
]
