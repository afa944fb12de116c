"""The asyncio flavour against a real server: every kind, each also
against threads of the same Client and of another, cancellation and loss."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import psycopg
import pytest

import simba
import simba.aio

from conftest import Database, eventually, unique
from test_fair import queued
from test_rwlock import SHORT, status
from test_semaphore import held_on_server


async def aclient(db: Database, **kw: Any) -> simba.aio.AsyncClient:
    kw.setdefault("application_name", unique("simba-pytest-aio"))
    return await simba.aio.AsyncClient.connect(db.conninfo(), **kw)


async def until(pred: Callable[[], Any], timeout: float = 5) -> bool:
    """``eventually`` off the loop: the predicate's queries block."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: eventually(pred, timeout))


def registered(db: Database) -> bool:
    """A waiter's simba_wait registration is in place (an advisory lock of simba's)."""
    return db.admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                            " AND classid = 1397312834").fetchone()[0] > 0


class Occupancy:
    """Who is inside each name at once: the most holders at a time, and
    whether an exclusive holder ever had company."""

    def __init__(self) -> None:
        self.mu = threading.Lock()
        self.inside: Dict[str, List[bool]] = collections.defaultdict(list)  # each holder: exclusive?
        self.most = 0
        self.shared_an_exclusive = False
        self.entries = 0

    @contextlib.contextmanager
    def holding(self, names: Sequence[str], exclusive: bool) -> Iterator[None]:
        with self.mu:
            self.entries += 1
            for n in names:
                self.inside[n].append(exclusive)
                self.most = max(self.most, len(self.inside[n]))
                self.shared_an_exclusive |= len(self.inside[n]) > 1 and any(self.inside[n])
        try:
            yield
        finally:
            with self.mu:
                for n in names:
                    self.inside[n].remove(exclusive)


Hold = Tuple[Any, Sequence[str], bool]  # something to enter, the names it holds, whether alone


async def crowd(occ: Occupancy, tasks: Sequence[Hold], threads: Sequence[Hold], rounds: int = 6) -> None:
    """Enters each hold ``rounds`` times, all at once: those of ``tasks``
    from tasks of this loop (``async with``), those of ``threads`` from
    threads (``with``), each entry counted in ``occ``."""
    async def task(hold: Any, names: Sequence[str], exclusive: bool) -> None:
        for _ in range(rounds):
            async with hold:
                with occ.holding(names, exclusive):
                    await asyncio.sleep(0.002)  # a short hold, so that holds overlap

    def thread(hold: Any, names: Sequence[str], exclusive: bool) -> None:
        for _ in range(rounds):
            with hold:
                with occ.holding(names, exclusive):
                    time.sleep(0.002)

    await asyncio.wait_for(asyncio.gather(*(task(*h) for h in tasks),
                                          *(asyncio.to_thread(thread, *h) for h in threads)), 120)


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
            assert await until(lambda: registered(db))
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
            assert await until(lambda: registered(db))  # the task lost its attempt and waits
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
                    assert await until(lambda: bool(lost))
                    assert lost[0].fence == lease.fence
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


# ---------------------------------------------------------------- fair locks

def test_fair_lock_excludes_across_tasks_threads_and_clients(db: Database, name: str) -> None:
    other = db.client()
    occ = Occupancy()

    async def main() -> None:
        async with await aclient(db) as ac:
            await crowd(occ, [(ac.lock(name, fair=True), [name], True) for _ in range(2)],
                        [(ac.client.lock(name, fair=True), [name], True),
                         (other.lock(name, fair=True), [name], True)])

    asyncio.run(main())
    assert occ.entries == 24 and occ.most == 1
    assert queued(db, name) == [] and db.owner(name)[0] is None


