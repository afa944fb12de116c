"""The counting semaphore: at most ``permits`` holders of a key across
clients, permits under the session (kept by its keepalive, lost with it),
waiters woken by a release, bad input refused before anything is sent."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

import simba

from conftest import Database, eventually

SHORT = dict(session_ttl=1.5, session_transition=1.0, reconnect_initial=0.05, reconnect_max=0.2)


def held_on_server(db: Database, key: str) -> int:
    return db.admin.execute("SELECT count(*) FROM simba_semaphore_status WHERE key = %s AND time_left > '0'",
                            (key,)).fetchone()[0]


def test_at_most_permits_holders_and_a_release_frees_one(db: Database, name: str) -> None:
    a, b = db.client(), db.client()
    sa, sb = a.semaphore(name, 2), b.semaphore(name, 2)
    p1, p2 = sa.acquire(), sb.acquire()
    assert p1 is not None and p2 is not None
    assert p1.is_owner() and p2.is_owner() and p1.token != p2.token
    assert p1.fence > 0 and p2.fence > 0 and p1.fence != p2.fence
    fences = (p1.fence, p2.fence)
    assert sb.acquire(blocking=False) is None  # both permits taken
    assert sa.acquire(timeout=0.3) is None
    p1.release()
    assert not p1.is_owner() and p1.lease is None and p1.fence == 0
    p3 = sb.acquire(blocking=False)
    assert p3 is not None and p3.fence > max(fences)
    for p in (p2, p3):
        p.release()
    assert sa.acquire(blocking=False) is not None  # free again


def test_with_holds_for_the_block_and_times_out(db: Database, name: str) -> None:
    c, other = db.client(), db.client()
    sem = c.semaphore(name, 1, timeout=0.3)
    with sem as permit:
        assert isinstance(permit, simba.Permit) and permit.is_owner()
        fence = permit.fence
        with pytest.raises(simba.LockTimeoutError):
            with other.semaphore(name, 1, timeout=0.3):
                pass
    assert not permit.is_owner()
    with other.semaphore(name, 1, timeout=5) as again:  # released by the block's end
        assert again.fence > fence


def test_a_waiter_is_woken_by_a_release(db: Database, name: str) -> None:
    holder, waiter = db.client(), db.client()
    held = holder.semaphore(name, 1).acquire()
    assert held is not None
    fence = held.fence
    got: List[int] = []
    t0: List[float] = []

    def wait() -> None:
        p = waiter.semaphore(name, 1).acquire(timeout=30)
        if p is not None:
            t0.append(time.monotonic())
            got.append(p.fence)
            p.release()  # by the acquiring thread

    t = threading.Thread(target=wait)
    t.start()
    # the waiter has attempted once and registered its wait
    assert eventually(lambda: db.admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834").fetchone()[0] > 0, 5)
    released = time.monotonic()
    held.release()
    t.join(30)
    assert len(got) == 1 and got[0] > fence
    assert t0[0] - released < 0.9  # woken by the NOTIFY, before its 1 s poll


def test_concurrent_holders_never_exceed_permits(db: Database, name: str) -> None:
    """Six threads on three clients, two permits: never three at once, here
    or on the server, and both permits are used."""
    clients = [db.client() for _ in range(3)]
    mu = threading.Lock()
    now_holding = [0]
    most = [0]
    server_most = [0]
    errors: List[BaseException] = []

    def work(c: simba.Client) -> None:
        sem = c.semaphore(name, 2)
        try:
            for _ in range(8):
                with sem:
                    with mu:
                        now_holding[0] += 1
                        most[0] = max(most[0], now_holding[0])
                    n = held_on_server(db, name)
                    with mu:
                        server_most[0] = max(server_most[0], n)
                    time.sleep(0.01)  # a short hold, so that holds overlap
                    with mu:
                        now_holding[0] -= 1
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(clients[i % 3],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert most[0] == 2 and server_most[0] <= 2, (most, server_most)
    assert held_on_server(db, name) == 0


def test_session_closed_elsewhere_loses_every_permit(db: Database, name: str) -> None:
    c = db.client(**SHORT)
    lost: List[simba.Lease] = []
    sem = c.semaphore(name, 3, on_lost=lost.append)
    permits = [sem.acquire(), sem.acquire()]
    assert all(p is not None and p.is_owner() for p in permits)
    fences = [p.fence for p in permits if p]
    sid = c.session_id
    with db.app_connection() as conn:
        assert conn.execute("SELECT simba_session_close(%s::uuid)", (sid,)).fetchone()[0] == 2
    assert eventually(lambda: len(lost) == 2, 10)
    assert not any(p.is_owner() for p in permits)  # loss is final
    assert held_on_server(db, name) == 0
    for p in permits:
        p.release()
    again = sem.acquire(timeout=5)
    assert again is not None and again.fence > max(fences) and c.session_id != sid
    again.release()


def test_kept_by_the_keepalive_past_many_leases(db: Database, name: str) -> None:
    c = db.client(**SHORT)
    p = c.semaphore(name, 1).acquire()
    assert p is not None
    fence = p.fence
    end = time.monotonic() + 3 * (SHORT["session_ttl"] + SHORT["session_transition"])
    assert eventually(lambda: time.monotonic() >= end, 15, step=0.05)
    assert p.is_owner() and p.fence == fence and held_on_server(db, name) == 1
    p.release()
    assert held_on_server(db, name) == 0


def test_bad_input_is_refused_before_anything_is_sent(db: Database, name: str) -> None:
    c = db.client()
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(simba.InvalidArgumentError) as e:
            c.semaphore(name, bad)  # type: ignore[arg-type]
        assert e.value.sqlstate == "22023"
    with pytest.raises(simba.InvalidArgumentError):
        c.semaphore("", 1)
    with pytest.raises(simba.InvalidArgumentError):
        c.semaphore("x" * 257, 1)
    assert held_on_server(db, name) == 0
