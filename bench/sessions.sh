#!/usr/bin/env bash
# `make bench-scale` (benchmark 7): live locks at scale on one PostgreSQL,
# ramped step by step, under sessions and under per-lock leases, against the
# same workload on etcd from Debian, in one run.
#
#   PROCS "processes" hold the locks (lock i is process i % PROCS's), each on
#   a connection of its own; a waiter process contends for 1 lock in
#   WAITER_EVERY (its attempts lose).
#   - sessions: each process holds its locks under one session (ttl 10 s +
#     transition 6 s) and keeps it alive every KEEPALIVE seconds. Ramped
#     through STEPS (locks taken BATCH to a statement).
#   - per-lock leases (Simba's protocol, ttl 10 s + transition 6 s): each
#     process renews its own leases 100 to a statement, every lease once per
#     KEEPALIVE seconds, as the client batches them. Ramped through
#     PERLOCK_STEPS: the largest count with 0 lost is a headline.
#   - etcd (bench/etcd_sessions.py): a lease of 16 s per process with its
#     keys attached (concurrency.Session's layout), through STEPS.
#   Under sessions the waiter waits as the clients do where the server's
#   lapse waker runs (bench/lapse_waiter.py): it registers its names on a
#   LISTEN connection, attempts each once, and then only on a NOTIFY or its
#   backstop (BACKSTOP seconds); with per-lock leases it polls every
#   WAITER_PERIOD seconds, as a waiter of those does.
#   At each step, over STEADY seconds: server CPU (% of one core, from
#   /proc), keepalive (renewal) latency p50/p99, statements/s, WAL bytes/s,
#   memory, and locks lost. After the last step of each mode one process is
#   killed (its connection terminated, as a SIGKILL leaves it) and a waiter
#   takes each of its locks: the time from its last keepalive until the
#   waiter holds each, p50/p99/max, against ttl + transition (16 s); under
#   sessions the waiter registered them all and takes each when the lapse
#   is announced, with per-lock leases it polls every 0.2 s.
#
#   bench/sessions.sh                                    the full ramp (about 20 minutes)
#   STEPS="10000 50000" PERLOCK_STEPS=10000 STEADY=10 bench/sessions.sh
#   bench/sessions.sh --suite                            inside an existing cluster (PG* set)
#
# Results: tables on stdout and in build/bench-results/sessions.log,
# build/bench-results/sessions.json, and sessions.svg (a chart, if gnuplot).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/bench-results
STEPS=${STEPS:-10000 100000 250000 500000 1000000} PERLOCK_STEPS=${PERLOCK_STEPS:-10000 50000 100000 200000}
PROCS=${PROCS:-10} BATCH=${BATCH:-10000} STEADY=${STEADY:-60} KEEPALIVE=${KEEPALIVE:-3}
WAITER_EVERY=${WAITER_EVERY:-100} WAITER_PERIOD=${WAITER_PERIOD:-10} BACKSTOP=${BACKSTOP:-300}

if [ "${1:-}" != --suite ]; then
  bench/install-deps.sh
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  make -s -j2 SIMBA_CLI=no SIMBA_WERROR=yes
  $sudo make -s install SIMBA_CLI=no >/dev/null
  exec test/with-cluster.sh "$0" --suite
fi

mkdir -p "$out"
: >"$out/sessions.log"
log() { tee -a "$out/sessions.log"; }
q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
db=simba_bench_sessions
work=$(mktemp -d "${TMPDIR:-/tmp}/simba-sessions.XXXXXX")
chmod 777 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# CPU ticks (user + system) the server has used: the postmaster's own, its
# live children's, and those of children that ended (cutime, cstime).
ticks=$(getconf CLK_TCK)
postmaster=$(head -1 "$(q -d postgres -c 'SHOW data_directory')/postmaster.pid")
server_cpu() {
  local sum p
  sum=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$postmaster/stat")
  for p in $(pgrep -P "$postmaster"); do
    sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$sum"
}
pct() { awk -v t="$1" -v s="$2" -v k="$ticks" 'BEGIN { printf "%.2f", 100 * t / k / s }'; }
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

echo "benchmark 7 — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; steps $STEPS (per-lock: $PERLOCK_STEPS), $PROCS processes," \
  "ttl 10 s + transition 6 s, keepalive every $KEEPALIVE s, a waiter on 1 lock in $WAITER_EVERY (sessions: announced," \
  "backstop $BACKSTOP s; per-lock: every $WAITER_PERIOD s), steady $STEADY s" | log

