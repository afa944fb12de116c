"""``pooled=True`` (a transaction-pooling PgBouncer in front): what the
client sends through the pooler and where it LISTENs. Against the server
itself: what goes over which connection is visible in pg_stat_activity and
pg_prepared_statements without a pooler. tck.conformance.pgbouncer runs the
client through a real one."""
import logging
import threading
from typing import Any

from conftest import Database, eventually, unique


def connections(db: Database, application_name: str) -> int:
    return db.admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)).fetchone()[0]


def test_pooled_without_listen_conninfo_opens_no_listen_and_warns(db: Database, name: str, caplog: Any) -> None:
    app = unique("simba-pooled")
    with caplog.at_level(logging.WARNING, logger="simba"):
        c = db.client(pooled=True, application_name=app)
    assert "pooled without listen_conninfo" in caplog.text
    assert "simba-listen" not in [t.name for t in c._threads]
    lock = c.lock(name)
    for _ in range(8):  # past psycopg's prepare threshold (5)
        assert lock.acquire(timeout=5)
        lock.release()
    assert connections(db, app) == 1, "only the statement connection"
    # nothing a pooler would hand to another client: no setting, no prepared statement
    with c._io:
        conn = c._conn
        assert conn is not None
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] == 0
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "0"
    c.close()


def test_pooled_listens_over_listen_conninfo(db: Database, name: str) -> None:
    app, listen_app = unique("simba-pooled"), unique("simba-pooled-listen")
    c = db.client(pooled=True, application_name=app,
                  listen_conninfo=db.conninfo(application_name=listen_app))
    assert eventually(lambda: connections(db, listen_app) == 1, 5), "no LISTEN over listen_conninfo"
    assert connections(db, app) == 1, "LISTEN went over the pooled connection string"
    holder = db.client()
    held = holder.lock(name)
    assert held.acquire(timeout=5)
    waiter = c.lock(name)
    got = []

    # within 10 s only by the release's NOTIFY: the poll backstop waits for
    # the holder's transition_at (16 s)
    def wait() -> None:
        got.append(waiter.acquire(timeout=10))
        if got[0]:
            waiter.release()
    t = threading.Thread(target=wait)
    t.start()
    held.release()
    t.join()
    assert got == [True]