def test_fair_waiters_of_tasks_threads_and_clients_in_arrival_order(db: Database, name: str) -> None:
    # leases of 16 s, queued waiters asking every 5 s: only a wake-up hands over within a second
    holder = db.client().lock(name, fair=True)
    assert holder.acquire()
    other = db.client()
    order: List[Tuple[str, float]] = []

    async def in_task(lk: simba.aio.AsyncLock) -> None:
        assert await lk.acquire(timeout=60)
        order.append((lk.contender_id, time.monotonic()))
        await lk.release()

    def in_thread(lk: simba.Lock) -> None:
        assert lk.acquire(timeout=60)
        order.append((lk.contender_id, time.monotonic()))
        lk.release()

    async def main() -> float:
        async with await aclient(db) as ac:
            locks = [ac.lock(name, fair=True), other.lock(name, fair=True), ac.lock(name, fair=True),
                     ac.client.lock(name, fair=True)]
            waits = []
            for lk in locks:
                waits.append(asyncio.ensure_future(
                    in_task(lk) if isinstance(lk, simba.aio.AsyncLock) else asyncio.to_thread(in_thread, lk)))
                # queued before the next one arrives: arrival order is this order
                assert await until(lambda: lk.contender_id in queued(db, name))
            assert queued(db, name) == [lk.contender_id for lk in locks]
            released = time.monotonic()
            holder.release()  # the holding thread: the loop runs on it
            await asyncio.wait_for(asyncio.gather(*waits), 60)
            assert [i for i, _ in order] == [lk.contender_id for lk in locks]
            return released

    released = asyncio.run(main())
    times = [released] + [t for _, t in order]
    handoffs = [b - a for a, b in zip(times, times[1:])]
    assert all(h < 1.0 for h in handoffs), handoffs  # woken on their channels, not polled
    assert queued(db, name) == [] and db.owner(name)[0] is None


def test_a_fair_waiter_cancelled_or_timed_out_leaves_the_queue(db: Database, name: str) -> None:
    holder = db.client().lock(name, fair=True)
    assert holder.acquire()

    async def main() -> None:
        async with await aclient(db) as ac:
            quitter = ac.lock(name, fair=True, timeout=0.3)
            assert not await quitter.acquire(timeout=0.3)
            assert queued(db, name) == []  # its place is gone at once
            with pytest.raises(simba.LockTimeoutError):
                async with quitter:
                    pass
            assert queued(db, name) == []
            waiter = ac.lock(name, fair=True)
            t = asyncio.ensure_future(waiter.acquire())
            assert await until(lambda: queued(db, name) == [waiter.contender_id])
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            # left well before its entry's lease (16 s) would have ended
            assert await until(lambda: queued(db, name) == [])
            assert not waiter.locked() and not waiter.is_owner()
            holder.release()  # the holding thread: the loop runs on it
            assert db.owner(name)[0] is None
            async with waiter as lease:  # nothing of the cancelled wait is left to hold it up
                assert waiter.is_owner() and lease.fence > 0

    asyncio.run(main())
    assert db.owner(name)[0] is None


# ---------------------------------------------------------------- semaphores

def test_semaphore_at_most_permits_across_tasks_threads_and_clients(db: Database, name: str) -> None:
    """Three tasks sharing one AsyncSemaphore, a thread of the same Client and
    one of another, two permits: never three at once, both permits used."""
    other = db.client()
    occ = Occupancy()

    async def main() -> None:
        async with await aclient(db) as ac:
            sem = ac.semaphore(name, 2)
            await crowd(occ, [(sem, [name], False) for _ in range(3)],
                        [(ac.client.semaphore(name, 2), [name], False), (other.semaphore(name, 2), [name], False)])

    asyncio.run(main())
    assert occ.entries == 30 and occ.most == 2
    assert held_on_server(db, name) == 0


def test_semaphore_timeouts_and_a_cancelled_waiter(db: Database, name: str) -> None:
    held = db.client().semaphore(name, 1).acquire()
    assert held is not None

    async def main() -> None:
        async with await aclient(db) as ac:
            sem = ac.semaphore(name, 1, timeout=0.3)
            assert await sem.acquire(blocking=False) is None
            assert await sem.acquire(timeout=0.3) is None
            with pytest.raises(simba.LockTimeoutError):
                async with sem:
                    pass
            t = asyncio.ensure_future(sem.acquire())
            assert await until(lambda: registered(db))  # it lost its attempt and waits
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert held_on_server(db, name) == 1
            held.release()  # the acquiring thread: the loop runs on it
            async with sem as permit:
                assert isinstance(permit, simba.aio.AsyncPermit) and permit.is_owner()
                assert held_on_server(db, name) == 1
            assert not permit.is_owner() and held_on_server(db, name) == 0
            permit = await sem.acquire()
            assert permit is not None
            async with permit as lease:  # a held permit, released at the block's end
                assert lease.fence == permit.fence
            assert not permit.locked() and held_on_server(db, name) == 0

    asyncio.run(main())


