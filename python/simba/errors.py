"""Typed exceptions of the simba client, each carrying a SQLSTATE.

They mirror the C++ client's (``client/include/simba/errors.hpp``):

================================  ===========================  ===========================
class                             SQLSTATE                     when
================================  ===========================  ===========================
:class:`InvalidArgumentError`     22023, 22004                 a bad name, ttl, ...
:class:`PermissionDeniedError`    42501                        the role lacks ``simba_grant``
:class:`NotOwnerError`            SB001                        ``simba_fence_check``
:class:`StaleFenceError`          SB002                        ``simba_fence_check``
:class:`LeaseExpiredError`        SB003                        ``simba_fence_check``
:class:`SessionEndedError`        SB004                        the session has ended
:class:`ConnectionError`          08xxx, 3D000, 28000, 28P01   no server, no database, ...
:class:`ServerError`              anything else                42883 (extension missing), 55000
:class:`IllegalStateError`        --                           e.g. a second acquire by the holder
:class:`CancelledError`           --                           a wait ended by ``close()``
:class:`LockTimeoutError`         --                           ``with client.lock(.., timeout=)``
================================  ===========================  ===========================

Setup mistakes (42883, 42501, 55000, 22023, a refused connection) carry the
same hints as the C++ client's.
"""

from __future__ import annotations

import builtins
from typing import Optional

__all__ = [
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
    "error_for",
    "from_psycopg",
    "connect_error",
    "is_permanent",
    "MAX_NAME_LENGTH",
    "validate_name",
]

MAX_NAME_LENGTH = 256

EXTENSION_HINT = (
    "is the simba extension installed in this database, at its latest version?"
    " CREATE EXTENSION simba, or ALTER EXTENSION simba UPDATE;"
    " or is its portable edition's schema on the role's search_path?"
)
GRANT_HINT = (
    "simba's owner grants it to a role (a superuser for the extension,"
    " the installing role for the portable edition): SELECT simba_grant('role')"
)


class Error(Exception):
    """Base of every simba exception.

    :attr:`sqlstate` is the five-character SQLSTATE the server used (or would
    use) for it, or ``None`` where none applies.
    """

    def __init__(self, message: str, sqlstate: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate

    def __str__(self) -> str:
        return self.message if not self.sqlstate else f"{self.message} (SQLSTATE {self.sqlstate})"


class InvalidArgumentError(Error, ValueError):
    """A bad argument: SQLSTATE 22023 (invalid_parameter_value) or 22004 (null)."""


class PermissionDeniedError(Error):
    """The role lacks a privilege (42501): ``SELECT simba_grant('role')``."""


class FenceError(Error):
    """``simba_fence_check`` refused the write (SQLSTATE class SB)."""


class NotOwnerError(FenceError):
    """SB001: the caller does not hold the mutex."""


class StaleFenceError(FenceError):
    """SB002: the fence is not the current holder's fence."""


class LeaseExpiredError(FenceError):
    """SB003: the caller's lease (or session) has ended."""


class SessionEndedError(Error):
    """SB004: the session has ended, is unknown or is another role's."""


class ConnectionError(Error, builtins.ConnectionError):
    """The server could not be reached or the connection broke (08xxx), or a
    connection was refused for a reason a retry cannot fix (3D000, 28000,
    28P01, 42501)."""


class ServerError(Error):
    """Any other server error; :attr:`sqlstate` says which (42883: the
    extension is missing; 55000: it must be updated)."""


class IllegalStateError(Error, RuntimeError):
    """A call the object's state does not allow (a second acquire by the
    holding thread, a release by a thread that does not hold the lock, a
    call on a closed client)."""


class CancelledError(IllegalStateError):
    """A wait for a lock ended because the client was closed."""


class LockTimeoutError(Error, builtins.TimeoutError):
    """``with client.lock(name, timeout=...)`` did not get the lock in time."""


_PERMANENT = {"42883", "42P01", "42501", "22023", "22004", "55000", "3D000", "28000", "28P01"}


def is_permanent(sqlstate: Optional[str]) -> bool:
    """Whether an error with this SQLSTATE is a setup mistake a retry cannot fix."""
    return sqlstate in _PERMANENT


def with_setup_hint(sqlstate: Optional[str], message: str) -> str:
    """The two setup mistakes a new user meets first, said in their terms.

    As the C++ client does, only the server message's first line is kept
    (its position and cast hint name simba's own statement)."""
    hint = EXTENSION_HINT if sqlstate == "42883" else GRANT_HINT if sqlstate == "42501" else None
    if hint is None or "simba_" not in message:
        return message
    return message.split("\n", 1)[0] + " (" + hint + ")"


def error_for(sqlstate: Optional[str], message: str) -> Error:
    """The :class:`Error` subclass for a server SQLSTATE (``throw_sqlstate``)."""
    s = sqlstate or ""
    if s in ("22023", "22004"):
        return InvalidArgumentError(message, s)
    if s == "42501":
        return PermissionDeniedError(message, s)
    if s == "SB001":
        return NotOwnerError(message, s)
    if s == "SB002":
        return StaleFenceError(message, s)
    if s == "SB003":
        return LeaseExpiredError(message, s)
    if s == "SB004":
        return SessionEndedError(message, s)
    if s.startswith("SB"):
        return FenceError(message, s)
    if s.startswith("08"):
        return ConnectionError(message, s)
    return ServerError(message, sqlstate)


def _message(e: BaseException) -> str:
    diag = getattr(e, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    msg = primary or str(e)
    return msg.strip()


def from_psycopg(e: BaseException, *, lost: bool = False) -> Error:
    """Turns a psycopg error raised by a statement into a typed :class:`Error`.

    ``lost``: the connection broke under the statement (08006)."""
    if isinstance(e, Error):
        return e
    msg = _message(e)
    if lost:
        return ConnectionError(msg or "the connection broke or the server closed it", "08006")
    state = getattr(e, "sqlstate", None)
    return error_for(state, with_setup_hint(state, msg))


def connect_sqlstate(e: BaseException) -> str:
    """The SQLSTATE of a failed connect (libpq rarely gives one): as the
    C++ client reads it from the message."""
    state = getattr(e, "sqlstate", None)
    if state:
        return str(state)
    msg = str(e)
    if 'database "' in msg and "does not exist" in msg:
        return "3D000"
    if "password authentication failed" in msg:
        return "28P01"
    if 'role "' in msg and "does not exist" in msg:
        return "28000"
    if "no pg_hba.conf entry" in msg:
        return "28000"
    if "permission denied for database" in msg:
        return "42501"
    return "08001"


def connect_error(e: BaseException) -> ConnectionError:
    """A failed connect as :class:`ConnectionError` with its SQLSTATE."""
    if isinstance(e, ConnectionError):
        return e
    return ConnectionError(str(e).strip() or "could not connect", connect_sqlstate(e))


def validate_name(value: object, what: str) -> str:
    """Checks a mutex name or contender id as the server does (22004, 22023)."""
    if value is None:
        raise InvalidArgumentError(f"{what} must not be null", "22004")
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str", "22023")
    if not value:
        raise InvalidArgumentError(f"{what} must not be empty", "22023")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidArgumentError(f"{what} must be at most {MAX_NAME_LENGTH} characters", "22023")
    return value
