"""The base of every kind of lock: :class:`Lock`, one hold on the server
(a tenure with its fence) and the wait for it, which the read-write lock,
the multi-lock and the permit specialise, and the statements of the mutex.
A hold's statements and waits are written once, as steps
(:data:`Steps`), that the threaded and the asyncio flavour run.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import queue
import random
import re
import socket
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, Optional, Sequence, Tuple

from . import errors
from .errors import (
    CancelledError,
    Error,
    IllegalStateError,
    LockTimeoutError,
    SessionEndedError,
)
from .lease import Lease, Tenure, monotonic, server_time

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Lock", "Callback"]

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

_ids = itertools.count()


def _contender_id() -> str:
    """``{counter}:{pid}@{host}``, as the C++ client's ``ContenderId::host()``."""
    return f"{next(_ids)}:{os.getpid()}@{socket.gethostname() or 'localhost'}"


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


class _Waiter:
    """A waiter on a name; ``event`` has ``set()`` (a threading.Event, or an
    asyncio adapter that sets an asyncio.Event in its loop)."""

    __slots__ = ("event",)

    def __init__(self, event: Any = None) -> None:
        self.event = event if event is not None else threading.Event()


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
