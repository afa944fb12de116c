"""Transactional fencing: ``simba_fence_check`` inside the caller's own
psycopg transaction (docs/reference.md, "Transactional fencing")."""

from __future__ import annotations

from typing import Any, Optional, Union

import psycopg

from . import errors
from .client import Lock
from .lease import Lease

__all__ = ["fence_check"]


def fence_check(cursor: Union["psycopg.Cursor[Any]", "psycopg.Connection[Any]"], lease: Union[Lease, Lock],
                name: Optional[str] = None) -> None:
    """Runs ``simba_fence_check(name, contender_id, fence)`` on ``cursor``
    (or connection), inside the transaction the caller writes in: the write
    commits only if the lease's holder still holds the mutex with that fence,
    and a takeover waits for the transaction to end (the check locks the
    mutex row ``FOR SHARE``).

    ``lease`` is a :class:`~simba.Lease` (keep the one ``with`` gave you) or
    a :class:`~simba.Lock` (its lease now; a lock that holds nothing raises
    :class:`~simba.errors.NotOwnerError` without a round trip). ``name``
    defaults to the lease's mutex.

    Raises :class:`~simba.errors.NotOwnerError` (SB001),
    :class:`~simba.errors.StaleFenceError` (SB002),
    :class:`~simba.errors.LeaseExpiredError` (SB003), or another
    :class:`~simba.errors.Error`; the transaction is then aborted, as after
    any error: roll it back.
    """
    if isinstance(lease, Lock):
        lk = lease
        held = lk.lease
        if held is None:
            raise errors.NotOwnerError(f'contender "{lk.contender_id}" does not hold mutex "{lk.name}"', "SB001")
        lease = held
    mutex = name if name is not None else lease.name
    try:
        cursor.execute("SELECT simba_fence_check(%s, %s, %s)", (mutex, lease.contender_id, lease.fence))
    except psycopg.Error as e:
        raise errors.from_psycopg(e) from e
