"""simba for Python: distributed locks whose state lives in PostgreSQL.

::

    import simba

    with simba.Client("dbname=app") as client:
        with client.lock("orders", timeout=5) as lease:
            ...  # yours on every machine; pass lease.fence to what you write

See :class:`Client`, :class:`Lock`, :class:`Lease`, :class:`Semaphore`,
:func:`fence_check` and :mod:`simba.errors`; asyncio: :mod:`simba.aio`.
"""

from . import errors
from .client import Client, Lock
from .election import Election
from .errors import (
    CancelledError,
    ConnectionError,
    Error,
    FenceError,
    IllegalStateError,
    InvalidArgumentError,
    LeaseExpiredError,
    LockTimeoutError,
    NotOwnerError,
    PermissionDeniedError,
    ServerError,
    SessionEndedError,
    StaleFenceError,
)
from .fencing import fence_check
from .lease import Lease
from .multi import MultiLock
from .rwlock import ReadWriteLock
from .semaphore import Permit, Semaphore

__version__ = "1.4"

__all__ = [
    "Client",
    "Lock",
    "Election",
    "Semaphore",
    "Permit",
    "ReadWriteLock",
    "MultiLock",
    "Lease",
    "fence_check",
    "errors",
    "Error",
    "InvalidArgumentError",
    "PermissionDeniedError",
    "FenceError",
    "NotOwnerError",
    "StaleFenceError",
    "LeaseExpiredError",
    "SessionEndedError",
    "ConnectionError",
    "ServerError",
    "IllegalStateError",
    "CancelledError",
    "LockTimeoutError",
]
