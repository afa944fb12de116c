"""The asyncio flavour against a real server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest

import simba
import simba.aio

from conftest import Database, eventually, unique


async def aclient(db: Database, **kw: Any) -> simba.aio.AsyncClient:
    kw.setdefault("application_name", unique("simba-pytest-aio"))
    return await simba.aio.AsyncClient.connect(db.conninfo(), **kw)


def test_async_with_and_exclusion_with_threads(db: Database, name: str) -> None:
    sync = db.client()
    peak = 0
    inside = 0
    fences: List[int] = []
    m = threading.Lock()

    def enter(fence: int) -> None:
        nonlocal inside, peak
        with m:
            inside += 1
            peak = max(peak, inside)
            fences.append(fence)

    def leave() -> None:
        nonlocal inside
        with m:
            inside -= 1

    def thread_worker() -> None:
        lk = sync.lock(name)
        for _ in range(20):
            with lk as lease:
                enter(lease.fence)
                time.sleep(0.001)
                leave()

    async def main() -> None:
        async with await aclient(db) as ac:
            async def task_worker() -> None:
                lk = ac.lock(name, timeout=30)
                for _ in range(20):
                    async with lk as lease:
                        assert lk.is_owner() and lease.fence == lk.fence
                        enter(lease.fence)
                        await asyncio.sleep(0.001)
                        leave()
                    assert not lk.is_owner()
            await asyncio.gather(task_worker(), task_worker(), asyncio.to_thread(thread_worker))

    asyncio.run(main())
    assert peak == 1 and len(fences) == 60
    assert all(x < y for x, y in zip(fences, fences[1:]))
    assert db.owner(name)[0] is None


def test_async_waiter_woken_promptly_and_parks_no_thread(db: Database, name: str) -> None:
    holder = db.client()
    lh = holder.lock(name)
    assert lh.acquire()

    async def main() -> float:
        async with await aclient(db) as ac:
            lk = ac.lock(name)
            threads_before = threading.active_count()
            waiters = [asyncio.ensure_future(ac.lock(name).acquire(timeout=30)) for _ in range(20)]
            t = asyncio.ensure_future(lk.acquire(timeout=30))
            await asyncio.sleep(0)
            assert await asyncio.get_running_loop().run_in_executor(None, lambda: eventually(
                lambda: db.admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                         " AND classid = 1397312834").fetchone()[0] > 0, 5))
            assert threading.active_count() <= threads_before + 1  # no thread per waiter
            # cancelled all at once, each ends its wait (asyncio.wait_for once lost a
            # cancellation that came as the waiter's event was set)
            for w in waiters:
                w.cancel()
            res = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 10)
            assert all(isinstance(r, asyncio.CancelledError) for r in res), res
            t0 = time.monotonic()
            lh.release()  # the holding thread: the loop runs on it
            assert await asyncio.wait_for(t, 10)
            took = time.monotonic() - t0
            assert lk.is_owner()
            await lk.release()
            return took

    took = asyncio.run(main())
    assert took < 1.0, took


def test_cancel_ends_the_wait_and_holds_nothing(db: Database, name: str) -> None:
    holder = db.client()
    lh = holder.lock(name)
    assert lh.acquire()

    async def main() -> None:
        async with await aclient(db) as ac:
            lk = ac.lock(name)
            t = asyncio.ensure_future(lk.acquire())
            # the task lost its attempt and waits (its wait is registered)
            assert await asyncio.get_running_loop().run_in_executor(None, lambda: eventually(
                lambda: db.admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                         " AND classid = 1397312834").fetchone()[0] > 0, 5))
            assert not t.done()
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert not lk.is_owner() and not lk.locked()
            lh.release()  # the holding thread: the loop runs on it
            # nothing of ours on the server, and the lock is free for others
            assert db.owner(name)[0] is None
            assert await lk.acquire(blocking=False)
            with pytest.raises(simba.IllegalStateError):
                await lk.acquire()
            assert await lk.acquire(blocking=False) is False
            await lk.release()
            other = ac.lock(name, timeout=0.2)
            async with other:
                with pytest.raises(simba.LockTimeoutError):
                    async with ac.lock(name, timeout=0.2):
                        pass

    asyncio.run(main())


def test_async_loss_and_fence_check(db: Database, name: str) -> None:
    lost: List[simba.Lease] = []

    async def main() -> None:
        async with await aclient(db) as ac:
            lk = ac.lock(name, on_lost=lost.append)
            async with lk as lease:
                with db.app_connection() as conn:
                    simba.fence_check(conn, lease)
                    conn.rollback()
                    db.admin.execute("SELECT simba_force_release(%s)", (name,))
                    ok = await asyncio.get_running_loop().run_in_executor(None, lambda: eventually(
                        lambda: bool(lost), 5))
                    assert ok and lost[0].fence == lease.fence
                    assert not lk.is_owner()
                    with pytest.raises(simba.NotOwnerError):
                        simba.fence_check(conn, lease)

    asyncio.run(main())


def test_async_setup_mistakes(db: Database, stranger_role: str) -> None:
    async def main() -> None:
        with pytest.raises(simba.PermissionDeniedError):
            await simba.aio.AsyncClient.connect(db.dsn(user=stranger_role))
        with pytest.raises(simba.ConnectionError) as ei:
            await simba.aio.AsyncClient.connect("dbname=simba_no_such_database")
        assert ei.value.sqlstate == "3D000"

    asyncio.run(main())
