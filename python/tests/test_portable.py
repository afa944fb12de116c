"""The same client against the portable edition (portable/, docs/portable.md), installed by a database's owner without superuser: a
lock, a prompt handoff and a fence check."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any, Iterator, List

import psycopg
import pytest
from psycopg import sql

import simba

from conftest import eventually, unique

SCRIPT = os.environ.get("SIMBA_PORTABLE_SCRIPT") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "portable", "simba_portable.sql")


@pytest.fixture(scope="module")
def portable(root: "psycopg.Connection[Any]") -> Iterator[str]:
    """A database its owner (no superuser) installed the portable edition into; its conninfo."""
    if not os.path.exists(SCRIPT):
        pytest.skip(f"no portable script at {SCRIPT} (make portable)")
    owner, dbname = unique("simba_py_porta"), unique("simba_py_porta")
    root.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(owner)))
    root.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(dbname), sql.Identifier(owner)))
    conninfo = psycopg.conninfo.make_conninfo("", dbname=dbname, user=owner)
    subprocess.run(["psql", "-Xq", "-v", "ON_ERROR_STOP=1", "-v", "schema=public", "-f", SCRIPT, conninfo],
                   check=True, stdout=subprocess.DEVNULL)
    yield conninfo
    root.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))
    root.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(owner)))


def test_lock_handoff_and_fence_check_on_the_portable_edition(portable: str) -> None:
    with psycopg.connect(portable, autocommit=True) as c:
        assert c.execute("SELECT edition FROM simba_settings").fetchone()[0].startswith("portable")
    with simba.Client(portable) as a, simba.Client(portable) as b:
        la = a.lock("porta")
        assert la.acquire(timeout=5)
        first = la.fence
        got: List[float] = []

        def wait() -> None:
            lb = b.lock("porta")
            if lb.acquire(timeout=15):
                got.append(time.monotonic())
                assert lb.fence > first
                lb.release()

        t = threading.Thread(target=wait)
        t.start()
        with psycopg.connect(portable, autocommit=True) as c:  # the waiter lost and registered
            assert eventually(lambda: c.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397312834"
            ).fetchone()[0] > 0, 5)
        released = time.monotonic()
        la.release()
        t.join(20)
        assert got and got[0] - released < 3.0, "the release must hand over, not the 16 s lease"
        assert la.acquire(timeout=5)
        with psycopg.connect(portable) as conn, conn.transaction():
            assert la.lease is not None
            simba.fence_check(conn, la.lease)
        stale = la.lease
        la.release()
        assert b.lock("porta").acquire(timeout=5)
        with pytest.raises(simba.FenceError):
            with psycopg.connect(portable) as conn, conn.transaction():
                simba.fence_check(conn, stale)
