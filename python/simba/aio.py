"""The asyncio flavour: every kind of hold the threaded client has, with
``await acquire()``, ``await release()``, ``async with``, and cancellation by
task cancel.

An :class:`AsyncClient` wraps a :class:`~simba.Client`, whose session,
keepalive, LISTEN connection and deadline checks run on its background
threads as for threaded code (so the deadline rule and loss are the same),
and sends its holds' statements on a psycopg :class:`~psycopg.AsyncConnection`
of the event loop's. A waiting ``acquire()`` parks no thread: it awaits an
:class:`asyncio.Event` that the LISTEN thread sets (NOTIFY) or its poll time.

::

    async with await simba.aio.AsyncClient.connect("dbname=app") as client:
        async with client.lock("orders", timeout=5) as lease:
            ...
        async with client.semaphore("exports", 3) as permit:
            ...

Each kind is its threaded class with this module's acquire and release
mixed in (:class:`AsyncLock` is a :class:`~simba.Lock`, :class:`AsyncPermit`
a :class:`~simba.Permit`, ...): the statements, replies, wait schedule and
loss are the threaded kind's own, only awaited here
(:func:`simba.lock._drive`'s steps). Cancelling a task that waits in
``acquire()`` ends the wait: nothing is held after the cancellation (a grant
that was in flight is released, a queue place left). An :class:`AsyncClient`
belongs to the loop it was made in.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import psycopg

from . import errors
from .client import Client
from .lock import Callback, Lock, Steps, _contender_id, _run_steps
from .election import LEADER_SQL
from .errors import IllegalStateError, LockTimeoutError
from .lease import Lease, monotonic
from .multi import MultiLock
from .rwlock import ReadWriteLock
from .semaphore import Permit, Semaphore

T = TypeVar("T")

__all__ = ["AsyncClient", "AsyncLock", "AsyncSemaphore", "AsyncPermit", "AsyncReadWriteLock", "AsyncMultiLock",
           "AsyncElection"]


class _LoopEvent:
    """An asyncio.Event that any thread may set (the LISTEN thread does)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ev = asyncio.Event()

    def set(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.ev.set)
        except RuntimeError:  # the loop is closed
            pass

    def clear(self) -> None:
        self.ev.clear()

    async def wait(self, timeout: float) -> bool:
        # Not asyncio.wait_for: before Python 3.12 it swallows a cancellation
        # that arrives as the event is set, and the cancelled waiter would
        # wait on (seen with 20 waiters cancelled at once).
        if self.ev.is_set():
            return True
        w = asyncio.ensure_future(self.ev.wait())
        try:
            done, _ = await asyncio.wait({w}, timeout=timeout)
        finally:
            if not w.done():
                w.cancel()
        return bool(done)


async def _adrive(steps: Steps) -> Any:
    """:func:`simba.lock._drive` on the event loop: each call awaited."""
    return await _run_steps(steps, True)


