"""Failure paths: forced release, terminated backends, a server refusing
reconnection past the deadline, reconnect in time. Loss is final."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

import simba
from simba.lease import monotonic

from conftest import Database, eventually

# Short sessions: a lease of 2.5 s, a keepalive every 1.5 s or so.
SHORT = dict(session_ttl=1.5, session_transition=1.0, reconnect_initial=0.05, reconnect_max=0.2)


class Recorder:
    def __init__(self) -> None:
        self.events: List[Any] = []
        self.cv = threading.Condition()

    def cb(self, kind: str) -> Any:
        def f(lease: simba.Lease) -> None:
            with self.cv:
                self.events.append((kind, lease, monotonic()))
                self.cv.notify_all()
        return f

    def kinds(self) -> List[str]:
        with self.cv:
            return [e[0] for e in self.events]

    def wait_for(self, kind: str, timeout: float) -> Any:
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                for e in self.events:
                    if e[0] == kind:
                        return e
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)

    def lock(self, c: simba.Client, name: str) -> simba.Lock:
        return c.lock(name, on_lost=self.cb("lost"), on_suspended=self.cb("suspended"),
                      on_resumed=self.cb("resumed"))


def test_forced_release_is_a_loss(db: Database, name: str) -> None:
    c = db.client()  # a 16 s lease: the loss must come from the NOTIFY, not the deadline
    assert c.connected()  # LISTEN is in place once the client is made
    rec = Recorder()
    lk = rec.lock(c, name)
    assert lk.acquire()
    lease = lk.lease
    assert lease is not None
    with db.app_connection() as conn:
        simba.fence_check(conn, lease)
        conn.rollback()
        t0 = time.monotonic()
        assert db.admin.execute("SELECT simba_force_release(%s)", (name,)).fetchone()[0] is True
        lost = rec.wait_for("lost", 5)
        assert lost is not None and time.monotonic() - t0 < 2
        assert lost[1].fence == lease.fence
        assert not lk.is_owner() and lk.lease is None and lk.fence == 0
        with pytest.raises(simba.NotOwnerError) as ei:
            simba.fence_check(conn, lease)
        assert ei.value.sqlstate == "SB001"
        conn.rollback()
    # final: another client takes it; ours takes nothing back by itself
    other = db.client()
    lo = other.lock(name)
    assert lo.acquire(timeout=5)
    assert not lk.is_owner()
    assert rec.kinds().count("lost") == 1
    lo.release()
    lk.release()  # ends the lost hold
    assert lk.acquire(timeout=5)  # a new tenure, a new fence
    assert lk.fence > lease.fence
    lk.release()


def test_terminated_and_refused_past_the_deadline_is_a_loss(db: Database, name: str) -> None:
    c = db.client(**SHORT)
    rec = Recorder()
    lk = rec.lock(c, name)
    assert lk.acquire()
    lease = lk.lease
    assert lease is not None
    db.allow_connections(False)
    try:
        assert db.terminate(c.application_name) >= 1
        sus = rec.wait_for("suspended", 5)
        assert sus is not None and sus[1].fence == lease.fence
        lost = rec.wait_for("lost", 10)
        assert lost is not None
        # lost at the local deadline, never after it
        assert lost[2] >= lost[1].deadline
        assert lost[2] - lost[1].deadline < 0.5
        assert not lk.is_owner() and lk.lease is None
        assert rec.kinds().count("resumed") == 0
    finally:
        db.allow_connections(True)
    # the server agrees: the session ended, another client takes the mutex with a higher fence
    other = db.client(**SHORT)
    lo = other.lock(name)
    assert lo.acquire(timeout=10)
    assert lo.fence > lease.fence
    with db.app_connection() as conn:
        with pytest.raises((simba.NotOwnerError, simba.LeaseExpiredError, simba.StaleFenceError)):
            simba.fence_check(conn, lease)
    lo.release()
    # loss is final: the old client reconnects, but the lost hold stays lost
    assert eventually(c.connected, 10)
    assert not lk.is_owner() and rec.kinds().count("lost") == 1
    lk.release()
    assert lk.acquire(timeout=10) and lk.fence > lo.fence
    lk.release()


def test_reconnect_in_time_keeps_the_lock(db: Database, name: str) -> None:
    c = db.client(**SHORT)
    rec = Recorder()
    lk = rec.lock(c, name)
    assert lk.acquire()
    lease = lk.lease
    assert lease is not None
    assert eventually(c.connected, 5)
    sid = c.session_id
    assert db.terminate(c.application_name) >= 1
    assert rec.wait_for("suspended", 5) is not None
    resumed = rec.wait_for("resumed", 5)
    assert resumed is not None and resumed[1].fence == lease.fence
    assert "lost" not in rec.kinds()
    assert lk.is_owner() and lk.fence == lease.fence and c.session_id == sid
    # held across several more keepalives, on the server too
    t_end = monotonic() + 2 * (SHORT["session_ttl"] + SHORT["session_transition"])
    assert eventually(lambda: monotonic() >= t_end, 10, step=0.05)
    assert lk.is_owner() and db.owner(name) == (lk.contender_id, lease.fence)
    assert "lost" not in rec.kinds()
    lk.release()
    assert db.owner(name)[0] is None


def test_keepalive_keeps_many_locks_with_one_statement(db: Database, name: str) -> None:
    try:
        db.admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    except Exception as e:
        pytest.skip(f"pg_stat_statements not available: {e}")
    c = db.client(**SHORT)
    locks = [c.lock(f"{name}-{i}") for i in range(50)]
    for lk in locks:
        assert lk.acquire()
    calls = lambda: db.admin.execute(  # noqa: E731
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '%simba_session_keepalive%'"
        " AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchone()[0]
    before = calls()
    # three lease lengths: the locks outlive the first lease by far
    t_end = monotonic() + 3 * 2.5
    assert eventually(lambda: monotonic() >= t_end, 10, step=0.05)
    assert all(lk.is_owner() for lk in locks)
    kept = calls() - before
    assert 3 <= kept <= 8, kept  # about one per 1.5 s period, not one per lock
    for lk in locks:
        lk.release()


def test_frozen_backend_is_cut_and_the_lock_kept(db: Database, name: str) -> None:
    """A backend that stops answering (SIGSTOP) holds no statement forever:
    the watchdog cuts the connection, the client reconnects and the next
    keepalive gets through before the deadline."""
    import os
    import signal
    c = db.client(session_ttl=2.0, session_transition=2.0, statement_timeout=0.4,
                  reconnect_initial=0.05, reconnect_max=0.2)
    rec = Recorder()
    lk = rec.lock(c, name)
    assert lk.acquire()
    fence = lk.fence
    pid = None

    def idle_statement_backend() -> bool:
        nonlocal pid
        row = db.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
            " AND query LIKE '%%simba_acquire%%'", (c.application_name,)).fetchone()
        pid = row[0] if row else None
        return pid is not None

    assert eventually(idle_statement_backend, 5)
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        pytest.skip("cannot signal the server's backends (not root or postgres)")
    try:
        sus = rec.wait_for("suspended", 6)
        assert sus is not None
        res = rec.wait_for("resumed", 6)
        assert res is not None and res[1].fence == fence
    finally:
        os.kill(pid, signal.SIGCONT)
    assert "lost" not in rec.kinds()
    assert lk.is_owner() and db.owner(name) == (lk.contender_id, fence)
    lk.release()


def test_forced_release_seen_through_revoked_without_listen(db: Database, name: str) -> None:
    """Without a LISTEN connection the keepalive's grown ``revoked`` count
    tells the holder to check its tenures: lost within a keepalive period."""
    c = db.client(listen=False, **SHORT)
    rec = Recorder()
    lk = rec.lock(c, name)
    assert lk.acquire()
    t0 = monotonic()
    assert db.admin.execute("SELECT simba_force_release(%s)", (name,)).fetchone()[0] is True
    lost = rec.wait_for("lost", 5)
    assert lost is not None
    # before the deadline the last keepalive proved: it was the check, not the clock
    assert lost[2] < lost[1].deadline
    assert lost[2] - t0 < 2.5
    assert not lk.is_owner()
    lk.release()


def test_session_closed_elsewhere_ends_every_lock(db: Database, name: str) -> None:
    """The session ended on the server (here closed by another connection of
    the same role): every lock under it is lost, and the next acquire opens a
    new session with a new fence."""
    c = db.client(**SHORT)
    rec = Recorder()
    locks = [rec.lock(c, f"{name}-{i}") for i in range(3)]
    for lk in locks:
        assert lk.acquire()
    fences = [lk.fence for lk in locks]
    sid = c.session_id
    with db.app_connection() as conn:
        assert conn.execute("SELECT simba_session_close(%s::uuid)", (sid,)).fetchone()[0] == 3
    assert eventually(lambda: rec.kinds().count("lost") == 3, 5)
    assert not any(lk.is_owner() for lk in locks)
    for lk, f in zip(locks, fences):
        lk.release()
        assert lk.acquire(timeout=5) and lk.fence > f
    assert c.session_id != sid
    for lk in locks:
        lk.release()


def test_release_right_after_the_backends_were_killed_reaches_the_server_at_once(db: Database, name: str) -> None:
    # The default lease (16 s): a release left to lapse would keep the
    # waiter out for that long; the owed release goes first on reconnect.
    holder, waiter = db.client(), db.client()
    lk = holder.lock(name)
    assert lk.acquire()
    assert eventually(holder.connected, 5)
    got: List[float] = []

    def wait() -> None:
        w = waiter.lock(name)
        if w.acquire(timeout=15):
            got.append(monotonic())
            w.release()

    t = threading.Thread(target=wait)
    t.start()
    assert eventually(lambda: db.admin.execute(
        "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid)"
        " WHERE a.application_name = %s AND l.locktype = 'advisory' AND l.classid = 1397312834"
        " AND l.mode = 'ShareLock'", (waiter.application_name,)).fetchone()[0] > 0, 5), "the waiter registered"
    assert db.terminate(holder.application_name) >= 1
    released = monotonic()
    lk.release()
    t.join(20)
    assert got, "the waiter never got the lock"
    assert got[0] - released < 3.0, f"handed over {got[0] - released:.3f} s after the release"
