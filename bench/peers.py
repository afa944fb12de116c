"""Benchmark 10 (make bench-peers): simba against etcd, ZooKeeper with
Curator and Redis, every store durable on the same disk and driven by a
driver of its own that speaks one command line (bench/README.md, "10.
Against the peers"). Run by bench/peers.sh inside a durable throwaway
cluster (libpq's environment, SIMBA_PGDATA); it starts and stops the other
stores itself, under DIR.

    python3 bench/peers.py --dir DIR --simba-driver BIN --etcd-driver BIN
        --curator-driver "java -cp ... BenchPeersCurator"
        [--rounds 2] [--seconds 5] [--trials 3] [--hold 10000] [--json FILE]

Every row runs each store in turn, the order rotated per round; a row's
figure is the median over rounds and its ratio simba / peer the median of
the per-round ratios. The JSON holds every round, the medians and the
ratios; the chart (--svg, beside the JSON by default) the ratios.
"""
import argparse
import json
import os
import queue
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

LEASE_S = 5  # every store's lease: simba's ttl + transition, etcd's session TTL, ZooKeeper's session timeout, Redis's PX


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > end:
            raise RuntimeError(f"{what} not ready in {timeout_s} s")
        time.sleep(0.1)  # a server's readiness: nothing to wait on but the port


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


# ------------------------------------------------------------------ stores

class Store:
    """A running store: its driver command, endpoint and server processes."""

    def __init__(self, name, driver, endpoint, server_pids, proc=None, jvm=False):
        self.name, self.driver, self.endpoint = name, driver, endpoint
        self.server_pids = server_pids  # () -> pids whose CPU and memory are the server's
        self.proc = proc
        self.jvm = jvm  # a Java server: its live heap is read too

    def command(self, mode, *args):
        return self.driver + [mode, "--endpoint", self.endpoint, "--lease-s", str(LEASE_S), *map(str, args)]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_simba(a):
    pgdata = os.environ["SIMBA_PGDATA"]
    postmaster = int(Path(pgdata, "postmaster.pid").read_text().split()[0])
    return Store("simba", shlex.split(a.simba_driver), "", lambda: [postmaster] + children(postmaster),
                 None), ["--store", "simba"]


def start_etcd(a, d):
    cp, pp = free_port(), free_port()
    url = f"http://127.0.0.1:{cp}"
    proc = subprocess.Popen(["etcd", "--data-dir", str(d / "etcd"), "--listen-client-urls", url,
                             "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{pp}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
                             "--initial-cluster", f"default=http://127.0.0.1:{pp}"],
                            stdout=open(d / "etcd.log", "w"), stderr=subprocess.STDOUT)
    wait_for(lambda: port_open(cp), 30, "etcd")
    return Store("etcd", shlex.split(a.etcd_driver), url, lambda: [proc.pid], proc), []


# Debian's zoo.cfg (zookeeperd's defaults: tickTime 2000, so sessions of 4-40 s),
# with a directory and port of our own, the fsync named, and two changes:
# maxClientCnxns (60 per client address by default) lifted for the 64
# clients on one address; the admin server (an HTTP port) off; of the
# four-letter words only srvr, to tell when it serves.
ZOO_CFG = """tickTime=2000
initLimit=10
syncLimit=5
dataDir={data}
clientPort={port}
clientPortAddress=127.0.0.1
forceSync=yes
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr
"""
ZOO_CP = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"


def zk_serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"srvr")
            return b"Mode: standalone" in s.makefile("rb").read()
    except OSError:
        return False


def start_zookeeper(a, d):
    port, zd = free_port(), d / "zookeeper"
    (zd / "data").mkdir(parents=True, exist_ok=True)
    (zd / "zoo.cfg").write_text(ZOO_CFG.format(data=zd / "data", port=port))
    # As zookeeperd's init script runs it (/etc/zookeeper/conf/environment),
    # its log4j configuration on the console, into zookeeper.log.
    proc = subprocess.Popen(["java", "-cp", ZOO_CP, f"-Dzookeeper.log.dir={zd}", "-Dzookeeper.root.logger=INFO,CONSOLE",
                             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(zd / "zoo.cfg")],
                            stdout=open(d / "zookeeper.log", "w"), stderr=subprocess.STDOUT)
    wait_for(lambda: zk_serving(port), 60, "ZooKeeper")
    return Store("zookeeper", shlex.split(a.curator_driver), f"127.0.0.1:{port}", lambda: [proc.pid], proc,
                 jvm=True), []