q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
# ka: each keepalive's (renewal statement's) time in the server, around the
# call (the loopback round trip, about 0.05 ms, is not in it); attempts: the
# waiter's statements; taken: when the waiter took a killed process's lock.
q -d $db -c "CREATE EXTENSION simba" \
  -c "CREATE TABLE procs (p int PRIMARY KEY, sid uuid)" \
  -c "CREATE UNLOGGED TABLE ka (p int, at timestamptz, ms float8, statements int)" \
  -c "CREATE UNLOGGED TABLE attempts (at timestamptz)" \
  -c "CREATE UNLOGGED TABLE taken (i int PRIMARY KEY, at timestamptz)" \
  -c "CREATE TABLE live (n int, waited int)" -c "INSERT INTO live VALUES (0, 0)"

# A "process": a loop on a connection of its own, named simba-bench-<name>,
# running body every period seconds, each run committed. Killed by
# terminating its backend: nothing of it runs after, as after a SIGKILL.
start_proc() { # name period body
  psql -X -q -d $db -c "SET application_name = 'simba-bench-$1'" \
    -c "DO \$\$ DECLARE t0 timestamptz; b_ int; BEGIN LOOP $3; COMMIT; PERFORM pg_sleep($2); END LOOP; END \$\$" \
    >/dev/null 2>&1 &
  pids+=($!)
}
kill_procs() { # application_name pattern
  q -d $db -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'simba-bench-$1'" >/dev/null
}
running() { q -d $db -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'simba-bench-$1'"; }
stop_all() { kill_procs '%'; wait "${pids[@]}" 2>/dev/null || true; pids=(); }

# The waiter: its attempts on 1 lock in WAITER_EVERY of those live, one
# statement; under a session of its own in session mode ($1: session or NULL).
start_waiter() {
  start_proc waiter "$WAITER_PERIOD" "PERFORM count(*) FROM generate_series(0, (SELECT live.n FROM live) - 1, $WAITER_EVERY) i,
    LATERAL simba_acquire('lock-' || i, 'waiter', '10s', '6s', session_id => $1); INSERT INTO attempts VALUES (clock_timestamp())"
}

# Ramps the live locks from what live says to $1: lock i by process i % PROCS,
# BATCH to a statement; $2 the lease arguments. Prints the seconds it took.
ramp() { # to lease-args
  local from lo hi won start
  from=$(q -d $db -c "SELECT n FROM live") start=$(date +%s.%N)
  for ((lo = from; lo < $1; lo += BATCH)); do
    hi=$((lo + BATCH - 1)); [ $hi -lt "$1" ] || hi=$(($1 - 1))
    won=$(q -d $db -c "SELECT count(*) FROM generate_series($lo, $hi) i JOIN procs ON p = i % $PROCS,
                         LATERAL simba_acquire('lock-' || i, 'proc-' || p, $2) o WHERE o.owner_id = 'proc-' || p")
    [ "$won" -eq $((hi - lo + 1)) ] || { echo "ramp: only $won of $((hi - lo + 1)) acquired" >&2; exit 1; }
  done
  q -d $db -c "UPDATE live SET n = $1" -c "VACUUM ANALYZE simba_mutex" >/dev/null
  elapsed "$start"
}

# One step's steady phase: prints a JSON object of its measures.
steady() { # locks ramp_s
  local c0 c1 w0 t0
  c0=$(server_cpu) w0=$(q -d $db -c "SELECT pg_current_wal_lsn()") t0=$(q -d $db -c "SELECT clock_timestamp()")
  sleep "$STEADY"
  c1=$(server_cpu)
  q -d $db -c "SELECT json_build_object('locks', $1, 'ramp_s', $2, 'cpu_pct', $(pct $((c1 - c0)) "$STEADY"),
      'keepalive_p50_ms', round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),
      'keepalive_p99_ms', round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 3),
      'statements_per_s', round(((sum(statements) + w.n) / $STEADY.0)::numeric, 1),
      'waiter_statements', w.n,
      'wal_bytes_per_s', round(pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0') / $STEADY),
      'table_mb', round((pg_total_relation_size('simba_mutex') + pg_total_relation_size('simba_session_lease')) / 1048576.0),
      'lost', $1 - (SELECT count(*) FROM simba_mutex_status WHERE owner_id LIKE 'proc-%'),
      'processes_alive', $(running 'proc-%'))
    FROM ka, (SELECT count(*) AS n FROM attempts WHERE at > '$t0') w WHERE ka.at > '$t0' GROUP BY w.n"
}

# The waiter under sessions: bench/lapse_waiter.py in the background ($1: the session).
start_announced_waiter() {
  /usr/bin/python3 bench/lapse_waiter.py wait --dsn "dbname=$db" --session "$1" --every "$WAITER_EVERY" --backstop "$BACKSTOP" \
    >"$work/waiter.log" 2>&1 &
  waiter_pid=$!; pids+=($waiter_pid)
}

