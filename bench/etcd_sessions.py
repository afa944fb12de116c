#!/usr/bin/env python3
"""Benchmark 7's etcd side (bench/sessions.sh): the same workload as simba's
sessions on an etcd member, through its JSON gateway (etcd 3.4, /v3/...),
with Python's standard library only.

--procs "processes" each hold one lease of --ttl seconds with every one of
their keys attached, as etcd's concurrency.Session does: lock i is the key
lock/{i}, value proc-{i % procs}, on process i % procs's lease. Each lease is
kept alive every --keepalive seconds by a thread of its own on a connection of
its own (staggered over the period), which times every keepalive's round trip.
A waiter process (its own lease, kept alive too; not in the latencies)
contends for every held lock i with i % --waiter-every == 0 as
concurrency.Mutex waits: it puts its own key wait/{i} on its lease once,
--batch puts to a txn, looking for newly held locks every --waiter-period
seconds (a waiter of etcd then watches; it sends nothing more).

For each step N of --steps the locks from the previous step's N up to N are
taken, --batch to a txn, each only if absent (create_revision == 0), and
then, over --steady seconds:
  cpu_pct            etcd's CPU (utime + stime in /proc/PID/stat), % of a core
  keepalive_p50/p99  round trip of the owners' keepalives sent in the window
  requests_per_s     HTTP requests to etcd from every thread in the window
  write_bytes_per_s  bytes etcd wrote to storage (/proc/PID/io write_bytes:
                     its WAL and its database; the WAL's files are
                     preallocated, so their sizes would not show it)
  rss_mb             etcd's resident memory at the end of the window
  lost               locks not held: N minus the keys under lock/ (a lease
                     that ended took its keys with it).
After the last step process 0 stops its keepalives (as if killed) and a taker
asks every 0.2 s whether the first of its keys still to take is gone; then it
takes them, a txn per --batch of them, each txn taking all of its keys only
if all are absent. For each key, the time from
process 0's last keepalive sent until the taker held it: p50, p99, max, the
bound (ttl) and how far the max is past it.

Prints one JSON object on stdout; progress goes to stderr.
"""
import argparse
import base64
import http.client
import json
import math
import os
import sys
import threading
import time
import urllib.parse

ERRORS = (OSError, http.client.HTTPException, RuntimeError)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Etcd:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.requests = 0  # every request sent, by every thread
        self.lock = threading.Lock()

    def connect(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=120)

    def call(self, path, body, conn):
        with self.lock:
            self.requests += 1
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        except ERRORS:
            conn.close()  # the next request reconnects
            raise
        if r.status != 200:
            raise RuntimeError(f"{path}: HTTP {r.status}: {data[:200]!r}")
        return json.loads(data)


def put(key, value, lease):
    return {"requestPut": {"key": b64(key), "value": b64(value), "lease": str(lease)}}


