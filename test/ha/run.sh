#!/usr/bin/env bash
# simba failover run: a primary and a streaming standby on loopback TCP, the
# chaos workload on a multi-host connection string, SIGKILL of the primary,
# promotion of the standby, then the checker against the new primary.
#
#   test/ha/run.sh --bin-dir DIR [--mode sync|async] [--duration 40]
#                  [--failover-at 15] [--stall-ms 0]
#
# sync:  synchronous_standby_names = '*', synchronous_commit = on: every
#        acknowledged commit is on the standby; the checker must find no
#        violation (exit 1 otherwise).
# async: no synchronous standby; the checker prints what the promotion lost
#        and the run passes (--report-only).
# --stall-ms N: before the kill, the primary's walsender is SIGSTOPped for N ms
# (a slow or partitioned replication link) and never resumed.
#
# Both clusters run as an unprivileged user (postgres when started by root)
# in one temp dir, listen on 127.0.0.1 only, fsync = on, and are stopped and
# removed on every exit (SIMBA_HA_KEEP=1 keeps the dir and the logs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

bin_dir="" mode=sync duration=40 failover_at=15 stall_ms=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --failover-at) failover_at=$2; shift 2 ;;
    --stall-ms) stall_ms=$2; shift 2 ;;
    *) echo "ha/run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$mode" in sync|async) ;; *) echo "ha/run.sh: --mode sync|async" >&2; exit 2 ;; esac
[ -x "$bin_dir/simba_chaos_worker" ] || { echo "ha/run.sh: no simba_chaos_worker in '$bin_dir'" >&2; exit 2; }
command -v pg_config >/dev/null || { echo "ha/run.sh: no PostgreSQL (pg_config)" >&2; exit 77; }
bin=$(pg_config --bindir)

pguser=""
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-ha.XXXXXX")
chmod 755 "$dir"
if [ "$(id -u)" -eq 0 ]; then pguser=postgres; chown postgres: "$dir"; fi
mkdir -p "$dir/logs" && chmod 777 "$dir/logs"

# Stops a cluster only if its postmaster.pid names a live postmaster of that
# data dir: the killed primary leaves a stale pid file, and its pid may have
# been reused by someone else's process since.
stop_all() {
  local d pid
  for d in primary standby; do
    pid=$(head -n 1 "$dir/$d/postmaster.pid" 2>/dev/null || true)
    [ -n "$pid" ] || continue
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/$d"; then
      as_pg "$bin/pg_ctl" -D "$dir/$d" -m immediate -w stop >/dev/null 2>&1 || true
    fi
  done
  if [ "${SIMBA_HA_KEEP:-0}" = 1 ]; then echo "ha/run.sh: kept $dir" >&2; else rm -rf "$dir"; fi
}
trap stop_all EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 30000))
    if port_free "$p" && [ "$p" != "${1:-}" ]; then echo "$p"; return; fi
  done
  echo "ha/run.sh: no free port" >&2; exit 1
}

# Starts the cluster in $1 on a free port (retrying if another process takes
# the port first); sets $port. (Not a $(...): the server would hold its pipe.)
start_on_free_port() {
  local d=$1 avoid=${2:-} p
  for _ in 1 2 3 4 5; do
    p=$(pick_port "$avoid")
    echo "port = $p" >>"$dir/$d/postgresql.conf"
    if as_pg "$bin/pg_ctl" -D "$dir/$d" -l "$dir/$d.log" -w -t 60 start >/dev/null 2>&1; then
      port=$p; return
    fi
  done
  cat "$dir/$d.log" >&2; exit 1
}

as_pg "$bin/initdb" -D "$dir/primary" -U postgres --auth=trust -E UTF8 --locale=C --no-instructions \
  >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
cat >>"$dir/primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = on
synchronous_commit = on
synchronous_standby_names = ''
track_commit_timestamp = on
wal_level = replica
max_wal_senders = 4
hot_standby = on
max_connections = 100
log_min_messages = warning
CONF
start_on_free_port primary; p1=$port
psql_p() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -d postgres "$@"; }
psql_p -p "$p1" -c "CREATE EXTENSION simba" -c "ALTER DATABASE postgres SET simba.history = on" \
  -c "CREATE TABLE ledger (id bigserial PRIMARY KEY, mutex text NOT NULL, writer text NOT NULL,
        fence bigint NOT NULL, worker int NOT NULL, seq bigint NOT NULL,
        written_at timestamptz NOT NULL DEFAULT clock_timestamp())"

as_pg "$bin/pg_basebackup" -h 127.0.0.1 -p "$p1" -U postgres -D "$dir/standby" -R -X stream \
  >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log" >&2; exit 1; }
# Once promoted, the standby is alone: like Patroni with synchronous_mode_strict
# off, it must not wait for a synchronous standby that does not exist.
echo "synchronous_standby_names = ''" >>"$dir/standby/postgresql.conf"
start_on_free_port standby "$p1"; p2=$port

want=sync; [ "$mode" = async ] && want=async
# Synchronous only once the standby exists (commits would wait for it before).
if [ "$mode" = sync ]; then
  psql_p -p "$p1" -c "ALTER SYSTEM SET synchronous_standby_names = '*'" -c "SELECT pg_reload_conf()" >/dev/null
fi
for i in $(seq 1 300); do
  st=$(psql_p -p "$p1" -At -c "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'" || true)
  [ "$st" = "$want" ] && break
  [ "$i" = 300 ] && { echo "ha/run.sh: standby not streaming ($want) after 30 s" >&2; exit 1; }
  sleep 0.1
done
echo "ha: primary 127.0.0.1:$p1, standby 127.0.0.1:$p2 ($want), fsync=on, synchronous_commit=on"

conninfo="host=127.0.0.1,127.0.0.1 port=$p1,$p2 target_session_attrs=read-write dbname=postgres user=postgres"
nemesis=("$bin_dir/simba_chaos_nemesis" --workers 8 --worker-bin "$bin_dir/simba_chaos_worker"
  --logdir "$dir/logs" --conninfo "$conninfo" --duration-s "$duration" --kinds failover
  --failover-at-s "$failover_at" --stall-ms "$stall_ms" --pgdata "$dir/primary"
  --standby-pgdata "$dir/standby" --pgbin "$bin" --worker-arg=--hold-ms --worker-arg 3000)
[ -n "$pguser" ] && nemesis+=(--pguser "$pguser")
stall_label=""
[ "$stall_ms" -gt 0 ] && stall_label=", walsender stalled ${stall_ms} ms before the kill"
checker=("$bin_dir/simba_chaos_checker" --logdir "$dir/logs"
  --conninfo "host=127.0.0.1 port=$p2 dbname=postgres user=postgres" --bound-ms 8000
  --label "HA failover ($mode replication$stall_label)")
[ "$mode" = async ] && checker+=(--report-only)

set +e
"${nemesis[@]}"
nrc=$?
"${checker[@]}"
crc=$?
set -e
if [ "$nrc" -ne 0 ] || [ "$crc" -ne 0 ]; then
  for d in primary standby; do echo "--- $d log (tail)"; tail -n 20 "$dir/$d.log" || true; done
  SIMBA_HA_KEEP=1
  echo "ha/run.sh: FAILED (nemesis $nrc, checker $crc)" >&2
  exit 1
fi
