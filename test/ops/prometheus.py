#!/usr/bin/env python3
"""The operators' kit against a real Prometheus (ctest ops.prometheus).

Inside test/with-cluster.sh (a cluster of its own: the test restarts it):
starts `simba metrics --listen`, prometheus-postgres-exporter with
contrib/postgres_exporter.yaml, and the client example serving its metrics
(client/examples/metrics_endpoint.cpp); a Prometheus from Debian scrapes the
three on loopback with contrib/prometheus/simba-alerts.yml loaded, and the
test checks through Prometheus's HTTP API that
  - every series client/cli/README.md names is there (server and client side),
  - the exporter's queries give the same server-side series as simba metrics,
  - every query of contrib/grafana/simba.json and every alert rule evaluates
    without error and names only series that are scraped,
then that `simba metrics --listen` answers simba_up 0 while the server is
down and simba_up 1 once it is back, without a restart of its own.
promtool checks and unit-tests the rules first.

usage: prometheus.py SIMBA_BIN METRICS_EXAMPLE_BIN
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CONTRIB = os.path.join(ROOT, "contrib")
failures = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def eventually(what, fn, timeout=60):
    """Polls fn until it returns something true; the last value otherwise."""
    end = time.monotonic() + timeout
    while True:
        try:
            v = fn()
        except (OSError, ValueError):
            v = None
        if v or time.monotonic() > end:
            return v
        time.sleep(0.2)


def psql(db, *sql):
    args = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db]
    for s in sql:
        args += ["-c", s]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def pg_ctl(*args):
    cmd = [os.path.join(os.environ["SIMBA_PG_BIN"], "pg_ctl"), "-D", os.environ["SIMBA_PGDATA"], *args]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--"] + cmd
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Prometheus:
    def __init__(self, url):
        self.url = url

    def api(self, path, **params):
        body = json.loads(get(self.url + "/api/v1/" + path + "?" + urllib.parse.urlencode(params)))
        return body

    def query(self, expr):
        """(status, error, result) of an instant query."""
        try:
            b = self.api("query", query=expr)
            return b["status"], b.get("error", ""), b["data"]["result"]
        except urllib.error.HTTPError as e:
            b = json.loads(e.read().decode())
            return b["status"], b.get("error", ""), []

    def names(self, job):
        _, _, r = self.query('count by (__name__) ({job="%s", __name__=~"simba_.+"})' % job)
        return {x["metric"]["__name__"] for x in r}


def documented_series():
    """The metric names of the two tables in client/cli/README.md."""
    text = open(os.path.join(ROOT, "client", "cli", "README.md")).read()
    server = text.split("### `simba metrics` (server side)")[1].split("### Client metrics")[0]
    client = text.split("### Client metrics")[1].split("\n## ")[0]
    pick = lambda part: re.findall(r"^\| `(simba_[a-z_]+)` \| (\w+)", part, re.M)
    return pick(server), pick(client)


def main():
    simba_bin, example_bin = sys.argv[1], sys.argv[2]
    env = dict(os.environ)
    db = "simba_ops_%d" % os.getpid()
    work = tempfile.mkdtemp(prefix="simba-ops.")
    procs = []

    def start(args, **kw):
        p = subprocess.Popen(args, **kw)
        procs.append(p)
        return p

    try:
        # promtool: the rules parse, and their unit tests pass.
        for args in (["check", "rules", "simba-alerts.yml"], ["test", "rules", "simba-alerts.test.yml"]):
            r = subprocess.run(["promtool", *args], cwd=os.path.join(CONTRIB, "prometheus"),
                               capture_output=True, text=True)
            check(r.returncode == 0, "promtool " + " ".join(args) + ("" if r.returncode == 0 else ":\n" + r.stdout + r.stderr))

        # A database with something to show for every series: a held mutex, a
        # released one (history on), a permit, a session holding a mutex and
        # a read hold, a read-write lock written once.
        psql("postgres", "CREATE DATABASE " + db)
        psql(db, "CREATE EXTENSION simba", "ALTER DATABASE %s SET simba.history = on" % db)
        psql(db, "SELECT simba_acquire('ops-held', 'a', '1 hour', '1 hour')",
             "SELECT simba_acquire('ops-released', 'b')", "SELECT simba_release('ops-released', 'b')",
             "SELECT simba_semaphore_acquire('ops-pool', 'w1', 2, '1 hour')",
             "SELECT simba_acquire('ops-session', 'c', session_id => (simba_session_open('1 hour', '1 hour')).session_id)",
             "SELECT simba_rwlock_acquire('ops-rw', 'w', 'write')", "SELECT simba_rwlock_release('ops-rw', 'w')",
             "SELECT simba_rwlock_acquire('ops-rw', 'r', 'read', session_id => (SELECT session_id FROM simba_session_status LIMIT 1))")
        env["PGDATABASE"] = db
        dsn = "host=%s port=%s user=%s dbname=%s" % (env["PGHOST"], env["PGPORT"], env["PGUSER"], db)

        # simba metrics --listen on a free port it picks and prints.
        exporter = start([simba_bin, "metrics", "--listen", "127.0.0.1:0", "--dsn", dsn],
                         stderr=subprocess.PIPE, text=True, env=env)
        line = exporter.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        if not check(m is not None, "simba metrics --listen says where it serves (%r)" % line):
            return
        simba_port = int(m.group(1))
        check(get("http://127.0.0.1:%d/healthz" % simba_port) == "ok\n", "/healthz answers ok")

        pgx_port, app_port, prom_port = free_port(), free_port(), free_port()
        start(["prometheus-postgres-exporter", "--disable-default-metrics", "--disable-settings-metrics",
               "--extend.query-path=" + os.path.join(CONTRIB, "postgres_exporter.yaml"),
               "--web.listen-address=127.0.0.1:%d" % pgx_port],
              env=dict(env, DATA_SOURCE_NAME=dsn + " sslmode=disable"),
              stdout=open(os.path.join(work, "pgx.log"), "w"), stderr=subprocess.STDOUT)
        start([example_bin, str(app_port)], env=env, stdout=subprocess.DEVNULL,
              stderr=open(os.path.join(work, "app.log"), "w"))

        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [os.path.join(CONTRIB, "prometheus", "simba-alerts.yml")],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": ["127.0.0.1:%d" % port]}]}
                for job, port in (("simba", simba_port), ("pgexporter", pgx_port), ("app", app_port))
            ],
        }
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            yaml.safe_dump(config, f)
        start(["prometheus", "--config.file=" + os.path.join(work, "prometheus.yml"),
               "--storage.tsdb.path=" + os.path.join(work, "data"),
               "--web.listen-address=127.0.0.1:%d" % prom_port],
              stdout=open(os.path.join(work, "prometheus.log"), "w"), stderr=subprocess.STDOUT)
        prom = Prometheus("http://127.0.0.1:%d" % prom_port)

        up = eventually("every target up", lambda: len(prom.query("up == 1")[2]) == 3, timeout=90)
        if not check(bool(up), "Prometheus scrapes simba metrics, the postgres exporter and the client example"):
            print(prom.query("up"), open(os.path.join(work, "pgx.log")).read()[-2000:])
            return

        server, client = documented_series()
        check(len(server) >= 20 and len(client) >= 18, "client/cli/README.md names %d server and %d client series" % (len(server), len(client)))
        # Counters and histograms appear once their process has something to count: allow a few scrapes.
        want = {(n + "_count" if t == "histogram" else n, "simba") for n, t in server}
        want |= {(n + "_count" if t == "histogram" else n, "app") for n, t in client}
        def missing_now():
            have = {"simba": prom.names("simba"), "app": prom.names("app")}
            return {(n, j) for n, j in want if n not in have[j]}
        eventually("documented series", lambda: not missing_now(), timeout=30)
        miss = missing_now()
        check(not miss, "every series the README names is scraped%s" % (": missing " + ", ".join(sorted(n for n, _ in miss)) if miss else ""))

        # The exporter's queries: the same server-side series, the same values.
        simba_names, pgx_names = prom.names("simba") - {"simba_up"}, prom.names("pgexporter")
        check(simba_names == pgx_names, "postgres_exporter.yaml gives the series simba metrics gives%s" % (
            "" if simba_names == pgx_names else ": only simba %s, only exporter %s" % (sorted(simba_names - pgx_names), sorted(pgx_names - simba_names))))
        for series in ("simba_mutex_fence", "simba_semaphore_permits_held", "simba_session_mutexes",
                       "simba_session_rwlocks", "simba_rwlock_readers", "simba_rwlock_write_fence",
                       "simba_mutex_acquisitions_total"):
            _, _, r = prom.query('%s{job="pgexporter"} != bool on (mutex, key, state, holder, rwlock) %s{job="simba"}' % (series, series))
            check(r and all(float(x["value"][1]) == 0 for x in r), "%s: the same values from both" % series)

        # Every dashboard query evaluates (Grafana's variables filled in).
        dash = json.load(open(os.path.join(CONTRIB, "grafana", "simba.json")))
        targets = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
        # A misspelt series evaluates too, to nothing: each one named must be scraped.
        scraped = prom.names("simba") | prom.names("app") | prom.names("pgexporter")
        unknown = lambda expr: sorted(set(re.findall(r"\bsimba_[a-z_]+", expr)) - scraped)
        for title, expr in targets:
            status, error, _ = prom.query(expr.replace("$__rate_interval", "1m").replace("$mutex", ".*"))
            check(status == "success" and not unknown(expr), "dashboard panel %r: %s%s%s" % (
                title, expr, "" if status == "success" else ": " + error,
                ": unknown series " + ", ".join(unknown(expr)) if unknown(expr) else ""))
        var = dash["templating"]["list"][0]["query"]["query"]
        m = re.fullmatch(r"label_values\((\w+), (\w+)\)", var)
        check(m is not None and "ops-held" in prom.api("label/%s/values" % m.group(2), **{"match[]": m.group(1)})["data"],
              "the dashboard's mutex variable lists the mutexes (%s)" % var)

        # Every alert rule is loaded and evaluates without error.
        rule_defs = [r for g in yaml.safe_load(open(os.path.join(CONTRIB, "prometheus", "simba-alerts.yml")))["groups"]
                     for r in g["rules"]]
        alerts = [r["alert"] for r in rule_defs]
        for r in rule_defs:
            check(not unknown(r["expr"]), "alert %s names only scraped series%s" % (
                r["alert"], ": unknown " + ", ".join(unknown(r["expr"])) if unknown(r["expr"]) else ""))

        def rules():
            got = [r for g in prom.api("rules", type="alert")["data"]["groups"] for r in g["rules"]]
            return got if all(r.get("lastEvaluation", "0001").startswith("20") for r in got) and got else None
        got = eventually("rules evaluated", rules, timeout=30) or []
        check(sorted(r["name"] for r in got) == sorted(alerts), "Prometheus loaded the %d alert rules" % len(alerts))
        for r in got:
            check(r["health"] == "ok", "alert %s evaluates%s" % (r["name"], "" if r["health"] == "ok" else ": " + r.get("lastError", "")))

        # Down and back: simba_up 0 while the server is stopped, 1 once it is
        # back, from the same simba metrics process.
        scrape = lambda: get("http://127.0.0.1:%d/metrics" % simba_port, timeout=15)
        pg_ctl("-m", "fast", "-w", "stop")
        try:
            check("\nsimba_up 0\n" in scrape(), "simba_up 0 while the server is down")
            check(get("http://127.0.0.1:%d/healthz" % simba_port) == "ok\n", "/healthz still answers")
        finally:
            pg_ctl("-l", os.path.join(os.path.dirname(os.environ["SIMBA_PGDATA"]), "server.log"), "-w", "start")
        check(eventually("simba_up 1", lambda: "\nsimba_up 1\n" in scrape() and "ops-held" in scrape(), timeout=30),
              "simba_up 1 and the mutexes again once the server is back")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        check(all(p.returncode == 0 for p in procs[:1]), "simba metrics --listen exits 0 on SIGTERM")
        subprocess.run(["rm", "-rf", work])
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
