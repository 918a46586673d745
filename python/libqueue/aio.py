"""asyncio for pulled subscriptions.

Waits go through the core's readiness descriptor (``lq_subscription_fd``),
watched with the loop's reader: no thread per wait and no polling. The
descriptor is level-triggered, so a reader that takes what is ready and
finds nothing more simply waits again. Settlements awaited run off the loop
on a few threads of the subscription's own, acks gathered into one
``lq_deliveries_ack`` per turn (one statement and one commit where the form
allows), and their outcomes come back to the loop with one wake-up per turn.
The handlers of ``run_async`` are in ``aio_slots``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import weakref
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Tuple

from libqueue._ffi import ffi, lib, text
from libqueue.errors import last_error, make_error
from libqueue.logs import logger

if TYPE_CHECKING:
    from libqueue.delivery import Delivery
    from libqueue.subscription import Subscription

#: The most acks one settling turn takes into its statement.
_ACKS_PER_TURN = 256
#: How long a close waits for another thread's loop to let go of the
#: descriptor before it frees the subscription anyway.
_CLOSE_WAIT_S = 2.0


class Puller:
    """The tasks of one loop waiting for a subscription's deliveries. The
    descriptor is watched while one waits; each wake-up hands out what is
    ready, in the order the waits began."""

    def __init__(self, subscription: "Subscription", loop: asyncio.AbstractEventLoop,
                 fd: int) -> None:
        self.subscription = subscription
        # Weak: the subscription keeps its pullers by loop, weakly too.
        self._loop = weakref.ref(loop)
        self.fd = fd
        self.waiters: Deque[asyncio.Future] = collections.deque()
        self.watching = False

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        return self._loop()

    def wait(self) -> asyncio.Future:
        loop = self._loop()
        assert loop is not None  # called on it
        future = loop.create_future()
        self.waiters.append(future)
        if not self.watching:
            loop.add_reader(self.fd, self._ready)
            self.watching = True
        return future

    def forget(self, future: asyncio.Future) -> None:
        """A wait that ended otherwise (a timeout, a cancellation)."""
        try:
            self.waiters.remove(future)
        except ValueError:
            pass
        if not self.waiters:
            self._unwatch()

    def end_wait(self, future: asyncio.Future) -> None:
        """Ends a wait with None, nothing taken: at its deadline, or when its
        waiter has other work."""
        if not future.done():
            future.set_result(None)
        self.forget(future)

    def abandon(self, future: asyncio.Future) -> None:
        """A wait cancelled: forgotten, and a delivery that came meanwhile
        goes back to the queue."""
        self.forget(future)
        if future.done() and not future.cancelled() and future.exception() is None:
            delivery = future.result()
            if delivery is not None:
                delivery.release()

    def _unwatch(self) -> None:
        loop = self._loop()
        if self.watching and loop is not None and not loop.is_closed():
            loop.remove_reader(self.fd)
        self.watching = False

    def _ready(self) -> None:
        waiters = self.waiters
        while waiters:
            future = waiters[0]
            if future.done():
                waiters.popleft()
                continue
            try:
                delivery = self.subscription._try_next()
            except Exception as e:  # noqa: BLE001 - Closed ends every wait, others this one
                if getattr(e, "status", None) == lib.LQ_CLOSED:
                    self.close(e)
                    return
                waiters.popleft().set_exception(e)
                continue
            if delivery is None:  # another taker came first: wait again
                break
            waiters.popleft().set_result(delivery)
        if not waiters:
            self._unwatch()

    def close(self, error: Optional[BaseException] = None,
              done: Optional[threading.Event] = None) -> None:
        """Ends every wait with ``Closed`` and lets go of the descriptor,
        on the loop's thread (or with the loop not running)."""
        try:
            self._unwatch()
            if error is None:
                error = make_error(lib.LQ_CLOSED, "subscription to %r is closed"
                                   % self.subscription.table.name)
            while self.waiters:
                future = self.waiters.popleft()
                if not future.done():
                    future.set_exception(error)
        finally:
            if done is not None:
                done.set()


