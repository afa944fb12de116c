"""simba's client: one :class:`Client` per process, a session kept alive by
one keepalive per period, a LISTEN connection for wake-ups, and
:class:`Lock` objects that behave like :class:`threading.Lock` across every
process of the database.

Threads (all daemons, named ``simba-*``):

* ``simba-io``: keepalives, reconnects with backoff, owed releases, checks of
  held locks a NOTIFY or a grown ``revoked`` count asks for;
* ``simba-listen``: the LISTEN connection (``LISTEN simba``, ``simba_wait``
  registrations), routing NOTIFYs to waiters;
* ``simba-events``: runs the callbacks (``on_lost``, ``on_suspended``,
  ``on_resumed``) one at a time, in order, and ends a tenure at its local
  deadline by itself, whatever the other threads are doing.

A lock's first attempt runs on the calling thread: one round trip.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import random
import select
import socket
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import psycopg
from psycopg import conninfo as _conninfo

from . import errors
from .errors import (
    CancelledError,
    ConnectionError,
    Error,
    InvalidArgumentError,
    LockTimeoutError,
    SessionEndedError,
)
from .lease import Lease, keepalive_delay, margin, monotonic
from .statements import Statements

from .election import Election
from .lock import Callback, Lock, _contender_id, _Waiter
from .multi import MultiLock
from .rwlock import ReadWriteLock
from .semaphore import Semaphore

__all__ = ["Client", "Lock", "Callback"]

log = logging.getLogger("simba")


_SESSION_COLUMNS = (
    "s.session_id::text, simba_epoch_us(s.ttl_at), simba_epoch_us(s.transition_at),"
    " simba_epoch_us(s.current_at), s.revoked"
)
SESSION_OPEN_SQL = (
    "SELECT " + _SESSION_COLUMNS + " FROM simba_session_open(%s::int8 * interval '1 microsecond',"
    " %s::int8 * interval '1 microsecond') AS s"
)
SESSION_KEEPALIVE_SQL = "SELECT " + _SESSION_COLUMNS + " FROM simba_session_keepalive(%s::uuid) AS s"
SESSION_CLOSE_SQL = "SELECT simba_session_close(%s::uuid)"


def _NOOP() -> None:
    pass




def _us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))




class _Session:
    __slots__ = ("id", "sent_at", "ttl_at", "transition_at", "current_at", "revoked")

    def __init__(self, row: Sequence[Any], sent_at: float) -> None:
        self.id: str = row[0]
        self.ttl_at: int = row[1]
        self.transition_at: int = row[2]
        self.current_at: int = row[3]
        self.revoked: int = row[4]
        self.sent_at = sent_at

    def end(self) -> float:
        return self.sent_at + (self.transition_at - self.current_at) / 1e6




class _Held:
    """The locks held now and the earliest of their deadlines, without a
    scan: a heap of (deadline, entry, lock) beside each lock's live entry.
    As entries reach the top, those of released locks are dropped and those
    of renewed ones (a deadline only lengthens) go back at the new deadline:
    taking or releasing a lock costs O(log n), a keepalive renewing n locks
    O(n log n) once."""

    def __init__(self) -> None:
        self._entry: Dict[Lock, int] = {}
        self._heap: List[Tuple[float, int, Lock]] = []
        self._next = itertools.count()

    def __iter__(self) -> Iterator[Lock]:
        return iter(list(self._entry))  # a copy: callers end tenures as they go

    def __len__(self) -> int:
        return len(self._entry)

    def add(self, lk: Lock) -> None:
        """``lk`` was granted (its tenure holds a lease)."""
        assert lk._tenure.lease is not None
        n = next(self._next)
        self._entry[lk] = n
        heapq.heappush(self._heap, (lk._tenure.lease.deadline, n, lk))

    def discard(self, lk: Lock) -> None:
        self._entry.pop(lk, None)

    def clear(self) -> None:
        self._entry.clear()
        self._heap.clear()

    def earliest(self) -> Optional[float]:
        """The earliest deadline of a held lock, None if none is held."""
        h = self._heap
        while h:
            d, n, lk = h[0]
            lease = lk._tenure.lease
            if self._entry.get(lk) != n:
                heapq.heappop(h)
            elif lease is not None and lease.deadline > d:
                heapq.heapreplace(h, (lease.deadline, n, lk))
            else:
                return d
        return None

    def due(self, now: float) -> List[Lock]:
        """The held locks whose deadline is ``now`` or earlier; the caller
        ends their tenures."""
        out = []
        while (d := self.earliest()) is not None and d <= now:
            lk = heapq.heappop(self._heap)[2]
            del self._entry[lk]
            out.append(lk)
        return out


class Client:
    """One per process: a session, its keepalive, the LISTEN connection.

    ``conninfo`` is a libpq connection string or URI (empty: libpq's
    environment, ``PGHOST``, ``PGDATABASE``, ...). Construction connects and
    opens the session, so setup mistakes surface at once: no server or a
    wrong database (:class:`~simba.errors.ConnectionError`, 08001, 3D000,
    ...), the extension missing (:class:`~simba.errors.ServerError` 42883),
    no grant (:class:`~simba.errors.PermissionDeniedError` 42501).

    Every held lock lives by the session: one keepalive per period
    (``simba_session_keepalive``) renews them all. Times are in seconds.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        session_ttl: float = 10.0,
        session_transition: float = 6.0,
        release_margin: float = 0.020,
        clock_drift_ppm: int = 500,
        application_name: str = "simba-python",
        statement_timeout: float = 2.0,
        lock_timeout: float = 0.2,
        connect_timeout: int = 5,
        reconnect_initial: float = 0.1,
        reconnect_max: float = 5.0,
        retry_delay: float = 0.5,
        notify_min_interval: float = 0.1,
        listen_ping_interval: float = 5.0,
        announced_lapse_poll: float = 300.0,
        shutdown_timeout: float = 2.0,
        listen: bool = True,
        prepare: bool = True,
        pooled: bool = False,
        listen_conninfo: Optional[str] = None,
    ) -> None:
        if not session_ttl > 0:
            raise InvalidArgumentError("ttl must be positive", "22023")
        if session_transition < 0:
            raise InvalidArgumentError("transition must not be negative", "22023")
        if release_margin < 0:
            raise InvalidArgumentError("release_margin must not be negative", "22023")
        if not 0 <= clock_drift_ppm <= 100_000:
            raise InvalidArgumentError("clock_drift_ppm must be between 0 and 100000", "22023")
        if not notify_min_interval > 0:
            raise InvalidArgumentError("notify_min_interval must be positive", "22023")
        if not announced_lapse_poll > 0:
            raise InvalidArgumentError("announced_lapse_poll must be positive", "22023")
        self._conninfo = conninfo
        if pooled:
            # A transaction pooler gives each statement any server
            # connection: no prepared statements, and a LISTEN through it
            # would hear nothing (and leave simba_wait's registrations on a
            # pooled server connection).
            prepare = False
            if listen and listen_conninfo is None:
                log.warning("simba: pooled without listen_conninfo: no LISTEN connection, waiters poll")
                listen = False
        self._listen_conninfo = conninfo if listen_conninfo is None else listen_conninfo
        self._pooled = pooled
        self.session_ttl = session_ttl
        self.session_transition = session_transition
        self._ttl_us = _us(session_ttl)
        self._tr_us = _us(session_transition)
        lease_len = session_ttl + session_transition
        self.margin = margin(lease_len, release_margin, clock_drift_ppm)
        self._statement_timeout = min(statement_timeout, lease_len / 2)
        self._lock_timeout = min(lock_timeout, self._statement_timeout)
        self._connect_timeout = max(2, int(connect_timeout))
        self._reconnect_initial = reconnect_initial
        self._reconnect_max = reconnect_max
        self._retry_delay = min(retry_delay, session_ttl / 4)
        self.notify_min_interval = notify_min_interval
        self._ping_interval = listen_ping_interval
        self.announced_lapse_poll = announced_lapse_poll
        self._shutdown_timeout = shutdown_timeout
        self._prepare = prepare
        params = _conninfo.conninfo_to_dict(conninfo)
        self.application_name: str = params.get("application_name") or application_name
        defaults = (("application_name", application_name), ("connect_timeout", self._connect_timeout),
                    ("keepalives", 1), ("keepalives_idle", 5), ("keepalives_interval", 2),
                    ("keepalives_count", 3), ("tcp_user_timeout", 10000))

        def extra(dsn: str) -> Dict[str, Any]:  # the defaults a connection string leaves unset
            given = _conninfo.conninfo_to_dict(dsn)
            return {k: v for k, v in defaults if k not in given}
        self._extra = extra(conninfo)
        self._listen_extra = extra(self._listen_conninfo)

        self._mu = threading.RLock()  # client state; a leaf below _io and a lock's _op
        self._io = threading.Lock()  # the statement connection, one statement at a time
        self._conn: Optional[psycopg.Connection[Any]] = None
        self._statements: Optional[Statements] = None  # the statement connection's
        self._host: Optional[Tuple[str, int]] = None
        self._backoff = reconnect_initial
        self._next_connect_at = 0.0
        self._session: Optional[_Session] = None
        self._keepalive_at = float("inf")
        self._held = _Held()
        self._locks: "set[Lock]" = set()  # locks with an owed release or a check pending
        self._waiters: Dict[str, List[_Waiter]] = {}
        self._closing = False
        self._closed = False
        self._io_wake = threading.Event()
        self._events: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
        self._reconnect_needed = False
        self._inflight: Optional[Tuple[float, int]] = None  # (watchdog deadline, socket) of the statement running
        self._listen_inflight: Optional[Tuple[float, int]] = None  # the same for the LISTEN connection
        self._listen_cut = False
        self._events_next = 0.0  # when the events thread wakes next at the latest
        self._listen_enabled = listen
        self._listen_connected = threading.Event()
        self._wanted: Dict[str, int] = {}  # names waited on -> waiters
        self._registered: Set[str] = set()
        # simba_waker() said true on the LISTEN connection: the end of every
        # session is announced, so a registered waiter polls only as a backstop
        self._announced = False
        self._waker_unavailable = False
        self._channels: Dict[str, int] = {}  # fair waiters' wake channels -> waiters
        self._listening: Set[str] = set()  # those LISTENed to now
        self._register_dirty = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)

        # Setup mistakes surface here: connect and open the session.
        try:
            with self._io:
                self._connect_locked(first=True)
                self._open_session_locked()
        except BaseException:
            self._close_fds()
            if self._conn is not None:
                self._conn.close()
            raise
        self._threads = [
            threading.Thread(target=self._io_loop, name="simba-io", daemon=True),
            threading.Thread(target=self._events_loop, name="simba-events", daemon=True),
        ]
        if listen:
            self._threads.append(threading.Thread(target=self._listen_loop, name="simba-listen", daemon=True))
        for t in self._threads:
            t.start()
        if listen:
            # LISTEN in place before the first lock, so its wake-ups and an
            # operator's forced release are heard from the start (bounded:
            # without it waiters poll, and a keepalive's `revoked` still tells)
            self._listen_connected.wait(min(2.0, self._connect_timeout))

    # ------------------------------------------------------------------ API

    def lock(
        self,
        name: str,
        *,
        timeout: Optional[float] = None,
        contender_id: Optional[str] = None,
        on_lost: Optional[Callback] = None,
        on_suspended: Optional[Callback] = None,
        on_resumed: Optional[Callback] = None,
        fair: bool = False,
    ) -> "Lock":
        """A distributed lock on mutex ``name`` (see :class:`Lock`).

        ``timeout`` is for ``with``: how long ``__enter__`` waits (None:
        forever) before it raises :class:`~simba.errors.LockTimeoutError`.
        ``contender_id`` defaults to a unique ``{counter}:{pid}@{host}``; a
        hand-picked one must be unique across every process using the mutex
        under the same role. ``fair``: waiters are granted the mutex in
        arrival order (``simba_fair_acquire``), each woken alone on a
        channel of its own; fair and plain lockers of one mutex do not
        queue together."""
        return Lock(self, name, timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                    on_suspended=on_suspended, on_resumed=on_resumed, fair=fair)

    def election(self, name: str, *, value: Optional[str] = None,
                 on_lost: Optional[Callback] = None) -> "Election":
        """Leader election on mutex ``name`` (see :class:`~simba.election.Election`):
        ``value`` is what :meth:`~simba.election.Election.leader` names while
        this campaigner leads (its contender id; unique by default)."""

        return Election(self, name, value=value, on_lost=on_lost)

    def multi_lock(self, names: Sequence[str], *, timeout: Optional[float] = None,
                   contender_id: Optional[str] = None, on_lost: Optional[Callback] = None,
                   on_suspended: Optional[Callback] = None, on_resumed: Optional[Callback] = None) -> "MultiLock":
        """Every mutex of ``names`` at once, or none (``simba_acquire_all``;
        see :class:`~simba.multi.MultiLock`; arguments as :meth:`lock`):
        1 to 1,000 distinct names."""

        return MultiLock(self, names, timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                         on_suspended=on_suspended, on_resumed=on_resumed)

    def read_lock(self, name: str, *, timeout: Optional[float] = None, contender_id: Optional[str] = None,
                  on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                  on_resumed: Optional[Callback] = None) -> "ReadWriteLock":
        """A read hold on read-write lock ``name``: shared with other readers,
        refused while a writer holds it or waits (see
        :class:`~simba.rwlock.ReadWriteLock`; arguments as :meth:`lock`)."""

        return ReadWriteLock(self, name, "read", timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                             on_suspended=on_suspended, on_resumed=on_resumed)

    def write_lock(self, name: str, *, timeout: Optional[float] = None, contender_id: Optional[str] = None,
                   on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                   on_resumed: Optional[Callback] = None) -> "ReadWriteLock":
        """A write hold on read-write lock ``name``: alone, with a new fence;
        a waiting writer goes before new readers (see
        :class:`~simba.rwlock.ReadWriteLock`; arguments as :meth:`lock`)."""

        return ReadWriteLock(self, name, "write", timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                             on_suspended=on_suspended, on_resumed=on_resumed)

    def semaphore(self, key: str, permits: int, *, timeout: Optional[float] = None,
                  holder: Optional[str] = None, context: Optional[str] = None,
                  on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                  on_resumed: Optional[Callback] = None) -> "Semaphore":
        """A counting semaphore on ``key``: at most ``permits`` holders at
        once across every process (see :class:`~simba.semaphore.Semaphore`).
        ``timeout`` is for ``with``; ``holder`` (shown in
        ``simba_semaphore_status``) defaults to a unique
        ``{counter}:{pid}@{host}``; ``context`` is free text stored with
        each permit; the callbacks are each permit's, as a lock's."""

        return Semaphore(self, key, permits, timeout=timeout, holder=holder or _contender_id(), context=context,
                         on_lost=on_lost, on_suspended=on_suspended, on_resumed=on_resumed)

    @property
    def session_id(self) -> Optional[str]:
        """The id of the server session open now, or None."""
        with self._mu:
            return self._session.id if self._session else None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closing

    def connected(self) -> bool:
        """The statement connection is up (and, with ``listen``, LISTEN is in place)."""
        with self._mu:
            up = self._conn is not None and not self._reconnect_needed
        return up and (not self._listen_enabled or self._listen_connected.is_set())

    def close(self) -> None:
        """Ends every held tenure locally, then closes the session on the
        server (one statement that releases, and NOTIFYs, everything it
        holds), stops the threads and closes the connections. Waiters raise
        :class:`~simba.errors.CancelledError`. A bounded effort: with the
        connection down it reconnects once, within ``shutdown_timeout``.
        ``on_lost`` is not called for tenures ended by ``close()``."""
        with self._mu:
            if self._closing:
                return
            self._closing = True
            for lk in self._held:
                lk._tenure.end()
            self._held.clear()
            for ws in self._waiters.values():
                for w in ws:
                    w.event.set()
        self._io_wake.set()
        self._poke_listen()
        for t in self._threads:
            if t.name != "simba-events":
                t.join(timeout=10)
        self._deliver_before_exit()
        self._events.put(None)
        for t in self._threads:
            if t.name == "simba-events" and t is not threading.current_thread():
                t.join(timeout=10)
        with self._io:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self._close_fds()
        self._closed = True

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if not getattr(self, "_closing", True):
                self.close()
        except Exception:
            pass

    # ------------------------------------------------------- connections

    def _close_fds(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def _connect(self, *, connect_timeout: Optional[int] = None,
                 listen: bool = False) -> "psycopg.Connection[Any]":
        """The statement connection, or with ``listen`` the LISTEN one."""
        conninfo = self._listen_conninfo if listen else self._conninfo
        kw = dict(self._listen_extra if listen else self._extra)
        if connect_timeout is not None:
            kw["connect_timeout"] = connect_timeout
        try:
            conn = psycopg.connect(conninfo, autocommit=True, **kw)
        except psycopg.Error as e:
            err = errors.connect_error(e)
            err.message = f"could not connect to {self._target(conninfo)}: {' '.join(err.message.split())}"
            err.args = (err.message,)
            raise err from e
        if not self._prepare:
            conn.prepare_threshold = None
        return conn

    def _settings_statement(self) -> Optional[Tuple[str, Tuple[str, str]]]:
        """The statement connection's timeouts, set once per connection;
        none through a pooler, whose server sessions others share (the
        client's watchdog still bounds every statement)."""
        if self._pooled:
            return None
        return ("SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false)",
                (f"{int(self._statement_timeout * 1000)}ms", f"{int(self._lock_timeout * 1000)}ms"))

    def _target(self, conninfo: Optional[str] = None) -> str:
        """Where a connection string (the statement connection's by default)
        points, for error messages."""
        try:
            p = _conninfo.conninfo_to_dict(self._conninfo if conninfo is None else conninfo)
        except psycopg.Error:
            p = {}
        env = os.environ
        host = p.get("host") or p.get("hostaddr") or env.get("PGHOST") or "localhost"
        port = p.get("port") or env.get("PGPORT") or "5432"
        user = p.get("user") or env.get("PGUSER") or "(default user)"
        db = p.get("dbname") or env.get("PGDATABASE") or user
        return f"host {host} port {port} database {db!r} as {user}"

    def _connect_locked(self, first: bool = False) -> "psycopg.Connection[Any]":
        """Connects the statement connection (caller holds ``_io``). Respects
        the backoff unless ``first``."""
        if self._conn is not None:
            return self._conn
        now = monotonic()
        if not first and now < self._next_connect_at:
            raise ConnectionError("not connected: reconnecting", "08006")
        try:
            conn = self._connect()
            settings = self._settings_statement()
            if settings is not None:
                conn.execute(*settings)
        except psycopg.Error as e:
            self._schedule_reconnect()
            raise errors.connect_error(e) from e
        except ConnectionError:
            self._schedule_reconnect()
            raise
        info = conn.info
        self._host = (info.host, info.port)
        with self._mu:
            self._conn = conn
            self._reconnect_needed = False
            if self._session is not None:
                self._keepalive_at = monotonic()  # prove the session at once
            for lk in self._locks:
                if lk._owed:
                    lk._bg_at = 0.0  # an owed release goes first, not after its retry delay
        self._io_wake.set()
        if not first:
            log.info("simba: reconnected to %s:%s", info.host, info.port)
        return conn

    def _schedule_reconnect(self) -> None:
        with self._mu:
            b = self._backoff
            self._next_connect_at = monotonic() + random.uniform(b / 2, b)
            self._backoff = min(self._reconnect_max, b * 2)

    def _drop_locked(self, why: str) -> None:
        """Drops the statement connection (caller holds ``_io``) and suspends
        every held tenure: they end at their deadlines unless a keepalive
        gets through first."""
        conn, self._conn = self._conn, None
        if conn is not None:
            log.warning("simba: statement connection lost: %s", why)
            try:
                conn.close()
            except Exception:
                pass
            self._schedule_reconnect()
        self._suspend_all()
        self._io_wake.set()

    def _statement(self, sql: str, params: Any, *, one: bool = True) -> Tuple[Any, float]:
        """Runs one statement on the statement connection; returns (rows or
        row, send time). Raises a typed :class:`Error`."""
        with self._io:
            return self._statement_locked(sql, params, one=one)

    def _statement_locked(self, sql: str, params: Any, *, one: bool = True) -> Tuple[Any, float]:
        if self._reconnect_needed and self._conn is not None:
            self._drop_locked("the server closed the LISTEN connection")
        conn = self._connect_locked()
        sent_at = monotonic()
        with self._mu:
            # the watchdog: statement_timeout and a half, or the earliest
            # deadline a reply could still prove, but at least 100 ms
            cut = sent_at + self._statement_timeout * 1.5
            held = self._held.earliest()
            if held is not None:
                cut = min(cut, held)
            self._inflight = (max(cut, sent_at + 0.1), conn.fileno())
            wake = self._inflight[0] < self._events_next  # the events thread would wake too late
        if wake:
            self._events.put(_NOOP)
        try:
            try:
                if self._statements is None or self._statements.conn is not conn:
                    self._statements = Statements(conn, self._prepare)
                rows = self._statements.run(sql, params, one)
            finally:
                with self._mu:
                    self._inflight = None
        except psycopg.Error as e:
            if conn.broken or conn.closed:
                self._drop_locked(str(e).strip())
                raise errors.from_psycopg(e, lost=True) from e
            raise errors.from_psycopg(e) from e
        with self._mu:
            self._backoff = self._reconnect_initial  # only a statement that succeeds resets it
        return rows, sent_at

    # ------------------------------------------------------------ session

    def _open_session_locked(self) -> _Session:
        row, sent_at = self._statement_locked(SESSION_OPEN_SQL, (self._ttl_us, self._tr_us))
        s = _Session(row, sent_at)
        with self._mu:
            self._session = s
            self._schedule_keepalive(s)
        return s

    def _schedule_keepalive(self, s: _Session) -> None:
        now = monotonic()
        self._keepalive_at = now + keepalive_delay(s.sent_at, s.ttl_at, s.transition_at, s.current_at, now)
        self._io_wake.set()

    def _session_id_locked(self) -> str:
        """The session's id, opening one if none is open (caller holds ``_io``)."""
        with self._mu:
            s = self._session
        if s is None:
            s = self._open_session_locked()
        return s.id

    def _forget_session(self, session_id: str, why: str) -> None:
        """The session ended on the server (SB004): everything under it is
        lost. The next attempt opens a new one."""
        with self._mu:
            if self._session is None or self._session.id != session_id:
                return
            self._session = None
            self._keepalive_at = float("inf")
            log.warning("simba: session %s ended: %s", session_id, why)
            for lk in self._held:
                lk._lost_locked(lk._tenure.end(), owed=False)

    def _keepalive(self) -> None:
        with self._mu:
            s = self._session
        if s is None:
            return
        try:
            row, sent_at = self._statement(SESSION_KEEPALIVE_SQL, (s.id,))
        except SessionEndedError as e:
            self._forget_session(s.id, str(e))
            return
        except Error as e:
            log.warning("simba: keepalive failed: %s", e)
            with self._mu:
                self._keepalive_at = monotonic() + self._retry_delay
                self._suspend_all()
            return
        new = _Session(row, sent_at)
        now = monotonic()
        check: List[Lock] = []
        with self._mu:
            if self._session is None or self._session.id != s.id:
                return
            revoked = new.revoked > self._session.revoked
            self._session = new
            self._schedule_keepalive(new)
            for lk in self._held:
                ended = lk._tenure.expire(now)  # never bridge a gap with a late reply
                if ended is not None:
                    lk._lost_locked(ended, owed=True)
                    continue
                lk._tenure.renew(new.sent_at, new.transition_at, new.current_at, now)
                resumed = lk._tenure.resume()
                if resumed is not None and lk._on_resumed is not None:
                    self._post(lk._on_resumed, resumed)
                if revoked:
                    check.append(lk)
        self._wake_events()
        for lk in check:
            lk._check()

    def _suspend_all(self) -> None:
        with self._mu:
            now = monotonic()
            for lk in self._held:
                ended = lk._tenure.expire(now)
                if ended is not None:
                    lk._lost_locked(ended, owed=True)
                    continue
                lease = lk._tenure.suspend(now)
                if lease is not None and lk._on_suspended is not None:
                    self._post(lk._on_suspended, lease)

    # ---------------------------------------------------------- I/O thread

    def _io_loop(self) -> None:
        while True:
            with self._mu:
                if self._closing:
                    return
                now = monotonic()
                wake = self._keepalive_at
                if self._conn is None or self._reconnect_needed:
                    if self._session is not None or self._locks:
                        wake = min(wake, max(self._next_connect_at, now))
                for lk in self._locks:
                    if lk._owed or lk._check_wanted:
                        wake = min(wake, max(lk._bg_at, now) if self._conn is not None else now + self._retry_delay)
                timeout = max(0.0, min(wake - now, 1.0))
            if timeout > 0:
                self._io_wake.wait(timeout)
            self._io_wake.clear()
            if self._closing:
                return
            try:
                self._io_step()
            except Exception:  # never let the thread die
                log.exception("simba: I/O step failed")

    def _io_step(self) -> None:
        with self._mu:
            reconnect = self._reconnect_needed or (
                self._conn is None and (self._session is not None or bool(self._locks)))
            due = monotonic() >= self._keepalive_at
        if reconnect:
            with self._io:
                if self._reconnect_needed and self._conn is not None:
                    self._drop_locked("the server closed the LISTEN connection")
                if self._conn is None and monotonic() >= self._next_connect_at:
                    try:
                        self._connect_locked()
                    except Error as e:
                        log.warning("simba: reconnect failed: %s", e)
                        return
            with self._mu:
                due = monotonic() >= self._keepalive_at
        if due:
            self._keepalive()
        with self._mu:
            pending = [lk for lk in self._locks if lk._owed or lk._check_wanted]
        for lk in pending:
            if self._closing:
                return
            lk._background()

    # ------------------------------------------------------- events thread

    def _post(self, cb: Callback, lease: Lease) -> None:
        def run() -> None:
            cb(lease)

        self._events.put(run)

    def _wake_events(self) -> None:
        self._events.put(lambda: None)

    def _events_loop(self) -> None:
        while True:
            with self._mu:
                held = self._held.earliest()
                deadlines = [] if held is None else [held]
                for slot in (self._inflight, self._listen_inflight):
                    if slot is not None:
                        deadlines.append(slot[0])
            timeout = 1.0
            if deadlines:
                timeout = max(0.0, min(timeout, min(deadlines) - monotonic()))
            with self._mu:
                self._events_next = monotonic() + timeout
            try:
                item = self._events.get(timeout=timeout)
            except queue.Empty:
                item = lambda: None  # noqa: E731
            if item is None:
                return
            try:
                item()
            except Exception:
                log.exception("simba: a callback raised")
            # Deadlines end tenures here, whatever the I/O thread is doing.
            with self._mu:
                now = monotonic()
                if self._inflight is not None and now >= self._inflight[0]:
                    self._cut(self._inflight[1])
                    self._inflight = None
                if self._listen_inflight is not None and now >= self._listen_inflight[0]:
                    self._listen_cut = True  # a missed deadline drops the LISTEN connection alone
                    self._cut(self._listen_inflight[1])
                    self._listen_inflight = None
                for lk in self._held.due(now):
                    ended = lk._tenure.end()
                    if ended is not None:
                        lk._lost_locked(ended, owed=True)

    def _cut(self, fd: int) -> None:
        """Shuts down the socket of a statement past its watchdog deadline (a
        frozen backend, a blackholed server): the blocked call returns with
        an error and the connection is dropped and made again."""
        log.warning("simba: a statement got no answer in time: cutting its connection")
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()

    # ----------------------------------------------------------- wake-ups

    def _add_waiter(self, name: str, event: Any = None) -> _Waiter:
        w = _Waiter(event)
        with self._mu:
            self._waiters.setdefault(name, []).append(w)
            self._wanted[name] = self._wanted.get(name, 0) + 1
            if self._wanted[name] == 1:
                self._register_dirty = True
            if not self._listen_enabled or name in self._registered or self._closing:
                # nothing will register it (or it already is): attempt once more, then wait;
                # closing: close() woke the waiters before this one, and it must see it too
                w.event.set()
        self._poke_listen()
        return w

    def _remove_waiter(self, name: str, w: _Waiter) -> None:
        with self._mu:
            ws = self._waiters.get(name)
            if ws and w in ws:
                ws.remove(w)
                if not ws:
                    del self._waiters[name]
            n = self._wanted.get(name, 0) - 1
            if n <= 0:
                self._wanted.pop(name, None)
                self._register_dirty = True
            else:
                self._wanted[name] = n
        self._poke_listen()

    def _want_channel(self, channel: str, wanted: bool) -> None:
        """A fair waiter starts (or stops) waiting on its wake channel."""
        with self._mu:
            n = self._channels.get(channel, 0) + (1 if wanted else -1)
            if n > 0:
                self._channels[channel] = n
            else:
                self._channels.pop(channel, None)
            self._register_dirty = True
        self._poke_listen()

    def _notified(self, channel: str, payload: str) -> None:
        """A NOTIFY read on the LISTEN connection: on simba's channel, or on
        a fair waiter's, whose payload is the mutex."""
        with self._mu:
            ours = channel == "simba" or channel in self._listening
        if ours:
            self._wake(payload)

    def _wake(self, name: Optional[str]) -> None:
        """A NOTIFY for ``name`` (None: every name, after LISTEN took effect)."""
        with self._mu:
            targets = list(self._waiters.items()) if name is None else [(name, self._waiters.get(name, []))]
            for _, ws in targets:
                for w in ws:
                    w.event.set()
            for lk in self._held:
                if name is None or name in lk._names:
                    # the holder checks its tenure: an operator's forced release NOTIFYs
                    if name is not None:
                        lk._check_wanted = True
                        self._locks.add(lk)
            self._io_wake.set()

    def _poke_listen(self) -> None:
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def _listen_loop(self) -> None:
        conn: Optional[psycopg.Connection[Any]] = None
        next_connect = 0.0
        backoff = self._reconnect_initial
        last_exchange = 0.0
        retry_register_at = float("inf")
        while not self._closing:
            now = monotonic()
            if conn is None:
                self._listen_connected.clear()
                if now < next_connect:
                    self._wait_pipe(None, next_connect - now)
                    continue
                try:
                    conn = self._connect(listen=True)
                    # NOTIFYs read while a statement runs come through the handler
                    conn.add_notify_handler(lambda n: self._notified(n.channel, n.payload))
                    self._listen_exec(conn, "LISTEN simba")
                    with self._mu:
                        self._registered.clear()
                        self._listening.clear()
                        self._register_dirty = True
                    backoff = self._reconnect_initial
                    last_exchange = monotonic()
                    self._listen_connected.set()
                    self._register(conn)
                    self._wake(None)  # a release before LISTEN took effect was not heard
                except (Error, psycopg.Error) as e:
                    log.warning("simba: LISTEN connection failed: %s", e)
                    if conn is not None:
                        conn.close()
                    conn = None
                    next_connect = monotonic() + random.uniform(backoff / 2, backoff)
                    backoff = min(self._reconnect_max, backoff * 2)
                continue
            timeout = max(0.0, min(last_exchange + self._ping_interval, retry_register_at) - now)
            readable = self._wait_pipe(conn.fileno(), timeout)
            try:
                if readable:
                    conn.pgconn.consume_input()
                    if conn.pgconn.status != psycopg.pq.ConnStatus.OK:
                        raise psycopg.OperationalError("the server closed the LISTEN connection")
                    self._drain(conn)
                with self._mu:
                    dirty = self._register_dirty
                if dirty or monotonic() >= retry_register_at:
                    retry_register_at = float("inf")
                    if self._register(conn):
                        retry_register_at = monotonic() + 0.02
                    last_exchange = monotonic()
                elif monotonic() >= last_exchange + self._ping_interval:
                    if not self._ask_waker(conn):  # either proves the connection alive
                        self._listen_exec(conn, "LISTEN simba")
                    last_exchange = monotonic()
            except (psycopg.Error, OSError) as e:
                if self._closing:
                    break
                log.warning("simba: LISTEN connection lost: %s", str(e).strip())
                try:
                    conn.close()
                except Exception:
                    pass
                conn = None
                self._listen_connected.clear()
                self._set_announced(False)
                with self._mu:
                    if self._listen_cut:  # it missed a deadline: it alone goes, waiters poll meanwhile
                        self._listen_cut = False
                    else:  # the server closed it: the statement connection most likely too
                        self._reconnect_needed = True
                        self._suspend_all()
                self._io_wake.set()
                next_connect = monotonic() + random.uniform(backoff / 2, backoff)
                backoff = min(self._reconnect_max, backoff * 2)
        if conn is not None:
            conn.close()

    def _listen_exec(self, conn: "psycopg.Connection[Any]", sql: str, params: Any = None) -> List[Any]:
        """A statement on the LISTEN connection, under the watchdog."""
        with self._mu:
            self._listen_inflight = (monotonic() + max(0.1, self._statement_timeout * 1.5), conn.fileno())
            wake = self._listen_inflight[0] < self._events_next
        if wake:
            self._events.put(_NOOP)
        try:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []
        finally:
            with self._mu:
                self._listen_inflight = None

    def _wait_pipe(self, fd: Optional[int], timeout: float) -> bool:
        """Waits for ``fd`` or the wake pipe; returns whether ``fd`` is readable."""
        fds = [self._wake_r] + ([fd] if fd is not None else [])
        try:
            r, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            return False
        if self._wake_r in r:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        return fd is not None and fd in r

    def _drain(self, conn: "psycopg.Connection[Any]") -> None:
        while True:
            n = conn.pgconn.notifies()
            if n is None:
                return
            self._notified(n.relname.decode("utf-8", "replace"), n.extra.decode("utf-8", "replace"))

    def _register(self, conn: "psycopg.Connection[Any]") -> bool:
        """Registers the waited-on names with ``simba_wait``; returns whether
        some were refused (to try again 20 ms later)."""
        with self._mu:
            self._register_dirty = False
            wanted = set(self._wanted)
            add = sorted(wanted - self._registered)
            drop = sorted(self._registered - wanted)
            channels = set(self._channels)
            listen = sorted(channels - self._listening)
            unlisten = sorted(self._listening - channels)
        for ch in listen:  # checked when the reply named it: a plain identifier
            self._listen_exec(conn, f'LISTEN "{ch}"')
        for ch in unlisten:
            self._listen_exec(conn, f'UNLISTEN "{ch}"')
        with self._mu:
            self._listening = (self._listening | set(listen)) - set(unlisten)
        if listen:
            self._wake(None)  # a wake-up before the LISTEN took effect was not heard
        refused: List[str] = []
        try:
            if add:
                refused = [r[0] for r in self._listen_exec(
                    conn, "SELECT pg_catalog.unnest(simba_wait(%s::text[]))", (add,))]
            if drop:
                self._listen_exec(conn, "SELECT simba_wait(%s::text[], false)", (drop,))
        except psycopg.errors.Error as e:
            if conn.broken:
                raise
            # missing or not granted: waiters poll (under simba.notify = always nothing changes)
            log.info("simba: simba_wait unavailable (%s): not registering waits", str(e).strip())
            with self._mu:
                self._registered = wanted
                self._waker_unavailable = True  # nothing registered: no NOTIFY would announce a lapse
            for name in add:
                self._wake(name)  # LISTEN is in place: attempt once more
            return False
        self._drain(conn)
        with self._mu:
            self._registered = (self._registered | (set(add) - set(refused))) - set(drop)
        self._ask_waker(conn)  # after the registrations: a waker that says true stays while they do
        for name in set(add) - set(refused):
            self._wake(name)  # a release may have gone by before the registration
        return bool(refused)

    def _ask_waker(self, conn: "psycopg.Connection[Any]") -> bool:
        """While names are registered: whether the server's lapse waker
        runs (``simba_waker()``, which starts it). Returns whether it asked."""
        with self._mu:
            if self._waker_unavailable or not self._registered:
                return False
        try:
            rows = self._listen_exec(conn, "SELECT simba_waker()")
        except psycopg.errors.Error as e:
            if conn.broken:
                raise
            log.info("simba: simba_waker unavailable (%s): waiters poll at each lease's end", str(e).strip())
            with self._mu:
                self._waker_unavailable = True
            self._set_announced(False)
            return True
        self._set_announced(bool(rows and rows[0][0]))
        return True

    def _set_announced(self, announced: bool) -> None:
        with self._mu:
            was, self._announced = self._announced, announced
        if was and not announced:
            self._wake(None)  # waiters that only had a backstop poll attempt now

    def _lapses_announced(self, name: str) -> bool:
        """The end of a session holding ``name`` will be announced."""
        with self._mu:
            return self._announced and name in self._registered

    # ---------------------------------------------------------- shutdown

    def _deliver_before_exit(self) -> None:
        with self._mu:
            s, self._session = self._session, None
            owed = [lk for lk in self._locks if lk._owed]
        if s is None and not owed:
            return
        deadline = monotonic() + self._shutdown_timeout
        with self._io:
            if self._conn is None or self._reconnect_needed:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if self._shutdown_timeout <= 0:
                    return
                try:
                    self._conn = self._connect(connect_timeout=max(2, int(self._shutdown_timeout)))
                    self._reconnect_needed = False
                except Error as e:
                    log.warning("simba: shutdown could not reconnect (%s): the session lapses", e)
                    return
            conn = self._conn
            try:
                for lk in owed:
                    if monotonic() > deadline:
                        break
                    conn.execute(*lk._release_statement())
                    lk._owed = False
                if s is not None:
                    conn.execute(SESSION_CLOSE_SQL, (s.id,))
            except psycopg.Error as e:
                log.warning("simba: shutdown could not close the session (%s): it lapses", str(e).strip())

