"""The server's lapse waker (extension/lapse.c): the end of a dead holder's
session is announced, so a waiter takes over at the lapse without polling
for it; where the waker stops, waiters poll again."""

from __future__ import annotations

import select
import threading
import time
from typing import Any, List, Optional, Tuple

import psycopg
import pytest
from psycopg import sql

import simba

from conftest import Database, eventually, unique


class DeadHolder:
    """A holder in plain SQL under a session of its own that it keeps alive
    until stop() (its process "dies": no close, the session lapses)."""

    def __init__(self, db: Database, name: str, ttl: float = 1.0, transition: float = 0.5) -> None:
        self.db = db
        self.conn = psycopg.connect(db.conninfo(application_name=unique("simba-dead-holder")), autocommit=True)
        self.session = self.conn.execute(
            "SELECT session_id FROM simba_session_open(%s * interval '1 s', %s * interval '1 s')",
            (ttl, transition)).fetchone()[0]
        owner = self.conn.execute("SELECT owner_id FROM simba_acquire(%s, 'dead', session_id => %s)",
                                  (name, self.session)).fetchone()[0]
        assert owner == "dead"
        self.period = ttl / 3
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keepalive, daemon=True)
        self._thread.start()

    def _keepalive(self) -> None:
        while not self._stop.wait(self.period):
            self.conn.execute("SELECT simba_session_keepalive(%s)", (self.session,))

    def stop(self) -> float:
        """Stops the keepalives; returns the session's end (monotonic)."""
        self._stop.set()
        self._thread.join()
        left = self.db.admin.execute(
            "SELECT extract(epoch FROM transition_at - (simba_clock()).now) FROM simba_session_lease"
            " WHERE session_id = %s", (self.session,)).fetchone()[0]
        return time.monotonic() + float(left)

    def close(self) -> None:
        self._stop.set()
        self.conn.close()


def counting_attempts(lock: simba.Lock) -> List[float]:
    """Records when ``lock`` sends an attempt."""
    times: List[float] = []
    attempt = lock._attempt

    def counted() -> Any:
        times.append(time.monotonic())
        return attempt()

    lock._attempt = counted  # type: ignore[method-assign]
    return times


def wait_for(lock: simba.Lock, timeout: float) -> Tuple[threading.Thread, List[float]]:
    got: List[float] = []

    def run() -> None:
        if lock.acquire(timeout=timeout):
            got.append(time.monotonic())

    t = threading.Thread(target=run)
    t.start()
    return t, got


