"""The project README's Python guide runs against the test database."""

from __future__ import annotations

import contextlib
import io
import os
import re
from typing import Any

import psycopg
from conftest import Database

GUIDE = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_every_python_block_of_the_project_readme_runs(db: Database) -> None:
    text = open(GUIDE, encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README.md has no Python example"
    for i, code in enumerate(blocks):
        assert '"dbname=app"' in code, f"block {i} names no connection the test can replace"
        code = code.replace('"dbname=app"', repr(db.conninfo()))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"README.md (Python block {i})", "exec"), {})
        assert "holding nightly-report fence" in out.getvalue()
    assert db.owner("nightly-report")[0] is None  # released


def test_quick_start_sql_as_written(root: Any, app_role: str) -> None:
    """The README's Quick start in plain SQL: the superuser's setup (its
    role ``app`` being the test's role), then the lease as that role."""
    text = open(GUIDE, encoding="utf-8").read()
    start = text[text.index("## Quick start"):]
    setup, use = re.findall(r"```sql\n(.*?)```", start, re.S)[:2]
    assert "simba_grant('app')" in setup and "simba_acquire(" in use
    scratch = Database(root, app_role, with_extension=False)
    try:
        for stmt in filter(str.strip, setup.replace("'app'", f"'{app_role}'").split(";")):
            scratch.admin.execute(stmt)
        with psycopg.connect(scratch.conninfo(), autocommit=True) as app:
            acquire, release = [s for s in use.split(";") if s.strip()]
            owner_id, fence = app.execute(acquire).fetchone()
            assert owner_id == "worker-1" and fence > 0
            assert scratch.owner("nightly-report") == ("worker-1", fence)
            assert app.execute(release).fetchone()[0] is True
        assert scratch.owner("nightly-report")[0] is None
    finally:
        scratch.drop()
