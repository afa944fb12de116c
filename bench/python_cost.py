"""Benchmark 9: what the Python client (python/) costs beside the C++ one,
on the server in libpq's environment, in one run.

  1. An uncontended acquire + release, one at a time, one Lock per mutex
     kept: the p50 over batches that alternate with bench_overhead's
     `locker-reuse` path (the C++ Locker doing the same), and the ratio
     (target: Python <= 1.5x C++).
  2. 10,000 locks held by one Client: the statements it sends per keepalive
     period while they are held (target: 1, the session's keepalive), and
     the time to take and release them all.

    python3 bench/python_cost.py --overhead-bin build/.../bench_overhead [--batches 6] [--ops 300]
        [--locks 10000] [--periods 3] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
import simba  # noqa: E402


def python_batch(client: "simba.Client", locks: "list[simba.Lock]", ops: int) -> "list[float]":
    out = []
    for i in range(ops):
        lock = locks[i % len(locks)]
        t0 = time.perf_counter()
        lock.acquire()
        lock.release()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def cpp_batch(binary: str, ops: int) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([binary, "--only", "locker-reuse", "--batches", "1", "--ops", str(ops), "--json", f.name],
                       check=True, stdout=subprocess.DEVNULL)
        doc = json.load(open(f.name))
    return next(r for r in doc["results"] if r["path"] == "locker-reuse")["latency_us"]["p50"]


def held_upkeep(n: int, periods: int, ttl: float) -> dict:
    counts = {"statement": 0, "listen": 0}
    client = simba.Client(session_ttl=ttl, session_transition=ttl * 0.6)
    stmt, listen = client._statement_locked, client._listen_exec

    def counted_statement(*a, **kw):
        counts["statement"] += 1
        return stmt(*a, **kw)

    def counted_listen(*a, **kw):
        counts["listen"] += 1
        return listen(*a, **kw)

    client._statement_locked = counted_statement
    client._listen_exec = counted_listen
    locks = [client.lock(f"bench-py-held-{os.getpid()}-{i}") for i in range(n)]
    t0 = time.perf_counter()
    for lock in locks:
        assert lock.acquire(timeout=10)
    take = time.perf_counter() - t0
    counts.update(statement=0, listen=0)
    time.sleep(periods * ttl)  # the window measured: held, nothing asked
    held_counts = dict(counts)
    still = sum(lock.is_owner() for lock in locks)
    t0 = time.perf_counter()
    for lock in locks:
        lock.release()
    give = time.perf_counter() - t0
    client.close()
    return {"locks": n, "periods": periods, "ttl_s": ttl, "take_s": take, "release_s": give,
            "still_held": still, "statements_per_period": held_counts["statement"] / periods,
            "listen_statements_per_period": held_counts["listen"] / periods}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--overhead-bin", required=True, help="bench_overhead (benchmark 5)")
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--ops", type=int, default=300)
    p.add_argument("--locks", type=int, default=10000)
    p.add_argument("--periods", type=int, default=3)
    p.add_argument("--ttl", type=float, default=2.0, help="session ttl for part 2 (seconds)")
    p.add_argument("--json")
    a = p.parse_args()

    client = simba.Client()
    locks = [client.lock(f"bench-py-{os.getpid()}-{i}") for i in range(100)]
    python_batch(client, locks, 50)  # warm: connections, plans
    py, cpp = [], []
    for _ in range(a.batches):
        py.append(statistics.median(python_batch(client, locks, a.ops)))
        cpp.append(cpp_batch(a.overhead_bin, a.ops))
    client.close()
    py50, cpp50 = statistics.median(py), statistics.median(cpp)
    print("Benchmark 9 — the Python client beside the C++ one")
    print(f"  acquire + release, p50 of {a.batches} alternating batches of {a.ops}:"
          f" Python {py50:.0f} us, C++ Locker {cpp50:.0f} us, ratio {py50 / cpp50:.2f}x (target <= 1.5x)")
    held = held_upkeep(a.locks, a.periods, a.ttl)
    print(f"  {held['locks']} locks held by one Client for {a.periods} keepalive periods of {a.ttl:g} s:"
          f" {held['statements_per_period']:.2f} statements per period (target 1),"
          f" {held['listen_statements_per_period']:.2f} on the LISTEN connection;"
          f" {held['still_held']} still held; taken in {held['take_s']:.1f} s, released in {held['release_s']:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"python_p50_us": py50, "cpp_locker_p50_us": cpp50, "ratio": py50 / cpp50,
                       "batches_python_us": py, "batches_cpp_us": cpp, "held": held}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
