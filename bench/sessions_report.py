#!/usr/bin/env python3
"""Benchmark 7's tables (bench/sessions.sh): reads sessions.json, prints the
ramp of each mode as markdown tables with the simba/etcd ratios, and writes
the chart's data file (locks, then server CPU of simba under sessions, of
etcd, of simba under per-lock leases; '-' where a mode did not run).
"""
import json
import sys


def ratio(a, b):
    return f"{a / b:.2f}" if b else "-"


def main():
    r = json.load(open(sys.argv[1]))
    sessions, etcd, perlock = r["simba_sessions"], r["etcd"], r["simba_perlock"]
    etcd_at = {s["locks"]: s for s in etcd["steps"]}
    print()
    print(f"Sessions against etcd ({r['procs']} processes, steady {r['steady_s']} s per step; "
          "keepalive: simba's in the server, etcd's a round trip through its gateway)")
    print()
    print("| locks | ramp s simba / etcd | server CPU % simba / etcd (ratio) | keepalive p50 / p99 ms simba | "
          "etcd | statements/s simba / requests/s etcd | WAL kB/s simba / etcd's writes kB/s | simba tables MB / etcd RSS MB | lost simba / etcd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in sessions["steps"]:
        e = etcd_at.get(s["locks"], {})
        print(f"| {s['locks']:,} | {s['ramp_s']} / {e.get('ramp_s', '-')} "
              f"| {s['cpu_pct']} / {e.get('cpu_pct', '-')} (**{ratio(s['cpu_pct'], e.get('cpu_pct', 0))}**) "
              f"| {s['keepalive_p50_ms']} / {s['keepalive_p99_ms']} "
              f"| {e.get('keepalive_p50_ms', '-')} / {e.get('keepalive_p99_ms', '-')} "
              f"| {s['statements_per_s']} / {e.get('requests_per_s', '-')} "
              f"| {s['wal_bytes_per_s'] / 1000:.1f} / {e.get('write_bytes_per_s', 0) / 1000:.1f} "
              f"| {s['table_mb']} / {e.get('rss_mb', '-')} | {s['lost']} / {e.get('lost', '-')} |")
    print()
    print("Per-lock leases (each renewed once per keepalive period, 100 to a statement)")
    print()
    print("| locks | ramp s | server CPU % | renewal statement p50 / p99 ms | statements/s | WAL kB/s | tables MB | lost |")
    print("|---|---|---|---|---|---|---|---|")
    for s in perlock["steps"]:
        print(f"| {s['locks']:,} | {s['ramp_s']} | {s['cpu_pct']} | {s['keepalive_p50_ms']} / {s['keepalive_p99_ms']} "
              f"| {s['statements_per_s']} | {s['wal_bytes_per_s'] / 1000:.1f} | {s['table_mb']} | {s['lost']} |")
    print(f"\nLargest per-lock count with 0 lost: {perlock['largest_without_loss']:,} (of the steps run)")
    print()
    print("A process killed after the last step: seconds from its last keepalive (renewal) until a waiter holds each of its locks")
    print()
    print("| mode | locks | p50 | p99 | max | bound (ttl + transition) |")
    print("|---|---|---|---|---|---|")
    for name, k in (("simba, sessions", sessions["kill"]), ("simba, per-lock", perlock["kill"]), ("etcd", etcd["kill"])):
        if k:
            print(f"| {name} | {k['locks']:,} | {k['p50_s']} | {k['p99_s']} | {k['max_s']} | {k['bound_s']} |")
    perlock_at = {s["locks"]: s for s in perlock["steps"]}
    with open(sys.argv[2], "w") as f:
        for s in sessions["steps"]:
            f.write(f"{s['locks']} {s['cpu_pct']} {etcd_at.get(s['locks'], {}).get('cpu_pct', '-')} "
                    f"{perlock_at.get(s['locks'], {}).get('cpu_pct', '-')}\n")


if __name__ == "__main__":
    main()
