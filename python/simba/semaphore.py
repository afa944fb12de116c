"""A counting semaphore across processes, as kazoo's ``Semaphore`` and the
C++ client's ``simba::Semaphore`` offer it: at most ``permits`` holders of
one key at a time, each permit with its own token and fence.

::

    exports = client.semaphore("exports", permits=3)
    with exports as permit:          # waits (at most exports.timeout)
        export(permit.fence)         # at most 3 of these run anywhere

A permit is held under the client's session, as a :class:`~simba.Lock` is:
one keepalive per period keeps every permit and lock of the process, and
what a lock promises holds for a permit too: a local deadline it is never
claimed past, ``on_suspended``/``on_resumed``, and loss that is final
(``on_lost``; release it, then acquire a new one). A waiter is woken by the
NOTIFY of a release of the key and polls every second besides.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import errors
from .errors import LockTimeoutError
from .lease import Lease, server_time
from .lock import Callback, Lock, _WaitSchedule

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Semaphore", "Permit"]

ACQUIRE_SQL = (
    "SELECT p.slot, p.token::text, p.fence, simba_epoch_us(now()) FROM simba_semaphore_acquire("
    "%(k)s, %(h)s, %(n)s, %(ttl)s::int8 * interval '1 microsecond', %(ctx)s, %(s)s::uuid) AS p"
)
RELEASE_SQL = "SELECT simba_semaphore_release(%s, %s::uuid)"
# A waiter's poll when no NOTIFY comes (the C++ Semaphore's poll_interval).
POLL_INTERVAL = 1.0


class Permit(Lock):
    """One permit of a :class:`Semaphore`, held by the thread that acquired
    it: :attr:`token` and :attr:`slot` name it on the server, ``lease`` (its
    fence and local deadline), :meth:`is_owner` and :meth:`release` behave as
    a :class:`~simba.Lock`'s. ``with permit:`` releases it at the end."""

    def __init__(self, semaphore: Semaphore) -> None:
        s = semaphore
        super().__init__(s._client, s.key, timeout=s.timeout, contender_id=s.holder, on_lost=s._on_lost,
                         on_suspended=s._on_suspended, on_resumed=s._on_resumed)
        self._semaphore = s
        self.token: Optional[str] = None  # the permit held, or the one an owed release gives back
        self.slot: Optional[int] = None

    def __repr__(self) -> str:
        return f"<simba.Permit {self.name!r} slot={self.slot} owner={self.is_owner()}>"

    def __enter__(self) -> Lease:  # type: ignore[override]
        lease = self.lease
        if lease is None:
            raise errors.IllegalStateError(f"permit of {self.name!r} is not held")
        return lease

    def _acquire_statement(self) -> Tuple[str, Dict[str, Any], bool]:
        s = self._semaphore
        return ACQUIRE_SQL, {"k": self.name, "h": self.contender_id, "n": s.permits, "ttl": self._client._ttl_us,
                             "ctx": s.context}, True

    def _apply(self, reply: Any, sent_at: float, session_id: str) -> "bool | None":
        """True when the reply granted a permit held from now on; None when
        none was free."""
        slot, token, fence, granted_us = reply
        if token is None:
            return None
        c = self._client
        with c._mu:
            self.token, self.slot = token, slot
            session = c._session
            if session is None or session.id != session_id:  # it ended meanwhile: give the permit back
                self._owe_locked()
                return None
        # It lives exactly as long as the session it was granted under.
        granted = self._claim(fence, server_time(granted_us), session.sent_at, session.transition_at,
                              session.current_at)
        return True if granted else None

    def _lost_to(self, schedule: _WaitSchedule, owner: Any) -> None:
        schedule.retry_in(POLL_INTERVAL)

    def _release_statement(self) -> Tuple[str, Tuple[Any, ...]]:
        return RELEASE_SQL, (self.name, self.token)

    def _verify(self, lease: Lease) -> None:
        """A NOTIFY of the key is another permit's release: nothing to ask
        (a permit ends with its session, which the keepalive sees)."""


class Semaphore:
    """At most ``permits`` holders of ``key`` at once across every process
    (see :meth:`simba.Client.semaphore`).

    :meth:`acquire` returns a held :class:`Permit` (None when ``blocking``
    is False and none is free, or the ``timeout`` passed); ``with
    semaphore as permit:`` acquires one for the block (waiting at most
    :attr:`timeout`, then :class:`~simba.errors.LockTimeoutError`) and
    releases it at the end. Every holder of a key must ask with the same
    ``permits``."""

    def __init__(self, client: "Client", key: str, permits: int, *, timeout: Optional[float] = None,
                 holder: Optional[str] = None, context: Optional[str] = None,
                 on_lost: Optional[Callback] = None, on_suspended: Optional[Callback] = None,
                 on_resumed: Optional[Callback] = None) -> None:
        self.key = errors.validate_name(key, "key")
        if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
            raise errors.InvalidArgumentError(f"permits must be a positive int, not {permits!r}", "22023")
        self.permits = permits
        self.holder = errors.validate_name(holder, "holder") if holder is not None else None
        self.context = context
        self.timeout = timeout
        self._client = client
        self._on_lost = on_lost
        self._on_suspended = on_suspended
        self._on_resumed = on_resumed
        self._entered = threading.local()  # the permits `with` took on this thread, innermost last

    def __repr__(self) -> str:
        return f"<simba.Semaphore {self.key!r} permits={self.permits}>"

    def acquire(self, blocking: bool = True, timeout: float = -1) -> Optional[Permit]:
        """A permit, held; None when ``blocking`` is False and none is free,
        or when ``timeout`` (seconds, -1: none) passed. Setup mistakes raise
        at once; transient faults are retried within the timeout."""
        permit = self._permit()
        return permit if permit.acquire(blocking, timeout) else None

    def _permit(self) -> Permit:
        """A permit of this semaphore, not yet held."""
        return Permit(self)

    def _timeout_error(self) -> LockTimeoutError:
        return LockTimeoutError(f"no permit of {self.key!r} within {self.timeout} s")

    def __enter__(self) -> Permit:
        permit = self.acquire(True, -1 if self.timeout is None else self.timeout)
        if permit is None:
            raise self._timeout_error()
        stack: List[Permit] = self._entered.__dict__.setdefault("permits", [])
        stack.append(permit)
        return permit

    def __exit__(self, *exc: Any) -> None:
        permit = self._entered.permits.pop()
        if permit.locked():
            permit.release()
