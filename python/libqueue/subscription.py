"""``Subscription``: reads a queue table, in push mode (``run``) or pull mode
(``next`` / iteration)."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import (TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator, List,
                    Optional, Set, TypeVar, Union)

from libqueue._ffi import ffi, lib
from libqueue.delivery import Delivery
from libqueue.enums import Stat
from libqueue.errors import Error, check, last_error, make_error
from libqueue.logs import logger
from libqueue.metrics import Metrics, take as take_metrics

if TYPE_CHECKING:
    from libqueue.aio import Puller, Settler
    from libqueue.broker import Broker
    from libqueue.table import Table

__all__ = ["Subscription", "Handler", "stop_all"]

Handler = Callable[[Delivery], Any]
H = TypeVar("H", bound=Handler)

#: Longest single wait in C, so that signals (Ctrl-C) are seen while waiting.
_WAIT_SLICE_S = 0.5

#: Subscriptions running in push mode. A strong reference: the core holds a
#: handle to each until its stop returns, so none may be collected before.
_running: Set["Subscription"] = set()
#: Every open subscription, for the exit hook.
_open: "weakref.WeakSet[Subscription]" = weakref.WeakSet()
_registry_lock = threading.Lock()
_from_handle = ffi.from_handle
_unpack = ffi.unpack


def _bytes(data: Any, size: int) -> bytes:
    """A payload the extension's C handler read (``const char *``, size)."""
    return _unpack(data, size) if size else b""


def _handler_error(exc_type: Any, exc_value: Any, tb: Any) -> None:
    # Last resort of the trampoline (e.g. the wrapper itself failed): log; the
    # C side then gets the error value 1, a retry.
    try:
        logger.error("libqueue handler trampoline failed; the delivery will be retried",
                     exc_info=(exc_type, exc_value, tb))
    except BaseException:
        pass


@ffi.def_extern(error=1, onerror=_handler_error)
def _lq_py_handler(pointer: Any, payload: Any, size: int, userdata: Any) -> int:
    """Called by the core's worker threads (through ``lq_py_push``) for each
    pushed delivery, with its payload. On every job's path: kept to the
    fewest steps."""
    subscription: Subscription = _from_handle(userdata)
    handler = subscription._handler
    if handler is None:  # raced with stop: leave the row to the queue
        return 1
    delivery = Delivery(pointer, subscription, False, _bytes(payload, size))
    try:
        handler(delivery)
        return 0
    except Exception:
        logger.exception("handler %s raised on row %d of %r; the row is retried, or "
                         "dead-lettered at max_attempts",
                         getattr(handler, "__qualname__", repr(handler)), delivery.id,
                         subscription.table.name)
        return 1
    finally:
        delivery._kill("its handler returned")


@ffi.def_extern(error=1, onerror=_handler_error)
def _lq_py_batch_handler(pointers: Any, payloads: Any, sizes: Any, count: int,
                         userdata: Any) -> int:
    """Called by the core's worker threads (through ``lq_py_push_batch``)
    with each batch of a batch subscription, and its payloads (NULL lists
    when C had no memory for them: then each is read when asked for)."""
    subscription: Subscription = _from_handle(userdata)
    handler = subscription._handler
    if handler is None:
        return 1
    if payloads == ffi.NULL:
        batch = [Delivery(pointers[i], subscription, False) for i in range(count)]
    else:
        batch = [Delivery(pointers[i], subscription, False, _bytes(payloads[i], sizes[i]))
                 for i in range(count)]
    try:
        handler(batch)
        return 0
    except Exception:
        logger.exception("batch handler raised on rows %s of %r; the rows left unsettled will "
                         "be retried", [d.id for d in batch], subscription.table.name)
        return 1
    finally:
        for delivery in batch:
            delivery._kill("its handler returned")


