"""The README's first example runs against the test database."""

from __future__ import annotations

import contextlib
import io
import os
import re

from conftest import Database

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
