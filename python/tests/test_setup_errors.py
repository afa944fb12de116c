"""Setup mistakes surface at once on Client(...), with the C++ client's hints."""

from __future__ import annotations

import time
from typing import Any

import pytest

import simba
from simba import errors

from conftest import Database


def test_error_types_by_sqlstate() -> None:
    cases = {
        "22023": errors.InvalidArgumentError, "22004": errors.InvalidArgumentError,
        "42501": errors.PermissionDeniedError, "SB001": errors.NotOwnerError,
        "SB002": errors.StaleFenceError, "SB003": errors.LeaseExpiredError,
        "SB004": errors.SessionEndedError, "SB009": errors.FenceError,
        "08006": errors.ConnectionError, "42883": errors.ServerError, "55000": errors.ServerError,
    }
    for state, cls in cases.items():
        e = errors.error_for(state, "m")
        assert type(e) is cls and e.sqlstate == state
        assert isinstance(e, simba.Error)
    assert isinstance(errors.IllegalStateError("x"), RuntimeError)
    assert isinstance(errors.LockTimeoutError("x"), TimeoutError)


def test_no_extension(root: Any, app_role: str) -> None:
    bare = Database(root, app_role, with_extension=False)
    try:
        t0 = time.monotonic()
        with pytest.raises(simba.ServerError) as ei:
            simba.Client(bare.conninfo())
        assert time.monotonic() - t0 < 2
        e = ei.value
        assert e.sqlstate == "42883"
        assert "simba_session_open" in str(e)  # which function is missing
        assert "CREATE EXTENSION simba" in str(e)
        assert "portable edition" in str(e)
        assert "\n" not in e.message  # the server's position and cast hint are left out
    finally:
        bare.drop()


def test_no_grant(db: Database, stranger_role: str) -> None:
    with pytest.raises(simba.PermissionDeniedError) as ei:
        simba.Client(db.dsn(user=stranger_role))
    assert ei.value.sqlstate == "42501"
    assert "simba_grant('role')" in str(ei.value)


def test_wrong_port() -> None:
    t0 = time.monotonic()
    with pytest.raises(simba.ConnectionError) as ei:
        simba.Client("host=127.0.0.1 port=1 connect_timeout=2")
    assert ei.value.sqlstate == "08001"
    assert "127.0.0.1" in str(ei.value)
    assert time.monotonic() - t0 < 5


def test_wrong_database() -> None:
    with pytest.raises(simba.ConnectionError) as ei:
        simba.Client("dbname=simba_no_such_database")
    assert ei.value.sqlstate == "3D000"
    assert "simba_no_such_database" in str(ei.value)


def test_bad_arguments_rejected_before_any_round_trip(db: Database) -> None:
    with pytest.raises(simba.InvalidArgumentError) as ei:
        simba.Client(db.conninfo(), session_ttl=0)
    assert ei.value.sqlstate == "22023"
    c = db.client()
    for bad in ("", "x" * 257):
        with pytest.raises(simba.InvalidArgumentError):
            c.lock(bad)
    with pytest.raises(simba.InvalidArgumentError) as ei:
        c.lock(None)  # type: ignore[arg-type]
    assert ei.value.sqlstate == "22004"


def test_grant_revoked_after_start_raises_at_once(db: Database, name: str) -> None:
    """A lock attempt that meets 42501 raises now instead of waiting."""
    import uuid
    role = "simba_py_late_" + uuid.uuid4().hex[:8]
    db.root.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        db.admin.execute("SELECT simba_grant(%s)", (role,))
        c = simba.Client(db.dsn(user=role), application_name="simba-pytest-late")
        try:
            db.admin.execute("SELECT simba_revoke(%s)", (role,))
            t0 = time.monotonic()
            with pytest.raises(simba.PermissionDeniedError) as ei:
                c.lock(name).acquire(timeout=30)
            assert time.monotonic() - t0 < 5
            assert "simba_grant('role')" in str(ei.value)
        finally:
            c.close()
    finally:
        db.admin.execute(f'DROP OWNED BY "{role}"')
        db.root.execute(f'DROP ROLE "{role}"')
