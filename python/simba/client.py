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

import functools
import heapq
import itertools
import logging
import os
import queue
import random
import re
import select
import socket
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, Iterator, List, Optional, Sequence, Set, Tuple

import psycopg
from psycopg import conninfo as _conninfo

from . import errors
from .errors import (
    CancelledError,
    ConnectionError,
    Error,
    IllegalStateError,
    InvalidArgumentError,
    LockTimeoutError,
    SessionEndedError,
)
from .lease import Lease, Tenure, keepalive_delay, margin, monotonic, server_time
from .statements import Statements

if TYPE_CHECKING:
    from .election import Election
    from .multi import MultiLock
    from .rwlock import ReadWriteLock
    from .semaphore import Semaphore

__all__ = ["Client", "Lock", "Callback"]

log = logging.getLogger("simba")

Callback = Callable[[Lease], None]

_OWNER_COLUMNS = (
    "o.mutex,"
    " CASE WHEN o.owner_role <> current_user AND o.owner_id = {id}"
    " THEN o.owner_role || ':' || o.owner_id ELSE o.owner_id END,"
    " simba_epoch_us(o.acquired_at), simba_epoch_us(o.ttl_at), simba_epoch_us(o.transition_at),"
    " o.version, o.fence, simba_epoch_us(o.current_at), o.session_id IS NOT NULL"
)
ACQUIRE_SQL = (
    "SELECT " + _OWNER_COLUMNS.format(id="%(id)s") +
    " FROM simba_acquire(%(m)s, %(id)s, %(ttl)s::int8 * interval '1 microsecond',"
    " %(tr)s::int8 * interval '1 microsecond', %(s)s::uuid) AS o"
)
RENEW_SQL = (
    "SELECT " + _OWNER_COLUMNS.format(id="%(id)s") +
    " FROM simba_renew(%(m)s, %(id)s, %(f)s, %(ttl)s::int8 * interval '1 microsecond',"
    " %(tr)s::int8 * interval '1 microsecond') AS o"
)
RELEASE_SQL = "SELECT simba_release(%s, %s)"
# The fair lock: the owner columns, then the caller's place (NULL: it holds
# the mutex) and the channel the server wakes it on.
FAIR_ACQUIRE_SQL = (
    "SELECT " + _OWNER_COLUMNS.format(id="%(id)s") + ", o.position, o.wake_channel"
    " FROM simba_fair_acquire(%(m)s, %(id)s, %(ttl)s::int8 * interval '1 microsecond',"
    " %(tr)s::int8 * interval '1 microsecond', %(s)s::uuid) AS o"
)
FAIR_RELEASE_SQL = "SELECT simba_fair_release(%s, %s)"
# A wake channel as the server makes them ("simba_fair_" and hex digits):
# LISTEN names it as it is; anything else is not listened to.
_CHANNEL = re.compile(r"[A-Za-z0-9_]{1,63}")
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

_ids = itertools.count()


def _NOOP() -> None:
    pass


def _contender_id() -> str:
    """``{counter}:{pid}@{host}``, as the C++ client's ``ContenderId::host()``."""
    return f"{next(_ids)}:{os.getpid()}@{socket.gethostname() or 'localhost'}"


def _us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


class _Owner:
    """An owner row as the client reads it (times in epoch microseconds)."""

    __slots__ = ("owner_id", "acquired_at", "ttl_at", "transition_at", "fence", "current_at", "under_session",
                 "sent_at")

    def __init__(self, row: Sequence[Any], sent_at: float) -> None:
        self.owner_id: Optional[str] = row[1]
        self.acquired_at: int = row[2] or 0
        self.ttl_at: int = row[3] or 0
        self.transition_at: int = row[4] or 0
        self.fence: int = row[6] or 0
        self.current_at: int = row[7] or 0
        self.under_session: bool = bool(row[8])  # the lease is its session's: a lapse waker announces its end
        self.sent_at = sent_at


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