def next_notify(conn: "psycopg.Connection[Any]", timeout: float) -> Optional[Tuple[str, str, float]]:
    """The next NOTIFY on an idle connection: (channel, payload, when heard)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        select.select([conn.pgconn.socket], [], [], max(0.0, end - time.monotonic()))
        conn.pgconn.consume_input()
        n = conn.pgconn.notifies()
        if n is not None:
            return n.relname.decode(), n.extra.decode(), time.monotonic()
    return None


def test_lapse_announced_waiter_takes_over_without_polling(db: Database, name: str) -> None:
    holder = DeadHolder(db, name)
    try:
        waiter = db.client(listen_ping_interval=0.5)
        lk = waiter.lock(name)
        attempts = counting_attempts(lk)
        t, got = wait_for(lk, 30)
        # registered and told the waker runs: the waiter stops polling
        assert eventually(lambda: waiter._lapses_announced(name), 5)
        quiet_from = time.monotonic()
        time.sleep(3 * 1.5)  # three of the holder's leases, each of which a poll would have ended
        assert [a for a in attempts if a > quiet_from + 0.2] == [], "the waiter polled at a lease's end"
        assert db.owner(name)[0] == "dead"
        ends = holder.stop()
        t.join(10)
        assert got, "the waiter never took the lock"
        # the NOTIFY at the lapse brought the attempt: no poll was due
        assert ends <= got[0] + 0.05 < ends + 1.0
        assert db.owner(name)[0] == lk.contender_id
    finally:
        holder.close()


def test_waker_killed_comes_back_and_announces(db: Database, name: str) -> None:
    holder = DeadHolder(db, name)
    try:
        waiter = db.client(listen_ping_interval=0.3)
        lk = waiter.lock(name)
        t, got = wait_for(lk, 30)
        assert eventually(lambda: waiter._lapses_announced(name), 5)
        killed = db.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE backend_type = 'simba lapse waker' AND datname = current_database()").fetchall()
        assert killed == [(True,)]
        # the next ping starts another; it announces what lapsed meanwhile
        ends = holder.stop()
        t.join(10)
        assert got and got[0] < ends + 1.5
    finally:
        holder.close()


def test_waker_off_waiters_poll(db: Database, name: str) -> None:
    db.admin.execute(sql.SQL("ALTER DATABASE {} SET simba.lapse_waker = off").format(sql.Identifier(db.name)))
    db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE backend_type = 'simba lapse waker' AND datname = current_database()")
    try:
        holder = DeadHolder(db, name)
        try:
            waiter = db.client()
            lk = waiter.lock(name)
            attempts = counting_attempts(lk)
            t, got = wait_for(lk, 30)
            time.sleep(2 * 1.5)
            assert not waiter._lapses_announced(name)
            assert len(attempts) >= 3, "a waiter without the waker polls at each lease's end"
            ends = holder.stop()
            t.join(10)
            assert got and got[0] < ends + 1.5
        finally:
            holder.close()
    finally:
        db.admin.execute(sql.SQL("ALTER DATABASE {} RESET simba.lapse_waker").format(sql.Identifier(db.name)))


def test_simba_waker_plain_sql(db: Database, name: str) -> None:
    """As a plain-SQL waiter uses it: LISTEN, register, ask; the lapse of a
    session holding the name arrives as a NOTIFY."""
    holder = DeadHolder(db, name)
    try:
        with psycopg.connect(db.conninfo(), autocommit=True) as w:
            w.execute("LISTEN simba")
            assert w.execute("SELECT simba_wait(ARRAY[%s])", (name,)).fetchone()[0] == []
            assert w.execute("SELECT simba_waker()").fetchone()[0] is True
            ends = holder.stop()
            heard = next_notify(w, 5)
            assert heard is not None and heard[:2] == ("simba", name)
            assert ends - 0.05 <= heard[2] < ends + 1.0
    finally:
        holder.close()


@pytest.mark.parametrize("value", [0, -1.0])
def test_announced_lapse_poll_must_be_positive(db: Database, value: float) -> None:
    with pytest.raises(simba.errors.InvalidArgumentError) as e:
        simba.Client(db.conninfo(), announced_lapse_poll=value)
    assert e.value.sqlstate == "22023"


def wakers(db: Database) -> int:
    return db.admin.execute("SELECT count(*) FROM pg_stat_activity"
                            " WHERE backend_type = 'simba lapse waker' AND datname = current_database()").fetchone()[0]


def test_waker_runs_while_someone_waits_and_not_after(db: Database, name: str) -> None:
    with psycopg.connect(db.conninfo(), autocommit=True) as w:
        w.execute("SELECT simba_wait(ARRAY[%s])", (name,))
        assert w.execute("SELECT simba_waker()").fetchone()[0] is True
        assert wakers(db) == 1
        # asked again, by anyone: the one that runs answers
        with psycopg.connect(db.conninfo(), autocommit=True) as other:
            assert other.execute("SELECT simba_waker()").fetchone()[0] is True
        assert wakers(db) == 1
        w.execute("SELECT simba_wait(ARRAY[%s], false)", (name,))
        assert eventually(lambda: wakers(db) == 0, 5), "the waker stayed with nobody registered"


def test_one_start_at_a_time(db: Database, name: str) -> None:
    assert eventually(lambda: wakers(db) == 0, 5)
    with psycopg.connect(db.conninfo(), autocommit=True) as w, psycopg.connect(db.dsn()) as starting:
        w.execute("SELECT simba_wait(ARRAY[%s])", (name,))
        # another call holds the starter's lock (SIMW, 'ST') in its transaction
        starting.execute("SELECT pg_advisory_xact_lock(1397312855, 21332)")
        t0 = time.monotonic()
        assert w.execute("SELECT simba_waker()").fetchone()[0] is False
        assert time.monotonic() - t0 < 0.5 and wakers(db) == 0
        starting.rollback()
        assert w.execute("SELECT simba_waker()").fetchone()[0] is True


def test_setting_off_and_reloaded_stops_the_waker(db: Database, name: str) -> None:
    with psycopg.connect(db.conninfo(), autocommit=True) as w:
        w.execute("SELECT simba_wait(ARRAY[%s])", (name,))
        assert w.execute("SELECT simba_waker()").fetchone()[0] is True
        db.admin.execute("ALTER SYSTEM SET simba.lapse_waker = off")  # in a backend that loaded simba
        db.admin.execute("SELECT pg_reload_conf()")
        try:
            assert eventually(lambda: wakers(db) == 0, 5), "the waker ran on with the setting off"
            # the setting reaches a new connection's own start at once
            with psycopg.connect(db.conninfo(), autocommit=True) as fresh:
                assert fresh.execute("SELECT simba_waker()").fetchone()[0] is False
        finally:
            db.admin.execute("ALTER SYSTEM RESET simba.lapse_waker")
            db.admin.execute("SELECT pg_reload_conf()")


def test_waker_terminated_at_any_moment_leaves_the_server_up(db: Database, name: str) -> None:
    """SIGTERM (pg_terminate_backend, DROP DATABASE, a shutdown) may reach the
    waker anywhere in its start or its rounds: it ends at its next interrupt
    check. Ended inside the signal handler, a malloc it interrupted corrupts
    the heap, and the abort restarts the server, cutting every connection."""
    with psycopg.connect(db.conninfo(), autocommit=True) as w:
        w.execute("SELECT simba_wait(ARRAY[%s])", (name,))
        terminated = 0
        for i in range(500):
            assert w.execute("SELECT simba_waker()").fetchone()[0] is True
            if i % 8 == 0:
                time.sleep(0.0002 * (i % 64))  # most in its start, some in its rounds
            terminated += db.admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE backend_type = 'simba lapse waker' AND datname = current_database()").fetchone()[0]
        # both connections outlived every termination: the server never restarted
        assert terminated >= 400
        assert w.execute("SELECT simba_waker()").fetchone()[0] is True