def start_redis(a, d):
    sock = d / "redis.sock"
    proc = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--dir", str(d),
                             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
                            stdout=open(d / "redis.log", "w"), stderr=subprocess.STDOUT)
    wait_for(sock.exists, 30, "Redis")
    return Store("redis", shlex.split(a.simba_driver), str(sock), lambda: [proc.pid], proc), ["--store", "redis"]


# ------------------------------------------------------- processes' costs

def children(pid):
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def cpu_s(pids, with_children=False):
    """CPU seconds of pids (with the reaped children of each, for the
    postmaster: ended backends)."""
    total = 0
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if with_children else 0)
    return total / os.sysconf("SC_CLK_TCK")


def pss_mb(pids, kinds=("Pss",)):
    """Proportional set size: shared memory counted once across the pids.
    kinds picks smaps_rollup's lines (Pss, or Pss_Anon and Pss_Shmem)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.split(":")[0] in kinds:
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


# A server's growth counts the memory it allocates (anonymous and shared),
# not its mapped files: their proportional share shifts as other processes
# map the same ones (the Curator driver's JVM maps ZooKeeper's libjvm.so and
# class archive, halving their share in the server's PSS).
GROWTH = ("Pss_Anon", "Pss_Shmem")


def live_heap_mb(pid):
    """A JVM's heap in use after a full collection (jcmd): what its data
    holds, where its PSS follows the heap's sizing."""
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, check=True, timeout=60)
    info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, check=True, timeout=60)
    return int(re.search(r"used (\d+)K", info.stdout).group(1)) / 1024


# ------------------------------------------------------------------- rows

def run_json(cmd, timeout):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cycles(store, extra, clients, locks, seconds):
    return run_json(store.command("cycles", "--clients", clients, "--locks", locks, "--seconds", seconds, *extra),
                    seconds + 120)


def fair(store, extra):
    """simba's driver asked for fair locks; the peers' drivers as they are."""
    return extra + ["--fair"] if store.name == "simba" else extra


def handoff(store, extra, n):
    return run_json(store.command("handoff", "--handoffs", n, *extra), n + 120)


class Campaigner:
    """A driver in leader mode; its stdout lines read on a thread of their own."""

    def __init__(self, store, extra, name):
        self.proc = subprocess.Popen(store.command("leader", "--name", name, *extra), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x.strip()) for x in self.proc.stdout], daemon=True).start()
        assert self.line(60) == "ready", f"{store.name}: its campaigner did not start"

    def line(self, timeout_s):
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def failover(store, extra, how, trials):
    """Seconds from the leader's SIGKILL (or SIGTERM: a clean stop) to the
    other campaigner's `elected`."""
    out = []
    for t in range(trials):
        name = f"peers-{how}-{os.getpid()}-{t}-{time.monotonic_ns()}"
        a = Campaigner(store, extra, name)
        try:
            assert a.line(60) == "elected", f"{store.name}: the only campaigner was not elected"
            b = Campaigner(store, extra, name)
            try:
                t0 = time.monotonic()
                a.proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
                got = b.line(LEASE_S * 4 + 30)
                assert got == "elected", f"{store.name}: no new leader after the {how} ({got!r})"
                out.append(time.monotonic() - t0)
            finally:
                b.proc.stdin.close()
                b.proc.wait(30)
        finally:
            a.close()
    return {"mode": f"failover_{how}", "trials": trials, "p50_s": statistics.median(out), "max_s": max(out)}


