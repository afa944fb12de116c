"""The README's examples run against the test database."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re

from conftest import Database
from test_rwlock import status
from test_semaphore import held_on_server

README = os.path.join(os.path.dirname(__file__), "..", "README.md")


def test_readme_first_lock(db: Database) -> None:
    text = open(README, encoding="utf-8").read()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert 'conninfo = "dbname=app user=app_role"' in code
    code = code.replace('"dbname=app user=app_role"', repr(db.conninfo()))
    db.admin.execute("CREATE TABLE IF NOT EXISTS report_runs (fence bigint)")
    db.admin.execute(f'GRANT ALL ON report_runs TO "{db.role}"')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert "holding nightly-report fence" in out.getvalue()
    fences = db.admin.execute("SELECT array_agg(fence) FROM report_runs").fetchone()[0]
    assert len(fences) == 1 and fences[0] > 0
    assert db.owner("nightly-report")[0] is None  # released


def test_readme_later_blocks_run_with_what_they_take_as_given(db: Database) -> None:
    """The election, semaphore, multi-lock, read-write and asyncio fragments,
    given ``conninfo``, ``client`` and ``serve`` (the first block defines
    them in the reader's program); nothing is left held afterwards."""
    text = open(README, encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)[1:]
    assert len(blocks) >= 2
    served: list = []
    client = db.client()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, code in enumerate(blocks):
            ns = {"conninfo": db.conninfo(), "client": client,
                  "serve": lambda lease: served.append(lease.fence)}
            exec(compile(code, f"python/README.md (block {i + 2})", "exec"), ns)
            if "main" in ns:
                asyncio.run(ns["main"]())
    assert len(served) == 1 and served[0] > 0
    # the asyncio block took every kind
    for said in ("taking orders under fence", "exporting on slot", "reading the catalog among readers",
                 "rewriting the catalog under fence", "moving money, both accounts held: {",
                 "leading under fence"):
        assert said in out.getvalue(), out.getvalue()
    for mutex in ("report-leader", "orders", "account-7", "account-9"):
        assert db.owner(mutex)[0] is None
    assert held_on_server(db, "exports") == 0 and status(db, "catalog") == ("free", 0, 0)
