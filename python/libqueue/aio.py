"""asyncio for pulled subscriptions.

Waits go through the core's readiness descriptor (``lq_subscription_fd``),
watched with the loop's reader: no thread per wait and no polling. The
descriptor is level-triggered, so a reader that takes what is ready and
finds nothing more simply waits again. The ack after a ``run_async``
handler goes to the core's acker thread (``lq_delivery_ack_behind``) where
the form lets acks go behind, straight from the loop: no thread of ours, no
future. Other settlements run off the loop on a few threads of the
subscription's own, acks gathered into one ``lq_deliveries_ack`` per turn
(one statement and one commit where the form allows), and their outcomes
come back to the loop with one wake-up per turn.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Deque, Dict, List, Optional, Set, Tuple

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


# -- handlers -------------------------------------------------------------------

#: How often running handlers are looked at for a run that passed
#: timeout_ms or a row cancelled: a quarter of timeout_ms, within these.
_WATCH_MIN_S = 0.01
_WATCH_MAX_S = 0.25


def watch_interval(timeout_ms: int) -> float:
    if timeout_ms > 0:
        return min(_WATCH_MAX_S, max(_WATCH_MIN_S, timeout_ms / 4000.0))
    return _WATCH_MAX_S


async def run_handlers(subscription: "Subscription",
                       handler: Callable[["Delivery"], Awaitable[Any]],
                       concurrency: int) -> None:
    """The loop of ``Subscription.run_async``. While every slot is busy the
    handler that ends starts the next delivery ready in its slot at once,
    from a take of up to ``concurrency`` deliveries in one call; the acks of
    the handlers that end in one turn of the loop go to the core's acker
    together at its end. The loop below waits on the descriptor only while
    a slot is free and none is ready."""
    loop = asyncio.get_running_loop()
    acks_behind = subscription._acks_behind()
    # The pulls' buffers, one call taking every delivery ready for the free slots.
    ready_out = ffi.new("lq_delivery *[]", concurrency)
    ready_count = ffi.new("size_t *")
    take_ready = subscription._take_ready
    # Deliveries taken and not started yet: one take serves the next slots
    # that come free, each refilled as its handler ends.
    taken: Deque["Delivery"] = collections.deque()
    # Acks of the handlers that returned this turn, handed on at its end.
    acks: List["Delivery"] = []
    turn_end_due = False
    running: Dict["Delivery", asyncio.Task] = {}
    given_up: Dict["Delivery", str] = {}
    behind: Set[asyncio.Future] = set()  # settlements behind the handlers, off the loop
    interval = watch_interval(subscription._timeout_ms)
    watcher: Optional[asyncio.TimerHandle] = None
    # Set while every slot is busy: the handler that ends wakes the loop
    # below when it leaves its slot free (none was ready), or a pull failed.
    slot_free: Optional[asyncio.Future] = None
    ending = False

    def watch() -> None:
        nonlocal watcher
        watcher = None
        for delivery, task in list(running.items()):
            if delivery in given_up or task.done() or not delivery.alive:
                continue
            why = ("its run passed timeout_ms" if delivery.expired
                   else "its row was cancelled" if delivery.cancelled else None)
            if why:
                given_up[delivery] = why
                task.cancel()
        if running:
            watcher = loop.call_later(interval, watch)

    # A task of the loop's own for each run; the Task class at once where the
    # loop has no task factory (create_task's checks, once for the run).
    new_task: Callable[[Any], asyncio.Task] = (
        functools.partial(asyncio.Task, loop=loop) if loop.get_task_factory() is None
        else loop.create_task)

    def start(delivery: "Delivery") -> None:
        nonlocal watcher
        running[delivery] = new_task(handle(delivery))
        if watcher is None:
            watcher = loop.call_later(interval, watch)

    def fill() -> None:
        """Starts deliveries ready now in the free slots."""
        while len(running) < concurrency:
            if not taken:
                taken.extend(take_ready(ready_out, concurrency, ready_count))
                if not taken:
                    return
            start(taken.popleft())

    def hand_on_acks() -> None:
        if acks:
            batch = acks[:]
            del acks[:]
            _ack_behind_all(batch)

    def turn_end() -> None:
        """After the handlers that ended in a turn: their acks go on."""
        nonlocal turn_end_due
        turn_end_due = False
        hand_on_acks()

    def settled_behind(future: asyncio.Future) -> None:
        behind.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.warning("settling after an async handler: %s", future.exception())

    def settle(delivery: "Delivery", failed: bool) -> None:
        """Behind the handler, as the core's acker does: the slot is free at once."""
        if not failed and acks_behind:
            # Settled now, as far as anyone asks; its release waits for the
            # hand-over at the turn's end.
            delivery._settled = delivery._settling = True
            acks.append(delivery)
            return
        future = delivery._settle_behind(failed)
        behind.add(future)
        future.add_done_callback(settled_behind)

    def slot_left(delivery: "Delivery") -> None:
        nonlocal turn_end_due
        running.pop(delivery, None)
        if given_up:
            given_up.pop(delivery, None)
        delivery.release()  # after a settlement behind, once that is done
        if acks and not turn_end_due:
            turn_end_due = True
            loop.call_soon(turn_end)
        waiting = slot_free
        if ending or waiting is None or waiting.done():
            return
        try:
            fill()
        except BaseException as e:  # noqa: BLE001 - the loop below raises it
            waiting.set_exception(e)
            return
        if len(running) < concurrency:
            waiting.set_result(None)

    async def handle(delivery: "Delivery") -> None:
        try:
            try:
                await handler(delivery)
                failed = False
            except asyncio.CancelledError:
                why = given_up.get(delivery)
                if why is None:
                    raise  # run_async was cancelled: the row goes back unsettled
                logger.info("handler %s cancelled on row %d of %r: %s", _name(handler),
                            delivery.id, subscription.table.name, why)
                if delivery.alive and not delivery.settled:
                    # Counts it out; the row went back or away already (LeaseLost, Cancelled).
                    future = delivery._settle_behind(True)
                    behind.add(future)
                    future.add_done_callback(behind.discard)
                    future.add_done_callback(_quiet)
                return
            except Exception:
                logger.exception("handler %s raised on row %d of %r; the row is retried, or "
                                 "dead-lettered at max_attempts", _name(handler), delivery.id,
                                 subscription.table.name)
                failed = True
            # Alive and unsettled (the slots read, on every run's path).
            if delivery._dead is None and not delivery._settled:
                settle(delivery, failed)
        finally:
            slot_left(delivery)

    try:
        while True:
            try:
                fill()
                if len(running) >= concurrency:
                    slot_free = loop.create_future()
                    try:
                        await slot_free
                    finally:
                        slot_free = None
                    continue
                delivery = await subscription.anext()
            except BaseException as e:
                if getattr(e, "status", None) == lib.LQ_CLOSED:
                    break
                raise
            if delivery is not None:  # None without a timeout: kept for safety
                start(delivery)
    except asyncio.CancelledError:
        ending = True
        for task in running.values():
            task.cancel()
        raise
    finally:
        ending = True
        while taken:  # back to the queue, unspent
            taken.popleft().release()
        hand_on_acks()
        if running:
            await asyncio.gather(*running.values(), return_exceptions=True)
            hand_on_acks()
        if behind:
            await asyncio.gather(*behind, return_exceptions=True)
        if watcher is not None:
            watcher.cancel()