def end_waits(pullers: List[Puller]) -> None:
    """Before a close: every loop's waits end and its reader goes, while the
    descriptor is still open (a closed descriptor leaves an epoll waiter
    asleep for good)."""
    try:
        running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    pending = []
    for puller in pullers:
        loop = puller.loop
        if loop is None:
            continue
        if loop is running or loop.is_closed() or not loop.is_running():
            puller.close()
            continue
        done = threading.Event()
        try:
            loop.call_soon_threadsafe(puller.close, None, done)
        except RuntimeError:  # closed meanwhile
            continue
        pending.append(done)
    for done in pending:
        if not done.wait(_CLOSE_WAIT_S):
            logger.warning("a loop did not let go of a subscription's descriptor within %gs "
                           "of its close", _CLOSE_WAIT_S)


# -- settlements --------------------------------------------------------------

#: One settlement handed off: the delivery, its future, and the future's loop.
_Item = Tuple["Delivery", asyncio.Future, asyncio.AbstractEventLoop]


class Settler:
    """The settlements of one subscription's deliveries, run on threads of
    its own: at most ``threads`` turns at once, each acking what gathered
    while the others ran."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._acks: List[_Item] = []
        self._turns = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="libqueue-settle")

    def ack(self, item: _Item) -> None:
        with self._lock:
            self._acks.append(item)
            start = self._turns < self._threads
            if start:
                self._turns += 1
        if start:
            self._pool.submit(self._ack_turns)

    def other(self, item: _Item, what: str, fn: Any, *args: Any) -> None:
        self._pool.submit(self._settle_one, item, what, fn, args)

    def _ack_turns(self) -> None:
        while True:
            with self._lock:
                batch = self._acks[:_ACKS_PER_TURN]
                del self._acks[:_ACKS_PER_TURN]
                if not batch:
                    self._turns -= 1
                    return
            try:
                outcomes = _ack_all(batch)
            except BaseException as e:  # noqa: BLE001 - every future gets an answer
                outcomes = [e] * len(batch)
            _report(batch, outcomes, "ack")

    def _settle_one(self, item: _Item, what: str, fn: Any, args: Tuple[Any, ...]) -> None:
        delivery = item[0]
        try:
            status = fn(delivery._ptr, *args)
            outcome: Optional[BaseException] = None
            if status != lib.LQ_OK:
                outcome = last_error(status, "%s of row %d" % (what, delivery.id))
        except BaseException as e:  # noqa: BLE001
            outcome = e
        _report([item], [outcome], what)


def _ack_all(batch: List[_Item]) -> List[Optional[BaseException]]:
    """Acks a batch in one call; each delivery's outcome (None: acked)."""
    count = len(batch)
    pointers = ffi.new("lq_delivery *[]", [item[0]._ptr for item in batch])
    statuses = ffi.new("int[]", [-1] * count)
    first = lib.lq_deliveries_ack(statuses, pointers, count)
    first_error = last_error(first, "ack") if first != lib.LQ_OK else None
    outcomes: List[Optional[BaseException]] = []
    for i, item in enumerate(batch):
        status = statuses[i]
        if status == -1:  # refused as a set (one settled already): each on its own
            status = lib.lq_delivery_ack(pointers[i])
            if status != lib.LQ_OK:
                outcomes.append(last_error(status, "ack of row %d" % item[0].id))
                continue
        if status == lib.LQ_OK:
            outcomes.append(None)
        elif first_error is not None and status == first:
            outcomes.append(first_error)
            first_error = None
        else:
            outcomes.append(make_error(status, "ack of row %d: %s" % (
                item[0].id, text(lib.lq_status_describe(status)))))
    return outcomes


def _report(batch: List[_Item], outcomes: List[Optional[BaseException]], what: str) -> None:
    """Gives each outcome to its loop, one wake-up per loop."""
    by_loop: Dict[asyncio.AbstractEventLoop, List[Tuple[_Item, Optional[BaseException]]]] = {}
    for item, outcome in zip(batch, outcomes):
        by_loop.setdefault(item[2], []).append((item, outcome))
    for loop, done in by_loop.items():
        try:
            loop.call_soon_threadsafe(_finish, done, what)
        except RuntimeError:  # the loop is closed: finish here
            _finish(done, what)


def _finish(done: List[Tuple[_Item, Optional[BaseException]]], what: str) -> None:
    for (delivery, future, _loop), outcome in done:
        delivery._settled_off_loop()
        if future.done():
            continue
        if outcome is None:
            future.set_result(None)
        else:
            future.set_exception(outcome)
