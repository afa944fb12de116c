"""The project README's Python guide runs against the test database."""

from __future__ import annotations

import contextlib
import io
import os
import re

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
