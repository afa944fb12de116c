"""The asyncio flavour: ``async with client.lock(...)``, cancellation by task
cancel.

An :class:`AsyncClient` wraps a :class:`~simba.Client`, whose session,
keepalive, LISTEN connection and deadline checks run on its background
threads as for threaded code (so the deadline rule and loss are the same),
and sends its locks' statements on a psycopg :class:`~psycopg.AsyncConnection`
of the event loop's. A waiting ``acquire()`` parks no thread: it awaits an
:class:`asyncio.Event` that the LISTEN thread sets (NOTIFY) or its poll time.

::

    async with await simba.aio.AsyncClient.connect("dbname=app") as client:
        async with client.lock("orders", timeout=5) as lease:
            ...

Cancelling a task that waits in ``acquire()`` ends the wait: the lock is
never held after the cancellation (a grant that was in flight is released).
An :class:`AsyncClient` belongs to the loop it was made in.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Optional, Tuple

import psycopg

from . import errors
from .client import ACQUIRE_SQL, RELEASE_SQL, Callback, Client, Lock, _Owner, _WaitSchedule, log
from .errors import CancelledError, Error, IllegalStateError, LockTimeoutError, SessionEndedError
from .lease import Lease, monotonic

__all__ = ["AsyncClient", "AsyncLock"]


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
             on_resumed: Optional[Callback] = None) -> "AsyncLock":
        """An :class:`AsyncLock` on mutex ``name`` (arguments as
        :meth:`simba.Client.lock`; callbacks run on the client's thread)."""
        return AsyncLock(self, name, timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                         on_suspended=on_suspended, on_resumed=on_resumed)

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

    async def _statement(self, sql: str, params: Any) -> Tuple[Any, float]:
        """One statement on the async connection, under a watchdog
        (statement_timeout and a half); returns (row, send time). A task
        cancelled meanwhile lets the statement finish (one round trip, at
        most the watchdog), so the connection stays in a known state, and
        then raises CancelledError."""
        async with self._alock:
            conn = await self._connect()
            sent_at = monotonic()
            run = asyncio.ensure_future(self._run(conn, sql, params))
            try:
                row = await asyncio.shield(run)
            except asyncio.CancelledError:
                await asyncio.wait({run})
                if not run.cancelled() and run.exception() is not None:
                    pass  # the statement's own error; the cancellation wins
                raise
            return row, sent_at

    async def _run(self, conn: "psycopg.AsyncConnection[Any]", sql: str, params: Any) -> Any:
        c = self.client
        try:
            cur = await asyncio.wait_for(conn.execute(sql, params), c._statement_timeout * 1.5)
            return await cur.fetchone()
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


class AsyncLock(Lock):
    """A :class:`~simba.Lock` for asyncio: ``await acquire()``, ``await
    release()``, ``async with lock as lease:``. Within the process it is a
    mutex between tasks; not reentrant (a second ``acquire`` by the holding
    task raises :class:`~simba.errors.IllegalStateError`); any task may
    release it, as :class:`asyncio.Lock`. ``lease``, ``is_owner()``,
    ``fence``, loss and the callbacks are :class:`~simba.Lock`'s."""

    def __init__(self, aclient: AsyncClient, name: str, **kw: Any) -> None:
        super().__init__(aclient.client, name, **kw)
        self._aclient = aclient
        self._agate = asyncio.Lock()
        self._holder_task: Optional["asyncio.Task[Any]"] = None

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:  # type: ignore[override]
        """Takes the lock; returns whether it is held. ``timeout`` in seconds
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
        try:
            got = await self._acontend(blocking, until)
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
        # the lock's statements, one at a time: the I/O thread holds it only
        # for one statement of its own (an owed release, a check)
        while not self._op.acquire(blocking=False):
            await asyncio.sleep(0.002)

    async def _acontend(self, blocking: bool, until: Optional[float]) -> bool:
        c = self._client
        waiter: Optional[Any] = None
        ev: Optional[_LoopEvent] = None
        schedule = _WaitSchedule(self.contender_id, c.notify_min_interval)
        try:
            while True:
                if c._closing:
                    raise CancelledError(f"lock {self.name!r}: the client was closed")
                if ev is not None:
                    ev.clear()
                try:
                    owner = await self._aattempt()
                except SessionEndedError:
                    continue
                except Error as e:
                    if errors.is_permanent(e.sqlstate) or not blocking:
                        raise
                    log.info("simba: attempt on %r failed, retrying: %s", self.name, e)
                    schedule.retry_in(c._retry_delay)
                else:
                    if owner is True:
                        return True
                    if not blocking:
                        return False
                    assert isinstance(owner, _Owner)
                    schedule.lost_to(owner)
                if waiter is None:
                    ev = _LoopEvent(asyncio.get_running_loop())
                    waiter = c._add_waiter(self.name, ev)
                assert ev is not None
                while True:
                    now = monotonic()
                    if until is not None and now >= until:
                        return False
                    wait = schedule.wait(now)
                    if wait <= 0:
                        break
                    woke = await ev.wait(wait if until is None else min(wait, until - now))
                    if c._closing:
                        raise CancelledError(f"lock {self.name!r}: the client was closed")
                    if woke:
                        ev.clear()
                        schedule.notified()
        finally:
            if waiter is not None:
                c._remove_waiter(self.name, waiter)

    def _owe(self) -> None:
        c = self._client
        with c._mu:
            self._owed = True
            c._locks.add(self)
        c._io_wake.set()

    async def _aattempt(self) -> "bool | _Owner":
        c = self._client
        ac = self._aclient
        await self._op_acquire()
        try:
            if self._owed:
                await ac._statement(RELEASE_SQL, (self.name, self.contender_id))
                self._owed = False
            sid = await ac._session_id()
            try:
                row, sent_at = await ac._statement(ACQUIRE_SQL, {
                    "m": self.name, "id": self.contender_id, "ttl": c._ttl_us, "tr": c._tr_us, "s": sid})
            except SessionEndedError as e:
                c._forget_session(sid, str(e))
                raise
            except Error:
                raise
            except BaseException:
                # cancelled with the statement in flight: the grant may have
                # committed. Released by id (the I/O thread), never held.
                self._owe()
                raise
            return self._apply_reply(row, sent_at)
        finally:
            self._op.release()

    async def release(self) -> None:  # type: ignore[override]
        """Releases the lock (the tenure ends here first, then
        ``simba_release``); ends a lost hold too. A release the server did
        not get (an error, a cancellation) is sent again by the client."""
        c = self._client
        with c._mu:
            if not self._active:
                raise IllegalStateError(f"release of lock {self.name!r}, which is not held")
            self._tenure.end()
            c._held.discard(self)
            self._check_wanted = False
            self._owed = True
        try:
            if c._closing:
                self._owed = False  # the session's close releases it
            else:
                await self._op_acquire()
                try:
                    await self._aclient._statement(RELEASE_SQL, (self.name, self.contender_id))
                    self._owed = False
                except Error as e:
                    log.warning("simba: release of %r failed, it is owed: %s", self.name, e)
                finally:
                    self._op.release()
        finally:
            if self._owed:
                self._owe()
            with c._mu:
                self._active = False
                self._holder_task = None
            self._agate.release()

    async def __aenter__(self) -> Lease:
        if not await self.acquire(True, self.timeout):
            raise LockTimeoutError(f"lock {self.name!r} not acquired within {self.timeout} s")
        assert self._granted is not None
        return self._granted

    async def __aexit__(self, *exc: Any) -> None:
        if self._active:
            await self.release()

    def __enter__(self) -> Lease:
        raise TypeError("use 'async with' with an AsyncLock")

    def __exit__(self, *exc: Any) -> None:  # pragma: no cover
        raise TypeError("use 'async with' with an AsyncLock")
