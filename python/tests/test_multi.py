"""The multi-lock: every member or none, taken in one statement; a waiter
woken when the last blocking member is free; the loss of a member is the
loss of the set, whose other members are given back."""

from __future__ import annotations

import threading
from typing import List

import pytest

import simba

from conftest import Database, eventually


def test_all_or_nothing(db: Database, name: str) -> None:
    a, b = db.client(), db.client()
    x, y = f"{name}-x", f"{name}-y"
    held = a.lock(x)
    assert held.acquire()
    multi = b.multi_lock([y, x])
    assert multi.names == (x, y)  # the server's order: bytewise
    assert not multi.acquire(blocking=False)
    assert db.owner(y)[0] is None  # refused: it took nothing
    held.release()
    assert multi.acquire(timeout=5)
    fences = multi.fences
    assert set(fences) == {x, y} and all(f > 0 for f in fences.values())
    assert db.owner(x) == (multi.contender_id, fences[x]) and db.owner(y) == (multi.contender_id, fences[y])
    assert multi.fence == max(fences.values()) and multi.lease is not None
    assert not a.lock(y).acquire(blocking=False)
    multi.release()
    assert multi.fences == {}
    assert db.owner(x)[0] is None and db.owner(y)[0] is None


def test_a_waiter_gets_the_set_once_its_last_member_is_free(db: Database, name: str) -> None:
    a, b, c = db.client(), db.client(), db.client()
    x, y = f"{name}-x", f"{name}-y"
    hx, hy = a.lock(x), b.lock(y)
    assert hx.acquire() and hy.acquire()
    multi = c.multi_lock([x, y])
    got, done = threading.Event(), threading.Event()
    owners: List[object] = []

    def wait() -> None:
        if multi.acquire(timeout=30):
            got.set()
            done.wait(10)
            owners.extend([db.owner(x)[0], db.owner(y)[0]])
            multi.release()  # by the thread that holds it

    t = threading.Thread(target=wait)
    t.start()
    hx.release()
    assert not got.wait(1.0)  # y is still held
    assert db.owner(x)[0] is None  # and the waiter took nothing meanwhile
    hy.release()
    assert got.wait(10)  # well before y's 16 s lease would have ended
    done.set()
    t.join(10)
    assert owners == [multi.contender_id, multi.contender_id]
    assert db.owner(x)[0] is None and db.owner(y)[0] is None


def test_forced_release_of_a_member_loses_the_set(db: Database, name: str) -> None:
    c = db.client()
    lost: List[simba.Lease] = []
    x, y = f"{name}-x", f"{name}-y"
    multi = c.multi_lock([x, y], on_lost=lost.append)
    assert multi.acquire()
    db.admin.execute("SELECT simba_force_release(%s)", (y,))
    assert eventually(lambda: len(lost) == 1, 5)
    assert not multi.is_owner() and multi.fences == {}
    assert eventually(lambda: db.owner(x)[0] is None, 5)  # the member still held was given back
    multi.release()
    assert multi.acquire(timeout=5)
    multi.release()


def test_bad_names_are_refused_before_anything_is_sent(db: Database, name: str) -> None:
    c = db.client()
    for bad in ([], "abc", [name, name], [name, ""], [name, None], [f"m{i}" for i in range(1001)]):
        with pytest.raises(simba.InvalidArgumentError):
            c.multi_lock(bad)  # type: ignore[arg-type]
