"""The handlers of ``Subscription.run_async``: ``concurrency`` slots, each a
task of the loop that runs handlers one after another.

A slot takes the deliveries ready for the slots not inside a handler in one
call (``lq_subscription_try_next_batch``) and runs them in turn, each handler
awaited in the slot's task and run in a context of its own (a copy of the
context ``run_async`` was called in). A handler that returns without
suspending costs no task, no future and no turn of the loop. One that
suspends hands the deliveries taken to an idle slot, which runs the next.
Only while no slot is active does an idle one wait on the descriptor. A
turn of the loop starts at most 64 handlers and none once it has run for
1 ms, so a deep backlog never starves the loop's other tasks. The acks of a
take's handlers go to the core's acker together before the next take
(``lq_deliveries_ack_behind``), those of handlers that end later at the end
of their turn.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import inspect
import time
import types
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Deque, Dict, List, Optional, Set

from libqueue._ffi import ffi, lib
from libqueue.errors import last_error
from libqueue.logs import logger

if TYPE_CHECKING:
    from libqueue.delivery import Delivery
    from libqueue.subscription import Subscription

#: A turn of the loop starts handlers until this many started, or until
#: this long has passed since its first: then the loop's other tasks run.
_TURN_STARTS = 64
_TURN_S = 0.001

#: How often handlers waiting are looked at for a run that passed
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
    """The loop of ``Subscription.run_async``: until the subscription is
    stopped or closed, then until the handlers running end."""
    loop = asyncio.get_running_loop()
    slots = _Slots(subscription, handler, concurrency, loop)
    name = "libqueue %s slot " % subscription.table.name
    tasks = [loop.create_task(slots.slot(), name=name + str(i)) for i in range(concurrency)]
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        slots.ending = True  # before the slots see it: theirs to end on, not to survive
        for task in tasks:
            task.cancel()
        raise
    finally:
        slots.end()
        if not all(task.done() for task in tasks):
            await asyncio.wait(tasks)
        for task in tasks:  # retrieved: a slot's own failure is slots.failure
            if not task.cancelled():
                task.exception()
        await slots.settle_rest()
    if slots.failure is not None:
        raise slots.failure


class _Slots:
    """What the slots of one ``run_async`` share."""

    def __init__(self, subscription: "Subscription",
                 handler: Callable[["Delivery"], Awaitable[Any]],
                 concurrency: int, loop: asyncio.AbstractEventLoop) -> None:
        self.subscription = subscription
        self.handler = (handler if inspect.iscoroutinefunction(handler)
                        else functools.partial(_awaited, handler))
        self.concurrency = concurrency
        self.loop = loop
        # Each handler's context starts as a copy of this one.
        self.context = contextvars.copy_context()
        self.acks_behind = subscription._acks_behind()
        self.take_ready = subscription._take_ready
        self.ready_out = ffi.new("lq_delivery *[]", concurrency)
        self.ready_count = ffi.new("size_t *")
        self.puller = subscription._puller(loop)
        # Deliveries taken and not started yet, for the next slots free.
        self.taken: Deque["Delivery"] = collections.deque()
        # Acks of the handlers that returned, handed on at the next take or
        # at the turn's end.
        self.acks: List["Delivery"] = []
        self.started = 0  # handlers started this turn
        self.turn_ends_at = 0.0  # when this turn has run long enough
        self.turn_end_due = False
        # Handlers that suspended and have not ended, and their slots' tasks.
        self.waiting: Dict["Delivery", asyncio.Task] = {}
        self.given_up: Dict["Delivery", str] = {}
        self.behind: Set[asyncio.Future] = set()  # settlements off the loop
        self.active = 0  # slots neither idle nor inside a suspended handler
        self.idle: Deque[asyncio.Future] = collections.deque()
        self.pulling: Optional[asyncio.Future] = None  # an idle slot's wait on the descriptor
        self.interval = watch_interval(subscription._timeout_ms)
        self.watcher: Optional[asyncio.TimerHandle] = None
        self.ending = False
        self.failure: Optional[BaseException] = None

    # -- a slot -------------------------------------------------------------------

    async def slot(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+
        self.active += 1
        try:
            while not self.ending:
                try:
                    delivery = None
                    if self.active == 1:  # the one slot that takes; others wait
                        if self.started and (self.started >= _TURN_STARTS
                                             or time.monotonic() >= self.turn_ends_at):
                            await asyncio.sleep(0)  # this turn is spent: the next's
                            continue
                        delivery = self.take()
                    if delivery is None:
                        delivery = await self.wait()
                        if delivery is None:
                            continue
                        if self.ending:  # came as the run ended: back to the queue
                            delivery.release()
                            break
                    await self.run(delivery, task)
                    if cancelling is not None and cancelling():
                        # A cancel the handler left pending lands here, not in the next.
                        await asyncio.sleep(0)
                except asyncio.CancelledError:
                    if self.ending:
                        raise
                    _uncancel(task)  # not run_async's: the slot goes on
                except Exception as e:  # noqa: BLE001 - Closed ends the run, others fail it
                    self.end(e)
        finally:
            self.active -= 1

    def take(self) -> Optional["Delivery"]:
        """The next delivery taken, taking those ready for the slots not
        inside a handler when none is left; None when none is ready."""
        taken = self.taken
        if not taken:
            # The acks of the last take's handlers go on first: the claims
            # go on meanwhile, as after push handlers.
            if self.acks:
                self.hand_on_acks()
            free = self.concurrency - len(self.waiting)
            taken.extend(self.take_ready(self.ready_out, free, self.ready_count))
            if not taken:
                return None
        return taken.popleft()

    async def wait(self) -> Optional["Delivery"]:
        """An idle slot's wait: on the descriptor while no other slot is
        active and none waits on it (a delivery, or None), else until a
        handler suspends with work left (None)."""
        self.active -= 1
        try:
            if self.active == 0 and self.pulling is None:
                future = self.pulling = self.puller.wait()
                try:
                    return await future
                except asyncio.CancelledError:
                    self.puller.abandon(future)
                    raise
                finally:
                    self.pulling = None
            future = self.loop.create_future()
            self.idle.append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future in self.idle:
                    self.idle.remove(future)
                raise
            return None
        finally:
            self.active += 1

    def hand_over(self) -> None:
        """A slot's handler suspended: an idle slot takes the deliveries
        taken, or the next ready when no slot is active."""
        if not self.taken and (self.active or self.pulling is not None):
            return
        while self.idle:
            future = self.idle.popleft()
            if not future.done():
                future.set_result(None)
                return
        if self.taken and self.pulling is not None:
            self.puller.end_wait(self.pulling)

    # -- a handler ----------------------------------------------------------------

    async def run(self, delivery: "Delivery", task: asyncio.Task) -> None:
        if not self.started:
            self.turn_ends_at = time.monotonic() + _TURN_S
        self.started += 1
        if not self.turn_end_due:
            self.turn_end_due = True
            self.loop.call_soon(self.turn_end)
        try:
            try:
                await _steps(self.context.copy(), self.handler(delivery), self, delivery, task)
                failed = False
            except asyncio.CancelledError:
                why = self.given_up.get(delivery)
                if why is None:
                    if self.ending:
                        raise  # run_async was cancelled: the row goes back unsettled
                    _uncancel(task)  # the handler's own: its row goes back unsettled
                    return
                logger.info("handler %s cancelled on row %d of %r: %s", _name(self.handler),
                            delivery.id, self.subscription.table.name, why)
                if delivery.alive and not delivery.settled:
                    # Counts it out; the row went back or away already (LeaseLost, Cancelled).
                    future = delivery._settle_behind(True)
                    self.behind.add(future)
                    future.add_done_callback(self.behind.discard)
                    future.add_done_callback(_quiet)
                return
            except Exception:
                logger.exception("handler %s raised on row %d of %r; the row is retried, or "
                                 "dead-lettered at max_attempts", _name(self.handler),
                                 delivery.id, self.subscription.table.name)
                failed = True
            # Alive and unsettled (the slots read, on every run's path).
            if delivery._dead is None and not delivery._settled:
                self.settle(delivery, failed)
        finally:
            if self.waiting:
                self.waiting.pop(delivery, None)
                if self.given_up and self.given_up.pop(delivery, None) is not None:
                    _uncancel(task)  # the watcher's cancel is spent on this run
            delivery.release()  # after a settlement behind, once that is done

    def suspending(self, delivery: "Delivery", task: asyncio.Task) -> None:
        """A handler awaits: its slot lets go of the loop."""
        self.active -= 1
        if delivery not in self.waiting:
            self.waiting[delivery] = task
            if self.watcher is None:
                self.watcher = self.loop.call_later(self.interval, self.watch)
        self.hand_over()

    def resumed(self) -> None:
        self.active += 1

    def watch(self) -> None:
        """Cancels the handlers whose run passed timeout_ms or whose row was
        cancelled; their slots' tasks wait inside them."""
        self.watcher = None
        for delivery, task in list(self.waiting.items()):
            if delivery in self.given_up or not delivery.alive:
                continue
            why = ("its run passed timeout_ms" if delivery.expired
                   else "its row was cancelled" if delivery.cancelled else None)
            if why:
                self.given_up[delivery] = why
                task.cancel()
        if self.waiting:
            self.watcher = self.loop.call_later(self.interval, self.watch)

    # -- settlements --------------------------------------------------------------

    def settle(self, delivery: "Delivery", failed: bool) -> None:
        """Behind the handler, as the core's acker does: the slot is free at once."""
        if not failed and self.acks_behind:
            # Settled now, as far as anyone asks; its release waits for the
            # hand-over at the turn's end.
            delivery._settled = delivery._settling = True
            self.acks.append(delivery)
            if not self.turn_end_due:
                self.turn_end_due = True
                self.loop.call_soon(self.turn_end)
            return
        future = delivery._settle_behind(failed)
        self.behind.add(future)
        future.add_done_callback(self.settled_behind)

    def settled_behind(self, future: asyncio.Future) -> None:
        self.behind.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.warning("settling after an async handler: %s", future.exception())

    def turn_end(self) -> None:
        """After the handlers of a turn: their acks go on, and the next turn
        may start as many."""
        self.turn_end_due = False
        self.started = 0
        self.hand_on_acks()

    def hand_on_acks(self) -> None:
        if self.acks:
            batch = self.acks[:]
            del self.acks[:]
            _ack_behind_all(batch)

    # -- the end ------------------------------------------------------------------

    def end(self, error: Optional[BaseException] = None) -> None:
        """No slot starts another handler: idle ones end now, the others as
        their handlers end. A failure other than Closed ends run_async."""
        if (error is not None and getattr(error, "status", None) != lib.LQ_CLOSED
                and self.failure is None):
            self.failure = error
        self.ending = True
        while self.idle:
            future = self.idle.popleft()
            if not future.done():
                future.set_result(None)
        if self.pulling is not None:
            self.puller.end_wait(self.pulling)

    async def settle_rest(self) -> None:
        """Once every slot ended: what was taken goes back unspent, the acks
        go on, and the settlements behind are waited for."""
        while self.taken:
            self.taken.popleft().release()
        self.hand_on_acks()
        if self.behind:
            await asyncio.gather(*self.behind, return_exceptions=True)
        if self.watcher is not None:
            self.watcher.cancel()


