"""The deadline rule on a fake clock: no server."""

from __future__ import annotations

import datetime as dt

import pytest

from simba.lease import Tenure, deadline, keepalive_delay, margin

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
S = 1_000_000  # a second in server microseconds


def test_margin_is_the_cpp_rule() -> None:
    # min(20 ms, lease/10) + lease * 500 ppm
    assert margin(16.0) == pytest.approx(0.020 + 0.008)
    assert margin(300.0) == pytest.approx(0.020 + 0.150)
    assert margin(0.1) == pytest.approx(0.010 + 0.00005)  # a tenth of a short lease
    assert margin(5.0, release_margin=0.0, clock_drift_ppm=0) == 0.0


def test_deadline_counts_from_the_send_time_not_the_reply() -> None:
    # sent at 100 s on the local clock; the server says the lease ends 16 s
    # after its decision. However late the reply comes, the deadline is
    # anchored at the send time.
    d = deadline(100.0, transition_at_us=1_016 * S, current_at_us=1_000 * S, margin_s=0.028)
    assert d == pytest.approx(100.0 + 16.0 - 0.028)


def test_grant_renew_never_shortens_and_late_reply_ends_the_tenure() -> None:
    m = margin(16.0)
    t = Tenure(m)
    now = 100.0
    lease = t.grant("m", "id", 7, T0, sent_at=100.0, transition_at_us=16 * S, current_at_us=0, now=100.5)
    assert lease is not None and lease.deadline == pytest.approx(116.0 - m)
    assert t.holding(115.0) and not t.holding(116.0)
    # a keepalive sent at 110 proves until 126 - m
    t.renew(sent_at=110.0, transition_at_us=30 * S, current_at_us=14 * S, now=110.2)
    assert t.lease is not None and t.lease.deadline == pytest.approx(126.0 - m)
    assert t.lease.fence == 7
    # a reply that proves less (an older keepalive answered late) does not shorten it
    t.renew(sent_at=105.0, transition_at_us=20 * S, current_at_us=14 * S, now=111.0)
    assert t.lease.deadline == pytest.approx(126.0 - m)
    # past the deadline the tenure ends; a reply that arrives then bridges nothing
    now = 126.0
    assert t.renew(sent_at=125.0, transition_at_us=40 * S, current_at_us=24 * S, now=now) is None
    assert t.lease is None and t.ended
    assert not t.holding(now)


def test_reply_after_its_own_deadline_grants_nothing() -> None:
    t = Tenure(margin(2.0))
    assert t.grant("m", "id", 3, T0, sent_at=10.0, transition_at_us=2 * S, current_at_us=0, now=12.5) is None
    assert t.lease is None


def test_suspend_once_resume_once_and_expire() -> None:
    t = Tenure(0.0)
    t.grant("m", "id", 1, T0, sent_at=0.0, transition_at_us=10 * S, current_at_us=0, now=0.1)
    assert t.suspend(1.0) is not None
    assert t.suspend(2.0) is None  # once per suspension
    t.renew(sent_at=3.0, transition_at_us=20 * S, current_at_us=10 * S, now=3.1)
    r = t.resume()
    assert r is not None and r.deadline == pytest.approx(13.0)
    assert t.resume() is None
    assert t.suspend(4.0) is not None
    assert t.expire(12.9) is None
    ended = t.expire(13.0)
    assert ended is not None and ended.fence == 1
    assert t.suspend(13.5) is None and t.lease is None  # ended while suspended: only the end


def test_keepalive_is_due_at_ttl_or_with_a_quarter_of_the_lease_left() -> None:
    # ttl 10 s, transition 6 s: at ttl_at
    assert keepalive_delay(0.0, 10 * S, 16 * S, 0, now=0.0) == pytest.approx(10.0)
    # ttl 10 s, transition 0: 7.5 s (a quarter of the lease kept in hand)
    assert keepalive_delay(0.0, 10 * S, 10 * S, 0, now=0.0) == pytest.approx(7.5)
    # counted from the send time, never negative
    assert keepalive_delay(5.0, 10 * S, 16 * S, 0, now=7.0) == pytest.approx(8.0)
    assert keepalive_delay(0.0, 10 * S, 16 * S, 0, now=20.0) == 0.0


class _Holder:
    """What the client's held set reads of a lock: its tenure."""

    def __init__(self, deadline_s: float) -> None:
        self._tenure = Tenure(0.0)
        self._tenure.grant("m", "id", 1, T0, sent_at=0.0, transition_at_us=int(deadline_s * S), current_at_us=0,
                           now=0.0)


def test_held_set_finds_the_earliest_deadline_through_releases_and_renewals() -> None:
    from simba.client import _Held

    held = _Held()
    assert held.earliest() is None and held.due(1e9) == []
    a, b, c = _Holder(10.0), _Holder(5.0), _Holder(20.0)
    for lk in (a, b, c):
        held.add(lk)  # type: ignore[arg-type]
    assert held.earliest() == pytest.approx(5.0) and len(held) == 3
    held.discard(b)  # type: ignore[arg-type]
    assert held.earliest() == pytest.approx(10.0)
    # a renewal lengthens a's deadline in place: the set sees it unasked
    a._tenure.renew(sent_at=0.0, transition_at_us=30 * S, current_at_us=0, now=1.0)
    assert held.earliest() == pytest.approx(20.0)
    # b taken again: its new entry counts, the old one is gone
    b._tenure.end()
    b._tenure.grant("m", "id", 2, T0, sent_at=0.0, transition_at_us=25 * S, current_at_us=0, now=1.0)
    held.add(b)  # type: ignore[arg-type]
    assert held.due(19.9) == []
    assert held.due(26.0) == [c, b] and list(held) == [a] and held.earliest() == pytest.approx(30.0)
    held.clear()
    assert held.earliest() is None and len(held) == 0
