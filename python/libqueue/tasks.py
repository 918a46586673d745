"""Typed tasks: functions enqueued by name with JSON arguments, on top of the
bytes API.

A row of a task is its arguments as a UTF-8 JSON object, ``{"args": [...],
"kwargs": {...}}``, in the payload, and the task's name in a header
(``task`` unless named otherwise). Workers decode it with ``json.loads`` and
nothing else: whoever can write a row must never be able to run code in a
worker, which unpickling (or evaluating any code-carrying format) would
allow. A row that does not decode, names no task of the queue, or whose
arguments do not fit the function's signature is never run.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generic, Mapping, Optional, Tuple,
                    TypeVar, Union, overload)

from libqueue.logs import logger
from libqueue.table import Table

if TYPE_CHECKING:
    from libqueue.broker import Broker
    from libqueue.delivery import Delivery
    from libqueue.subscription import Subscription

if TYPE_CHECKING:
    from typing import ParamSpec
else:
    try:
        from typing import ParamSpec
    except ImportError:  # Python < 3.10
        try:
            from typing_extensions import ParamSpec
        except ImportError:  # then the typing is coarser; the code is the same
            def ParamSpec(name):
                return TypeVar(name)

__all__ = ["Queue", "Task", "TaskOptions", "TaskRefused"]

P = ParamSpec("P")
R = TypeVar("R")

#: Enqueue options -> the keyword of ``Broker.publish`` each one sets.
_PUBLISH_KEYWORDS = {
    "delay_ms": "delay_ms", "priority": "priority", "dedup": "dedup_key",
    "on_duplicate": "on_duplicate", "expires_in_ms": "expires_in_ms", "group": "group",
    "partition_key": "partition_key", "headers": "headers",
}
#: The same, as ``Task.enqueue`` takes them among the task's own arguments.
_PREFIXED = {"_" + name: name for name in _PUBLISH_KEYWORDS}


class TaskRefused(Exception):
    """A row the queue will not run: it does not decode as a task's
    arguments, names no task of the queue, or its arguments do not fit."""


def _reject_constant(name: str) -> Any:
    raise ValueError("%s is not JSON" % name)


def _to_json(task: str, bound: inspect.BoundArguments) -> bytes:
    """The payload of a call: positional-only and variadic positional
    arguments by position, every other one by name."""
    parameters = bound.signature.parameters
    by_position = any(p.kind == p.VAR_POSITIONAL and bound.arguments.get(name)
                      for name, p in parameters.items())
    args: list = []
    kwargs: Dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            for i, item in enumerate(value):
                _check_json(task, "%s[%d]" % (name, i), item)
            args.extend(value)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            for key, item in value.items():
                _check_json(task, key, item)
            kwargs.update(value)
        elif kind == inspect.Parameter.POSITIONAL_ONLY or (
                kind == inspect.Parameter.POSITIONAL_OR_KEYWORD and by_position):
            _check_json(task, name, value)
            args.append(value)
        else:
            _check_json(task, name, value)
            kwargs[name] = value
    document = {"args": args, "kwargs": kwargs}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _check_json(task: str, name: str, value: Any) -> None:
    """Raises TypeError unless ``value`` comes back from JSON equal and of
    the same types (a tuple would come back a list, an int key a str)."""
    try:
        back = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError("task %s: argument %r cannot be JSON: %s" % (task, name, e)) from None
    if not _same(value, back):
        raise TypeError("task %s: argument %r = %r would arrive as %r: JSON holds str, int, "
                        "float, bool, None, lists and dicts with str keys"
                        % (task, name, value, back))


def _same(value: Any, back: Any) -> bool:
    if type(value) is not type(back):
        return False
    if isinstance(value, list):
        return len(value) == len(back) and all(map(_same, value, back))
    if isinstance(value, dict):
        return value.keys() == back.keys() and all(_same(value[k], back[k]) for k in value)
    return bool(value == back)


def _from_json(payload: bytes) -> Tuple[list, Dict[str, Any]]:
    """The arguments of a payload, by ``json.loads`` alone."""
    try:
        document = json.loads(payload.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TaskRefused("its payload is not JSON: %s" % e) from None
    if not isinstance(document, dict) or not set(document) <= {"args", "kwargs"}:
        raise TaskRefused('its payload is not {"args": [...], "kwargs": {...}}')
    args = document.get("args", [])
    kwargs = document.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise TaskRefused('its payload is not {"args": [...], "kwargs": {...}}')
    return args, kwargs


class TaskOptions(Generic[P]):
    """A task with its enqueue options fixed (``Task.options``): its
    ``enqueue`` takes the task's arguments alone, so type checkers check
    every one of them."""

    def __init__(self, task: "Task[P, Any]", options: Mapping[str, Any]) -> None:
        unknown = set(options) - set(_PUBLISH_KEYWORDS)
        if unknown:
            raise TypeError("task %s: unknown enqueue option(s) %s (known: %s)" % (
                task.name, ", ".join(sorted(unknown)), ", ".join(sorted(_PUBLISH_KEYWORDS))))
        self._task = task
        self._options = dict(options)

    def _message(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[bytes, dict]:
        task = self._task
        try:
            bound = task.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError("task %s: %s" % (task.name, e)) from None
        fields = {_PUBLISH_KEYWORDS[k]: v for k, v in self._options.items() if v is not None}
        headers = dict(fields.get("headers") or {})
        header = task.queue.name_header
        if header in headers:
            raise ValueError("task %s: header %r holds the task's name; give headers of other "
                             "names" % (task.name, header))
        headers[header] = task.name
        fields["headers"] = headers
        return _to_json(task.name, bound), fields

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Checks the arguments against the function's signature, writes the
        row, and returns its id. Arguments that do not fit, or that JSON
        cannot hold, raise ``TypeError`` and write nothing."""
        payload, fields = self._message(args, kwargs)
        queue = self._task.queue
        return queue.broker.publish(queue.table, payload, **fields)

    def enqueue_on(self, connection: Any, *args: P.args, **kwargs: P.kwargs) -> int:
        """``enqueue`` on a connection of your own, in the transaction you have
        open (``Broker.publish_on``): your commit or rollback decides."""
        payload, fields = self._message(args, kwargs)
        queue = self._task.queue
        return queue.broker.publish_on(connection, queue.table, payload, **fields)


