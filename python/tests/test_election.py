"""Leader election: one leader at a time, resign hands over at once, the
server names the leader, loss is final."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

import simba

from conftest import Database, eventually


def test_one_leader_and_resign_hands_over_at_once(db: Database, name: str) -> None:
    a, b = db.client(), db.client()
    ea, eb = a.election(name, value="a"), b.election(name, value="b")
    leading, resign = threading.Event(), threading.Event()
    got: List[Any] = []

    def lead_a() -> None:  # a leads on a thread of its own, and resigns there
        got.append(ea.campaign(timeout=5))
        leading.set()
        resign.wait(20)
        got.append(time.monotonic())
        ea.resign()

    t = threading.Thread(target=lead_a)
    t.start()
    assert leading.wait(10)
    lease_a = got[0]
    assert ea.is_leader() and lease_a.fence > 0
    assert ea.leader() == "a" and eb.leader() == "a"
    with pytest.raises(simba.LockTimeoutError):
        eb.campaign(timeout=0.3)  # a leads
    resign.set()
    lease_b = eb.campaign(timeout=15)
    elected = time.monotonic()
    t.join(10)
    assert elected - got[1] < 2.0, f"elected {elected - got[1]:.3f} s after the resignation (the lease is 16 s)"
    assert lease_b.fence > lease_a.fence
    assert not ea.is_leader() and eb.is_leader() and ea.leader() == "b"
    with pytest.raises(simba.IllegalStateError):
        eb.campaign(timeout=1)  # not reentrant
    eb.resign()
    assert eb.leader() is None
    eb.resign()  # nothing when not leading


def test_campaign_times_out_while_another_leads(db: Database, name: str) -> None:
    a, b = db.client(), db.client()
    a.election(name).campaign(timeout=5)
    t0 = time.monotonic()
    with pytest.raises(simba.LockTimeoutError):
        b.election(name).campaign(timeout=0.3)
    assert time.monotonic() - t0 < 3


def test_run_leads_for_the_call_and_resigns(db: Database, name: str) -> None:
    a = db.client()
    e = a.election(name, value="runner")

    def serve(lease: simba.Lease, x: int) -> int:
        assert e.is_leader() and e.leader() == "runner" and lease.fence > 0
        return x * 2

    assert e.run(serve, 21, timeout=5) == 42
    assert not e.is_leader() and e.leader() is None

    def fail(lease: simba.Lease) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        e.run(fail, timeout=5)
    assert e.leader() is None  # resigned on the way out


def test_forced_release_ends_the_leadership(db: Database, name: str) -> None:
    a = db.client()
    lost: List[simba.Lease] = []
    e = a.election(name, on_lost=lost.append)
    lease = e.campaign(timeout=5)
    db.admin.execute("SELECT simba_force_release(%s)", (name,))
    assert eventually(lambda: not e.is_leader(), 5)
    assert eventually(lambda: bool(lost), 5) and lost[0].fence == lease.fence
    assert e.leader() is None
    e.resign()  # ends the lost leadership; a new campaign has a new fence
    assert e.campaign(timeout=5).fence > lease.fence
    e.resign()
