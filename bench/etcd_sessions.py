#!/usr/bin/env python3
"""Benchmark 7's etcd side (bench/sessions.sh): the same workload as simba's
sessions on an etcd member, through its JSON gateway (etcd 3.4, /v3/...).

Each "process" has one lease (--ttl seconds) with its keys attached, as
etcd's concurrency.Session does; a keepalive per lease every --keepalive
seconds. Prints one JSON object: ramp_s, cpu_pct (etcd's CPU over --steady
seconds, % of one core), lost, rss, and for one process that stops its
keepalives, how long after its last keepalive (and after its lease end)
every one of its keys is gone.
"""
import argparse
import base64
import http.client
import json
import os
import threading
import time
import urllib.parse


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Etcd:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port

    def call(self, path, body, conn=None):
        c = conn or http.client.HTTPConnection(self.host, self.port, timeout=120)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"{path}: HTTP {r.status}: {data[:200]!r}")
        if conn is None:
            c.close()
        return json.loads(data)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                kb = int(line.split()[1])
                return f"{kb / 1024:.0f} MB"
    return "-"


def count(etcd, prefix, conn=None):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    r = etcd.call("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end), "count_only": True}, conn)
    return int(r.get("count", 0))


def main():
    ap = argparse.ArgumentParser()
    for name in ("url",):
        ap.add_argument("--" + name, required=True)
    for name in ("pid", "locks", "procs", "batch", "steady", "keepalive", "ttl"):
        ap.add_argument("--" + name, type=int, required=True)
    a = ap.parse_args()
    etcd = Etcd(a.url)
    for _ in range(100):  # wait for the member
        try:
            etcd.call("/v3/maintenance/status", {})
            break
        except OSError:
            time.sleep(0.1)

    leases = [int(etcd.call("/v3/lease/grant", {"TTL": a.ttl})["ID"]) for _ in range(a.procs)]
    alive = [True] * a.procs
    last_keepalive = [time.time()] * a.procs
    stop = threading.Event()

    def keepalive_loop():
        conn = http.client.HTTPConnection(etcd.host, etcd.port, timeout=60)
        while not stop.is_set():
            for p, lease in enumerate(leases):
                if alive[p]:
                    sent = time.time()
                    r = etcd.call("/v3/lease/keepalive", {"ID": lease}, conn)
                    if int(r.get("result", {}).get("TTL", 0)) <= 0:
                        raise SystemExit(f"lease of process {p} expired")
                    last_keepalive[p] = sent
            stop.wait(a.keepalive)

    ka = threading.Thread(target=keepalive_loop, daemon=True)
    ka.start()

    conn = http.client.HTTPConnection(etcd.host, etcd.port, timeout=120)
    start = time.time()
    for lo in range(0, a.locks, a.batch):
        ops = []
        for i in range(lo, min(lo + a.batch, a.locks)):
            p = i % a.procs
            # take the key only if nobody has it (create_revision 0), as a lock does
            ops.append((f"proc/{p}/lock-{i}", f"proc-{p}", leases[p]))
        txn = {
            "compare": [{"key": b64(k), "target": "CREATE", "result": "EQUAL", "create_revision": "0"} for k, _, _ in ops],
            "success": [{"requestPut": {"key": b64(k), "value": b64(v), "lease": str(l)}} for k, v, l in ops],
        }
        r = etcd.call("/v3/kv/txn", txn, conn)
        if not r.get("succeeded"):
            raise SystemExit("etcd ramp: a txn failed")
    ramp = time.time() - start

    c0 = cpu_ticks(a.pid)
    time.sleep(a.steady)
    c1 = cpu_ticks(a.pid)
    ticks = os.sysconf("SC_CLK_TCK")
    cpu_pct = 100.0 * (c1 - c0) / ticks / a.steady
    lost = a.locks - count(etcd, "proc/", conn)
    memory = rss(a.pid)

    # process 0 dies: its keepalives stop; its keys go when etcd revokes the lease
    alive[0] = False
    time.sleep(0.01)
    died_after = last_keepalive[0]
    while count(etcd, "proc/0/", conn) > 0:
        time.sleep(0.2)
    gone = time.time()
    stop.set()
    print(json.dumps({
        "ramp_s": round(ramp, 1), "cpu_pct": round(cpu_pct, 2), "lost": lost, "rss": memory,
        "free_after_keepalive_s": round(gone - died_after, 1),
        "free_after_end_s": round(gone - (died_after + a.ttl), 1),
    }))


if __name__ == "__main__":
    main()
