"""Python ``IntEnum`` views of the C enums of ``libqueue.h``.

Written out, so that type checkers and editors see the members: each enum
holds the constants of one C enum type without their common prefix
(``LQ_FORM_LEASE`` -> ``Form.LEASE``). tests/python/test_enums.py checks them
against the compiled header, member by member, so they cannot drift.
"""

from enum import IntEnum

__all__ = ["Status", "Form", "Role", "Isolation", "Stat", "LogLevel", "Option", "OptionType"]


class Status(IntEnum):
    """Status codes of every call (``lq_status``); the exceptions carry one."""

    OK = 0
    ERROR = 1
    MISUSE = 2
    NOMEM = 3
    CONNECT = 4
    BACKEND = 5
    SCHEMA = 6
    DIALECT = 7
    SERVER_TOO_OLD = 8
    CONNECTION_LIMIT = 9
    TIMEOUT = 10
    CLOSED = 11
    LEASE_LOST = 12
    CONTENTION = 13
    ALREADY_SUBSCRIBED = 14
    BATCH_ROLLED_BACK = 15
    DUPLICATE = 16
    NOT_FOUND = 17
    CANCELLED = 18


class Form(IntEnum):
    """How a table's rows are claimed (``lq_form``)."""

    ROW_LOCK = 1
    LEASE = 2
    ADVISORY = 3


class Role(IntEnum):
    """What a column of a queue table holds (``lq_role``)."""

    PAYLOAD = 1
    ATTEMPT = 2
    LOCKED_UNTIL = 3
    GROUP = 4
    PARTITION_KEY = 5
    PRIORITY = 6
    RETRY_AFTER = 7
    PROCESSED_AT = 8
    HEADERS = 9
    DEDUP_KEY = 10
    EXPIRES_AT = 11
    CREATED_AT = 12
    DEAD_REASON = 13


class Isolation(IntEnum):
    """Transaction isolation of a table's statements (``lq_isolation``)."""

    DEFAULT = 0
    READ_UNCOMMITTED = 1
    READ_COMMITTED = 2
    REPEATABLE_READ = 3
    SERIALIZABLE = 4


class Stat(IntEnum):
    """Counters and gauges of a subscription (``lq_stat``)."""

    CLAIMS = 1
    EMPTY_CLAIMS = 2
    DELIVERED = 3
    SETTLED = 4
    EXTENSIONS = 5
    IN_WORK = 6
    WAITING = 7
    POLL_INTERVAL_MS = 8
    CONTENTION = 9
    EXPIRED = 10
    EXPIRED_UNSTARTED = 11
    PAUSED = 12
    CLAIMED = 13
    ACKED = 14
    RETRIED = 15
    DEAD_LETTERED = 16
    LEASE_LOST = 17
    SETTLE_ERRORS = 18
    POOL_IN_USE = 19
    POOL_IDLE = 20


class LogLevel(IntEnum):
    """Levels of the core's log messages (``lq_log_level``), as in ``logging``."""

    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40


class Option(IntEnum):
    """Options of brokers, subscriptions and schedules (``lq_option``)."""

    POOL_SIZE = 1
    CONNECT_TIMEOUT_MS = 2
    STATEMENT_TIMEOUT_MS = 3
    ACQUIRE_TIMEOUT_MS = 4
    CONNECTION_LIMIT = 5
    LISTEN_NOTIFY = 6
    PGBOUNCER = 7
    LISTEN_URL = 8
    WORKERS = 20
    WORKERS_BY_KEY = 21
    BATCH = 22
    POLL_INTERVAL_MS = 23
    LEASE_MS = 24
    MAX_ATTEMPTS = 25
    TRANSACTIONAL = 26
    GROUP = 27
    ON_THREADS = 28
    THREAD_CONNECTIONS = 29
    COALESCE = 30
    COALESCE_WAIT_US = 31
    MAX_PAYLOAD_BYTES = 32
    MAX_HEADERS_BYTES = 33
    CONCURRENCY = 34
    WORKER_CONCURRENCY = 35
    POLL_CEILING_MS = 36
    RATE_LIMIT = 37
    RATE_PERIOD_MS = 38
    PARTITION_CONCURRENCY = 39
    TIMEOUT_MS = 40
    RETAIN_MS = 41
    DEAD_LETTER_RETAIN_MS = 42
    PARTITION_WORKER_CONCURRENCY = 43
    PARTITION_RATE_LIMIT = 44
    PARTITION_RATE_PERIOD_MS = 45
    CRON = 60
    EVERY_MS = 61
    TZ = 62
    CATCH_UP = 63
    CATCH_UP_MS = 64


class OptionType(IntEnum):
    """The value type an option takes (``lq_option_type``)."""

    INT = 1
    STRING = 2
