"""Fixtures: a real PostgreSQL server from libpq's environment (run the
suite inside test/with-cluster.sh), a database per test module with the
extension created, and a role without superuser granted by simba_grant."""

from __future__ import annotations

import itertools
import os
import sys
import time
from typing import Any, Callable, Iterator, List

import psycopg
import pytest
from psycopg import sql

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import simba  # noqa: E402

_n = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_n)}"


def eventually(pred: Callable[[], Any], timeout: float, step: float = 0.005) -> bool:
    """Polls ``pred`` until it is true or ``timeout`` seconds passed."""
    end = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= end:
            return bool(pred())
        time.sleep(step)


@pytest.fixture(scope="session")
def root() -> Iterator["psycopg.Connection[Any]"]:
    try:
        c = psycopg.connect("", autocommit=True)
    except psycopg.OperationalError as e:
        if os.environ.get("SIMBA_PGDATA"):
            raise
        pytest.skip(f"no PostgreSQL (run inside test/with-cluster.sh): {e}")
    yield c
    c.close()


@pytest.fixture(scope="session")
def app_role(root: "psycopg.Connection[Any]") -> Iterator[str]:
    """A LOGIN role without superuser, granted simba in each test database."""
    name = unique("simba_py_app")
    root.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    root.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def stranger_role(root: "psycopg.Connection[Any]") -> Iterator[str]:
    """A LOGIN role that is never granted simba."""
    name = unique("simba_py_stranger")
    root.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    root.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


class Database:
    """A scratch database with the extension created."""

    def __init__(self, root: "psycopg.Connection[Any]", role: str, with_extension: bool = True) -> None:
        self.root = root
        self.name = unique("simba_py")
        self.role = role
        root.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        self.admin = psycopg.connect(self.dsn(), autocommit=True)  # superuser, in this database
        if with_extension:
            self.admin.execute("CREATE EXTENSION simba")
            self.admin.execute("SELECT simba_grant(%s)", (role,))
        self.clients: List[simba.Client] = []

    def dsn(self, **kw: Any) -> str:
        return psycopg.conninfo.make_conninfo("", dbname=self.name, **kw)

    def conninfo(self, **kw: Any) -> str:
        """As the granted application role."""
        return self.dsn(user=self.role, **kw)

    def client(self, **kw: Any) -> simba.Client:
        kw.setdefault("application_name", unique("simba-pytest"))
        c = simba.Client(self.conninfo(), **kw)
        self.clients.append(c)
        return c

    def app_connection(self) -> "psycopg.Connection[Any]":
        """A plain psycopg connection as the application role (for fencing)."""
        return psycopg.connect(self.conninfo())

    def terminate(self, application_name: str) -> int:
        rows = self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,)).fetchall()
        return len(rows)

    def allow_connections(self, allow: bool) -> None:
        self.root.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(self.name), sql.SQL("true" if allow else "false")))

    def owner(self, mutex: str) -> Any:
        return self.admin.execute("SELECT owner_id, fence FROM simba_owner(%s)", (mutex,)).fetchone()

    def drop(self) -> None:
        for c in self.clients:
            try:
                c.close()
            except Exception:
                pass
        self.admin.close()
        self.allow_connections(True)
        self.root.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(self.name)))


@pytest.fixture(scope="module")
def db(root: "psycopg.Connection[Any]", app_role: str) -> Iterator[Database]:
    d = Database(root, app_role)
    yield d
    d.drop()


@pytest.fixture()
def name(request: Any) -> str:
    """A mutex name of this test's own."""
    return unique(request.node.name[:40])


@pytest.fixture(autouse=True)
def _close_clients(request: Any) -> Iterator[None]:
    """Closes the clients a test made, so that the next test's server sees
    only its own."""
    yield
    if "db" in request.fixturenames:
        d: Database = request.getfixturevalue("db")
        while d.clients:
            try:
                d.clients.pop().close()
            except Exception:
                pass