def test_a_permit_granted_as_its_task_is_cancelled_goes_back(db: Database, name: str) -> None:
    """The acquire's statement waits on the server (the key row locked) when
    the task is cancelled; the grant it then makes is given back by its
    token, never held."""
    app = unique("simba-pytest-aio")

    def waiting_on_a_lock() -> bool:
        return db.admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                                " AND wait_event_type = 'Lock'", (app,)).fetchone()[0] == 1

    async def main() -> None:
        async with await aclient(db, application_name=app, lock_timeout=1.0) as ac:  # the key waits 1 s at most
            sem = ac.semaphore(name, 1)
            first = await sem.acquire()
            assert first is not None
            fence = first.fence
            await first.release()
            with psycopg.connect(db.dsn()) as blocker:
                blocker.execute("SELECT 1 FROM simba_semaphore WHERE key = %s FOR UPDATE", (name,))
                t = asyncio.ensure_future(sem.acquire())
                assert await until(waiting_on_a_lock)
                t.cancel()
                blocker.commit()  # the statement goes on and grants the permit
            with pytest.raises(asyncio.CancelledError):
                await t
            assert await until(lambda: held_on_server(db, name) == 0)  # given back
            again = await sem.acquire(blocking=False)
            assert again is not None and again.fence >= fence + 2  # the cancelled grant was made
            await again.release()

    asyncio.run(main())


# --------------------------------------------------------- read-write locks

def test_readers_share_and_a_waiting_writer_goes_first(db: Database, name: str) -> None:
    other = db.client()

    async def main() -> None:
        async with await aclient(db) as ac:
            readers = [ac.read_lock(name), other.read_lock(name), ac.client.read_lock(name)]
            assert await readers[0].acquire(timeout=5)
            assert readers[1].acquire(timeout=5) and readers[2].acquire(timeout=5)
            assert status(db, name)[:2] == ("read", 3)
            w = ac.write_lock(name)
            t = asyncio.ensure_future(w.acquire(timeout=30))
            assert await until(lambda: status(db, name)[2] == 1)  # the writer is queued
            assert not await ac.read_lock(name).acquire(blocking=False)  # a new reader is refused meanwhile
            assert not other.read_lock(name).acquire(blocking=False)
            await readers[0].release()
            readers[1].release()  # the acquiring thread: the loop runs on it
            readers[2].release()
            assert await asyncio.wait_for(t, 10)
            assert w.is_owner() and w.fence > 0 and status(db, name)[:2] == ("write", 1)
            assert not await ac.read_lock(name).acquire(blocking=False)  # not while a writer holds it
            assert not other.write_lock(name).acquire(blocking=False)
            wfence = w.fence
            await w.release()
            async with ac.read_lock(name) as lease:
                assert lease.fence == wfence  # a reader's fence: the write epoch

    asyncio.run(main())
    assert status(db, name) == ("free", 0, 0)


def test_a_writer_is_alone_across_tasks_threads_and_clients(db: Database, name: str) -> None:
    other = db.client()
    occ = Occupancy()

    async def main() -> None:
        async with await aclient(db) as ac:
            await crowd(occ, [(ac.write_lock(name), [name], True), (ac.write_lock(name), [name], True),
                              (ac.read_lock(name), [name], False), (ac.read_lock(name), [name], False)],
                        [(ac.client.write_lock(name), [name], True), (other.read_lock(name), [name], False),
                         (other.write_lock(name), [name], True)])

    asyncio.run(main())
    assert occ.entries == 42 and not occ.shared_an_exclusive
    assert status(db, name) == ("free", 0, 0)