class _Waiter:
    """A waiter on a name; ``event`` has ``set()`` (a threading.Event, or an
    asyncio adapter that sets an asyncio.Event in its loop)."""

    __slots__ = ("event",)

    def __init__(self, event: Any = None) -> None:
        self.event = event if event is not None else threading.Event()


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
        from .election import Election  # it imports this module

        return Election(self, name, value=value, on_lost=on_lost)

    def multi_lock(self, names: Sequence[str], *, timeout: Optional[float] = None,
                   contender_id: Optional[str] = None, on_lost: Optional[Callback] = None,
                   on_suspended: Optional[Callback] = None, on_resumed: Optional[Callback] = None) -> "MultiLock":
        """Every mutex of ``names`` at once, or none (``simba_acquire_all``;
        see :class:`~simba.multi.MultiLock`; arguments as :meth:`lock`):
        1 to 1,000 distinct names."""
        from .multi import MultiLock  # it imports this module

        return MultiLock(self, names, timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                         on_suspended=on_suspended, on_resumed=on_resumed)

    def read_lock(self, name: str, *, timeout: Optional[float] = None, contender_id: Optional[str] = None,
                  on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                  on_resumed: Optional[Callback] = None) -> "ReadWriteLock":
        """A read hold on read-write lock ``name``: shared with other readers,
        refused while a writer holds it or waits (see
        :class:`~simba.rwlock.ReadWriteLock`; arguments as :meth:`lock`)."""
        from .rwlock import ReadWriteLock  # it imports this module

        return ReadWriteLock(self, name, "read", timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                             on_suspended=on_suspended, on_resumed=on_resumed)

    def write_lock(self, name: str, *, timeout: Optional[float] = None, contender_id: Optional[str] = None,
                   on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                   on_resumed: Optional[Callback] = None) -> "ReadWriteLock":
        """A write hold on read-write lock ``name``: alone, with a new fence;
        a waiting writer goes before new readers (see
        :class:`~simba.rwlock.ReadWriteLock`; arguments as :meth:`lock`)."""
        from .rwlock import ReadWriteLock  # it imports this module

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
        from .semaphore import Semaphore  # it imports this module

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


# A hold's statements and waits as steps: a generator that yields each call
# to make and is sent its result (or thrown its Error), so the threaded and
# the asyncio flavour share the logic and differ only in how a call waits.
Steps = Generator[Callable[[], Any], Any, Any]


async def _run_steps(steps: Steps, awaits: bool) -> Any:
    """Runs ``steps``, awaiting each call's result if ``awaits`` (the
    asyncio flavour's calls are coroutine functions); returns what they
    return."""
    try:
        call = next(steps)
        while True:
            try:
                result = call()
                if awaits:
                    result = await result
            except Error as e:
                call = steps.throw(e)
            else:
                call = steps.send(result)
    except StopIteration as stop:
        return stop.value
    finally:
        steps.close()


def _drive(steps: Steps) -> Any:
    """Runs ``steps`` on the calling thread: their calls block, so nothing
    is awaited and the coroutine ends at its first ``send``."""
    try:
        _run_steps(steps, False).send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("unreachable: a run that awaits nothing does not suspend")


