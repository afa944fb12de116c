"""The read-write lock: readers share, a writer is alone with a new fence,
a waiting writer goes before new readers and leaves the queue when it
gives up, holds end with their session."""

from __future__ import annotations

import threading
import time
from typing import List, Tuple

import simba

from conftest import Database, eventually

SHORT = dict(session_ttl=1.5, session_transition=1.0, reconnect_initial=0.05, reconnect_max=0.2)


def status(db: Database, name: str) -> Tuple[str, int, int]:
    """(mode, live holders, waiting writers) as the server shows them."""
    row = db.admin.execute("SELECT mode, coalesce(cardinality(holders), 0), waiting_writers FROM simba_rwlock_status"
                           " WHERE rwlock = %s", (name,)).fetchone()
    return (row[0], row[1], row[2]) if row else ("free", 0, 0)


def test_readers_share_a_writer_is_alone(db: Database, name: str) -> None:
    a, b, c = db.client(), db.client(), db.client()
    r1, r2, w = a.read_lock(name), b.read_lock(name), c.write_lock(name)
    assert r1.acquire() and r2.acquire()
    assert status(db, name)[:2] == ("read", 2)
    assert not w.acquire(blocking=False)  # not while readers hold it
    r1.release()
    r2.release()
    assert w.acquire(timeout=5)
    wfence = w.fence
    assert wfence > 0 and status(db, name)[:2] == ("write", 1)
    assert not r1.acquire(blocking=False)  # not while a writer holds it
    assert not c.write_lock(name).acquire(blocking=False)  # nor another writer
    w.release()
    assert r1.acquire(timeout=5)
    assert r1.fence == wfence  # a reader's fence is the write epoch
    r1.release()
    assert w.acquire(timeout=5) and w.fence > wfence  # a new fence for every write hold
    w.release()
    assert status(db, name)[:2] == ("free", 0)


def test_a_waiting_writer_goes_before_new_readers(db: Database, name: str) -> None:
    a, b, c = db.client(), db.client(), db.client()
    r1 = a.read_lock(name)
    assert r1.acquire()
    w = b.write_lock(name)
    got: List[int] = []

    def write() -> None:
        if w.acquire(timeout=30):
            got.append(w.fence)
            w.release()

    t = threading.Thread(target=write)
    t.start()
    assert eventually(lambda: status(db, name)[2] == 1, 5)  # the writer is queued
    assert not c.read_lock(name).acquire(blocking=False)  # a new reader is refused while it waits
    r1.release()
    t.join(30)
    assert len(got) == 1 and got[0] > 0
    assert status(db, name) == ("free", 0, 0)


def test_a_writer_that_gives_up_leaves_the_queue(db: Database, name: str) -> None:
    a, b, c = db.client(), db.client(), db.client()
    r1 = a.read_lock(name)
    assert r1.acquire()
    assert not b.write_lock(name).acquire(timeout=0.5)
    assert status(db, name)[2] == 0  # its place is gone at once
    r2 = c.read_lock(name)
    assert r2.acquire(blocking=False)  # so readers are not held off
    r1.release()
    r2.release()


def test_holds_end_with_their_session(db: Database, name: str) -> None:
    c = db.client(**SHORT)
    lost: List[simba.Lease] = []
    r = c.read_lock(name, on_lost=lost.append)
    w = c.write_lock(f"{name}-w", on_lost=lost.append)
    assert r.acquire() and w.acquire()
    sid = c.session_id
    with db.app_connection() as conn:
        assert conn.execute("SELECT simba_session_close(%s::uuid)", (sid,)).fetchone()[0] == 2
    assert eventually(lambda: len(lost) == 2, 10)
    assert not r.is_owner() and not w.is_owner()  # loss is final
    assert status(db, name)[1] == 0 and status(db, f"{name}-w")[1] == 0
    r.release()
    w.release()
    assert w.acquire(timeout=5) and c.session_id != sid
    w.release()


def test_kept_by_the_keepalive_past_many_leases(db: Database, name: str) -> None:
    c = db.client(**SHORT)
    w = c.write_lock(name)
    assert w.acquire()
    fence = w.fence
    end = time.monotonic() + 3 * (SHORT["session_ttl"] + SHORT["session_transition"])
    assert eventually(lambda: time.monotonic() >= end, 15, step=0.05)
    assert w.is_owner() and w.fence == fence and status(db, name)[:2] == ("write", 1)
    w.release()


def test_a_waiting_writer_keeps_its_place_past_its_entry_lease(db: Database, name: str) -> None:
    """A queued writer's entry lapses after ttl + transition without a call
    (2.5 s here); the writer asks again within it, so after several entry
    leases it is still queued, and it gets the lock when the reader goes."""
    reader = db.client().read_lock(name)  # a 16 s lease: no help from the holder's timing
    assert reader.acquire()
    w = db.client(**SHORT).write_lock(name)
    got: List[int] = []

    def write() -> None:
        if w.acquire(timeout=30):
            got.append(w.fence)
            w.release()

    t = threading.Thread(target=write)
    t.start()
    assert eventually(lambda: status(db, name)[2] == 1, 5)
    end = time.monotonic() + 3 * (SHORT["session_ttl"] + SHORT["session_transition"])
    assert eventually(lambda: time.monotonic() >= end, 15, step=0.05)
    assert status(db, name)[2] == 1
    assert not db.client().read_lock(name).acquire(blocking=False)  # still ahead of new readers
    reader.release()
    t.join(30)
    assert len(got) == 1
