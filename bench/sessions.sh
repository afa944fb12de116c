#!/usr/bin/env bash
# `make bench-scale` (benchmark 7): a million live locks on one PostgreSQL
# under sessions, against the same workload on etcd from Debian, in one run.
#
#   PROCS "processes" each hold LOCKS/PROCS mutexes under one session (ttl 10 s
#   + transition 6 s; etcd: a lease of 16 s per process, every key attached to
#   it). Measured, for simba and etcd alike:
#   - ramp: seconds to take every lock (batches of BATCH per statement or txn),
#   - steady: server CPU (% of one core, from /proc) over STEADY seconds while
#     every process keeps its session (lease) alive every 3 s, and memory,
#   - lost: locks not live after the steady phase (must be 0),
#   - a dead process: one stops its keepalives; how long after its last
#     keepalive its locks are free (bound: ttl + transition = 16 s).
#   simba is also measured without sessions at PERLOCK locks (one lease per
#   lock, renewed 100 to a statement every 3 s as the client batches them):
#   what sessions save.
#
#   bench/sessions.sh                       defaults below (about 10 minutes)
#   LOCKS=100000 STEADY=20 bench/sessions.sh
#   bench/sessions.sh --suite               inside an existing cluster (PG* set)
#
# Results: a table on stdout and in build/bench-results/sessions.log, and
# build/bench-results/sessions.json.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/bench-results
LOCKS=${LOCKS:-1000000} PROCS=${PROCS:-100} BATCH=${BATCH:-10000}
STEADY=${STEADY:-60} PERLOCK=${PERLOCK:-100000} KEEPALIVE=${KEEPALIVE:-3}

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

echo "benchmark 7 — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; $LOCKS locks, $PROCS processes, ttl 10 s + transition 6 s, keepalive every $KEEPALIVE s, steady $STEADY s" | log

# --- simba --------------------------------------------------------------
q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
q -d $db -c "CREATE EXTENSION simba" \
  -c "CREATE TABLE procs (p int PRIMARY KEY, sid uuid, alive boolean NOT NULL DEFAULT true)" \
  -c "INSERT INTO procs SELECT p, (simba_session_open('10s', '6s')).session_id FROM generate_series(0, $PROCS - 1) p"

# Runs a statement every KEEPALIVE seconds on one connection of its own, in
# the background, each run committed; stop_periods ends them.
every_period() { # sql
  psql -X -q -d $db -c "SET application_name = 'simba-bench-period'" \
    -c "DO \$\$ BEGIN LOOP PERFORM count(*) FROM ($1) AS x; COMMIT; PERFORM pg_sleep($KEEPALIVE); END LOOP; END \$\$" \
    >/dev/null 2>&1 &
  pids+=($!)
  sleep 0.5
}
stop_periods() {
  q -d $db -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'simba-bench-period'" >/dev/null
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}
# Every live process keeps its session alive (one keepalive per process per
# period, sent here in one statement: the server does the same work).
every_period "SELECT 1 FROM procs, LATERAL simba_session_keepalive(sid) WHERE alive"