class Task(Generic[P, R]):
    """A function of a ``Queue``, made by ``@queue.task``. Calling it runs
    the function here; ``enqueue`` writes a row for a worker to run it."""

    def __init__(self, queue: "Queue", fn: Callable[P, R], name: str) -> None:
        self.queue = queue
        self.fn = fn
        self.name = name
        self.signature = inspect.signature(fn)
        reserved = set(self.signature.parameters) & set(_PREFIXED)
        if reserved:
            raise ValueError("task %s: parameter(s) %s are the names of enqueue options"
                             % (name, ", ".join(sorted(reserved))))
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def options(self, **options: Any) -> TaskOptions[P]:
        """The task with enqueue options: ``delay_ms``, ``priority``,
        ``dedup`` (the dedup key), ``on_duplicate``, ``expires_in_ms``,
        ``group``, ``partition_key``, ``headers`` (``Broker.publish``'s)."""
        return TaskOptions(self, options)

    def _split(self, kwargs: Dict[str, Any]) -> TaskOptions[P]:
        options = {_PREFIXED[k]: kwargs.pop(k) for k in list(kwargs) if k in _PREFIXED}
        return self.options(**options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue a run with these arguments; returns the row's id. Options
        go among them with a leading underscore (``_delay_ms=500``,
        ``_priority=1``, ``_dedup="key"``, ...: those of ``options``)."""
        return self._split(kwargs).enqueue(*args, **kwargs)

    def enqueue_on(self, connection: Any, *args: P.args, **kwargs: P.kwargs) -> int:
        """``enqueue`` in your own transaction (``Broker.publish_on``)."""
        return self._split(kwargs).enqueue_on(connection, *args, **kwargs)

    def __repr__(self) -> str:
        return "<Task %s of %r>" % (self.name, self.queue.table.name)


class Queue:
    """Typed tasks on one table: ``@queue.task`` registers a function,
    ``task.enqueue(...)`` enqueues a run of it, and ``queue.worker()``
    runs each row by its task's name.

    The table needs a payload column and a headers column: the name goes in
    header ``name_header``.
    """

    def __init__(self, broker: "Broker", table: Table, *, name_header: str = "task") -> None:
        if not isinstance(table, Table):
            raise TypeError("table must be a libqueue.Table, got %s" % type(table).__name__)
        missing = [role for role in ("payload", "headers") if not table.has(role)]
        if missing:
            raise ValueError("a task queue needs the table's %s column(s); %r has none"
                             % (" and ".join(missing), table.name))
        if not isinstance(name_header, str) or not name_header:
            raise ValueError("name_header must be a non-empty str, got %r" % (name_header,))
        self.broker = broker
        self.table = table
        self.name_header = name_header
        #: name -> Task
        self.tasks: Dict[str, Task[Any, Any]] = {}

    @overload
    def task(self, fn: Callable[P, R]) -> Task[P, R]: ...

    @overload
    def task(self, *, name: Optional[str] = None) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, fn: Optional[Callable[P, R]] = None, *,
             name: Optional[str] = None) -> Union[Task[P, R],
                                                  Callable[[Callable[P, R]], Task[P, R]]]:
        """Register ``fn`` as a task, named ``name`` or its ``__name__``:
        ``@queue.task`` or ``@queue.task(name="images.resize")``."""
        def register(fn: Callable[P, R]) -> Task[P, R]:
            if not callable(fn):
                raise TypeError("a task is a function, got %s" % type(fn).__name__)
            task_name = fn.__name__ if name is None else name
            if not isinstance(task_name, str) or not task_name:
                raise ValueError("a task's name is a non-empty str, got %r" % (task_name,))
            if task_name in self.tasks:
                raise ValueError("the queue has a task named %r already" % task_name)
            task = self.tasks[task_name] = Task(self, fn, task_name)
            return task

        return register if fn is None else register(fn)

    # -- running --------------------------------------------------------------

    def _call_of(self, delivery: "Delivery") -> Tuple[Task[Any, Any], list, Dict[str, Any]]:
        """The task a row names and its arguments, or TaskRefused."""
        name = delivery.headers.get(self.name_header)
        if name is None:
            raise TaskRefused("it has no %r header" % self.name_header)
        task = self.tasks.get(name)
        if task is None:
            raise TaskRefused("it names task %r, which this queue does not have" % name)
        args, kwargs = _from_json(delivery.payload)
        try:
            task.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TaskRefused("its arguments do not fit task %s: %s" % (name, e)) from None
        return task, args, kwargs

    def _refuse(self, delivery: "Delivery", why: TaskRefused) -> None:
        """Logs a refused row, bound for the dead letters; a table without
        them gets the refusal raised, as a handler's exception."""
        if self.table.dead_letter is None:
            raise why
        logger.warning("row %d of %r is not run and goes to the dead letters: %s",
                       delivery.id, self.table.name, why)

    def handle(self, delivery: "Delivery") -> None:
        """Run the task a delivery names (the handler ``worker`` runs):
        returns as it returns, raises as it raises. An async task runs to its
        end on a loop of its own. A row it refuses goes to the dead letters
        where the table has them; without, ``TaskRefused`` is raised."""
        try:
            task, args, kwargs = self._call_of(delivery)
        except TaskRefused as why:
            self._refuse(delivery, why)
            delivery.dead_letter()
            return
        result = task.fn(*args, **kwargs)
        if inspect.iscoroutine(result):
            asyncio.run(result)

    async def handle_async(self, delivery: "Delivery") -> None:
        """``handle`` for ``Subscription.run_async``: an async task is
        awaited, a plain one called on the loop."""
        try:
            task, args, kwargs = self._call_of(delivery)
        except TaskRefused as why:
            self._refuse(delivery, why)
            await delivery.dead_letter_async()
            return
        result = task.fn(*args, **kwargs)
        if inspect.isawaitable(result):
            await result

    def subscribe(self, **options: Any) -> "Subscription":
        """A subscription to the queue's table (``Broker.subscribe``'s
        options), e.g. for ``await sub.run_async(queue.handle_async)``."""
        return self.broker.subscribe(self.table, **options)

    def worker(self, **options: Any) -> "Subscription":
        """A subscription running every task in push mode (``sub.run``):
        a task that returns acks its row; one that raises is logged and
        retried (dead-lettered at ``max_attempts``). Close it to stop."""
        subscription = self.subscribe(**options)
        try:
            subscription.run(self.handle)
        except BaseException:
            subscription.close()
            raise
        return subscription

    def __repr__(self) -> str:
        return "<Queue %r: %s>" % (self.table.name, ", ".join(sorted(self.tasks)) or "no tasks")
