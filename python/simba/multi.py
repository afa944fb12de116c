"""A multi-lock: every mutex of a set held at once, or none, as the C++
client's ``simba::MultiLocker`` offers it (``simba_acquire_all``).

::

    accounts = client.multi_lock(["account-7", "account-9"])
    with accounts:
        transfer(accounts.fences)    # both held; each member's own fence

It is a :class:`~simba.Lock` of one contender over all the members, held
under the client's session: one statement takes them all in byte order of
their names (two multi-locks over overlapping sets never deadlock), and a
loss of any member (an operator's ``simba_force_release``, the session's
end) is the loss of the set, final as a lock's; what is still held of it is
given back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from . import errors
from .lease import Lease, monotonic, server_time
from .lock import _OWNER_COLUMNS, Callback, Lock, _Owner, _WaitSchedule, log

if TYPE_CHECKING:
    from .client import Client

__all__ = ["MultiLock"]

MAX_MEMBERS = 1000  # simba_acquire_all's limit

ACQUIRE_SQL = (
    "SELECT " + _OWNER_COLUMNS.format(id="%(id)s") +
    " FROM simba_acquire_all(%(names)s::text[], %(id)s, %(ttl)s::int8 * interval '1 microsecond',"
    " %(tr)s::int8 * interval '1 microsecond', %(s)s::uuid) AS o"
)
RENEW_SQL = (
    "SELECT " + _OWNER_COLUMNS.format(id="%(id)s") +
    " FROM unnest(%(names)s::text[], %(fences)s::int8[]) WITH ORDINALITY AS u(m, f, i),"
    " LATERAL simba_renew(u.m, %(id)s, u.f, %(ttl)s::int8 * interval '1 microsecond',"
    " %(tr)s::int8 * interval '1 microsecond') AS o ORDER BY u.i"
)
RELEASE_SQL = "SELECT simba_release_all(%s::text[], %s)"


class MultiLock(Lock):
    """Every mutex of ``names`` or none (see :meth:`simba.Client.multi_lock`):
    a :class:`~simba.Lock` over all of them. Its ``lease`` is the set's:
    ``fence`` the largest member's, ``deadline`` the earliest member's;
    :attr:`fences` has each member's own."""

    def __init__(self, client: "Client", names: Sequence[str], *, timeout: Optional[float] = None,
                 contender_id: Optional[str] = None, on_lost: Optional[Callback] = None,
                 on_suspended: Optional[Callback] = None, on_resumed: Optional[Callback] = None) -> None:
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise errors.InvalidArgumentError("names must be a list of mutex names", "22023")
        checked = [errors.validate_name(n, "a mutex name") for n in names]
        members = tuple(sorted(checked, key=lambda n: n.encode("utf-8")))  # the server's order: bytewise
        if not members:
            raise errors.InvalidArgumentError("names must not be empty", "22023")
        if len(members) > MAX_MEMBERS:
            raise errors.InvalidArgumentError(f"names must name at most {MAX_MEMBERS} mutexes", "54000")
        if len(set(members)) != len(members):
            raise errors.InvalidArgumentError("names must name each mutex once", "22023")
        super().__init__(client, members[0], timeout=timeout, contender_id=contender_id, on_lost=on_lost,
                         on_suspended=on_suspended, on_resumed=on_resumed)
        self._names = members
        self.name = ",".join(members)  # for display: the hold's name in its lease and in logs
        self._fences: Dict[str, int] = {}

    @property
    def names(self) -> Tuple[str, ...]:
        """The members, in byte order."""
        return self._names

    def __repr__(self) -> str:
        return f"<simba.MultiLock {list(self.names)!r} id={self.contender_id!r} owner={self.is_owner()}>"

    @property
    def fences(self) -> Dict[str, int]:
        """Each member's fence while held, else empty."""
        with self._client._mu:
            fences = dict(self._fences)
        return fences if self.lease is not None else {}

    def _acquire_statement(self) -> Tuple[str, Dict[str, Any], bool]:
        c = self._client
        return ACQUIRE_SQL, {"names": list(self.names), "id": self.contender_id, "ttl": c._ttl_us,
                             "tr": c._tr_us}, False

    def _apply(self, reply: Any, sent_at: float, session_id: str) -> "bool | List[_Owner]":
        """True when every member was granted, else the owner rows."""
        owners = [_Owner(r, sent_at) for r in reply]
        if len(owners) != len(self.names) or any(o.owner_id != self.contender_id for o in owners):
            return owners
        earliest = min(owners, key=lambda o: o.transition_at - o.current_at)
        fences = {n: o.fence for n, o in zip(self.names, owners)}
        c = self._client
        with c._mu:
            self._fences = fences
        held = self._claim(max(fences.values()), server_time(earliest.acquired_at), sent_at,
                           earliest.transition_at, earliest.current_at)
        return True if held else owners

    def _lost_to(self, schedule: _WaitSchedule, owner: Any) -> None:
        """Again once the last member another holds may be free (no jitter:
        a release's NOTIFY brings it forward), at least 10 ms from now."""
        now = monotonic()
        ends = [o.sent_at + (o.transition_at - o.current_at) / 1e6 for o in owner
                if o.owner_id is not None and o.owner_id != self.contender_id]
        schedule.retry_in(max(0.01, max(ends, default=now) - now))

    def _release_statement(self) -> Tuple[str, Tuple[Any, ...]]:
        return RELEASE_SQL, (list(self.names), self.contender_id)

    def _verify(self, lease: Lease) -> None:
        """Each member renewed by its fence (``simba_renew`` never grants):
        another fence or owner on any member is the loss of the set."""
        c = self._client
        with c._mu:
            fences = dict(self._fences)
        rows, sent_at = c._statement(RENEW_SQL, {
            "names": list(self.names), "fences": [fences[n] for n in self.names], "id": self.contender_id,
            "ttl": c._ttl_us, "tr": c._tr_us}, one=False)
        owners = [_Owner(r, sent_at) for r in rows]
        with c._mu:
            if self._tenure.lease is None or self._tenure.lease.fence != lease.fence:
                return
            if len(owners) == len(self.names) and all(
                    o.owner_id == self.contender_id and o.fence == fences[n] for n, o in zip(self.names, owners)):
                return
            log.warning("simba: multi-lock %r lost a member: the whole set is lost", self.name)
            # the members still ours are given back, by id
            self._lost_locked(self._tenure.end(), owed=True)
