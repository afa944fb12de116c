"""Leases and the deadline rule (docs/design.md, "Safety rules", rule 3).

A client reports itself holder only while it can prove it. It anchors a
lease at the local clock's time it **sent** the statement whose reply proved
it, and its deadline is::

    anchor + (transition_at - current_at) - margin

with ``transition_at`` and ``current_at`` from the reply (server times), so
network delay only shortens the lease it believes in. The margin is
``min(release_margin, lease / 10) + lease * clock_drift_ppm / 10**6`` of the
lease length ``ttl + transition`` (C++: ``detail::lease_margin``). A renewal
never shortens a deadline an earlier reply proved, and a reply that comes
after the deadline never bridges the gap: the tenure ended there, and loss is
final.

Everything here is pure: callers pass ``now``, so tests drive it with a fake
clock.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["Lease", "monotonic", "margin", "deadline", "keepalive_delay", "Tenure", "server_time"]

try:
    _BOOTTIME = time.CLOCK_BOOTTIME  # type: ignore[attr-defined]

    def monotonic() -> float:
        """The local clock deadlines are on: ``CLOCK_BOOTTIME`` where there is
        one (it counts through a system suspend, as the C++ client's
        ``BootClock``), else :func:`time.monotonic`. Seconds."""
        return time.clock_gettime(_BOOTTIME)

except AttributeError:  # pragma: no cover - not Linux
    monotonic = time.monotonic


def server_time(epoch_us: int) -> _dt.datetime:
    """A server time read as ``simba_epoch_us`` as an aware UTC datetime."""
    return _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(microseconds=epoch_us)


def margin(lease: float, release_margin: float = 0.020, clock_drift_ppm: int = 500) -> float:
    """How long before the proven end of a lease of ``lease`` seconds the
    client gives it up: ``min(release_margin, lease/10) + lease*ppm/1e6``."""
    return min(release_margin, lease / 10) + lease * clock_drift_ppm / 1_000_000


def deadline(sent_at: float, transition_at_us: int, current_at_us: int, margin_s: float) -> float:
    """The local deadline a reply proves: ``sent_at + (transition_at -
    current_at) - margin`` (``sent_at`` on :func:`monotonic`, server times in
    epoch microseconds)."""
    return sent_at + (transition_at_us - current_at_us) / 1e6 - margin_s


def keepalive_delay(sent_at: float, ttl_at_us: int, transition_at_us: int, current_at_us: int, now: float) -> float:
    """When a session's keepalive is next due, as a delay from ``now``
    (C++ ``ContendPeriod::owner_delay``): at ``ttl_at``, or earlier so that a
    quarter of the lease is left for retries; never negative."""
    ttl_deadline = sent_at + (ttl_at_us - current_at_us) / 1e6
    end = sent_at + (transition_at_us - current_at_us) / 1e6
    lease = (transition_at_us - current_at_us) / 1e6
    return max(0.0, min(ttl_deadline, end - lease / 4) - now)


@dataclass(frozen=True)
class Lease:
    """A snapshot of a held tenure, read in one piece.

    ``deadline`` is on :func:`monotonic`: the lock is held until then unless
    a keepalive proves more. ``acquired_at`` is the server time of the grant.
    """

    name: str
    contender_id: str
    fence: int
    acquired_at: _dt.datetime
    deadline: float

    def remaining(self, now: Optional[float] = None) -> float:
        """Seconds left until :attr:`deadline` (negative once past)."""
        return self.deadline - (monotonic() if now is None else now)


class Tenure:
    """The ownership state of one hold, pure and deterministic (C++
    ``detail::Ownership`` for a single-tenure Locker): every method takes
    ``now``. Not thread-safe: its owner locks around it."""

    def __init__(self, margin_s: float) -> None:
        self.margin = margin_s
        self.lease: Optional[Lease] = None  # the tenure held now
        self.ended = False  # a tenure ended here: loss is final
        self.suspended = False

    def holding(self, now: float) -> bool:
        """Held and its deadline not passed."""
        return self.lease is not None and now < self.lease.deadline

    def grant(self, name: str, contender_id: str, fence: int, acquired_at: _dt.datetime,
              sent_at: float, transition_at_us: int, current_at_us: int, now: float) -> Optional[Lease]:
        """A reply granted the mutex. Returns the lease, or None when the
        reply came too late to prove anything (its deadline already passed)."""
        d = deadline(sent_at, transition_at_us, current_at_us, self.margin)
        if d <= now:
            return None
        self.lease = Lease(name, contender_id, fence, acquired_at, d)
        self.ended = False
        self.suspended = False
        return self.lease

    def expire(self, now: float) -> Optional[Lease]:
        """Ends the tenure if its deadline passed; returns the ended lease."""
        if self.lease is not None and now >= self.lease.deadline:
            return self.end()
        return None

    def end(self) -> Optional[Lease]:
        """Ends the tenure now (release, loss); returns the ended lease."""
        ended, self.lease = self.lease, None
        if ended is not None:
            self.ended = True
        self.suspended = False
        return ended

    def renew(self, sent_at: float, transition_at_us: int, current_at_us: int, now: float) -> Optional[Lease]:
        """A keepalive (or renewal) sent at ``sent_at`` proved the lease until
        ``transition_at``. Never bridges a gap (a tenure whose deadline passed
        first ends) and never shortens the deadline. Returns the lease if
        still held."""
        self.expire(now)
        if self.lease is None:
            return None
        d = deadline(sent_at, transition_at_us, current_at_us, self.margin)
        if d > self.lease.deadline:
            self.lease = Lease(self.lease.name, self.lease.contender_id, self.lease.fence,
                               self.lease.acquired_at, d)
        return self.lease

    def suspend(self, now: float) -> Optional[Lease]:
        """Renewals are failing: returns the lease the first time (to report
        ``on_suspended``), None if already suspended or not held."""
        self.expire(now)
        if self.lease is None or self.suspended:
            return None
        self.suspended = True
        return self.lease

    def resume(self) -> Optional[Lease]:
        """A renewal succeeded after a suspension: returns the lease once."""
        if self.lease is None or not self.suspended:
            return None
        self.suspended = False
        return self.lease


Clock = Callable[[], float]