# The seconds from process 0's last keepalive (renewal) at $2 to each take, p50/p99/max.
takes() { # locks last rounds
  q -d $db -c "SELECT json_build_object('locks', count(*), 'bound_s', 16, 'rounds', $3,
      'p50_s', round(extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY at - '$2'))::numeric, 2),
      'p99_s', round(extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY at - '$2'))::numeric, 2),
      'max_s', round(extract(epoch FROM max(at - '$2'))::numeric, 2)) FROM taken"
}

# Under sessions: a waiter registers every lock of process 0 and is told the
# lapse waker runs (its steady waiter stopped first, so that each take is
# this one's); process 0 is killed, and the waiter takes each lock when the
# waker announces its session's end. rounds: the waiter's statements.
announced_kill_and_take() { # locks session
  local last t0
  kill "$waiter_pid" 2>/dev/null || true
  q -d $db -c "TRUNCATE taken"
  t0=$(q -d $db -c "SELECT clock_timestamp()")
  # 60 s and 1 s per 5,000 locks to take (1,000,000 took longer than 60 s at 10,000,000 live)
  coproc taker { /usr/bin/python3 bench/lapse_waiter.py take --dsn "dbname=$db" --session "$2" \
    --timeout $((60 + $1 / PROCS / 5000)) \
    --names-from "SELECT 'lock-' || i FROM generate_series(0, $1 - 1, $PROCS) i" 2>&1; }
  read -r ready <&"${taker[0]}"
  [ "$ready" = ready ] || { echo "lapse_waiter: $ready" >&2; exit 1; }
  kill_procs proc-0
  last=$(q -d $db -c "SELECT max(at) FROM ka WHERE p = 0")
  wait "$taker_PID" || true
  takes "$1" "$last" "$(q -d $db -c "SELECT count(*) FROM attempts WHERE at > '$t0'")"
}

# Per-lock leases: process 0 is killed; the waiter (its periodic attempts
# stopped first, so that each take is this loop's) takes each of its locks
# as soon as it can: every 0.2 s it asks who owns the first lock still to
# take (its lease ends first), and once nobody does it tries every lock
# still to take in one statement.
kill_and_take() { # locks lease-args
  local last rounds=0
  kill_procs waiter
  kill_procs proc-0
  q -d $db -c "TRUNCATE taken"
  last=$(q -d $db -c "SELECT max(at) FROM ka WHERE p = 0")
  while [ "$(q -d $db -c "SELECT count(*) FROM taken")" -lt $((($1 + PROCS - 1) / PROCS)) ]; do
    rounds=$((rounds + 1)); sleep 0.2
    [ -z "$(q -d $db -c "SELECT o.owner_id FROM (SELECT min(i) AS i FROM generate_series(0, $1 - 1, $PROCS) i
                           WHERE NOT EXISTS (SELECT FROM taken t WHERE t.i = i.i)) f, simba_owner('lock-' || f.i) o")" ] || continue
    q -d $db -c "INSERT INTO taken SELECT s.i, o.acquired_at
                   FROM (SELECT i FROM generate_series(0, $1 - 1, $PROCS) i
                          WHERE NOT EXISTS (SELECT FROM taken t WHERE t.i = i.i) OFFSET 0) s,
                        LATERAL simba_acquire('lock-' || s.i, 'waiter', $2) o
                  WHERE o.owner_id = 'waiter'"
  done
  takes "$1" "$last" "$rounds"
}

# --- simba, sessions -------------------------------------------------------
q -d $db -c "INSERT INTO procs SELECT p, (simba_session_open('10s', '6s')).session_id FROM generate_series(-1, $PROCS - 1) p"
for ((p = -1; p < PROCS; p++)); do
  # p = -1 is the waiter's session
  name=proc-$p; [ $p -ge 0 ] || name=waiter-keepalive
  start_proc "$name" "$KEEPALIVE" "t0 := clock_timestamp(); PERFORM simba_session_keepalive((SELECT sid FROM procs WHERE p = $p));
    INSERT INTO ka SELECT $p, t0, extract(epoch FROM clock_timestamp() - t0) * 1000, 1 WHERE $p >= 0"
done
waiter_sid=$(q -d $db -c "SELECT sid FROM procs WHERE p = -1")
start_announced_waiter "$waiter_sid"
session_steps=()
for n in $STEPS; do
  r=$(ramp "$n" "session_id => sid")
  # the waiter has registered and tried the new locks (its one-off cost, not the steady state's)
  until [ "$(q -d $db -c "SELECT waited FROM live")" -ge "$n" ]; do
    kill -0 "$waiter_pid" 2>/dev/null || { echo "the waiter exited:" >&2; cat "$work/waiter.log" >&2; exit 1; }
    sleep 0.2
  done
  session_steps+=("$(steady "$n" "$r")")
  echo "sessions: ${session_steps[-1]}" >&2