@types.coroutine
def _steps(context: contextvars.Context, coroutine: Any, slots: _Slots,
           delivery: "Delivery", task: asyncio.Task) -> Any:
    """Awaits a handler's coroutine with each of its steps run in
    `context`, telling the slots when it suspends and resumes."""
    send, throw = coroutine.send, coroutine.throw
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            if error is None:
                yielded = context.run(send, value)
            else:
                yielded = context.run(throw, error)
        except StopIteration as stop:
            return stop.value
        slots.suspending(delivery, task)
        try:
            value, error = (yield yielded), None
        except BaseException as e:  # noqa: BLE001 - thrown in by the task (a cancellation)
            value, error = None, e
        slots.resumed()


async def _awaited(handler: Callable[["Delivery"], Awaitable[Any]], delivery: "Delivery") -> Any:
    """A handler that is not an ``async def`` (a callable returning an awaitable)."""
    return await handler(delivery)


def _uncancel(task: asyncio.Task) -> None:
    """A cancellation of the slot's task that was dealt with: its count goes
    back (asyncio.timeout and TaskGroup in later handlers read it)."""
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+
    if uncancel is not None and task.cancelling():
        uncancel()


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
    if isinstance(handler, functools.partial) and handler.func is _awaited:
        handler = handler.args[0]
    return getattr(handler, "__qualname__", repr(handler))
