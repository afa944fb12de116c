"""The fair option: waiters granted in arrival order, each woken alone on its
own channel, a waiter that gives up leaving the queue."""

from __future__ import annotations

import threading
import time
from typing import List, Tuple

import simba

from conftest import Database, eventually


def queued(db: Database, name: str) -> List[str]:
    """The live entries of mutex ``name``'s queue (their lease not over on
    simba's clock), in the server's order."""
    return [r[0] for r in db.admin.execute(
        "SELECT q.owner_id FROM simba_mutex_queue q, simba_clock() c"
        " WHERE q.mutex = %s AND q.transition_at > c.now ORDER BY q.enqueued_at, q.owner_id",
        (name,)).fetchall()]


def test_waiters_are_granted_in_arrival_order_each_woken_at_once(db: Database, name: str) -> None:
    # leases of 16 s, waiters asking every 5 s: only a wake-up hands over within a second
    holder = db.client().lock(name, fair=True)
    assert holder.acquire()
    order: List[Tuple[int, float]] = []
    mu = threading.Lock()
    locks = [db.client().lock(name, fair=True) for _ in range(3)]

    def wait(i: int) -> None:
        lk = locks[i]
        if lk.acquire(timeout=60):
            with mu:
                order.append((i, time.monotonic()))
            time.sleep(0.05)  # act on it
            lk.release()

    threads = []
    for i, lk in enumerate(locks):
        t = threading.Thread(target=wait, args=(i,))
        t.start()
        threads.append(t)
        # queued before the next one arrives: arrival order is this order
        assert eventually(lambda: lk.contender_id in queued(db, name), 5)
    assert queued(db, name) == [lk.contender_id for lk in locks]
    released = time.monotonic()
    holder.release()
    for t in threads:
        t.join(60)
    assert [i for i, _ in order] == [0, 1, 2]
    handoffs = [b - a for a, b in zip([released] + [t for _, t in order], [t for _, t in order])]
    assert all(h < 1.0 for h in handoffs), handoffs  # woken, not polled (every 5 s)
    assert queued(db, name) == [] and db.owner(name)[0] is None


def test_a_waiter_that_gives_up_leaves_the_queue(db: Database, name: str) -> None:
    holder = db.client().lock(name, fair=True)
    assert holder.acquire()
    quitter, next_one = db.client().lock(name, fair=True), db.client().lock(name, fair=True)
    assert not quitter.acquire(timeout=0.3)
    assert quitter.contender_id not in queued(db, name)  # its place is gone at once
    assert not next_one.acquire(blocking=False)
    assert next_one.contender_id not in queued(db, name)
    got = threading.Event()

    def wait() -> None:
        if next_one.acquire(timeout=30):
            got.set()
            next_one.release()

    t = threading.Thread(target=wait)
    t.start()
    assert eventually(lambda: queued(db, name) == [next_one.contender_id], 5)
    holder.release()
    assert got.wait(5)
    t.join(10)
    assert queued(db, name) == []


def test_a_queued_waiter_keeps_its_place_past_its_entry_lease(db: Database, name: str) -> None:
    """Entries lapse after ttl + transition without a call: a waiter renews
    its own every ttl/2 (here 0.5 s), not only when the holder's lease (16 s
    here) would end, so it is still first after several entry leases."""
    short = dict(session_ttl=1.0, session_transition=0.5)
    holder = db.client().lock(name, fair=True)
    assert holder.acquire()
    first, second = db.client(**short).lock(name, fair=True), db.client(**short).lock(name, fair=True)
    got: List[str] = []

    def wait(lk: simba.Lock) -> None:
        if lk.acquire(timeout=30):
            got.append(lk.contender_id)
            lk.release()

    t1 = threading.Thread(target=wait, args=(first,))
    t1.start()
    assert eventually(lambda: queued(db, name) == [first.contender_id], 5)
    t2 = threading.Thread(target=wait, args=(second,))
    t2.start()
    assert eventually(lambda: queued(db, name) == [first.contender_id, second.contender_id], 5)
    end = time.monotonic() + 3 * 1.5  # three entry leases
    assert eventually(lambda: time.monotonic() >= end, 10, step=0.05)
    assert queued(db, name) == [first.contender_id, second.contender_id]
    holder.release()
    t1.join(30)
    t2.join(30)
    assert got == [first.contender_id, second.contender_id]