def test_a_writer_cancelled_or_timed_out_leaves_the_queue(db: Database, name: str) -> None:
    reader = db.client().read_lock(name)
    assert reader.acquire()

    async def main() -> None:
        async with await aclient(db) as ac:
            assert not await ac.write_lock(name).acquire(timeout=0.3)
            assert status(db, name)[2] == 0  # its place is gone at once
            with pytest.raises(simba.LockTimeoutError):
                async with ac.write_lock(name, timeout=0.3):
                    pass
            assert status(db, name)[2] == 0
            w = ac.write_lock(name)
            t = asyncio.ensure_future(w.acquire())
            assert await until(lambda: status(db, name)[2] == 1)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert await until(lambda: status(db, name)[2] == 0)  # well before its entry's 16 s lease
            assert not w.locked() and status(db, name)[:2] == ("read", 1)
            async with ac.read_lock(name):  # readers are not held off by it
                assert status(db, name)[:2] == ("read", 2)
            reader.release()  # the acquiring thread: the loop runs on it
            async with w:
                assert status(db, name)[:2] == ("write", 1)

    asyncio.run(main())
    assert status(db, name) == ("free", 0, 0)


# --------------------------------------------------------------- multi-locks

def test_multi_lock_all_or_nothing_woken_by_its_last_member(db: Database, name: str) -> None:
    x, y = f"{name}-x", f"{name}-y"
    hx = db.client().lock(x)
    assert hx.acquire()

    async def main() -> None:
        async with await aclient(db) as ac:
            hy = ac.lock(y)
            assert await hy.acquire()
            multi = ac.multi_lock([y, x])
            assert multi.names == (x, y)
            assert not await multi.acquire(blocking=False)
            assert db.owner(y)[0] == hy.contender_id  # refused: it took nothing
            t = asyncio.ensure_future(multi.acquire(timeout=30))
            assert await until(lambda: registered(db))
            hx.release()  # the holding thread: the loop runs on it
            done, _ = await asyncio.wait({t}, timeout=1.0)
            assert not done  # y is still held
            assert db.owner(x)[0] is None  # and the waiter took nothing meanwhile
            await hy.release()
            # y's holder's lease is 16 s: only y's release wakes it this soon
            assert await asyncio.wait_for(t, 5)
            fences = multi.fences
            assert set(fences) == {x, y} and multi.fence == max(fences.values())
            assert [db.owner(n) for n in (x, y)] == [(multi.contender_id, fences[n]) for n in (x, y)]
            assert not await ac.lock(y).acquire(blocking=False)
            await multi.release()
            assert multi.fences == {}

    asyncio.run(main())
    assert db.owner(x)[0] is None and db.owner(y)[0] is None


def test_overlapping_multi_locks_exclude_across_tasks_threads_and_clients(db: Database, name: str) -> None:
    a, b, c = f"{name}-a", f"{name}-b", f"{name}-c"
    other = db.client()
    occ = Occupancy()

    async def main() -> None:
        async with await aclient(db) as ac:
            await crowd(occ, [(ac.multi_lock([a, b]), [a, b], True), (ac.multi_lock([b, c]), [b, c], True),
                              (ac.lock(c), [c], True)],
                        [(ac.client.multi_lock([c, a]), [c, a], True),
                         (other.multi_lock([a, b, c]), [a, b, c], True)])

    asyncio.run(main())
    assert occ.entries == 30 and occ.most == 1
    assert all(db.owner(n)[0] is None for n in (a, b, c))


def test_a_cancelled_multi_lock_waiter_holds_nothing(db: Database, name: str) -> None:
    x, y = f"{name}-x", f"{name}-y"

    async def main() -> None:
        async with await aclient(db) as ac:
            hy = ac.lock(y)
            assert await hy.acquire()
            multi = ac.multi_lock([x, y], timeout=0.3)
            assert not await multi.acquire(timeout=0.3)
            with pytest.raises(simba.LockTimeoutError):
                async with multi:
                    pass
            t = asyncio.ensure_future(multi.acquire())
            assert await until(lambda: registered(db))
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert not multi.locked() and db.owner(x)[0] is None and db.owner(y)[0] == hy.contender_id
            await hy.release()
            assert await multi.acquire(blocking=False)
            await multi.release()

    asyncio.run(main())
    assert db.owner(x)[0] is None and db.owner(y)[0] is None