start=$(date +%s.%N)
for ((lo = 0; lo < LOCKS; lo += BATCH)); do
  hi=$((lo + BATCH - 1)); [ $hi -lt $LOCKS ] || hi=$((LOCKS - 1))
  won=$(q -d $db -c "SELECT count(*) FROM generate_series($lo, $hi) i JOIN procs ON p = i % $PROCS,
                       LATERAL simba_acquire('lock-' || i, 'proc-' || p, session_id => sid) o
                      WHERE o.owner_id = 'proc-' || p")
  [ "$won" -eq $((hi - lo + 1)) ] || { echo "simba ramp: only $won of $((hi - lo + 1)) acquired"; exit 1; }
done
simba_ramp=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
q -d $db -c "VACUUM ANALYZE simba_mutex" >/dev/null

c0=$(server_cpu); sleep "$STEADY"; c1=$(server_cpu)
simba_cpu=$(pct $((c1 - c0)) "$STEADY")
simba_lost=$(q -d $db -c "SELECT $LOCKS - count(*) FROM simba_mutex_status WHERE owner_id IS NOT NULL")
simba_mem=$(q -d $db -c "SELECT pg_size_pretty(pg_total_relation_size('simba_mutex') + pg_total_relation_size('simba_session_lease'))")

# A process dies: its session is no longer kept alive.
q -d $db -c "UPDATE procs SET alive = false WHERE p = 0"
# lock-0 is process 0's: poll it, then every lock of process 0 must be free for the taking
while [ -n "$(q -d $db -c "SELECT owner_id FROM simba_owner('lock-0')")" ]; do sleep 0.05; done
simba_gone=$(q -d $db -c "SELECT extract(epoch FROM (simba_clock()).now)")
# its last keepalive (one may have been under way when it died) and its end
read -r renewed end <<<"$(q -d $db -F ' ' -c "SELECT extract(epoch FROM s.renewed_at), extract(epoch FROM s.transition_at)
                                               FROM procs, simba_session_status s WHERE p = 0 AND s.session_id = sid")"
taken=$(q -d $db -c "SELECT count(*) FROM generate_series(0, $LOCKS - 1, $PROCS) i,
                       LATERAL simba_acquire('lock-' || i, 'proc-1', '1h', '0s') o WHERE o.owner_id = 'proc-1'")
[ "$taken" -eq $(((LOCKS + PROCS - 1) / PROCS)) ] || { echo "simba: only $taken of process 0's locks could be taken"; exit 1; }
simba_free=$(awk -v g="$simba_gone" -v r="$renewed" 'BEGIN { printf "%.1f", g - r }')
simba_over=$(awk -v g="$simba_gone" -v e="$end" 'BEGIN { printf "%.1f", g - e }')

# Without sessions, for the ratio: PERLOCK leases renewed one row each.
stop_periods
q -d $db -c "SELECT simba_session_close(sid) FROM procs" >/dev/null
q -d $db -c "TRUNCATE simba_mutex" -c "VACUUM ANALYZE simba_mutex" >/dev/null
q -d $db -c "SELECT count(*) FROM generate_series(0, $PERLOCK - 1) i, LATERAL simba_acquire('lock-' || i, 'proc-' || i % $PROCS, '10s', '6s')" >/dev/null
# each lease renewed by its own holder's id, 100 to a statement (unnest, as the client batches)
q -d $db -c "CREATE TABLE batches AS SELECT i / 100 AS b, array_agg('lock-' || i) AS names, array_agg('proc-' || i % $PROCS) AS ids
               FROM generate_series(0, $PERLOCK - 1) i GROUP BY 1"
every_period "SELECT 1 FROM batches, LATERAL (SELECT count(*) FROM unnest(names, ids) AS x(n, id),
                                                LATERAL simba_acquire(x.n, x.id, '10s', '6s')) r"
sleep "$KEEPALIVE"
c0=$(server_cpu); sleep "$STEADY"; c1=$(server_cpu)
perlock_cpu=$(pct $((c1 - c0)) "$STEADY")
perlock_lost=$(q -d $db -c "SELECT $PERLOCK - count(*) FROM simba_mutex_status WHERE owner_id IS NOT NULL")
stop_periods

# --- etcd ---------------------------------------------------------------
etcd_dir=$work/etcd
etcd --data-dir "$etcd_dir" --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster default=http://127.0.0.1:23800 --max-txn-ops "$BATCH" --max-request-bytes 33554432 \
  --quota-backend-bytes 8589934592 >"$work/etcd.log" 2>&1 &
etcd_pid=$!; pids+=($etcd_pid)
python3 bench/etcd_sessions.py --url http://127.0.0.1:23790 --pid "$etcd_pid" --locks "$LOCKS" --procs "$PROCS" \
  --batch "$BATCH" --steady "$STEADY" --keepalive "$KEEPALIVE" --ttl 16 >"$work/etcd.json"
IFS=$'\t' read -r etcd_ramp etcd_cpu etcd_lost etcd_mem etcd_free etcd_over < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(*(r[k] for k in ("ramp_s", "cpu_pct", "lost", "rss", "free_after_keepalive_s", "free_after_end_s")), sep="\t")' \
  "$work/etcd.json")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
{
  echo
  printf '| %-44s | %12s | %12s | %10s |\n' "$LOCKS locks, $PROCS processes" simba etcd simba/etcd
  printf '|%s|%s|%s|%s|\n' "----------------------------------------------" "--------------" "--------------" "------------"
  printf '| %-44s | %12s | %12s | %10s |\n' "ramp to every lock held (s)" "$simba_ramp" "$etcd_ramp" "$(ratio "$simba_ramp" "$etcd_ramp")"
  printf '| %-44s | %12s | %12s | %10s |\n' "steady server CPU (% of a core)" "$simba_cpu" "$etcd_cpu" "$(ratio "$simba_cpu" "$etcd_cpu")"
  printf '| %-44s | %12s | %12s | %10s |\n' "locks lost in the steady phase" "$simba_lost" "$etcd_lost" ""
  printf '| %-44s | %12s | %12s | %10s |\n' "memory (simba: tables; etcd: RSS)" "$simba_mem" "$etcd_mem" ""
  printf '| %-44s | %12s | %12s | %10s |\n' "dead process: free after its last keepalive (s)" "$simba_free" "$etcd_free" ""
  printf '| %-44s | %12s | %12s | %10s |\n' "  ... after its lease end (s)" "$simba_over" "$etcd_over" ""
  echo
  echo "simba without sessions, $PERLOCK leases renewed 100 per statement every $KEEPALIVE s: $perlock_cpu % of a core," \
       "$perlock_lost lost ($(ratio "$perlock_cpu" "$simba_cpu") × the sessions' CPU at $LOCKS locks)"
} | log
cat >"$out/sessions.json" <<JSON
{"locks": $LOCKS, "procs": $PROCS, "steady_s": $STEADY,
 "simba": {"ramp_s": $simba_ramp, "cpu_pct": $simba_cpu, "lost": $simba_lost, "free_after_keepalive_s": $simba_free,
           "free_after_end_s": $simba_over, "perlock_locks": $PERLOCK, "perlock_cpu_pct": $perlock_cpu, "perlock_lost": $perlock_lost},
 "etcd": $(cat "$work/etcd.json")}
JSON