class AsyncClient:
    """The asyncio face of a :class:`~simba.Client`: make it with
    ``await AsyncClient.connect(conninfo, **options)`` (the options of
    :class:`~simba.Client`); setup mistakes raise there."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self._loop = loop
        self._conn: Optional[psycopg.AsyncConnection[Any]] = None
        self._alock = asyncio.Lock()

    @classmethod
    async def connect(cls, conninfo: str = "", **options: Any) -> "AsyncClient":
        """Makes the :class:`~simba.Client` (in a worker thread) and connects
        the async statement connection."""
        loop = asyncio.get_running_loop()
        client = await loop.run_in_executor(None, functools.partial(Client, conninfo, **options))
        self = cls(client, loop)
        try:
            async with self._alock:
                await self._connect()
        except BaseException:
            await loop.run_in_executor(None, client.close)
            raise
        return self

    def lock(self, name: str, *, timeout: Optional[float] = None, contender_id: Optional[str] = None,
             on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
             on_resumed: Optional[Callback] = None, fair: bool = False) -> "AsyncLock":
        """An :class:`AsyncLock` on mutex ``name`` (arguments as
        :meth:`simba.Client.lock`, ``fair`` too; callbacks run on the
        client's thread)."""
        return AsyncLock(self, self.client, name, timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                         on_suspended=on_suspended, on_resumed=on_resumed, fair=fair)

    def election(self, name: str, *, value: Optional[str] = None,
                 on_lost: Optional[Callback] = None) -> "AsyncElection":
        """Leader election on mutex ``name`` (as :meth:`simba.Client.election`)."""
        return AsyncElection(self, name, value=value, on_lost=on_lost)

    def read_lock(self, name: str, *, timeout: Optional[float] = None, contender_id: Optional[str] = None,
                  on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                  on_resumed: Optional[Callback] = None) -> "AsyncReadWriteLock":
        """A read hold on read-write lock ``name`` (as
        :meth:`simba.Client.read_lock`)."""
        return AsyncReadWriteLock(self, self.client, name, "read", timeout=timeout, contender_id=contender_id,
                                  on_lost=on_lost, on_suspended=on_suspended, on_resumed=on_resumed)

    def write_lock(self, name: str, *, timeout: Optional[float] = None, contender_id: Optional[str] = None,
                   on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                   on_resumed: Optional[Callback] = None) -> "AsyncReadWriteLock":
        """A write hold on read-write lock ``name`` (as
        :meth:`simba.Client.write_lock`)."""
        return AsyncReadWriteLock(self, self.client, name, "write", timeout=timeout, contender_id=contender_id,
                                  on_lost=on_lost, on_suspended=on_suspended, on_resumed=on_resumed)

    def multi_lock(self, names: Sequence[str], *, timeout: Optional[float] = None,
                   contender_id: Optional[str] = None, on_lost: Optional[Callback] = None,
                   on_suspended: Optional[Callback] = None,
                   on_resumed: Optional[Callback] = None) -> "AsyncMultiLock":
        """Every mutex of ``names`` at once, or none (as
        :meth:`simba.Client.multi_lock`)."""
        return AsyncMultiLock(self, self.client, names, timeout=timeout, contender_id=contender_id,
                              on_lost=on_lost, on_suspended=on_suspended, on_resumed=on_resumed)

    def semaphore(self, key: str, permits: int, *, timeout: Optional[float] = None,
                  holder: Optional[str] = None, context: Optional[str] = None,
                  on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                  on_resumed: Optional[Callback] = None) -> "AsyncSemaphore":
        """At most ``permits`` holders of ``key`` at once (as
        :meth:`simba.Client.semaphore`): an :class:`AsyncSemaphore`."""
        return AsyncSemaphore(self, key, permits, timeout=timeout, holder=holder or _contender_id(),
                              context=context, on_lost=on_lost, on_suspended=on_suspended, on_resumed=on_resumed)

    async def close(self) -> None:
        """Closes the async connection, then the client (its session's close
        releases everything held)."""
        async with self._alock:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
        await self._loop.run_in_executor(None, self.client.close)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ----------------------------------------------------------- internals

    async def _connect(self) -> "psycopg.AsyncConnection[Any]":
        if self._conn is not None and not self._conn.closed:
            return self._conn
        c = self.client
        try:
            conn = await psycopg.AsyncConnection.connect(c._conninfo, autocommit=True, **c._extra)
            if not c._prepare:
                conn.prepare_threshold = None
            settings = c._settings_statement()
            if settings is not None:
                await conn.execute(*settings)
        except psycopg.Error as e:
            err = errors.connect_error(e)
            err.message = f"could not connect to {c._target()}: {' '.join(err.message.split())}"
            err.args = (err.message,)
            raise err from e
        self._conn = conn
        return conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    async def _statement(self, sql: str, params: Any, *, one: bool = True) -> Tuple[Any, float]:
        """One statement on the async connection, under a watchdog
        (statement_timeout and a half); returns (row, or every row if not
        ``one``; send time). A task cancelled meanwhile lets the statement
        finish (one round trip, at most the watchdog), so the connection
        stays in a known state, and then raises CancelledError."""
        async with self._alock:
            conn = await self._connect()
            sent_at = monotonic()
            run = asyncio.ensure_future(self._run(conn, sql, params, one))
            try:
                row = await asyncio.shield(run)
            except asyncio.CancelledError:
                await asyncio.wait({run})
                if not run.cancelled() and run.exception() is not None:
                    pass  # the statement's own error; the cancellation wins
                raise
            return row, sent_at

    async def _run(self, conn: "psycopg.AsyncConnection[Any]", sql: str, params: Any, one: bool) -> Any:
        c = self.client
        try:
            cur = await asyncio.wait_for(conn.execute(sql, params), c._statement_timeout * 1.5)
            return await (cur.fetchone() if one else cur.fetchall())
        except psycopg.Error as e:
            if conn.broken or conn.closed:
                await self._drop()
                raise errors.from_psycopg(e, lost=True) from e
            raise errors.from_psycopg(e) from e
        except asyncio.TimeoutError as e:
            await self._drop()
            raise errors.ConnectionError("a statement got no answer in time", "08006") from e

    async def _session_id(self) -> str:
        c = self.client
        with c._mu:
            s = c._session
        if s is not None:
            return s.id

        def open_session() -> str:
            with c._io:
                return c._session_id_locked()

        return await self._loop.run_in_executor(None, open_session)


class _AsyncOnly:
    """Refuses a plain ``with``: an asyncio kind is entered with ``async with``."""

    def __enter__(self) -> Any:
        raise TypeError(f"use 'async with' with an {type(self).__name__}")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover
        raise TypeError(f"use 'async with' with an {type(self).__name__}")


class _AsyncHold(_AsyncOnly, Lock):
    """asyncio's acquire and release, mixed in before a threaded kind
    (``AsyncLock(_AsyncHold, Lock)``, ``AsyncPermit(_AsyncHold, Permit)``):
    the kind's statements, replies, wait loop and hooks, awaited on the
    async connection. Within the process a hold is a mutex between tasks;
    not reentrant (a second ``acquire`` by the holding task raises
    :class:`~simba.errors.IllegalStateError`); any task may release it, as
    :class:`asyncio.Lock`. ``lease``, ``is_owner()``, ``fence``, loss and
    the callbacks are the kind's own."""

    def __init__(self, aclient: AsyncClient, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._aclient = aclient
        self._agate = asyncio.Lock()
        self._holder_task: Optional["asyncio.Task[Any]"] = None

    async def acquire(self, blocking: bool = True,  # type: ignore[override]
                      timeout: Optional[float] = None) -> bool:
        """Takes the hold; returns whether it is held. ``timeout`` in seconds
        (None: no limit); ``blocking=False``: one attempt. Cancelling the task
        ends the wait and leaves nothing held."""
        c = self._client
        if c._closing:
            raise IllegalStateError("the client is closed")
        task = asyncio.current_task()
        if self._active and self._holder_task is task:
            if not blocking:
                return False
            raise IllegalStateError(f"lock {self.name!r} is already held by this task (not reentrant)")
        until = None if timeout is None or not blocking else monotonic() + timeout
        if not await self._gate_acquire(blocking, until):
            return False
        loop = asyncio.get_running_loop()
        try:
            got = await _adrive(self._waits(blocking, until, self._aattempt, lambda: _LoopEvent(loop)))
            if not got and self._gave_up():
                await _adrive(self._withdraw_steps(self._aclient._statement))
        except asyncio.CancelledError:
            if self._gave_up():
                self._owe()  # the queue place is left by id, from the I/O thread
            self._agate.release()
            raise
        except BaseException:
            self._agate.release()
            raise
        if not got:
            self._agate.release()
            return False
        with c._mu:
            self._active = True
            self._holder_task = task
        return True

    async def _gate_acquire(self, blocking: bool, until: Optional[float]) -> bool:
        if not blocking:
            if self._agate.locked():
                return False
            await self._agate.acquire()  # free: completes at once
            return True
        fut = asyncio.ensure_future(self._agate.acquire())
        try:
            done, _ = await asyncio.wait({fut}, timeout=None if until is None else max(0.0, until - monotonic()))
        except BaseException:
            await self._abandon(fut)
            raise
        if not done:
            await self._abandon(fut)
            return False
        return True

    async def _abandon(self, fut: "asyncio.Future[Any]") -> None:
        """Gives up a gate acquire in flight, releasing the gate if it got it."""
        if not fut.done():
            fut.cancel()
            try:
                await fut
            except BaseException:
                pass
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            self._agate.release()

    async def _op_acquire(self) -> None:
        # the hold's statements, one at a time: the I/O thread holds it only
        # for one statement of its own (an owed release, a check)
        while not self._op.acquire(blocking=False):
            await asyncio.sleep(0.002)

    def _owe(self) -> None:
        with self._client._mu:
            self._owe_locked()

    async def _aattempt(self) -> Any:
        """:meth:`_attempt` on the event loop: the kind's statements and
        reply, the statements awaited on the async connection."""
        ac = self._aclient
        await self._op_acquire()
        run = asyncio.ensure_future(_adrive(self._session_steps(ac._statement, ac._session_id,
                                                                *self._acquire_statement())))
        try:
            reply = await asyncio.shield(run)
        except asyncio.CancelledError:
            # The statements go on to their end (the connection stays in a
            # known state), then what they granted is given back, even if
            # this wait for them is cancelled too.
            run.add_done_callback(self._give_back)
            await asyncio.wait({run})
            raise
        except BaseException:
            self._op.release()
            raise
        try:
            return self._apply(*reply)
        finally:
            self._op.release()

    def _give_back(self, run: "asyncio.Future[Any]") -> None:
        """The statements of an attempt whose task was cancelled ended
        (``_op`` still held for them): a hold they granted is never held
        here, and it and a queue place they took go back by the release
        statement, from the I/O thread."""
        c = self._client
        try:
            if run.cancelled() or run.exception() is not None:
                return  # as an attempt that failed
            granted = self._apply(*run.result()) is True  # a permit learns its token
            with c._mu:
                if granted:
                    self._tenure.end()
                    c._held.discard(self)
                if self._gave_up() or granted:
                    self._owe_locked()
            self._drop_channel()
        finally:
            self._op.release()

    async def release(self) -> None:  # type: ignore[override]
        """Releases the hold (it ends here first, then the kind's release
        statement); ends a lost hold too. A release the server did not get
        (an error, a cancellation) is sent again by the client."""
        c = self._client
        with c._mu:
            self._end_locked()
        try:
            if c._closing:
                self._owed = False  # the session's close releases it
            else:
                await self._op_acquire()
                try:
                    await _adrive(self._release_steps(self._aclient._statement))
                finally:
                    self._op.release()
        finally:
            if self._owed:  # cancelled before the server had it
                self._owe()
            with c._mu:
                self._active = False
                self._holder_task = None
            self._agate.release()

    async def __aenter__(self) -> Lease:
        if not await self.acquire(True, self.timeout):
            raise self._timeout_error()
        assert self._granted is not None
        return self._granted

    async def __aexit__(self, *exc: Any) -> None:
        if self._active:
            await self.release()


class AsyncLock(_AsyncHold, Lock):
    """A :class:`~simba.Lock` for asyncio (see :meth:`AsyncClient.lock`):
    ``await acquire()``, ``await release()``, ``async with lock as lease:``;
    ``fair=True`` as the threaded lock's."""


class AsyncReadWriteLock(_AsyncHold, ReadWriteLock):
    """A :class:`~simba.ReadWriteLock` for asyncio (see
    :meth:`AsyncClient.read_lock` and :meth:`AsyncClient.write_lock`); a
    cancelled writer leaves the queue as one that timed out."""


class AsyncMultiLock(_AsyncHold, MultiLock):
    """A :class:`~simba.MultiLock` for asyncio (see
    :meth:`AsyncClient.multi_lock`): every member at once or none."""


class AsyncPermit(_AsyncHold, Permit):
    """A :class:`~simba.Permit` for asyncio, held by the task that acquired
    it (any task may release it); ``async with permit:`` releases a held
    permit at the end."""

    async def __aenter__(self) -> Lease:
        return Permit.__enter__(self)


class AsyncSemaphore(_AsyncOnly, Semaphore):
    """A :class:`~simba.Semaphore` for asyncio (see
    :meth:`AsyncClient.semaphore`): ``await acquire()`` returns a held
    :class:`AsyncPermit` (None when none is free and ``blocking`` is False,
    or ``timeout`` passed); ``async with semaphore as permit:`` holds one for
    the block (:class:`~simba.errors.LockTimeoutError` after ``timeout``)."""

    def __init__(self, aclient: AsyncClient, key: str, permits: int, **kw: Any) -> None:
        super().__init__(aclient.client, key, permits, **kw)
        self._aclient = aclient
        self._entered_by: Dict[Optional["asyncio.Task[Any]"], List[AsyncPermit]] = {}  # innermost last

    def _permit(self) -> AsyncPermit:
        return AsyncPermit(self._aclient, self)

    async def acquire(self, blocking: bool = True,  # type: ignore[override]
                      timeout: Optional[float] = None) -> Optional[AsyncPermit]:
        """A permit, held; None when ``blocking`` is False and none is free,
        or when ``timeout`` (seconds, None: none) passed."""
        permit = self._permit()
        return permit if await permit.acquire(blocking, timeout) else None

    async def __aenter__(self) -> AsyncPermit:
        permit = await self.acquire(True, self.timeout)
        if permit is None:
            raise self._timeout_error()
        self._entered_by.setdefault(asyncio.current_task(), []).append(permit)
        return permit

    async def __aexit__(self, *exc: Any) -> None:
        task = asyncio.current_task()
        stack = self._entered_by[task]
        permit = stack.pop()
        if not stack:
            del self._entered_by[task]
        if permit.locked():
            await permit.release()


class AsyncElection:
    """:class:`~simba.Election` for asyncio: ``await campaign()``, ``await
    resign()``, ``await leader()``, ``await run(coro_func)``; a leader is an
    :class:`AsyncLock` holder, so loss is final and the fence grows with
    every new leader. Cancelling a campaigning task ends the campaign."""

    def __init__(self, aclient: AsyncClient, name: str, *, value: Optional[str] = None,
                 on_lost: Optional[Callback] = None) -> None:
        self.name = name
        self._aclient = aclient
        self._lock = aclient.lock(name, contender_id=value, on_lost=on_lost)

    @property
    def value(self) -> str:
        """What :meth:`leader` returns while this campaigner leads: its contender id."""
        return self._lock.contender_id

    async def campaign(self, timeout: Optional[float] = None) -> Lease:
        """Until elected (at most ``timeout`` seconds, None: no limit;
        :class:`~simba.errors.LockTimeoutError` then); the leadership's lease."""
        if not await self._lock.acquire(timeout=timeout):
            raise LockTimeoutError(f"not elected leader of {self.name!r} within {timeout} s")
        lease = self._lock.lease
        if lease is None:  # lost between the grant and this read
            raise LockTimeoutError(f"elected leader of {self.name!r}, but the lease ended at once")
        return lease

    async def resign(self) -> None:
        """Steps down (the next campaigner is elected at once); ends a lost
        leadership too. Nothing when not leading."""
        if self._lock.locked():
            await self._lock.release()

    def is_leader(self) -> bool:
        """Leads now: elected, and the lease's local deadline not passed."""
        return self._lock.is_owner()

    @property
    def lease(self) -> Optional[Lease]:
        """The leadership's lease while leading, else None."""
        return self._lock.lease

    async def leader(self) -> Optional[str]:
        """The current leader's value as the server sees it now, or None."""
        row, _ = await self._aclient._statement(LEADER_SQL, (self.name,))
        return row[0] if row else None

    async def run(self, func: Callable[..., Awaitable[T]], *args: Any, timeout: Optional[float] = None) -> T:
        """Campaigns, awaits ``func(lease, *args)`` as leader, and resigns
        when it returns or raises (or the task is cancelled)."""
        lease = await self.campaign(timeout)
        try:
            return await func(lease, *args)
        finally:
            await self.resign()

    def __repr__(self) -> str:
        return f"<simba.aio.AsyncElection {self.name!r} value={self.value!r} leader={self.is_leader()}>"
