"""The conformance suite's harness: workers of any language driven over the
line protocol of README.md, and an admin connection (libpq's environment, a
superuser) for the faults and the server's view.

Workers come from the environment, one variable per kind:
``SIMBA_CONFORMANCE_WORKER_<KIND>="command line"`` (split as a shell would,
without one). This repository's Python worker is always there as kind
``python``; ``tck/CMakeLists.txt`` adds ``cpp``. The pair cases run for every
ordered pair of kinds (each kind as the holder and as the one after it).
Inside test/with-pgbouncer.sh (``SIMBA_POOLER_DSN``) every worker's
statements go through the transaction pooler, its LISTEN directly.
"""
import itertools
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import psycopg
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ROLE = "simba_conformance"
TTL_MS, TRANSITION_MS = 2000, 1000
LEASE_S = (TTL_MS + TRANSITION_MS) / 1000
REPLY_S = 30  # a reply later than this is a hung worker


def worker_kinds() -> Dict[str, List[str]]:
    kinds = {"python": [sys.executable, str(HERE / "worker.py")]}
    for k, v in sorted(os.environ.items()):
        if k.startswith("SIMBA_CONFORMANCE_WORKER_") and v:
            kinds[k[len("SIMBA_CONFORMANCE_WORKER_"):].lower()] = shlex.split(v)
    return kinds


KINDS = worker_kinds()
PAIRS = [pytest.param(a, b, id=f"{a}-{b}") for a, b in itertools.product(KINDS, KINDS)]


class WorkerError(AssertionError):
    pass