def absent(key):
    """Compare: nobody has the key (create_revision 0), as a lock's take does."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def every(period, delay, stop):
    """Yields after `delay` s, then every `period` s, until `stop` is set; a
    round that starts late is not made up for."""
    due = time.perf_counter() + delay
    while not stop.wait(max(0.0, due - time.perf_counter())):
        yield
        due = max(due + period, time.perf_counter())


class Keeper(threading.Thread):
    """One process's lease, kept alive every `period` s on its own connection;
    records (sent, round trip) of each keepalive answered."""

    def __init__(self, etcd, conn, ttl, period, delay):
        super().__init__(daemon=True)
        self.etcd, self.period, self.delay = etcd, period, delay
        self.lease = int(etcd.call("/v3/lease/grant", {"TTL": ttl}, conn)["ID"])
        self.stopped = threading.Event()
        self.samples = []
        self.last_sent = time.perf_counter()
        self.expired = False

    def run(self):
        conn = self.etcd.connect()
        for _ in every(self.period, self.delay, self.stopped):
            sent = time.perf_counter()
            try:
                r = self.etcd.call("/v3/lease/keepalive", {"ID": self.lease}, conn)
            except ERRORS as e:
                log(f"keepalive of lease {self.lease:x}: {e}")
                continue
            rtt = time.perf_counter() - sent
            self.last_sent = sent
            if int(r.get("result", {}).get("TTL", 0)) <= 0:
                self.expired = True
                log(f"lease {self.lease:x} lost")
                return
            self.samples.append((sent, rtt))


class Waiter(threading.Thread):
    """Every `period` s, puts wait/{i} on its lease for every lock i newly
    held (below `self.locks`) with i % every == 0, `batch` to a txn."""

    def __init__(self, etcd, lease, period, every_, batch):
        super().__init__(daemon=True)
        self.etcd, self.lease, self.period, self.every, self.batch = etcd, lease, period, every_, batch
        self.stopped = threading.Event()
        self.locks = 0

    def run(self):
        conn = self.etcd.connect()
        done = 0  # wait/{i} is in place for every such i below done
        for _ in every(self.period, self.period, self.stopped):
            upto = self.locks
            keys = [f"wait/{i}" for i in range(-(-done // self.every) * self.every, upto, self.every)]
            try:
                for lo in range(0, len(keys), self.batch):
                    self.etcd.call("/v3/kv/txn", {"success": [put(k, "waiter", self.lease) for k in keys[lo:lo + self.batch]]}, conn)
                done = upto
            except ERRORS as e:
                log(f"waiter: {e}")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def write_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def exists(etcd, key, conn):
    return int(etcd.call("/v3/kv/range", {"key": b64(key), "count_only": True}, conn).get("count", 0)) > 0


def count(etcd, prefix, conn):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    r = etcd.call("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end), "count_only": True}, conn)
    return int(r.get("count", 0))


def pct(xs, q):
    """Nearest-rank percentile of sorted xs (None if empty)."""
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else None


def rnd(x, digits):
    return None if x is None else round(x, digits)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--steps", required=True, type=lambda s: [int(x) for x in s.split(",")])
    for name in ("pid", "procs", "batch", "steady", "keepalive", "ttl", "waiter-every", "waiter-period"):
        ap.add_argument("--" + name, type=int, required=True)
    a = ap.parse_args()
    if any(n <= m for m, n in zip([0] + a.steps, a.steps)):
        ap.error("--steps must increase")

    etcd = Etcd(a.url)
    conn = etcd.connect()
    for _ in range(100):  # wait for the member
        try:
            etcd.call("/v3/maintenance/status", {}, conn)
            break
        except ERRORS:
            time.sleep(0.1)

    # staggered over the period, as independent processes would be
    owners = [Keeper(etcd, conn, a.ttl, a.keepalive, a.keepalive * p / a.procs) for p in range(a.procs)]
    waiter_lease = Keeper(etcd, conn, a.ttl, a.keepalive, 0)
    waiter = Waiter(etcd, waiter_lease.lease, a.waiter_period, a.waiter_every, a.batch)
    for t in owners + [waiter_lease, waiter]:
        t.start()

    steps, held = [], 0
    for n in a.steps:
        log(f"etcd: ramp {held} -> {n} locks")
        start = time.perf_counter()
        for lo in range(held, n, a.batch):
            # a process whose lease is gone cannot take locks: they count as lost
            keys = [(f"lock/{i}", i % a.procs) for i in range(lo, min(lo + a.batch, n)) if not owners[i % a.procs].expired]
            txn = {
                "compare": [absent(k) for k, _ in keys],
                "success": [put(k, f"proc-{p}", owners[p].lease) for k, p in keys],
            }
            if keys and not etcd.call("/v3/kv/txn", txn, conn).get("succeeded"):
                raise SystemExit(f"etcd ramp: a txn failed at lock {lo}")
            waiter.locks = min(lo + a.batch, n)
        ramp = time.perf_counter() - start
        held = n

        log(f"etcd: {n} locks, steady {a.steady} s")
        w0, c0, r0 = time.perf_counter(), cpu_ticks(a.pid), etcd.requests
        b0 = write_bytes(a.pid)
        time.sleep(a.steady)
        w1, c1, r1 = time.perf_counter(), cpu_ticks(a.pid), etcd.requests
        b1 = write_bytes(a.pid)
        secs = w1 - w0
        ms = sorted(1000 * rtt for o in owners for sent, rtt in list(o.samples) if w0 <= sent < w1)
        lost = n - count(etcd, "lock/", conn)
        steps.append({
            "locks": n, "ramp_s": round(ramp, 2),
            "cpu_pct": round(100.0 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / secs, 2),
            "keepalive_p50_ms": rnd(pct(ms, 0.5), 2), "keepalive_p99_ms": rnd(pct(ms, 0.99), 2),
            "requests_per_s": round((r1 - r0) / secs, 1),
            "write_bytes_per_s": round((b1 - b0) / secs),
            "rss_mb": rss_mb(a.pid), "lost": lost,
        })
        log(f"etcd: {json.dumps(steps[-1])}")

    # process 0 dies: its keepalives stop, its lease ends ttl after the last one
    taker = Keeper(etcd, conn, a.ttl, a.keepalive, a.keepalive)
    taker.start()
    victim = owners[0]
    victim.stopped.set()
    victim.join()  # a keepalive under way still counts
    killed = victim.last_sent
    keys = [f"lock/{i}" for i in range(0, held, a.procs)]
    log(f"etcd: process 0 killed, taking its {len(keys)} locks")
    pending = [keys[lo:lo + a.batch] for lo in range(0, len(keys), a.batch)]
    waited = []
    while pending:
        # as simba's waiter does: ask whether the first key still to take is
        # gone before sending the txns (each failing txn goes through raft)
        if not exists(etcd, pending[0][0], conn):
            for batch in list(pending):
                txn = {
                    "compare": [absent(k) for k in batch],
                    "success": [put(k, "taker", taker.lease) for k in batch],
                }
                if etcd.call("/v3/kv/txn", txn, conn).get("succeeded"):
                    waited += [time.perf_counter() - killed] * len(batch)
                    pending.remove(batch)
        if pending:
            if time.perf_counter() - killed > 10 * a.ttl:
                raise SystemExit(f"etcd: process 0's locks not free {10 * a.ttl} s after its last keepalive")
            time.sleep(0.2)
    for t in owners + [waiter_lease, waiter, taker]:
        t.stopped.set()
    waited.sort()
    print(json.dumps({"steps": steps, "kill": {
        "locks": len(keys), "p50_s": rnd(pct(waited, 0.5), 3), "p99_s": rnd(pct(waited, 0.99), 3),
        "max_s": rnd(pct(waited, 1.0), 3), "bound_s": a.ttl, "after_lease_end_s": rnd(pct(waited, 1.0) - a.ttl, 3),
    }}))


if __name__ == "__main__":
    main()
