"""Leader election on one mutex, as etcd's ``concurrency.Election`` and
kazoo's ``Election`` offer it: campaign until elected, lead while the lease
holds, resign, and ask who leads.

::

    election = client.election("report-leader", value="worker-7")
    election.run(serve)          # campaigns, calls serve(lease) as leader, resigns

A leader is a :class:`~simba.Lock` holder, so everything a lock promises
holds: one leader at a time, a fence that increases with every new leader,
and loss that is final (``on_lost``); after a loss, campaign again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from .errors import LockTimeoutError
from .lease import Lease
from .lock import Callback

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Election"]

T = TypeVar("T")

LEADER_SQL = "SELECT owner_id FROM simba_owner(%s)"


class Election:
    """Leader election on mutex ``name`` (see :meth:`simba.Client.election`)."""

    def __init__(self, client: "Client", name: str, *, value: Optional[str] = None,
                 on_lost: Optional["Callback"] = None) -> None:
        self.name = name
        self._client = client
        self._lock = client.lock(name, contender_id=value, on_lost=on_lost)

    @property
    def value(self) -> str:
        """What :meth:`leader` returns while this campaigner leads: its contender id."""
        return self._lock.contender_id

    def campaign(self, timeout: Optional[float] = None) -> Lease:
        """Blocks until elected (at most ``timeout`` seconds, None: no
        limit; :class:`~simba.errors.LockTimeoutError` then) and returns the
        leadership's lease. Not reentrant: a leader's second campaign raises
        :class:`~simba.errors.IllegalStateError`."""
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise LockTimeoutError(f"not elected leader of {self.name!r} within {timeout} s")
        lease = self._lock.lease
        if lease is None:  # lost between the grant and this read
            raise LockTimeoutError(f"elected leader of {self.name!r}, but the lease ended at once")
        return lease

    def resign(self) -> None:
        """Steps down (the next campaigner is elected at once); ends a lost
        leadership too. Nothing when not leading. From the thread that
        campaigned, as a lock is released by the thread that holds it."""
        if self._lock.locked():
            self._lock.release()

    def is_leader(self) -> bool:
        """Leads now: elected, and the lease's local deadline not passed."""
        return self._lock.is_owner()

    @property
    def lease(self) -> Optional[Lease]:
        """The leadership's lease while leading, else None."""
        return self._lock.lease

    def leader(self) -> Optional[str]:
        """The current leader's value (contender id) as the server sees it
        now, or None when nobody leads."""
        row, _ = self._client._statement(LEADER_SQL, (self.name,))
        return row[0] if row else None

    def run(self, func: Callable[..., T], *args: Any, timeout: Optional[float] = None) -> T:
        """Campaigns, calls ``func(lease, *args)`` as leader, and resigns
        when it returns or raises. ``func`` should check ``is_leader()`` (or
        fence its writes with ``lease``): loss can end the leadership before
        it returns."""
        lease = self.campaign(timeout)
        try:
            return func(lease, *args)
        finally:
            self.resign()

    def __repr__(self) -> str:
        return f"<simba.Election {self.name!r} value={self.value!r} leader={self.is_leader()}>"