class Worker:
    """One worker process: commands in, one reply per command out, and
    ``event`` lines (a lost hold) collected on their own."""

    def __init__(self, kind: str, conninfo: str, listen_conninfo: Optional[str] = None,
                 lease_ms: Tuple[int, int] = (TTL_MS, TRANSITION_MS)) -> None:
        self.kind = kind
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
        args = ["--conninfo", conninfo, "--ttl-ms", str(lease_ms[0]), "--transition-ms", str(lease_ms[1])]
        if listen_conninfo is not None:
            args += ["--listen-conninfo", listen_conninfo]
        self.proc = subprocess.Popen(
            KINDS[kind] + args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
        self.replies: "queue.Queue[Optional[str]]" = queue.Queue()
        self.events: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._reply("(start)")
        if not ready.startswith("ready"):
            raise WorkerError(f"{kind} worker: {ready!r} instead of ready")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            (self.events if line.startswith("event ") else self.replies).put(line)
        self.replies.put(None)

    def _reply(self, what: str) -> str:
        try:
            line = self.replies.get(timeout=REPLY_S)
        except queue.Empty:
            raise WorkerError(f"{self.kind} worker: no reply to {what} in {REPLY_S} s") from None
        if line is None:
            raise WorkerError(f"{self.kind} worker exited (status {self.proc.wait()}) before replying to {what}")
        return line

    def call(self, *words: object) -> str:
        line = " ".join(map(str, words))
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self._reply(line)
        if not reply.startswith("ok"):
            raise WorkerError(f"{self.kind} worker: {line!r} -> {reply!r}")
        return reply[3:]

    def lock(self, name: str, timeout_s: float, fair: bool = False) -> Optional[int]:
        """The fence of the hold taken, or None on timeout."""
        r = self.call("lock", name, int(timeout_s * 1000), *(["fair"] if fair else [])).split()
        return int(r[1]) if r[0] == "acquired" else None

    def unlock(self, name: str) -> None:
        self.call("unlock", name)

    def lease(self, name: str) -> Optional[int]:
        r = self.call("lease", name).split()
        return int(r[1]) if r[0] == "held" else None

    def multilock(self, names: List[str], timeout_s: float) -> Optional[Dict[str, int]]:
        """Each member's fence of the multi-lock taken, or None on timeout."""
        members = sorted(names, key=lambda n: n.encode())
        r = self.call("multilock", ",".join(members), int(timeout_s * 1000)).split()
        return dict(zip(members, map(int, r[1].split(",")))) if r[0] == "acquired" else None

    def multiunlock(self, names: List[str]) -> None:
        self.call("multiunlock", ",".join(sorted(names, key=lambda n: n.encode())))

    def rwlock(self, name: str, mode: str, timeout_s: float) -> Optional[int]:
        """The fence of the read or write hold taken, or None on timeout."""
        r = self.call("rwlock", name, mode, int(timeout_s * 1000)).split()
        return int(r[1]) if r[0] == "acquired" else None

    def rwunlock(self, name: str) -> None:
        self.call("rwunlock", name)

    def permit(self, key: str, permits: int, timeout_s: float) -> Optional[int]:
        """The fence of a permit of `key` (at most `permits` holders), or None on timeout."""
        r = self.call("permit", key, permits, int(timeout_s * 1000)).split()
        return int(r[1]) if r[0] == "permit" else None

    def unpermit(self, key: str) -> None:
        self.call("unpermit", key)

    def elect(self, name: str) -> None:
        assert self.call("elect", name) == "campaigning"

    def resign(self, name: str) -> None:
        assert self.call("resign", name) == "resigned"

    def leader(self, name: str) -> Optional[int]:
        """The fence of this worker's leadership of `name` now, or None."""
        r = self.call("leader", name).split()
        return int(r[1]) if r[0] == "leader" else None

    def event(self, timeout_s: float) -> Optional[str]:
        """The next event line, or None when none came within timeout_s."""
        try:
            return self.events.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def wait_event(self, expected: str, timeout_s: float) -> None:
        try:
            got = self.events.get(timeout=timeout_s)
        except queue.Empty:
            raise WorkerError(f"{self.kind} worker: no {expected!r} within {timeout_s} s") from None
        assert got == expected, f"{self.kind} worker: {got!r} instead of {expected!r}"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def quit(self) -> None:
        assert self.call("quit") == "bye"
        assert self.proc.wait(timeout=REPLY_S) == 0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


class Harness:
    def __init__(self, admin: psycopg.Connection) -> None:
        self.admin = admin
        self.workers: List[Worker] = []

    def worker(self, kind: str, lease_ms: Tuple[int, int] = (TTL_MS, TRANSITION_MS)) -> Worker:
        """A worker of `kind` taking its locks with lease_ms (ttl, transition)."""
        app = f"simba-conformance-{uuid.uuid4().hex[:12]}"
        direct = f"user={ROLE} application_name={app}"
        pooler = os.environ.get("SIMBA_POOLER_DSN")
        if pooler:  # statements through the pooler (test/with-pgbouncer.sh), LISTEN direct
            w = Worker(kind, f"{pooler} {direct}", direct, lease_ms)
        else:
            w = Worker(kind, direct, lease_ms=lease_ms)
        w.application_name = app  # type: ignore[attr-defined]
        self.workers.append(w)
        return w

    def held(self, a: str, b: str, name: str) -> Tuple[Worker, Worker, int]:
        """Workers of kinds a and b, a holding lock `name`: (a, b, a's fence)."""
        wa, wb = self.worker(a), self.worker(b)
        fa = wa.lock(name, 10)
        assert fa is not None, f"{a} worker: no hold on a free lock within 10 s"
        return wa, wb, fa

    def sql(self, query: str, *args: object):
        return self.admin.execute(query, args).fetchone()

    def restart_server(self) -> None:
        """pg_ctl restart -m fast (test/with-cluster.sh's server): every
        connection is cut, and the server is back when it returns."""
        if not os.environ.get("SIMBA_PGDATA"):
            pytest.skip("needs test/with-cluster.sh (SIMBA_PGDATA, SIMBA_PG_BIN)")
        cmd = [os.path.join(os.environ["SIMBA_PG_BIN"], "pg_ctl"), "-D", os.environ["SIMBA_PGDATA"],
               "-m", "fast", "-w", "-t", "60", "restart"]
        if os.geteuid() == 0:  # the server runs as postgres (test/with-cluster.sh)
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.admin.close()
        self.admin = psycopg.connect("", autocommit=True)

    def server_fence(self, name: str) -> Optional[int]:
        """The fence of the live holder on the server's clock, or None."""
        row = self.sql("SELECT (o).fence, (o).owner_id FROM (SELECT simba_owner(%s) AS o) s", name)
        return row[0] if row and row[1] is not None else None

    def server_queue(self, name: str) -> int:
        """Live entries of mutex `name`'s fair queue on the server's clock."""
        return self.sql("SELECT count(*) FROM simba_mutex_queue q, simba_clock() c"
                        " WHERE q.mutex = %s AND q.transition_at > c.now", name)[0]

    def server_rwlock(self, name: str) -> Tuple[str, int]:
        """(mode, live holders) of read-write lock `name` on the server."""
        row = self.sql("SELECT mode, coalesce(cardinality(holders), 0) FROM simba_rwlock_status"
                       " WHERE rwlock = %s", name)
        return (row[0], row[1]) if row else ("free", 0)

    def server_permits(self, key: str) -> int:
        """Live permits of `key` on the server's clock."""
        return self.sql("SELECT count(*) FROM simba_semaphore_status WHERE key = %s AND time_left > '0'", key)[0]

    def close(self) -> None:
        for w in self.workers:
            w.close()


@pytest.fixture(scope="session")
def role():
    try:
        conn = psycopg.connect("", autocommit=True)
    except psycopg.OperationalError as e:
        pytest.skip(f"no server in libpq's environment: {e}")
    with conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN")
        conn.execute("SELECT simba_grant(%s::regrole)", (ROLE,))
    return ROLE


@pytest.fixture
def h(role):
    harness = Harness(psycopg.connect("", autocommit=True))  # a test may restart the server
    yield harness
    harness.close()
    harness.admin.close()


@pytest.fixture
def name():
    return f"conformance-{uuid.uuid4().hex[:12]}"


def concurrently(workers: List[Worker], run: Callable[[int, Worker], None]) -> List[str]:
    """Runs run(i, worker) for every worker, each on a thread of its own,
    and waits for all; returns the AssertionErrors they raised, as text (one
    worker's failure does not stop the others)."""
    errors: List[str] = []

    def one(i: int, w: Worker) -> None:
        try:
            run(i, w)
        except AssertionError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=one, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def elapsed_since(t0: float) -> float:
    return time.monotonic() - t0