class Subscription:
    """A subscription to one queue table; made by ``Broker.subscribe``.

    Opening it checks the table (a missing table or column raises
    ``SchemaError``; a form the database cannot serve ``DialectError``) but
    claims nothing. Then use it in one mode:

    * push: ``run(handler)`` starts the core's worker threads, which call
      ``handler(delivery)``; returning normally acks the delivery unless the
      handler settled it, raising logs the exception (logger ``"libqueue"``)
      and retries it;
    * pull: ``next(timeout)``, ``for d in sub``, ``sub.deliveries(timeout)``;
    * asyncio (pull mode too): ``await sub.anext(timeout)``, ``async for d in
      sub``, ``await sub.run_async(handler, concurrency=n)``.

    ``stop()`` stops claiming and returns claimed rows not yet handed out;
    ``close()`` (or leaving a ``with`` block) stops and frees it.
    """

    def __init__(self, broker: "Broker", table: "Table", options_ptr: Any) -> None:
        out = ffi.new("lq_subscription **")
        check(lib.lq_subscription_open(out, broker._live(), table._ptr, options_ptr),
              "subscription to %r" % table.name)
        self._ptr: Any = ffi.gc(out[0], lib.lq_subscription_close)
        self._broker = broker
        self.table = table
        #: the group it reads, where the table has groups (set by Broker.subscribe)
        self.group: Optional[str] = None
        self._handler: Optional[Handler] = None
        self._handle: Any = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        # One stop at a time: the core's stop returns at once while another
        # thread's is under way, before the handlers that one waits for have
        # returned, and their handle must outlive them.
        self._stopping = threading.Lock()
        # Calls in C on the pointer right now; close() waits for them. The
        # pulls of asyncio take the lock alone (a C call, not Condition's
        # Python one) and notify only once a close waits (_closing).
        self._busy = 0
        self._busy_lock = threading.RLock()
        self._idle = threading.Condition(self._busy_lock)
        self._closing = False
        #: timeout_ms as opened (set by Broker.subscribe): how often
        #: run_async looks for runs past it
        self._timeout_ms = 0
        # asyncio: the readiness descriptor, each loop's waits, the settling threads.
        self._fd: Optional[int] = None
        self._pullers: "weakref.WeakKeyDictionary[Any, Puller]" = weakref.WeakKeyDictionary()
        self._settler: Optional["Settler"] = None
        with _registry_lock:
            _open.add(self)

    # -- state ------------------------------------------------------------

    def _live(self) -> Any:
        if self._ptr is None:
            raise make_error(lib.LQ_CLOSED, "subscription to %r is closed" % self.table.name)
        return self._ptr

    @contextlib.contextmanager
    def _using(self) -> Iterator[Any]:
        """The live pointer, which close() will not free while in use."""
        with self._idle:
            pointer = self._live()
            self._busy += 1
        try:
            yield pointer
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._ptr is None

    @property
    def running(self) -> bool:
        """True while in push mode and not stopped."""
        return self._handle is not None

    def stat(self, name: Union[str, int, Stat]) -> int:
        """A counter or gauge of this subscription, read from memory:
        ``"claims"``, ``"empty_claims"``, ``"delivered"``, ``"acked"``,
        ``"retried"``, ``"in_work"``, ... (a ``Stat`` name or member)."""
        if isinstance(name, str):
            try:
                which = int(Stat[name.upper()])
            except KeyError:
                raise make_error(lib.LQ_MISUSE, "unknown stat %r (one of %s)" % (
                    name, ", ".join(s.name.lower() for s in Stat))) from None
        else:
            which = int(name)
        with self._using() as pointer:
            return int(lib.lq_subscription_stat(pointer, which))

    def metrics(self) -> Metrics:
        """Every stat and the claim and wait histograms at one moment, read
        from memory: taking it runs no statement (``libqueue.prometheus``
        exports it)."""
        with self._using() as pointer:
            return take_metrics(pointer)

    # -- push mode --------------------------------------------------------

    def run(self, handler: H) -> H:
        """Start push mode: the core's workers call ``handler(delivery)``.

        Returns at once, and returns ``handler``, so it also serves as a
        decorator::

            @subscription.run
            def handle(delivery): ...
        """
        return self._start(handler, ffi.addressof(lib, "lq_py_push"), lib.lq_subscription_run)

    def run_batch(self, handler: Callable[[list], Any]) -> Callable[[list], Any]:
        """Push mode of a batch subscription (``batch=n``): the core's workers
        call ``handler(deliveries)`` with up to n at a time. Deliveries the
        handler leaves unsettled are acked when it returns and retried when it
        raises. In the row lock form a batch shares one transaction."""
        return self._start(handler, ffi.addressof(lib, "lq_py_push_batch"),
                           lib.lq_subscription_run_batch)

    def _start(self, handler: Any, trampoline: Any, start: Any) -> Any:
        if not callable(handler):
            raise TypeError("handler must be callable")
        with self._lock, self._using() as pointer:
            if self._handle is not None:
                raise make_error(lib.LQ_MISUSE, "subscription is already running")
            self._handler = handler
            self._handle = ffi.new_handle(self)
            with _registry_lock:
                _running.add(self)
            status = start(pointer, trampoline, self._handle)
            if status != lib.LQ_OK:
                error = last_error(status, "run")
                self._handler = None
                self._handle = None
                with _registry_lock:
                    _running.discard(self)
                raise error
        return handler

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until ``stop()``/``close()`` (True) or ``timeout`` seconds
        pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _WAIT_SLICE_S if deadline is None else min(_WAIT_SLICE_S, deadline - time.monotonic())
            if left <= 0:
                return self._stopped.is_set()
            if self._stopped.wait(left):
                return True

    # -- pull mode --------------------------------------------------------

    @staticmethod
    def _deadline(timeout: Optional[float]) -> Optional[float]:
        """The monotonic deadline of a timeout in seconds (None: no limit);
        0 takes only what is ready now."""
        if timeout is None:
            return None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number of seconds or None, got %s"
                            % type(timeout).__name__)
        if not timeout >= 0:  # also NaN
            raise ValueError("timeout must be >= 0 seconds, or None for no limit; got %r"
                             % timeout)
        return time.monotonic() + timeout

    def next(self, timeout: Optional[float] = None) -> Optional[Delivery]:
        """The next claimed delivery, waiting up to ``timeout`` seconds (None:
        no limit). Returns None when none came in time; raises ``Closed`` once
        the subscription is stopped. The delivery is the caller's: settle it
        and release it (``with`` block, ``release()``, or the garbage
        collector)."""
        out = ffi.new("lq_delivery **")
        deadline = self._deadline(timeout)
        while True:
            if deadline is None:
                wait_s = _WAIT_SLICE_S
            else:
                wait_s = min(_WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
            with self._using() as pointer:
                status = lib.lq_subscription_next(out, pointer, int(wait_s * 1000))
                if status == lib.LQ_OK:
                    return Delivery(out[0], self, owned=True)
                if not _waits_on(status):
                    check(status, "next")
            if deadline is not None and time.monotonic() >= deadline:
                self._raise_outage(timeout)
                return None

    def next_batch(self, timeout: Optional[float] = None, capacity: int = 100) -> list:
        """Up to ``capacity`` claimed deliveries, waiting up to ``timeout``
        seconds for the first; an empty list when none came in time."""
        out = ffi.new("lq_delivery *[]", capacity)
        count = ffi.new("size_t *")
        deadline = self._deadline(timeout)
        while True:
            if deadline is None:
                wait_s = _WAIT_SLICE_S
            else:
                wait_s = min(_WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
            with self._using() as pointer:
                status = lib.lq_subscription_next_batch(out, capacity, count, pointer,
                                                        int(wait_s * 1000))
                if status == lib.LQ_OK:
                    return [Delivery(out[i], self, owned=True) for i in range(count[0])]
                if not _waits_on(status):
                    check(status, "next_batch")
            if deadline is not None and time.monotonic() >= deadline:
                self._raise_outage(timeout)
                return []

    def health(self) -> Optional[Error]:
        """None while the subscription's claims reach the database; else the
        last claim's failure as an exception (not raised), whose
        ``failing_for`` says how many seconds claims have failed in a row.
        Failing claims are retried every second and logged."""
        failing = ffi.new("int64_t *")
        with self._using() as pointer:
            status = lib.lq_subscription_health(pointer, failing)
            if status == lib.LQ_OK:
                return None
            error = last_error(status, "claims")
        error.failing_for = failing[0] / 1000.0
        return error

    def _raise_outage(self, timeout: Optional[float]) -> None:
        """At a pull's deadline: raise the claims' failure if they failed for
        the whole wait, since then no delivery came because of it."""
        error = self.health()
        if error is not None and timeout is not None and error.failing_for >= timeout:
            error.message = "no delivery within %gs: claims have failed for %.1fs: %s" % (
                timeout, error.failing_for, error.message)
            raise error

    def deliveries(self, timeout: Optional[float] = None) -> Iterator[Delivery]:
        """Pulled deliveries until one does not come within ``timeout``
        seconds (None: until stopped)."""
        self._deadline(timeout)  # a bad timeout raises here, not at the first next()
        while True:
            try:
                delivery = self.next(timeout)
            except Exception as e:
                if getattr(e, "status", None) == lib.LQ_CLOSED:
                    return
                raise
            if delivery is None:
                return
            yield delivery

    def __iter__(self) -> Iterator[Delivery]:
        """Pulled deliveries until the subscription is stopped."""
        return self.deliveries(None)

    # -- asyncio (pull mode) ----------------------------------------------

    def _try_next(self) -> Optional[Delivery]:
        """A delivery ready now, or None; never waits."""
        taken = self._take_ready(ffi.new("lq_delivery *[1]"), 1, ffi.new("size_t *"))
        return taken[0] if taken else None

    def _take_ready(self, out: Any, capacity: int, count: Any) -> List[Delivery]:
        """Up to ``capacity`` deliveries ready now (none: an empty list),
        through the caller's buffers (``lq_delivery *[capacity]``,
        ``size_t *``); never waits. The pull of every async delivery: as
        _using, spelled out."""
        lock = self._busy_lock
        with lock:
            pointer = self._live()
            self._busy += 1
        try:
            status = lib.lq_subscription_try_next_batch(out, capacity, count, pointer)
            if status == lib.LQ_OK:
                return [Delivery(out[i], self, True) for i in range(count[0])]
            if status == lib.LQ_TIMEOUT:
                return []
            raise last_error(status, "try_next")
        finally:
            with lock:
                self._busy -= 1
                if self._closing:
                    self._idle.notify_all()

    def _puller(self, loop: Any) -> "Puller":
        from libqueue.aio import Puller

        with self._lock:
            puller = self._pullers.get(loop)
            if puller is None:
                if self._fd is None:
                    fd = ffi.new("int *")
                    with self._using() as pointer:
                        check(lib.lq_subscription_fd(fd, pointer), "fd")
                    self._fd = int(fd[0])
                puller = self._pullers[loop] = Puller(self, loop, self._fd)
            return puller

    def _acks_behind(self) -> bool:
        """Whether an ack may go to the core's acker thread
        (``Delivery._ack_behind``)."""
        with self._using() as pointer:
            return bool(lib.lq_subscription_acks_behind(pointer))

    def _async_settler(self) -> "Settler":
        from libqueue.aio import Settler

        with self._lock:
            if self._settler is None:
                try:  # one writer: a turn gathers every ack, more only contend
                    threads = 1 if self._broker.dialect == "sqlite" else 4
                except Error:
                    threads = 4
                self._settler = Settler(threads)
            return self._settler

    async def anext(self, timeout: Optional[float] = None) -> Optional[Delivery]:
        """The next claimed delivery, as ``next(timeout)`` gives it, awaited
        on the event loop: the wait is the loop's reader on the core's
        readiness descriptor (no thread, no polling). Returns None when none
        came in time; raises ``Closed`` once the subscription is stopped or
        closed, also in a task awaiting it then. Settle it with
        ``ack_async()`` and the like, which do not block the loop."""
        import asyncio

        deadline = self._deadline(timeout)
        loop = asyncio.get_running_loop()
        delivery = self._try_next()
        if delivery is not None:
            try:
                await asyncio.sleep(0)  # each pull lets the loop's other tasks run
            except asyncio.CancelledError:
                delivery.release()
                raise
            return delivery
        if deadline is not None and timeout == 0:
            self._raise_outage(timeout)
            return None
        puller = self._puller(loop)
        future = puller.wait()
        timer = None
        if deadline is not None:
            timer = loop.call_later(max(0.0, deadline - time.monotonic()), puller.end_wait,
                                    future)
        try:
            delivery = await future
        except asyncio.CancelledError:
            puller.abandon(future)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if delivery is None:
            self._raise_outage(timeout)
        return delivery

    async def _async_deliveries(self) -> AsyncIterator[Delivery]:
        while True:
            try:
                delivery = await self.anext()
            except Error as e:
                if e.status == lib.LQ_CLOSED:
                    return
                raise
            if delivery is not None:
                yield delivery

    def __aiter__(self) -> AsyncIterator[Delivery]:
        """``async for d in sub``: pulled deliveries until the subscription
        is stopped or closed."""
        return self._async_deliveries()

    async def run_async(self, handler: Callable[[Delivery], Awaitable[Any]],
                        concurrency: int = 1) -> None:
        """Run ``async def handler(delivery)`` for each delivery in
        ``concurrency`` tasks of the running loop (slots, each running its
        handlers one after another, each handler in a copy of the context
        run_async was called in), until the subscription is stopped or
        closed; returns once the handlers running then have finished and
        their settlements are done, or queued for the core's acker thread,
        which commits them by the time ``stop()`` returns.

        A handler that returns acks its delivery unless it settled it; one
        that raises has the exception logged (logger ``"libqueue"``) and the
        delivery retried (dead-lettered at max_attempts), as a ``run``
        handler. The settlement goes off the loop, behind the handler, which
        frees its slot at once (an ack to the core's acker thread where the
        form allows, as after ``run`` handlers). A handler whose run passes ``timeout_ms``
        (``expired``) or whose row is cancelled (``cancelled``) is cancelled
        (``asyncio.CancelledError`` in it): the flags are looked at every
        quarter of timeout_ms (between 10 and 250 ms). Cancelling run_async
        cancels the handlers running, and their rows go back unsettled.
        Pull mode: the subscription must not be ``run`` too; give it
        ``workers`` >= concurrency, which bounds the rows claimed."""
        from libqueue.aio_slots import run_handlers

        if not callable(handler):
            raise TypeError("handler must be an async function")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError("concurrency must be an int >= 1, got %r" % (concurrency,))
        await run_handlers(self, handler, concurrency)

    # -- ending -----------------------------------------------------------

    def _in_own_handler(self) -> bool:
        with self._idle:  # close() lets the pointer go only under this lock
            return self._ptr is not None and bool(lib.lq_subscription_in_handler(self._ptr))

    def stop(self) -> None:
        """Stop claiming, return claimed rows not handed out, and wait for
        running handlers to finish. Deliveries held stay valid. Idempotent.

        Called from one of this subscription's own handlers, it cannot wait for
        that handler: the stop then proceeds on another thread and this call
        returns at once."""
        if self._ptr is None:
            return
        if self._in_own_handler():
            threading.Thread(target=self._stop, name="libqueue-stop", daemon=True).start()
            return
        self._stop()

    def _stop(self) -> None:
        with self._stopping:
            if self._ptr is None:
                return
            with self._using() as pointer:
                check(lib.lq_subscription_stop(pointer), "stop")
            # Only now may the handle (the C userdata) go.
            self._handler = None
            self._handle = None
            with _registry_lock:
                _running.discard(self)
            self._stopped.set()

    def close(self) -> None:
        """Stop and free the subscription (idempotent). Pulled deliveries
        still held stay usable."""
        if self._ptr is None:
            return
        if self._in_own_handler():
            threading.Thread(target=self.close, name="libqueue-close", daemon=True).start()
            return
        try:
            self._stop()  # also wakes pulls waiting in other threads
        finally:
            with self._lock:
                pullers = list(self._pullers.values())
                self._pullers.clear()
            if pullers:  # before the descriptor closes with the subscription
                from libqueue.aio import end_waits

                end_waits(pullers)
            with self._idle:
                self._closing = True
                while self._busy:
                    self._idle.wait()
                pointer, self._ptr = self._ptr, None
            if pointer is not None:
                ffi.release(pointer)
            self._handler = None
            self._handle = None
            with _registry_lock:
                _running.discard(self)
                _open.discard(self)
            self._stopped.set()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else ("running" if self.running else "open")
        return "<Subscription %r %s>" % (self.table.name, state)


def _waits_on(status: int) -> bool:
    """Whether a pull's slice ended without a verdict: a timeout, or the
    claims' failure, which counts only at the pull's own deadline."""
    return status not in (lib.LQ_OK, lib.LQ_CLOSED, lib.LQ_MISUSE, lib.LQ_NOMEM)


def stop_all() -> None:
    """Stop every open subscription (the exit hook), so that no core thread
    calls into a finalising interpreter."""
    with _registry_lock:
        subscriptions = list(_running) + [s for s in _open if s not in _running]
    for subscription in subscriptions:
        try:
            subscription._stop()
        except Exception:  # noqa: BLE001 - exiting: nothing to do about it
            logger.debug("stopping %r at exit failed", subscription, exc_info=True)