# --------------------------------------------------------------------- loss

def test_forced_release_is_loss_for_fair_and_multi_locks(db: Database, name: str) -> None:
    f, x, y = f"{name}-f", f"{name}-x", f"{name}-y"
    lost: List[simba.Lease] = []

    async def main() -> None:
        async with await aclient(db) as ac:
            fair = ac.lock(f, fair=True, on_lost=lost.append)
            multi = ac.multi_lock([x, y], on_lost=lost.append)
            async with fair as flease, multi:
                db.admin.execute("SELECT simba_force_release(%s)", (f,))
                assert await until(lambda: len(lost) == 1)
                assert lost[0].name == f and lost[0].fence == flease.fence
                assert not fair.is_owner() and fair.lease is None and multi.is_owner()
                db.admin.execute("SELECT simba_force_release(%s)", (y,))
                assert await until(lambda: len(lost) == 2)
                assert not multi.is_owner() and multi.fences == {}  # loss is final
                assert await until(lambda: db.owner(x)[0] is None)  # the member still held went back
            async with fair as again:  # the lost hold was released; a new tenure, a new fence
                assert again.fence > flease.fence

    asyncio.run(main())
    assert len(lost) == 2


def test_session_end_is_loss_for_rwlocks_and_permits(db: Database, name: str) -> None:
    lost: List[simba.Lease] = []

    async def main() -> None:
        async with await aclient(db, **SHORT) as ac:
            w, r = ac.write_lock(name, on_lost=lost.append), ac.read_lock(f"{name}-r", on_lost=lost.append)
            sem = ac.semaphore(f"{name}-s", 2, on_lost=lost.append)
            assert await w.acquire() and await r.acquire()
            p = await sem.acquire()
            assert p is not None
            sid = ac.client.session_id
            with db.app_connection() as conn:
                assert conn.execute("SELECT simba_session_close(%s::uuid)", (sid,)).fetchone()[0] == 3
            assert await until(lambda: len(lost) == 3, 10)
            assert not any(h.is_owner() for h in (w, r, p))  # loss is final
            for h in (w, r, p):
                await h.release()
            assert status(db, name)[1] == 0 and held_on_server(db, f"{name}-s") == 0
            async with w:  # under a new session
                assert ac.client.session_id != sid

    asyncio.run(main())


def test_async_election_one_leader_handover_and_cancel(db: Database, name: str) -> None:
    """Campaigners on tasks and on a thread: one leader at a time, resign
    hands over at once with a greater fence, the server names the leader, a
    cancelled campaign leaves nothing held, run() resigns."""
    sync = db.client()
    thread_election = sync.election(name, value="thread")

    async def main() -> None:
        async with await aclient(db) as ac:
            ea, eb = ac.election(name, value="a"), ac.election(name, value="b")
            lease_a = await ea.campaign(timeout=5)
            assert ea.is_leader() and await ea.leader() == "a" and await eb.leader() == "a"
            with pytest.raises(simba.LockTimeoutError):
                await eb.campaign(timeout=0.3)
            cancelled = asyncio.ensure_future(eb.campaign())
            await asyncio.sleep(0.2)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            assert not eb.is_leader()
            # a thread of another client waits too; a's resignation elects one of them
            waiting = asyncio.ensure_future(asyncio.to_thread(thread_election.campaign, 15))
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            await ea.resign()
            lease_t = await waiting
            assert time.monotonic() - t0 < 2.0 and lease_t.fence > lease_a.fence
            assert await eb.leader() == "thread" and not ea.is_leader()
            await asyncio.to_thread(thread_election.resign)

            async def serve(lease: simba.Lease, tag: str) -> str:
                assert eb.is_leader() and await eb.leader() == "b"
                return f"{tag} {lease.fence > lease_t.fence}"

            assert await eb.run(serve, "served", timeout=5) == "served True"
            assert not eb.is_leader() and await eb.leader() is None

    asyncio.run(main())