done
session_kill=$(announced_kill_and_take "$n" "$waiter_sid")
stop_all
q -d $db -c "SELECT count(simba_session_close(sid)) FROM procs" -c "TRUNCATE simba_mutex, taken, ka, attempts" \
  -c "UPDATE live SET n = 0" >/dev/null

# --- simba, per-lock leases ------------------------------------------------
# Each process renews its own leases, 100 to a statement, each lease once a
# KEEPALIVE period; a renewal is an acquire by the holder (the client's batch).
# A batch: 100 consecutive locks of one process; lo its lowest lock.
q -d $db -c "CREATE UNLOGGED TABLE batches AS SELECT i / $PROCS / 100 AS b, i % $PROCS AS p, min(i) AS lo, array_agg('lock-' || i) AS names
               FROM generate_series(0, $(tr ' ' '\n' <<<"$PERLOCK_STEPS" | sort -n | tail -1) - 1) i GROUP BY 1, 2" \
  -c "CREATE INDEX ON batches (p, b)"
for ((p = 0; p < PROCS; p++)); do
  start_proc "proc-$p" "$KEEPALIVE" "FOR b_ IN SELECT b FROM batches WHERE p = $p AND lo < (SELECT live.n FROM live) ORDER BY b LOOP
      t0 := clock_timestamp();
      PERFORM count(*) FROM batches, unnest(names) AS x, LATERAL simba_acquire(x, 'proc-$p', '10s', '6s')
        WHERE b = b_ AND p = $p AND substr(x, 6)::int < (SELECT live.n FROM live);
      INSERT INTO ka VALUES ($p, t0, extract(epoch FROM clock_timestamp() - t0) * 1000, 1);
      COMMIT;
    END LOOP"
done
start_waiter NULL
perlock_steps=() perlock_max=0 perlock_kill=null
for n in $PERLOCK_STEPS; do
  r=$(ramp "$n" "'10s', '6s'")
  perlock_steps+=("$(steady "$n" "$r")")
  echo "per-lock: ${perlock_steps[-1]}" >&2
  [ "$(q -d $db -c "SELECT ('${perlock_steps[-1]}'::json->>'lost')::int")" -eq 0 ] || break
  perlock_max=$n
done
# The kill at the largest count kept without loss: back down to it if the
# last step lost locks (its processes take their lost ones again).
if [ "$perlock_max" -gt 0 ]; then
  q -d $db -c "UPDATE live SET n = $perlock_max" -c "DELETE FROM simba_mutex WHERE substr(mutex, 6)::int >= $perlock_max" >/dev/null
  until [ "$(q -d $db -c "SELECT count(*) FROM simba_mutex_status WHERE owner_id LIKE 'proc-%'")" -eq "$perlock_max" ]; do sleep 1; done
  perlock_kill=$(kill_and_take "$perlock_max" "'10s', '6s'")
fi
stop_all

# --- etcd ----------------------------------------------------------------
etcd_dir=$work/etcd
etcd --data-dir "$etcd_dir" --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster default=http://127.0.0.1:23800 --max-txn-ops "$BATCH" --max-request-bytes 33554432 \
  --quota-backend-bytes 8589934592 >"$work/etcd.log" 2>&1 &
etcd_pid=$!; pids+=($etcd_pid)
python3 bench/etcd_sessions.py --url http://127.0.0.1:23790 --pid "$etcd_pid" \
  --steps "$(tr ' ' ',' <<<"$STEPS")" --procs "$PROCS" --batch "$BATCH" --steady "$STEADY" --keepalive "$KEEPALIVE" --ttl 16 \
  --waiter-every "$WAITER_EVERY" --waiter-period "$WAITER_PERIOD" >"$work/etcd.json"

# --- results ---------------------------------------------------------------
join() { local IFS=,; echo "$*"; }
cat >"$out/sessions.json" <<JSON
{"procs": $PROCS, "steady_s": $STEADY, "keepalive_s": $KEEPALIVE, "waiter_every": $WAITER_EVERY, "waiter_period_s": $WAITER_PERIOD, "backstop_s": $BACKSTOP,
 "simba_sessions": {"steps": [$(join "${session_steps[@]}")], "kill": $session_kill},
 "simba_perlock": {"steps": [$(join "${perlock_steps[@]}")], "kill": $perlock_kill, "largest_without_loss": $perlock_max},
 "etcd": $(cat "$work/etcd.json")}
JSON
python3 bench/sessions_report.py "$out/sessions.json" "$out/sessions.dat" | log
if command -v gnuplot >/dev/null; then
  gnuplot -e "dat='$out/sessions.dat'; out='$out/sessions.svg'" bench/sessions.gp
fi