def hold(store, extra, locks, window_s):
    """Server and driver CPU % and PSS growth while `locks` locks are held."""
    pids = store.server_pids()
    base_live = live_heap_mb(pids[0]) if store.jvm else None  # first: a full collection shrinks the heap
    base_mb = pss_mb(pids, GROWTH)
    proc = subprocess.Popen(store.command("hold", "--locks", locks, *extra), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    took = json.loads(proc.stdout.readline())
    time.sleep(LEASE_S)  # settle: the first keepalives after the ramp
    pids = store.server_pids()
    c0, d0, t0 = cpu_s(pids, True), cpu_s([proc.pid]), time.monotonic()
    time.sleep(window_s)  # the window measured: held, nothing asked
    pids = store.server_pids()
    c1, d1, t1 = cpu_s(pids, True), cpu_s([proc.pid]), time.monotonic()
    server_mb, driver_mb = pss_mb(pids, GROWTH) - base_mb, pss_mb([proc.pid])
    heap = {"server_live_heap_mb": live_heap_mb(pids[0]) - base_live} if store.jvm else {}  # after the window
    proc.stdin.close()
    released = json.loads(proc.stdout.readline())
    proc.wait(120)
    return {"mode": "hold", "locks": locks, "take_s": took["take_s"], "release_s": released["release_s"],
            "server_cpu_pct": 100 * (c1 - c0) / (t1 - t0), "driver_cpu_pct": 100 * (d1 - d0) / (t1 - t0),
            "server_mb": server_mb, "driver_mb": driver_mb, **heap}


ROWS = [  # (key, label, function of (store, extra, args), the figures it reports)
    ("c1", "1 client", lambda s, e, a: cycles(s, e, 1, 1, a.seconds)),
    ("c8", "8 clients, own locks", lambda s, e, a: cycles(s, e, 8, 64, a.seconds)),
    ("c64", "64 clients, own locks", lambda s, e, a: cycles(s, e, 64, 64, a.seconds)),
    ("s8", "8 clients, one lock", lambda s, e, a: cycles(s, e, 8, 1, a.seconds)),
    ("s64", "64 clients, one lock", lambda s, e, a: cycles(s, e, 64, 1, a.seconds)),
    # simba's fair lock, queued and woken one at a time as etcd's and Curator's mutexes always are
    ("s8f", "8 clients, one lock, simba fair", lambda s, e, a: cycles(s, fair(s, e), 8, 1, a.seconds)),
    ("s64f", "64 clients, one lock, simba fair", lambda s, e, a: cycles(s, fair(s, e), 64, 1, a.seconds)),
    ("handoff", "handoff", lambda s, e, a: handoff(s, e, a.handoffs)),
    ("kill", "new leader after kill -9", lambda s, e, a: failover(s, e, "kill", a.trials)),
    ("stop", "new leader after a clean stop", lambda s, e, a: failover(s, e, "stop", a.trials)),
    ("hold", "10,000 held locks", lambda s, e, a: hold(s, e, a.hold, a.window)),
]
FIGURES = {  # what the table shows of a row, and whether bigger is better
    "c1": [("cycles_per_s", True), ("p50_us", False), ("p99_us", False)],
    "c8": [("cycles_per_s", True), ("p50_us", False)],
    "c64": [("cycles_per_s", True), ("p50_us", False)],
    "s8": [("cycles_per_s", True), ("p99_us", False)],
    "s64": [("cycles_per_s", True), ("p99_us", False)],
    "s8f": [("cycles_per_s", True), ("p99_us", False)],
    "s64f": [("cycles_per_s", True), ("p99_us", False)],
    "handoff": [("p50_us", False), ("p99_us", False)],
    "kill": [("p50_s", False), ("max_s", False)],
    "stop": [("p50_s", False), ("max_s", False)],
    "hold": [("server_cpu_pct", False), ("server_mb", False), ("driver_cpu_pct", False), ("driver_mb", False),
             ("take_s", False)],
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--simba-driver", required=True)
    p.add_argument("--etcd-driver", required=True)
    p.add_argument("--curator-driver", required=True, help="the command line of ZooKeeper's driver (Curator)")
    p.add_argument("--stores", default="simba,etcd,zookeeper,redis")
    p.add_argument("--rows", default=",".join(k for k, _, _ in ROWS))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--handoffs", type=int, default=200)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--hold", type=int, default=10000)
    p.add_argument("--window", type=float, default=20)
    p.add_argument("--json")
    p.add_argument("--svg", help="the chart of the ratios (default: beside --json, .svg)")
    a = p.parse_args()
    starters = {"simba": lambda: start_simba(a), "etcd": lambda: start_etcd(a, a.dir),
                "zookeeper": lambda: start_zookeeper(a, a.dir), "redis": lambda: start_redis(a, a.dir)}
    names = a.stores.split(",")
    stores = {}
    try:
        for n in names:
            stores[n] = starters[n]()
        results = {}  # row -> store -> [per-round result]
        for key, label, fn in ROWS:
            if key not in a.rows.split(","):
                continue
            for r in range(a.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for n in order:
                    store, extra = stores[n]
                    if key in ("kill", "stop") and n == "redis":
                        continue  # no leader recipe
                    res = fn(store, extra, a)
                    results.setdefault(key, {}).setdefault(n, []).append(res)
                    print(f"{label} [{n}, round {r + 1}]: {json.dumps(res)}", file=sys.stderr, flush=True)
        medians, ratios = summary(results, names)
        report(medians, ratios, names)
        if a.json:
            Path(a.json).write_text(json.dumps({"lease_s": LEASE_S, "rounds": a.rounds, "stores": names,
                                                "medians": medians, "ratios": ratios, "results": results}, indent=1))
        svg = a.svg or (str(Path(a.json).with_suffix(".svg")) if a.json else None)
        if svg:
            Path(svg).write_text(chart(ratios, names))
    finally:
        for store, _ in stores.values():
            store.stop()
    return 0


def summary(results, names):
    """Per row and figure: each store's median over rounds, and the median
    of the per-round ratios simba / peer, oriented so that > 1 means simba
    is better (None where a store has no such row)."""
    medians, ratios = {}, {}
    for key, _, _ in ROWS:
        if key not in results:
            continue
        for fig, bigger in FIGURES[key]:
            m = medians.setdefault(key, {}).setdefault(fig, {})
            for n in names:
                vals = [r[fig] for r in results[key].get(n, [])]
                m[n] = statistics.median(vals) if vals else None
            q = ratios.setdefault(key, {}).setdefault(fig, {})
            for n in [x for x in names if x != "simba"]:
                pairs = zip(results[key].get("simba", []), results[key].get(n, []))
                per = [(s[fig] / o[fig]) if bigger else (o[fig] / s[fig]) for s, o in pairs if s[fig] > 0 and o[fig] > 0]
                q[n] = statistics.median(per) if per else None
    return medians, ratios


def report(medians, ratios, names):
    peers = [n for n in names if n != "simba"]
    head = ["row", "figure"] + names + [f"simba/{n}" for n in peers]
    rows = [head]
    for key, label, _ in ROWS:
        for fig in medians.get(key, {}):
            line = [label, fig]
            line += [f"{v:.4g}" if v is not None else "-" for v in (medians[key][fig][n] for n in names)]
            line += [f"{v:.2f}" if v is not None else "-" for v in (ratios[key][fig].get(n) for n in peers)]
            rows.append(line)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


COLOURS = {"etcd": "#1f77b4", "zookeeper": "#2ca02c", "redis": "#d62728"}
FIG_LABELS = {"cycles_per_s": "cycles/s", "p50_us": "p50", "p99_us": "p99", "p50_s": "p50", "max_s": "max",
              "server_cpu_pct": "server CPU", "server_mb": "server memory", "driver_cpu_pct": "driver CPU",
              "driver_mb": "driver memory", "take_s": "time to take"}


def chart(ratios, names):
    """The ratios as an SVG of horizontal bars on a log scale, one group per
    row and figure, one bar per peer; written as text (the machine may have
    no gnuplot)."""
    import math
    peers = [n for n in names if n != "simba"]
    labels = {k: l for k, l, _ in ROWS}
    groups = [(f"{labels[k]}: {FIG_LABELS.get(fig, fig)}", ratios[k][fig]) for k, _, _ in ROWS if k in ratios for fig in ratios[k]]
    lo, hi = -2, 3  # 0.01x .. 1000x; bars beyond are clipped at the edge
    left, width, bar, top = 300, 560, 11, 50
    gh = bar * len(peers) + 8
    height = top + gh * len(groups) + 50
    x = lambda r: left + width * (min(max(math.log10(r), lo), hi) - lo) / (hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left + width / 2}" y="18" text-anchor="middle" font-size="14">simba benchmark 10: simba / peer '
           '(above 1: simba better; log scale)</text>']
    for i, n in enumerate(peers):
        out.append(f'<rect x="{left + 110 * i}" y="28" width="10" height="10" fill="{COLOURS.get(n, "grey")}"/>'
                   f'<text x="{left + 110 * i + 14}" y="37">{n}</text>')
    for e in range(lo, hi + 1):
        out.append(f'<line x1="{x(10 ** e)}" y1="{top}" x2="{x(10 ** e)}" y2="{top + gh * len(groups)}" '
                   f'stroke="{"black" if e == 0 else "#ccc"}"/>'
                   f'<text x="{x(10 ** e)}" y="{top + gh * len(groups) + 14}" text-anchor="middle">{10 ** e:g}x</text>')
    for g, (label, per) in enumerate(groups):
        y = top + gh * g + 4
        out.append(f'<text x="{left - 6}" y="{y + gh / 2 + 2}" text-anchor="end">{label}</text>')
        for i, n in enumerate(peers):
            r = per.get(n)
            if r is None:
                continue
            x0, x1 = sorted((x(1), x(r)))
            right = r >= 1 or x0 - left < 30  # the figure where it has room
            out.append(f'<rect x="{x0:.1f}" y="{y + bar * i}" width="{max(x1 - x0, 1):.1f}" height="{bar - 1}" '
                       f'fill="{COLOURS.get(n, "grey")}"><title>{n}: {r:.3g}</title></rect>'
                       f'<text x="{x1 + 3 if right else x0 - 3:.1f}" y="{y + bar * i + bar - 2}" font-size="9" '
                       f'text-anchor="{"start" if right else "end"}">{r:.2g}</text>')
    out.append(f'<text x="{left + width / 2}" y="{height - 12}" text-anchor="middle">'
               'medians of per-round ratios; bars clipped at 0.01x and 1000x</text></svg>')
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