class _WaitSchedule:
    """When a waiter attempts again (docs/client-protocol.md, "Waiting"): at
    its poll time (the holder's transition_at plus jitter; soon when the
    mutex is free), or on a NOTIFY, at most one NOTIFY-brought attempt per
    ``notify_min_interval`` (a change of hands lets the next act at once)."""

    def __init__(self, contender_id: str, notify_min_interval: float) -> None:
        self._contender_id = contender_id
        self._interval = notify_min_interval
        self._last_notify_attempt = -1e9
        self._last_seen: Optional[Tuple[Optional[str], int]] = None
        self._poll_at = 0.0
        self._notified = False

    def lost_to(self, owner: _Owner) -> None:
        """After an attempt that found ``owner`` holding the mutex."""
        seen = (owner.owner_id, owner.fence)
        if self._last_seen is not None and seen != self._last_seen:
            self._last_notify_attempt = -1e9
        self._last_seen = seen
        if owner.owner_id is None or owner.owner_id == self._contender_id:
            delay = 0.01  # free, or ours but proved nothing (given back): again soon
        else:
            tr = owner.transition_at - owner.ttl_at
            jitter = random.uniform(-0.2, 1.0) if tr > 0 else random.uniform(0.0, 1.0)
            delay = owner.sent_at + (owner.transition_at - owner.current_at) / 1e6 - monotonic() + jitter
        self.retry_in(delay)

    def retry_in(self, delay: float) -> None:
        """After an attempt that failed: the next in ``delay`` seconds."""
        self._poll_at = monotonic() + max(0.0, delay)
        self._notified = False

    def at_least(self, delay: float) -> None:
        """The next attempt no sooner than ``delay`` seconds from now."""
        self._poll_at = max(self._poll_at, monotonic() + max(0.0, delay))

    def at_most(self, delay: float) -> None:
        """The next attempt no later than ``delay`` seconds from now."""
        self._poll_at = min(self._poll_at, monotonic() + max(0.0, delay))

    def notified(self) -> None:
        self._notified = True

    def wait(self, now: float) -> float:
        """Seconds to wait before the next attempt; 0: attempt now."""
        target = self._poll_at
        if self._notified:
            target = min(target, self._last_notify_attempt + self._interval)
        if target > now:
            return target - now
        if self._notified:
            self._last_notify_attempt = now
        return 0.0


