"""Locks against a real server: exclusion, wake-ups, fences, fencing, close."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, List

import pytest

import simba

from conftest import Database, eventually


def test_lock_and_unlock(db: Database, name: str) -> None:
    c = db.client()
    lk = c.lock(name)
    assert not lk.is_owner() and lk.lease is None and lk.fence == 0
    assert lk.acquire() is True
    lease = lk.lease
    assert lease is not None and lk.is_owner()
    assert lease.name == name and lease.contender_id == lk.contender_id and lease.fence > 0
    assert lease.remaining() > c.session_ttl  # the session's lease, less the margin
    assert db.owner(name) == (lk.contender_id, lease.fence)
    # under the client's session, as the server sees it
    sess = db.admin.execute("SELECT session_id::text FROM simba_mutex_status WHERE mutex = %s", (name,)).fetchone()
    assert sess == (c.session_id,)
    lk.release()
    assert not lk.is_owner() and lk.lease is None
    assert db.owner(name)[0] is None
    with pytest.raises(simba.IllegalStateError):
        lk.release()


def test_with_gives_the_lease_and_releases(db: Database, name: str) -> None:
    c = db.client()
    lk = c.lock(name, timeout=5)
    with lk as lease:
        assert isinstance(lease, simba.Lease) and lease.fence == lk.fence
        assert lease.acquired_at.tzinfo is not None
        assert abs((lease.acquired_at - db.admin.execute("SELECT now()").fetchone()[0]).total_seconds()) < 5
    assert db.owner(name)[0] is None


def test_not_reentrant_and_a_mutex_within_the_process(db: Database, name: str) -> None:
    c = db.client()
    lk = c.lock(name)
    assert lk.acquire()
    with pytest.raises(simba.IllegalStateError):
        lk.acquire()
    assert lk.acquire(blocking=False) is False
    got: List[Any] = []

    def other() -> None:
        got.append(lk.acquire(blocking=False))
        t0 = time.monotonic()
        got.append(lk.acquire(timeout=0.3))
        got.append(time.monotonic() - t0)
        try:
            lk.release()
        except simba.IllegalStateError as e:
            got.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got[0] is False and got[1] is False and got[2] >= 0.3
    assert isinstance(got[3], simba.IllegalStateError)  # not the holding thread
    assert lk.is_owner()
    lk.release()


def test_other_client_times_out_and_with_raises(db: Database, name: str) -> None:
    a, b = db.client(), db.client()
    la = a.lock(name)
    assert la.acquire()
    lb = b.lock(name, timeout=0.4)
    assert lb.acquire(blocking=False) is False
    t0 = time.monotonic()
    assert lb.acquire(timeout=0.5) is False
    assert time.monotonic() - t0 >= 0.5
    with pytest.raises(simba.LockTimeoutError):
        with lb:
            pass
    la.release()
    assert lb.acquire(blocking=False) is True
    lb.release()


def test_two_clients_exclude_each_other(db: Database, name: str) -> None:
    clients = [db.client(), db.client()]
    inside = 0
    peak = 0
    fences: List[int] = []
    errors: List[BaseException] = []
    m = threading.Lock()
    iterations = int(os.environ.get("SIMBA_PY_ITERATIONS", "40"))  # more for a soak

    def worker(c: simba.Client) -> None:
        nonlocal inside, peak
        lk = c.lock(name)
        try:
            for _ in range(iterations):
                with lk as lease:
                    with m:
                        inside += 1
                        peak = max(peak, inside)
                        fences.append(lease.fence)
                    time.sleep(0.001)  # hold it a moment: a real critical section
                    with m:
                        inside -= 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(clients[i % 2],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert len(fences) == 4 * iterations
    assert peak == 1
    # each hold is a new tenure: fences strictly increase in the order of the holds
    assert all(x < y for x, y in zip(fences, fences[1:]))


def test_waiter_woken_promptly_by_release(db: Database, name: str) -> None:
    holder, waiter = db.client(), db.client()  # leases of 16 s: only a NOTIFY wakes within
    lh = holder.lock(name)
    assert lh.acquire()
    lw = waiter.lock(name)
    got = threading.Event()
    started = threading.Event()

    owner: List[bool] = []
    done = threading.Event()

    def wait() -> None:
        started.set()
        if lw.acquire(timeout=30):
            got.set()
            done.wait(10)
            owner.append(lw.is_owner())
            lw.release()  # by the holding thread

    t = threading.Thread(target=wait)
    t.start()
    started.wait()
    # the waiter has attempted once and is waiting (it registered its wait)
    assert eventually(lambda: db.admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834").fetchone()[0] > 0, 5)
    assert not got.is_set()
    t0 = time.monotonic()
    lh.release()
    assert got.wait(10)
    took = time.monotonic() - t0
    done.set()
    t.join()
    assert took < 1.0, took  # the lease would have lasted 16 s
    assert owner == [True]


def test_fence_strictly_increases_across_holders(db: Database, name: str) -> None:
    clients = [db.client(), db.client(), db.client()]
    fences = []
    for i in range(9):
        lk = clients[i % 3].lock(name)
        with lk as lease:
            fences.append(lease.fence)
    assert all(x < y for x, y in zip(fences, fences[1:]))


def test_fence_check(db: Database, name: str) -> None:
    c = db.client()
    lk = c.lock(name)
    db.admin.execute('CREATE TABLE IF NOT EXISTS writes (n int, fence bigint)')
    db.admin.execute(f'GRANT ALL ON writes TO "{db.role}"')
    with db.app_connection() as conn:
        with lk as first:
            with conn.transaction():
                with conn.cursor() as cur:
                    simba.fence_check(cur, first)
                    cur.execute("INSERT INTO writes VALUES (1, %s)", (first.fence,))
            with conn.transaction():
                simba.fence_check(conn, lk)  # a Lock: its lease now
        with lk as second:
            assert second.fence > first.fence
            with pytest.raises(simba.StaleFenceError) as ei:
                with conn.transaction():
                    with conn.cursor() as cur:
                        simba.fence_check(cur, first)
                        cur.execute("INSERT INTO writes VALUES (2, %s)", (first.fence,))
            assert ei.value.sqlstate == "SB002"
        # released: the holder holds nothing
        with pytest.raises(simba.NotOwnerError) as ei2:
            with conn.transaction():
                simba.fence_check(conn, second)
        assert ei2.value.sqlstate == "SB001"
        with pytest.raises(simba.NotOwnerError):
            simba.fence_check(conn, lk)  # no round trip: the Lock holds nothing
    assert db.admin.execute("SELECT array_agg(n ORDER BY n) FROM writes").fetchone()[0] == [1]


def test_close_releases_at_once(db: Database, name: str) -> None:
    a, b = db.client(), db.client()
    la = a.lock(name)
    assert la.acquire()
    lb = b.lock(name)
    got = threading.Event()
    release = threading.Event()

    def wait() -> None:
        if lb.acquire(timeout=30):
            got.set()
            release.wait(10)
            lb.release()

    t = threading.Thread(target=wait)
    t.start()
    assert eventually(lambda: db.admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834").fetchone()[0] > 0, 5)
    sid = a.session_id
    t0 = time.monotonic()
    a.close()
    assert got.wait(10)
    took = time.monotonic() - t0
    release.set()
    t.join()
    assert took < 1.5, took  # the lease was 16 s
    assert not la.is_owner()
    la.release()  # ends the hold close() ended; no error
    assert db.admin.execute("SELECT count(*) FROM simba_session_status WHERE session_id = %s",
                            (sid,)).fetchone()[0] == 0
    with pytest.raises(simba.IllegalStateError):
        la.acquire()


def test_close_cancels_waiters(db: Database, name: str) -> None:
    a, b = db.client(), db.client()
    assert a.lock(name).acquire()
    lb = b.lock(name)
    out: List[Any] = []
    t = threading.Thread(target=lambda: out.append(pytest.raises(simba.CancelledError, lb.acquire)))
    t.start()
    assert eventually(lambda: db.admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834").fetchone()[0] > 0, 5)
    b.close()
    t.join(10)
    assert not t.is_alive() and out


def test_close_leaves_no_threads_and_no_backends(db: Database) -> None:
    before = {t.ident for t in threading.enumerate()}
    c = db.client()
    app = c.application_name
    backends = lambda: db.admin.execute(  # noqa: E731
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchone()[0]
    assert backends() == 2  # statements and LISTEN
    mine = [t for t in threading.enumerate() if t.ident not in before]
    assert sorted(t.name for t in mine) == ["simba-events", "simba-io", "simba-listen"]
    c.close()
    assert not any(t.is_alive() for t in mine)
    assert eventually(lambda: backends() == 0, 5)
    c.close()  # idempotent


def test_waiters_poll_without_listen_and_never_spin(db: Database, name: str) -> None:
    """listen=False: no NOTIFY, the poll backstop (the holder's lease end plus
    jitter) gets the lock, with a handful of attempts, not a busy loop."""
    db.admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    short = dict(session_ttl=1.0, session_transition=0.5)
    holder = db.client(**short)
    waiter = db.client(listen=False, **short)
    lh = holder.lock(name)
    assert lh.acquire()
    lw = waiter.lock(name)
    attempts = lambda: db.admin.execute(  # noqa: E731
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '%%simba_acquire(%%'"
        " AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchone()[0]
    before = attempts()
    out: List[Any] = []

    def wait() -> None:
        t0 = time.monotonic()
        ok = lw.acquire(timeout=20)
        out.append((ok, time.monotonic() - t0))
        if ok:
            lw.release()

    t = threading.Thread(target=wait)
    t.start()
    # the waiter lost its first attempt and waits; then the holder releases
    assert eventually(lambda: attempts() > before, 5)
    lh.release()
    t.join(30)
    assert out and out[0][0] is True
    # woken by a poll: at the holder's session end (1.5 s after its last
    # keepalive) plus jitter in [-0.2, 1.0) s, never by a NOTIFY
    assert out[0][1] < 1.5 + 1.0 + 1.0
    assert attempts() - before <= 6
