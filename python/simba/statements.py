"""The client's statements on psycopg's libpq layer (:mod:`psycopg.pq`).

Debian's psycopg has no C speed-ups: a cursor's ``execute`` costs about as
much Python as the round trip it waits for. The statement connection's few
fixed statements need none of a cursor's generality, so they are sent as
libpq sends them: prepared once per connection (or unnamed through a
transaction pooler), parameters as text, and the row decoded by psycopg's
own loaders. Errors are psycopg's, as a cursor would raise them.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Dict, List, Optional, Tuple

import psycopg
from psycopg import pq
from psycopg.errors import error_from_result

__all__ = ["Statements"]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s")


@functools.lru_cache(maxsize=None)
def _convert(sql: str) -> Tuple[bytes, Tuple[str, ...]]:
    """``sql`` with psycopg's placeholders as ``$n``, and the names of the
    parameters in order (empty for positional ``%s``)."""
    names: List[str] = []
    count = 0

    def number(m: "re.Match[str]") -> str:
        nonlocal count
        if m.group(1) is None:
            count += 1
            return f"${count}"
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return _PLACEHOLDER.sub(number, sql).encode(), tuple(names)


def _text(v: Any) -> Optional[bytes]:
    """A parameter in PostgreSQL's text format (its type is the statement's)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return b"t" if v else b"f"
    if isinstance(v, (str, int)):
        return str(v).encode()
    if isinstance(v, (list, tuple)):  # an array: every element quoted
        return ("{" + ",".join('"' + str(x).replace("\\", "\\\\").replace('"', '\\"') + '"' for x in v)
                + "}").encode()
    raise TypeError(f"simba: no text form for a {type(v).__name__} parameter")


class Statements:
    """Runs statements on one connection: ``run(sql, params, one)`` returns
    the first row (``one``) or every row, as tuples."""

    def __init__(self, conn: "psycopg.Connection[Any]", prepare: bool) -> None:
        self.conn = conn
        self._pgconn = conn.pgconn
        self._prepare = prepare
        self._names: Dict[bytes, bytes] = {}  # converted statement -> its prepared name
        self._loaders: Dict[int, Any] = {}  # type oid -> psycopg's text loader

    def run(self, sql: str, params: Any, one: bool = True) -> Any:
        command, names = _convert(sql)
        values = [_text(params[n]) for n in names] if names else [_text(v) for v in params]
        pgconn = self._pgconn
        if self._prepare:
            name = self._names.get(command)
            if name is None:
                name = b"simba_%d" % len(self._names)
                self._check(pgconn.prepare(name, command))
                self._names[command] = name
            res = pgconn.exec_prepared(name, values)
        else:
            res = pgconn.exec_params(command, values)
        self._check(res)
        rows = [self._row(res, r) for r in range(res.ntuples)]
        return (rows[0] if rows else None) if one else rows

    def _check(self, res: "pq.abc.PGresult") -> None:
        if res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            raise error_from_result(res, encoding=self.conn.info.encoding)

    def _row(self, res: "pq.abc.PGresult", r: int) -> Tuple[Any, ...]:
        out = []
        for c in range(res.nfields):
            v = res.get_value(r, c)
            out.append(None if v is None else self._loader(res.ftype(c)).load(v))
        return tuple(out)

    def _loader(self, oid: int) -> Any:
        loader = self._loaders.get(oid)
        if loader is None:
            cls = self.conn.adapters.get_loader(oid, pq.Format.TEXT)
            if cls is None:
                raise TypeError(f"simba: no loader for type oid {oid}")
            loader = self._loaders[oid] = cls(oid, self.conn)
        return loader
