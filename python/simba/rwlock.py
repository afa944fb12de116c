"""A read-write lock across processes, as kazoo's ``ReadLock`` and
``WriteLock`` and the C++ client's ``simba::SharedLocker`` offer it: many
readers or one writer, with writer preference.

::

    with client.read_lock("catalog"):     # shared with other readers
        ...
    with client.write_lock("catalog") as lease:   # alone; lease.fence is new
        ...

Each is a :class:`~simba.Lock` of its own contender on the lock's name,
held under the client's session, so everything a lock promises holds: a
local deadline it is never claimed past, the callbacks, loss that is final.
While a writer waits, new readers are refused; a waiting writer keeps its
place by asking again, and leaves the queue when its ``acquire`` gives up.
A reader's fence is the write epoch (the latest writer's fence); a
writer's is its own, new for every write hold. Two lock objects are two
contenders: a process that reads and then writes releases its read lock
first (one contender id asking to write while it reads gets ``SB005``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from .lease import Lease, server_time
from .lock import Callback, Lock, _WaitSchedule, log

if TYPE_CHECKING:
    from .client import Client

__all__ = ["ReadWriteLock"]

ACQUIRE_SQL = (
    "SELECT g.granted IS TRUE AND g.mode = %(mode)s, g.fence, simba_epoch_us(g.acquired_at),"
    " simba_epoch_us(g.ttl_at), simba_epoch_us(g.transition_at), simba_epoch_us(g.current_at), g.mode"
    " FROM simba_rwlock_acquire(%(m)s, %(id)s, %(mode)s, %(ttl)s::int8 * interval '1 microsecond',"
    " %(tr)s::int8 * interval '1 microsecond', %(s)s::uuid) AS g"
)
RELEASE_SQL = "SELECT simba_rwlock_release(%s, %s)"
# A refused reader or a queued writer asks again this often at most (and
# within half the lease, so a writer's place never lapses meanwhile).
POLL_INTERVAL = 1.0


class ReadWriteLock(Lock):
    """One contender's read or write hold on a read-write lock (see
    :meth:`simba.Client.read_lock` and :meth:`simba.Client.write_lock`):
    ``acquire``/``release``/``with`` and everything else as a
    :class:`~simba.Lock`'s; :attr:`mode` is ``"read"`` or ``"write"``."""

    def __init__(self, client: "Client", name: str, mode: str, *, timeout: Optional[float] = None,
                 contender_id: Optional[str] = None, on_lost: Optional[Callback] = None,
                 on_suspended: Optional[Callback] = None, on_resumed: Optional[Callback] = None) -> None:
        super().__init__(client, name, timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                         on_suspended=on_suspended, on_resumed=on_resumed)
        assert mode in ("read", "write")
        self.mode = mode
        self._waiting = False  # a writer queued by its last attempt
        self._acquired_us = 0  # the hold held: acquired_at names it (a reader's fence may repeat)

    def __repr__(self) -> str:
        return f"<simba.ReadWriteLock {self.name!r} {self.mode} id={self.contender_id!r} owner={self.is_owner()}>"

    def _acquire_statement(self) -> Tuple[str, Dict[str, Any], bool]:
        c = self._client
        return ACQUIRE_SQL, {"m": self.name, "id": self.contender_id, "mode": self.mode, "ttl": c._ttl_us,
                             "tr": c._tr_us}, True

    def _apply(self, reply: Any, sent_at: float, session_id: str) -> "bool | None":
        granted, fence, acquired_us, _, transition_us, current_us, mode = reply
        self._waiting = mode == "waiting"
        if not granted:
            return None
        with self._client._mu:
            self._acquired_us = acquired_us
        return True if self._claim(fence, server_time(acquired_us), sent_at, transition_us, current_us) else None

    def _lost_to(self, schedule: _WaitSchedule, owner: Any) -> None:
        schedule.retry_in(min(POLL_INTERVAL, self._client._ttl_us / 2e6))

    def _gave_up(self) -> bool:
        """A writer whose wait ended without a hold leaves the queue (new
        readers are refused while it waits)."""
        waiting, self._waiting = self._waiting, False
        return waiting

    def _release_statement(self) -> Tuple[str, Tuple[Any, ...]]:
        return RELEASE_SQL, (self.name, self.contender_id)

    def _verify(self, lease: Lease) -> None:
        """The same call under the session checks the hold, which is ours
        while it answers with the same fence and ``acquired_at``."""
        c = self._client
        with c._mu:
            acquired_us = self._acquired_us
        row, _, _ = self._under_session(*self._acquire_statement())
        granted, fence, got_us = row[0], row[1], row[2]
        with c._mu:
            if self._tenure.lease is None or self._tenure.lease.fence != lease.fence:
                return
            if granted and fence == lease.fence and got_us == acquired_us:
                return
            log.warning("simba: %s lock %r was taken from us", self.mode, self.name)
            # what this very check was granted (a new hold, a writer's place) is given back, by id
            self._lost_locked(self._tenure.end(), owed=True)