class Lock:
    """A distributed lock on one mutex, with :class:`threading.Lock`'s API.

    ``acquire(blocking=True, timeout=-1) -> bool`` and ``release()``, or
    ``with lock as lease:`` (raises :class:`~simba.errors.LockTimeoutError`
    when the lock's ``timeout`` passes). Within the process it is a mutex
    too: another thread's ``acquire`` waits until the holder releases.
    Not reentrant: a second ``acquire`` by the holding thread raises
    :class:`~simba.errors.IllegalStateError` (``blocking=False``: returns
    False), as the C++ ``Locker``'s default.

    **Loss is final.** A hold is one tenure with one fence. If it ends other
    than by :meth:`release` (the session's keepalives failed past the
    deadline, an operator ran ``simba_force_release``, the session ended),
    :meth:`is_owner` turns False and stays False, :attr:`lease` is None,
    ``on_lost(lease)`` runs once, and nothing is taken back. Call
    :meth:`release` to end the lost hold, then acquire again for a new tenure
    with a new fence.

    Callbacks run on the client's ``simba-events`` thread, one at a time:
    ``on_suspended(lease)`` when renewals fail and the tenure ends at
    ``lease.deadline`` unless one gets through; ``on_resumed(lease)`` when
    one does (the new deadline); ``on_lost(lease)`` when the tenure ended.
    """

    def __init__(self, client: Client, name: str, *, timeout: Optional[float] = None,
                 contender_id: Optional[str] = None, on_lost: Optional[Callback] = None,
                 on_suspended: Optional[Callback] = None, on_resumed: Optional[Callback] = None,
                 fair: bool = False) -> None:
        self.name = errors.validate_name(name, "mutex")
        self._names: Tuple[str, ...] = (self.name,)  # the mutexes whose NOTIFYs concern this lock
        self.fair = fair
        self.contender_id = errors.validate_name(contender_id or _contender_id(), "contender_id")
        self.timeout = timeout
        self._client = client
        self._on_lost = on_lost
        self._on_suspended = on_suspended
        self._on_resumed = on_resumed
        self._tenure = Tenure(client.margin)
        self._gate = threading.Lock()  # the process-local mutex
        self._op = threading.Lock()  # this lock's statements, one at a time
        self._holder: Optional[int] = None  # thread ident of the holder
        self._active = False  # a hold exists (held, or lost and not yet released)
        self._owed = False  # a release by id must go before anything else
        self._check_wanted = False
        self._bg_at = 0.0  # background work (owed release, check) not before this
        self._granted: Optional[Lease] = None
        self._queued = False  # fair: the last attempt left the caller queued
        self._channel: Optional[str] = None  # fair: the wake channel listened to while waiting

    def __repr__(self) -> str:
        return f"<simba.Lock {self.name!r} id={self.contender_id!r} owner={self.is_owner()}>"

    # ----------------------------------------------------------- reading

    @property
    def lease(self) -> Optional[Lease]:
        """The tenure held now (fence, ``acquired_at``, local deadline), read
        in one piece; None when not held."""
        with self._client._mu:
            lease = self._tenure.lease
            if not self._active or lease is None or monotonic() >= lease.deadline:
                return None
            return lease

    def is_owner(self) -> bool:
        """Held now: acquired, not released, not lost, deadline not passed."""
        return self.lease is not None

    @property
    def fence(self) -> int:
        """The held tenure's fence, or 0."""
        lease = self.lease
        return lease.fence if lease else 0

    def locked(self) -> bool:
        """Whether a thread of this process holds this lock (even if lost and
        not yet released), as :meth:`threading.Lock.locked`."""
        return self._active

    # ------------------------------------------------------------ acquire

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the lock; returns whether it is held.

        ``blocking=False``: one attempt (one round trip), False if another
        holder has it. ``timeout`` (seconds, -1: none) bounds the wait; False
        when it passes. Setup mistakes (42883, 42501, 22023, ...) raise at
        once; transient faults are retried within the timeout."""
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout is not None and timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        c = self._client
        if c._closing:
            raise IllegalStateError("the client is closed")
        until = None if (timeout is None or timeout == -1) else monotonic() + timeout
        me = threading.get_ident()
        if self._active and self._holder == me:
            if not blocking:
                return False
            raise IllegalStateError(f"lock {self.name!r} is already held by this thread (not reentrant)")
        # the process-local gate first
        if not blocking:
            got = self._gate.acquire(False)
        elif until is None:
            got = self._gate.acquire()
        else:
            got = self._gate.acquire(True, max(0.0, until - monotonic()))
        if not got:
            return False
        try:
            if self._contend(blocking, until):
                with c._mu:
                    self._holder = me
                    self._active = True
                return True
            if self._gave_up():
                self._withdraw()
        except BaseException:
            self._gate.release()
            raise
        self._gate.release()
        return False

    def _contend(self, blocking: bool, until: Optional[float]) -> bool:
        return bool(_drive(self._waits(blocking, until, self._attempt, threading.Event)))

    def _waits(self, blocking: bool, until: Optional[float], attempt: Callable[[], Any],
               new_event: Callable[[], Any]) -> Steps:
        """The wait for a hold as steps (see :func:`_drive`), the same for
        the threaded and the asyncio lock: ``attempt`` (True when granted,
        else what :meth:`_lost_to` takes), and waits on an event of
        ``new_event()``, whose ``wait(seconds)`` says whether it was set.
        Returns whether the lock is held."""
        c = self._client
        # Registered (simba_wait) only once an attempt lost: an uncontended
        # lock costs its two round trips and nothing on the LISTEN
        # connection. Once the registration took effect the waiter attempts
        # once more, so a release between the losing attempt and the
        # registration is not missed.
        event: Any = None  # one event, woken by a NOTIFY of any of the names
        waiters: List[Tuple[str, _Waiter]] = []
        schedule = _WaitSchedule(self.contender_id, c.notify_min_interval)
        try:
            while True:
                if c._closing:
                    raise CancelledError(f"lock {self.name!r}: the client was closed")
                if event is not None:
                    event.clear()
                try:
                    owner = yield attempt
                except SessionEndedError:
                    continue  # the session was forgotten; the next attempt opens a new one
                except Error as e:
                    if errors.is_permanent(e.sqlstate) or not blocking:
                        raise
                    log.info("simba: attempt on %r failed, retrying: %s", self.name, e)
                    delay = c._retry_delay
                    with c._mu:
                        if c._conn is None:
                            delay = max(0.01, min(delay, c._next_connect_at - monotonic()))
                    schedule.retry_in(delay)
                else:
                    if owner is True:
                        return True
                    if not blocking:
                        return False
                    self._lost_to(schedule, owner)
                if event is None:
                    event = new_event()
                    waiters = [(n, c._add_waiter(n, event)) for n in self._names]
                # wait: a NOTIFY (rate-limited) or the poll backstop
                while True:
                    now = monotonic()
                    if until is not None and now >= until:
                        return False
                    wait = schedule.wait(now)
                    if wait <= 0:
                        break
                    woke = yield functools.partial(event.wait, wait if until is None else min(wait, until - now))
                    if c._closing:
                        raise CancelledError(f"lock {self.name!r}: the client was closed")
                    if woke:
                        event.clear()
                        schedule.notified()
        finally:
            for n, w in waiters:
                c._remove_waiter(n, w)
            self._drop_channel()

    def _drop_channel(self) -> None:
        """A fair waiter stops listening to its wake channel."""
        if self._channel is not None:
            self._client._want_channel(self._channel, False)
            self._channel = None

    def _lost_to(self, schedule: _WaitSchedule, owner: Any) -> None:
        """When to attempt again after an attempt that lost to ``owner``."""
        schedule.lost_to(owner)
        c = self._client
        if (owner.under_session and owner.owner_id not in (None, self.contender_id)
                and c._lapses_announced(self._names[0])):
            schedule.at_least(c.announced_lapse_poll)  # the NOTIFY at its session's end brings it
        if self._queued:  # a fair waiter keeps its place by asking within its entry's lease
            schedule.at_most(self._client._ttl_us / 2e6)

    def _gave_up(self) -> bool:
        """The wait ended without a hold: whether this contender leaves the
        queue its last attempt left it in (a fair waiter would hold the
        queue up until its entry lapsed; its place goes to the next)."""
        queued, self._queued = self._queued, False
        return queued

    def _withdraw(self) -> None:
        """Leaves the queue the last attempt left this contender in."""
        _drive(self._withdraw_steps(self._client._statement))

    def _withdraw_steps(self, statement: Callable[..., Any]) -> Steps:
        """:meth:`_withdraw` as steps: by the release statement; if that
        fails it is owed (a fair release may have handed this contender the
        mutex meanwhile, which under a session would stay its while the
        session lives)."""
        try:
            yield functools.partial(statement, *self._release_statement())
        except Error as e:
            log.info("simba: leaving the queue of %r failed, it is owed: %s", self.name, e)
            with self._client._mu:
                self._owe_locked()

    def _release_statement(self) -> Tuple[str, Tuple[Any, ...]]:
        """The statement that gives the hold back (by id: it also serves an
        owed release; a fair one also leaves the queue)."""
        return FAIR_RELEASE_SQL if self.fair else RELEASE_SQL, (self.name, self.contender_id)

    def _acquire_statement(self) -> Tuple[str, Dict[str, Any], bool]:
        """An attempt's statement: its sql, its parameters (the session's id
        is added as ``%(s)s``) and whether it answers one row (else every
        row). :meth:`_apply` takes the reply."""
        c = self._client
        return (FAIR_ACQUIRE_SQL if self.fair else ACQUIRE_SQL,
                {"m": self.name, "id": self.contender_id, "ttl": c._ttl_us, "tr": c._tr_us}, True)

    def _apply(self, reply: Any, sent_at: float, session_id: str) -> Any:
        """An attempt's reply, sent at ``sent_at`` under ``session_id``
        (caller holds ``_op``): True when it granted a hold held from now
        on, else what :meth:`_lost_to` takes (here the owner row)."""
        if self.fair:
            self._fair_reply(reply[9], reply[10])
        return self._apply_reply(reply, sent_at)

    def _attempt(self) -> Any:
        """One attempt under the session: True when granted, else what
        :meth:`_lost_to` takes."""
        with self._op:
            return self._apply(*self._under_session(*self._acquire_statement()))

    def _under_session(self, sql: str, params: Dict[str, Any], one: bool = True) -> Tuple[Any, float, str]:
        """:meth:`_session_steps` on the client's connection (caller holds
        ``_op``), one after the other under its ``_io``."""
        c = self._client
        with c._io:
            return _drive(self._session_steps(c._statement_locked, c._session_id_locked, sql, params, one))

    def _session_steps(self, statement: Callable[..., Any], session_id: Callable[[], Any], sql: str,
                       params: Dict[str, Any], one: bool) -> Steps:
        """An attempt's statements as steps: a release owed from an earlier
        tenure first, then ``sql`` with the session's id as ``%(s)s`` (one
        is opened if none is). Returns (reply, send time, session id); a
        session the server says ended is forgotten."""
        if self._owed:
            yield functools.partial(statement, *self._release_statement())
            self._owed = False
        sid = yield session_id
        try:
            reply, sent_at = yield functools.partial(statement, sql, dict(params, s=sid), one=one)
        except SessionEndedError as e:
            self._client._forget_session(sid, str(e))
            raise
        return reply, sent_at, sid

    def _fair_reply(self, position: Optional[int], channel: Optional[str]) -> None:
        """A fair attempt's place and wake channel: listened to while queued."""
        self._queued = position is not None
        if not self._queued or channel == self._channel:
            return
        c = self._client
        if self._channel is not None:
            c._want_channel(self._channel, False)
            self._channel = None
        if channel is not None and _CHANNEL.fullmatch(channel):
            self._channel = channel
            c._want_channel(channel, True)
        else:
            log.warning("simba: ignoring the fair lock's wake channel %r", channel)

    def _apply_reply(self, row: Sequence[Any], sent_at: float) -> "bool | _Owner":
        """An acquire's reply, sent at ``sent_at``: True when it granted a
        tenure held from now on, else the owner row as it stands."""
        owner = _Owner(row, sent_at)
        if owner.owner_id != self.contender_id:
            return owner
        if not self._claim(owner.fence, server_time(owner.acquired_at), sent_at, owner.transition_at,
                           owner.current_at):
            return owner
        return True

    def _claim(self, fence: int, acquired_at: Any, sent_at: float, transition_at_us: int,
               current_at_us: int) -> bool:
        """A reply sent at ``sent_at`` granted a tenure: held from now on
        (True), or given back by id when it proved nothing (it came after
        its deadline) or the client is closing (False)."""
        c = self._client
        now = monotonic()
        with c._mu:
            lease = self._tenure.grant(self.name, self.contender_id, fence, acquired_at, sent_at,
                                       transition_at_us, current_at_us, now)
            if lease is None or c._closing:
                self._owe_locked()
                return False
            c._held.add(self)
            self._granted = lease
        c._wake_events()
        return True

    def _owe_locked(self) -> None:
        """A release by id goes to the server before anything else of this
        lock (caller holds the client's ``_mu``); the I/O thread sends it."""
        c = self._client
        self._owed = True
        c._locks.add(self)
        c._io_wake.set()

    # ------------------------------------------------------------ release

    def release(self) -> None:
        """Releases the lock: the tenure ends here first, then
        ``simba_release`` tells the server (its NOTIFY wakes the waiters).
        Ends a lost hold too. Raises
        :class:`~simba.errors.IllegalStateError` when this thread does not
        hold it. A release the server did not get is sent again later."""
        c = self._client
        with c._mu:
            if self._active and self._holder != threading.get_ident():
                raise IllegalStateError(f"release of lock {self.name!r} by a thread that does not hold it")
            self._end_locked()
        try:
            if not c._closing:
                with self._op:
                    _drive(self._release_steps(c._statement))
            else:
                self._owed = False  # the session's close releases it
        finally:
            with c._mu:
                self._active = False
                self._holder = None
            self._gate.release()

    def _end_locked(self) -> None:
        """A release's first step (caller holds the client's ``_mu``): the
        tenure ends here, and the server is owed the release until it has
        it. Raises :class:`~simba.errors.IllegalStateError` when not held."""
        if not self._active:
            raise IllegalStateError(f"release of lock {self.name!r}, which is not held")
        self._tenure.end()
        self._client._held.discard(self)
        self._check_wanted = False
        self._owed = True

    def _release_steps(self, statement: Callable[..., Any]) -> Steps:
        """A release's statement as steps (caller holds ``_op``): the server
        has it, or it stays owed and the I/O thread sends it again."""
        try:
            yield functools.partial(statement, *self._release_statement())
            self._owed = False
        except Error as e:
            log.warning("simba: release of %r failed, it is owed: %s", self.name, e)
            with self._client._mu:
                self._owe_locked()

    def _timeout_error(self) -> LockTimeoutError:
        return LockTimeoutError(f"lock {self.name!r} not acquired within {self.timeout} s")

    def __enter__(self) -> Lease:
        """Acquires (waiting at most the lock's ``timeout``) and returns the
        lease granted."""
        if not self.acquire(True, -1 if self.timeout is None else self.timeout):
            raise self._timeout_error()
        assert self._granted is not None
        return self._granted

    def __exit__(self, *exc: Any) -> None:
        if self._active and self._holder == threading.get_ident():
            self.release()

    # ------------------------------------------------------ client's side

    def _lost_locked(self, lease: Optional[Lease], *, owed: bool) -> None:
        """The tenure ``lease`` ended other than by release (caller holds the
        client's ``_mu`` and ended it in ``_tenure``): final."""
        c = self._client
        c._held.discard(self)
        self._check_wanted = False
        if owed:  # the server may still count it (under the live session)
            self._owe_locked()
        if lease is not None and self._on_lost is not None:
            c._post(self._on_lost, lease)

    def _check(self) -> None:
        """Asks the server whether the held tenure is still ours (on a NOTIFY
        of its name or a grown ``revoked`` count); a tenure that is not is
        lost. One check at a time, never beside the lock's own statement."""
        c = self._client
        with c._mu:
            lease = self._tenure.lease
            self._check_wanted = False
        if lease is None:
            return
        if not self._op.acquire(blocking=False):
            with c._mu:
                self._check_wanted = True
            return
        try:
            self._verify(lease)
        except Error as e:
            log.info("simba: check of %r failed: %s", self.name, e)
        finally:
            self._op.release()

    def _verify(self, lease: Lease) -> None:
        """``_check``'s question (caller holds ``_op``): ``simba_renew`` by
        the fence, which never grants."""
        c = self._client
        row, sent_at = c._statement(RENEW_SQL, {"m": self.name, "id": self.contender_id, "f": lease.fence,
                                                "ttl": c._ttl_us, "tr": c._tr_us})
        owner = _Owner(row, sent_at)
        with c._mu:
            if self._tenure.lease is None or self._tenure.lease.fence != lease.fence:
                return
            if owner.owner_id == self.contender_id and owner.fence == lease.fence:
                self._tenure.renew(sent_at, owner.transition_at, owner.current_at, monotonic())
                return
            log.warning("simba: lock %r was taken from us (now %r, fence %s)", self.name,
                        owner.owner_id, owner.fence)
            self._lost_locked(self._tenure.end(), owed=False)

    def _background(self) -> None:
        """The I/O thread's work for this lock: an owed release, a check."""
        c = self._client
        if monotonic() < self._bg_at:
            return
        if self._check_wanted:
            self._bg_at = monotonic() + c.notify_min_interval  # a NOTIFY storm: one check per interval
            self._check()
        if self._owed and not self._op.acquire(blocking=False):
            self._bg_at = monotonic() + 0.01  # the lock's own statement is in flight: it sends it first
        elif self._owed:
            try:
                if self._owed and not self._active_holding():
                    try:
                        c._statement(*self._release_statement())
                        self._owed = False
                    except Error as e:
                        log.info("simba: owed release of %r failed: %s", self.name, e)
                        self._bg_at = monotonic() + c._retry_delay
            finally:
                self._op.release()
        with c._mu:
            if not self._owed and not self._check_wanted:
                c._locks.discard(self)

    def _active_holding(self) -> bool:
        with self._client._mu:
            return self._tenure.lease is not None
