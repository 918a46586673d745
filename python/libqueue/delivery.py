"""``Delivery``: one claimed row, handed out by a subscription."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Dict, Optional, Union

from libqueue._ffi import ctext, ffi, lib, text
from libqueue.errors import check, last_error, make_error
from libqueue.logs import logger
from libqueue.options import int_argument

if TYPE_CHECKING:
    import asyncio

__all__ = ["Delivery"]

_UNSET: Any = object()

_payload_of = lib.lq_delivery_payload
_payload_size = lib.lq_delivery_payload_size
_buffer = ffi.buffer


class Delivery:
    """One claimed row.

    Settle it once with ``ack()``, ``retry()``, ``retry_after(ms)`` or
    ``dead_letter()``.

    *Pulled* deliveries (from ``Subscription.next``) are owned: release them
    with ``release()``/``close()`` or a ``with`` block (else the garbage
    collector does). One released unsettled goes back to the queue at once,
    with no attempt spent.

    *Pushed* deliveries (given to a ``run`` handler) are borrowed: they die when
    the handler returns, and any later use raises ``Misuse``.

    In asyncio code, ``await ack_async()``, ``retry_async()``,
    ``retry_after_async(ms)`` and ``dead_letter_async()`` settle a pulled
    delivery on a thread of the subscription's own and never block the loop.
    """

    __slots__ = ("_ptr", "_owned", "_dead", "_subscription", "_settled",
                 "_id", "_payload", "_attempt", "_group", "_partition_key", "_headers",
                 "_settling", "_kill_later", "__weakref__")

    def __init__(self, pointer: Any, subscription: Any, owned: bool, payload: Any = _UNSET) -> None:
        """`payload`: the payload's bytes where the caller has them already
        (else read when asked for)."""
        if owned:
            pointer = ffi.gc(pointer, lib.lq_delivery_free)
        self._ptr = pointer  # None once dead
        self._owned = owned
        self._dead: Optional[str] = None
        self._subscription = subscription  # keeps the subscription alive while held
        self._settled = False
        # A settlement off the loop is in flight: a release waits for it.
        self._settling = False
        self._kill_later: Optional[str] = None
        self._payload = payload
        self._id = self._attempt = self._group = self._partition_key = self._headers = _UNSET

    # -- life -------------------------------------------------------------

    def _live(self) -> Any:
        pointer = self._ptr
        if pointer is None:
            raise self._used_dead()
        return pointer

    def _used_dead(self) -> Exception:
        return make_error(lib.LQ_MISUSE, "delivery used after %s" % self._dead)

    def _kill(self, why: str) -> None:
        """Mark dead: later use raises instead of touching freed memory."""
        if self._settling:
            self._kill_later = why
            return
        if self._dead is None:
            self._dead = why
            if self._owned:
                ffi.release(self._ptr)
            self._ptr = None

    def release(self) -> None:
        """Free a pulled delivery now (idempotent). Unsettled, it goes back to
        the queue at once. For a pushed delivery this does nothing: the core
        frees it when the handler returns."""
        if self._owned:
            self._kill("it was released")

    close = release

    @property
    def alive(self) -> bool:
        """False once released (pulled) or once its handler returned (pushed)."""
        return self._dead is None

    @property
    def pulled(self) -> bool:
        """True for a delivery from ``Subscription.next`` (owned by the caller)."""
        return self._owned

    @property
    def settled(self) -> bool:
        """True once settled through this object."""
        return self._settled

    def __enter__(self) -> "Delivery":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- the row ----------------------------------------------------------

    @property
    def id(self) -> int:
        """The row's id."""
        pointer = self._live()
        if self._id is _UNSET:
            self._id = int(lib.lq_delivery_id(pointer))
        return self._id

    @property
    def payload(self) -> bytes:
        """The payload (``b""`` when the table has no payload column)."""
        # The one getter nearly every handler calls: kept to the fewest steps.
        pointer = self._ptr
        if pointer is None:
            raise self._used_dead()
        payload = self._payload
        if payload is _UNSET:
            size = _payload_size(pointer)
            payload = self._payload = bytes(_buffer(_payload_of(pointer), size)) if size else b""
        return payload

    @property
    def attempt(self) -> int:
        """The attempt counted before this claim (first delivery: 1; 0 without
        an attempt column)."""
        pointer = self._live()
        if self._attempt is _UNSET:
            self._attempt = int(lib.lq_delivery_attempt(pointer))
        return self._attempt

    @property
    def group(self) -> Optional[str]:
        """The row's group, or None."""
        pointer = self._live()
        if self._group is _UNSET:
            g = lib.lq_delivery_group(pointer)
            self._group = None if g == ffi.NULL else text(g)
        return self._group

    @property
    def partition_key(self) -> Optional[str]:
        """The row's partition key, or None."""
        pointer = self._live()
        if self._partition_key is _UNSET:
            k = lib.lq_delivery_partition_key(pointer)
            self._partition_key = None if k == ffi.NULL else text(k)
        return self._partition_key

    @property
    def headers(self) -> Dict[str, str]:
        """The row's headers (a new dict each time)."""
        p = self._live()
        if self._headers is _UNSET:
            name = ffi.new("const char **")
            value = ffi.new("const char **")
            headers: Dict[str, str] = {}
            for i in range(lib.lq_delivery_header_count(p)):
                check(lib.lq_delivery_header_at(name, value, p, i), "header %d" % i)
                headers[text(name[0])] = text(value[0])
            self._headers = headers
        return dict(self._headers)

    @property
    def expired(self) -> bool:
        """Whether the run passed the subscription's ``timeout_ms`` and its row
        went back: the handler may give up, as its settlement will change
        nothing (``LeaseLost``)."""
        return bool(lib.lq_delivery_expired(self._live()))

    @property
    def cancelled(self) -> bool:
        """Whether the row was cancelled while this run held it
        (``Broker.cancel``): seen at a lease extension in the lease form, at
        the settlement in the advisory form. The handler may give up, as its
        settlement will change nothing (``Cancelled``)."""
        return bool(lib.lq_delivery_cancelled(self._live()))

    @property
    def lease_expiry_ms(self) -> int:
        """The lease expiry, ms since the epoch (lease form), or 0. Changes when
        the core extends the lease."""
        return int(lib.lq_delivery_lease_expiry_ms(self._live()))

    # -- the handler's own writes (transactional mode) -------------------------

    def execute(self, sql: str, *params: Union[str, int, float, None]) -> int:
        """Run one statement of the handler's own in the delivery's
        transaction (subscriptions opened with ``transactional=1``); returns
        the rows it changed. Parameters use the database's own placeholders
        (``?`` on SQLite and MySQL, ``$1`` on PostgreSQL) and go as text
        (``None`` is NULL). An ack commits these writes with the settlement;
        every other outcome rolls them back. Outside transactional mode this
        raises ``Misuse``."""
        texts = []
        for value in params:
            if value is None:
                texts.append(ffi.NULL)
            elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise TypeError("parameters are str, int, float or None, got %s"
                                % type(value).__name__)
            else:
                texts.append(ffi.new("char[]", ctext(str(value))))
        array = ffi.new("const char *[]", texts) if texts else ffi.NULL
        changes = ffi.new("int64_t *")
        check(lib.lq_delivery_exec(changes, self._live(), ctext(sql), array, len(texts)),
              "execute")
        return int(changes[0])

    # -- outcomes -----------------------------------------------------------

    def _settle(self, what: str, fn: Any, *args: Any) -> None:
        row = self.id  # read before: the error state must be the settlement's
        if self._settling:  # one off the loop, or an async handler's ack, is on its way
            raise make_error(lib.LQ_MISUSE, "%s of row %d: the delivery is settled already"
                             % (what, row))
        status = fn(self._live(), *args)
        # A failed settlement (LeaseLost, ...) still counts as the caller's
        # one settlement: the core refuses a second one with Misuse.
        self._settled = True
        check(status, "%s of row %d" % (what, row))

    def ack(self) -> None:
        """Finish the row: delete it, or set processed_at."""
        self._settle("ack", lib.lq_delivery_ack)

    def retry(self) -> None:
        """Return the row to the queue now."""
        self._settle("retry", lib.lq_delivery_retry)

    def retry_after(self, delay_ms: int) -> None:
        """Hide the row for ``delay_ms`` milliseconds (a plain retry, with a
        logged warning, when the table has no retry_after column)."""
        self._settle("retry_after", lib.lq_delivery_retry_after, int_argument("delay_ms", delay_ms))

    def dead_letter(self) -> None:
        """Move the row to the table's dead-letter destination."""
        self._settle("dead_letter", lib.lq_delivery_dead_letter)

    # -- outcomes off the event loop (asyncio) ----------------------------------

    def _off_loop(self, what: str, fn: Any = None, *args: Any) -> "asyncio.Future[None]":
        """Hands the settlement to the subscription's settling threads; the
        future (of the running loop) gets its outcome."""
        import asyncio

        loop = asyncio.get_running_loop()  # RuntimeError outside a loop, as asyncio says
        if not self._owned:
            raise make_error(lib.LQ_MISUSE, "%s_async is for pulled deliveries: a push handler "
                                            "runs on the core's threads, where %s() is right"
                             % (what, what))
        pointer = self._live()
        row = self.id
        if self._settled or self._settling:
            raise make_error(lib.LQ_MISUSE, "%s of row %d: the delivery is settled already"
                             % (what, row))
        settler = self._subscription._async_settler()
        future = loop.create_future()
        self._settled = self._settling = True
        lib.lq_delivery_handled(pointer)  # its worker counts free: claims go on meanwhile
        if fn is None:
            settler.ack((self, future, loop))
        else:
            settler.other((self, future, loop), what, fn, *args)
        return future

    def _settled_off_loop(self) -> None:
        """On the loop, once the settlement ran: a release asked for meanwhile
        happens now."""
        self._settling = False
        if self._kill_later is not None:
            self._kill(self._kill_later)

    def _ack_behind(self) -> None:
        """An async handler's ack, handed to the core's acker thread from the
        loop (``lq_delivery_ack_behind``; only where the subscription's acks
        go behind, so it never waits for the database). A failure of the ack
        itself the core logs, as after a push handler."""
        status = lib.lq_delivery_ack_behind(self._live())
        self._settled = True
        if status != lib.LQ_OK:
            logger.warning("settling after an async handler: %s",
                           last_error(status, "ack of row %d" % self.id))

    def _settle_behind(self, failed: bool) -> "asyncio.Future[None]":
        """An async handler's outcome: a retry when it raised, else an ack."""
        if failed:
            return self._off_loop("retry", lib.lq_delivery_retry)
        return self._off_loop("ack")

    def ack_async(self) -> Awaitable[None]:
        """``ack()`` off the event loop: returns an awaitable (a future of the
        running loop), and the ack starts at once. Acks handed over together
        commit as one statement where the form allows. A second settlement,
        or one of a pushed delivery, raises ``Misuse``."""
        return self._off_loop("ack")

    def retry_async(self) -> Awaitable[None]:
        """``retry()`` off the event loop (as ``ack_async``)."""
        return self._off_loop("retry", lib.lq_delivery_retry)

    def retry_after_async(self, delay_ms: int) -> Awaitable[None]:
        """``retry_after(delay_ms)`` off the event loop (as ``ack_async``)."""
        return self._off_loop("retry_after", lib.lq_delivery_retry_after, int_argument("delay_ms", delay_ms))

    def dead_letter_async(self) -> Awaitable[None]:
        """``dead_letter()`` off the event loop (as ``ack_async``)."""
        return self._off_loop("dead_letter", lib.lq_delivery_dead_letter)

    def __repr__(self) -> str:
        if self._dead is not None:
            return "<Delivery (dead: %s)>" % self._dead
        return "<Delivery id=%d attempt=%d%s>" % (
            self.id, self.attempt, " pulled" if self._owned else "")