def _ack_behind_all(deliveries: List["Delivery"]) -> None:
    """The acks of async handlers that returned, handed to the core's acker
    thread in one call (``lq_deliveries_ack_behind``); then the releases
    asked for meanwhile. A failure of an ack is logged, as after a push
    handler."""
    count = len(deliveries)
    try:
        pointers = ffi.new("lq_delivery *[]", [d._ptr for d in deliveries])
        statuses = ffi.new("int[]", count)
        first = lib.lq_deliveries_ack_behind(statuses, pointers, count)
        if first == lib.LQ_MISUSE:  # refused as a set (one settled meanwhile): each on its own
            for delivery in deliveries:
                delivery._ack_behind()
        elif first != lib.LQ_OK:  # acked here (the acker stopped), and some failed
            failed = [d.id for d, status in zip(deliveries, statuses) if status != lib.LQ_OK]
            logger.warning("settling after an async handler: %s",
                           last_error(first, "ack of rows %s" % failed))
    finally:
        for delivery in deliveries:
            delivery._settled_off_loop()


def _quiet(future: asyncio.Future) -> None:
    """Retrieves a given-up run's settlement outcome, which tells nothing new."""
    if not future.cancelled():
        future.exception()


def _name(handler: Any) -> str:
    return getattr(handler, "__qualname__", repr(handler))
