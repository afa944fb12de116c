#!/usr/bin/env bash
# simba HA run: a three-node PostgreSQL 15 cluster on loopback under an HA
# manager, Patroni (patroni_cluster.sh: one etcd) or pg_auto_failover
# (pgaf_cluster.sh: one monitor), the chaos workload (test/chaos programs)
# on a connection string listing every node (through each node's fault
# proxy) with target_session_attrs=read-write, HA faults (faults.sh,
# pgaf_faults.sh) in turn, then the chaos checker against whichever node
# leads at the end.
#
#   test/ha/run.sh --bin-dir DIR --proxy-bin FILE [--manager patroni|pgaf]
#                  [--mode strict|sync|async] [--duration S] [--kinds k1,k2,...]
#                  [--quiet-ms MS] [--bound-ms MS] [--stall-ms MS]
#                  [--dcs etcd|etcd3]
#                  [--simba-bin FILE] [--tck-bin FILE [--tck-filter GTEST_FILTER]]
#
# --simba-bin: three `simba run` contenders (run_loop.sh) take turns on the
#         mutex ha-run through the same faults, CMD = simba_chaos_run_cmd;
#         the checker judges them too (--run-mutex).
# --tck-bin: once the faults are over and the cluster is healthy, the TCK
#         (simba_tck_postgres and its worker processes) runs on the cluster
#         through the same multi-host string, the leader listed last;
#         --tck-filter picks its cases (--gtest_filter).
#
# Patroni (the default manager):
# strict: synchronous_mode: true, synchronous_mode_strict: true (the
#         default, what README.md recommends); the checker must find no
#         violation.
# sync:   synchronous_mode: true, synchronous_mode_strict: false; judged the
#         same way. Patroni 3.0.2 loses acknowledged commits in this mode
#         when the Patroni of a primary is SIGKILLed and started again
#         (patroni-kill): see README.md.
# async:  synchronous_mode: false, the control: the checker must find lost
#         acknowledged writes or grants or a fence issued twice
#         (--expect-loss); the run fails if it finds nothing.
# --dcs: Patroni's etcd API, v2 (`etcd:`, the default) or v3 (`etcd3:`).
# Patroni 3.0.2's etcd3 code lets a leader that wakes up after its ttl
# overwrite the new leader's key (fixed in 3.0.3, patroni#2689): the pause
# fault then makes two primaries in turn; see README.md.
# Kinds (faults.sh): pg-kill patroni-kill switchover pg-restart
# client-partition client-blackhole etcd-partition pause etcd-restart
# stall-kill.
#
# pg_auto_failover (--manager pgaf):
# strict: number_sync_standbys 1, both standbys in the replication quorum,
#         synchronous_commit on; the checker must find no violation.
# async:  the control: synchronous_commit = local (commits do not wait for
#         the standbys); judged with --expect-loss.
# Kinds (pgaf_faults.sh): pg-kill node-kill switchover pause
# client-partition client-blackhole monitor-restart stall-kill.
#
# Everything runs as an unprivileged user (postgres when started by root) in
# one temp dir, on loopback only, and is stopped and removed on every exit
# (SIMBA_HA_KEEP=1 keeps the dir and the logs; kept on failure too, stopped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

bin_dir="" proxy_bin="" manager=patroni dcs=etcd mode=strict duration=180 quiet_ms=2000 bound_ms="" stall_ms=2000
kinds=""
simba_bin="" tck_bin="" tck_filter="*"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --proxy-bin) proxy_bin=$2; shift 2 ;;
    --manager) manager=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --kinds) kinds=$2; shift 2 ;;
    --quiet-ms) quiet_ms=$2; shift 2 ;;
    --bound-ms) bound_ms=$2; shift 2 ;;
    --stall-ms) stall_ms=$2; shift 2 ;;
    --dcs) dcs=$2; shift 2 ;;
    --simba-bin) simba_bin=$2; shift 2 ;;
    --tck-bin) tck_bin=$2; shift 2 ;;
    --tck-filter) tck_filter=$2; shift 2 ;;
    *) echo "ha/run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin_dir/simba_chaos_worker" ] || { echo "ha/run.sh: no simba_chaos_worker in '$bin_dir'" >&2; exit 2; }
[ -x "$proxy_bin" ] || { echo "ha/run.sh: no fault proxy at '$proxy_bin'" >&2; exit 2; }
[ -z "$simba_bin" ] || [ -x "$simba_bin" ] || { echo "ha/run.sh: no simba at '$simba_bin'" >&2; exit 2; }
[ -z "$tck_bin" ] || [ -x "$tck_bin" ] || { echo "ha/run.sh: no TCK at '$tck_bin'" >&2; exit 2; }
command -v pg_config >/dev/null || { echo "ha/run.sh: no PostgreSQL (pg_config)" >&2; exit 77; }
# Only this run's clusters: libpq's environment (test/with-cluster.sh around
# ctest sets PGHOST, PGPORT, PGDATA) would send pg_autoctl and psql elsewhere.
for v in $(compgen -e); do case "$v" in PG[A-Z]*) unset "$v" ;; esac; done
# The manager's harness: ha_up, ha_healthy, ha_teardown, its fault script.
case "$manager" in
  patroni) . "$here/patroni_cluster.sh" ;;
  pgaf) . "$here/pgaf_cluster.sh" ;;
  *) echo "ha/run.sh: --manager patroni|pgaf" >&2; exit 2 ;;
esac
case " $ha_modes " in *" $mode "*) ;; *) echo "ha/run.sh: --manager $manager: --mode ${ha_modes// /|}" >&2; exit 2 ;; esac
kinds=${kinds:-$ha_default_kinds}
bound_ms=${bound_ms:-$ha_bound_ms}
# Not a skip: CI installs these (test/install-deps.sh), a missing one is a failure.
for c in $ha_tools setpriv; do
  command -v "$c" >/dev/null || { echo "ha/run.sh: no $c (run test/install-deps.sh)" >&2; exit 1; }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-ha.XXXXXX")
chmod 755 "$dir"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
for n in $ha_nodes; do mkdir -p "$dir/$n"; done
mkdir -p "$dir/logs" && chmod 777 "$dir/logs"
[ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir"

keep=${SIMBA_HA_KEEP:-0}
run_loops=()
# Stops the simba run contenders: no new simba run, SIGTERM to the running
# ones (forwarded to CMD, then the mutex is released); 0 if all exited
# within 20 s. --kill: at once, SIGKILL (simba run's watchdog then kills CMD).
stop_run_loops() {
  local sig=TERM end=$((SECONDS + 20)) p alive
  [ "${1:-}" = --kill ] && sig=KILL
  : >"$dir/run-stop"
  while :; do
    alive=0
    for p in "${run_loops[@]}"; do
      kill -0 "$p" 2>/dev/null || continue
      alive=1
      pkill "-$sig" -P "$p" 2>/dev/null
    done
    [ "$alive" = 0 ] && return 0
    [ $SECONDS -lt $end ] || return 1
    sleep 0.2
  done
}
finish() {
  [ ${#run_loops[@]} -eq 0 ] || stop_run_loops --kill || kill -KILL "${run_loops[@]}" 2>/dev/null
  ha_teardown
  if [ "$keep" = 1 ]; then echo "ha/run.sh: kept $dir" >&2; else rm -rf "$dir"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

{
  echo "HA_MODE=$mode HA_STALL_MS=$stall_ms"
  echo "PG_BIN=$(pg_config --bindir)"
  echo "ha_proxy_bin=$proxy_bin"
} >"$dir/env"
ha_load_env
HA_DCS=$dcs  # for patroni_cluster.sh
modes=$(ha_mode_text)
ha_up
lp=$(ha_var PG_PORT "$leader")
ha_psql "$lp" -c "CREATE EXTENSION simba" -c "ALTER DATABASE postgres SET simba.history = on"
ha_psql "$lp" -f "$here/../chaos/setup.sql"  # the ledgers, the audit of read-write holds and fair queues
echo "ha: $manager: $(for n in $ha_nodes; do printf '%s pg %s (clients via %s) ' \
  "$n" "$(ha_var PG_PORT "$n")" "$(ha_var CLIENT_PORT "$n")"; done); leader $leader;" \
  "$modes; $describe; up in ${SECONDS} s"

hosts="" ports=""
for n in $ha_nodes; do hosts+="${hosts:+,}127.0.0.1"; ports+="${ports:+,}$(ha_var CLIENT_PORT "$n")"; done
conninfo="host=$hosts port=$ports target_session_attrs=read-write dbname=postgres user=postgres"
# A fault may wait 90 s for health, then last 75 s (pgaf's pause, a failover
# begun late): its script, killed at the bound, would leave a node stopped.
nemesis=("$bin_dir/simba_chaos_nemesis" --workers 8 --worker-bin "$bin_dir/simba_chaos_worker"
  --logdir "$dir/logs" --conninfo "$conninfo" --duration-s "$duration" --extra-s "$ha_extra_s" --kinds "$kinds"
  --quiet-ms "$quiet_ms" --settle-ms "$bound_ms" --fault-cmd "$ha_fault_script" --fault-timeout-s 200
  --worker-arg=--hold-ms --worker-arg 3000 --worker-arg=--ledger-timeout-ms --worker-arg 5000
  --worker-arg=--rwlock --worker-arg chaos-rw --worker-arg=--multi --worker-arg chaos-b,chaos-c,chaos-m
  --worker-arg=--fair --worker-arg chaos-fair --targets chaos-m,chaos-fair --rwlocks chaos-rw)
label="$ha_label ($modes)"
checker_common=(--logdir "$dir/logs" --bound-ms "$bound_ms" --label "$label")
[ "$mode" = async ] && checker_common+=(--expect-loss)
if [ -n "$simba_bin" ]; then
  for i in 1 2 3; do
    "$here/run_loop.sh" "$simba_bin" "$bin_dir/simba_chaos_run_cmd" "$dir" "$i" "$conninfo" &
    run_loops+=($!)
  done
  checker_common+=(--run-mutex ha-run)
fi

set +e
SIMBA_HA_DIR=$dir "${nemesis[@]}"
nrc=$?
runs_stopped=1
if [ ${#run_loops[@]} -gt 0 ]; then
  stop_run_loops || { runs_stopped=0; echo "ha: simba run did not exit within 20 s of SIGTERM"; }
  echo "ha: simba run exit statuses (count status): $(cat "$dir"/logs/run-*.exits 2>/dev/null | sort -n | uniq -c | xargs)"
fi
# The checker reads the leader once the cluster has settled (all nodes back);
# one that does not come back fails the run.
settled=1
ha_wait_healthy 90 || { settled=0; echo "ha/run.sh: the cluster is not healthy 90 s after the last fault"; }
direct_ports=""
for n in $ha_nodes; do direct_ports+="${direct_ports:+,}$(ha_var PG_PORT "$n")"; done
"$bin_dir/simba_chaos_checker" "${checker_common[@]}" \
  --conninfo "host=$hosts port=$direct_ports target_session_attrs=read-write dbname=postgres user=postgres"
crc=$?
set -e
# Across nodes: once each replica replayed the leader's WAL, every node holds
# the same history and ledger (a node left unrewound would differ).
agree=1
if [ "$settled" = 1 ]; then
  digest="SELECT (SELECT count(*) || ':' || coalesce(sum(hashtext(id || mutex || event || coalesce(owner_id, '')
      || fence)), 0) FROM simba_mutex_history) || ' / ' || (SELECT count(*) || ':'
      || coalesce(sum(hashtext(id || mutex || writer || fence || seq)), 0) FROM ledger) || ' / ' || (SELECT count(*)
      || ':' || coalesce(sum(hashtext(id || rwlock || writer || mode || fence || seq)), 0) FROM rw_ledger) || ' / '
      || (SELECT count(*) || ':' || coalesce(sum(hashtext(id || op || coalesce(new, old)::text)), 0) FROM chaos_audit)"
  lp=$(ha_var PG_PORT "$leader")
  lsn=$(ha_psql "$lp" -At -c "SELECT pg_current_wal_lsn()")
  want=$(ha_psql "$lp" -At -c "$digest")
  for n in $ha_nodes; do
    [ "$n" = "$leader" ] && continue
    p=$(ha_var PG_PORT "$n") end=$((SECONDS + 30)) got=""
    until [ "$(ha_psql "$p" -At -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'" 2>/dev/null)" = t ]; do
      [ $SECONDS -lt $end ] || break
      sleep 0.1
    done
    got=$(ha_psql "$p" -At -c "$digest" 2>/dev/null || echo "(unreadable)")
    if [ "$got" != "$want" ]; then
      agree=0; echo "ha: $n differs from the leader $leader: history/ledger/rw_ledger/audit $got, leader $want"
    fi
  done
  [ "$agree" = 1 ] && echo "ha: every node holds the leader's history, ledgers and audit (rows:digest $want)"
fi
# The TCK on the cluster, through the client proxies with the leader listed
# last: every connection must skip the standbys (target_session_attrs).
trc=0
if [ -n "$tck_bin" ] && [ "$settled" = 1 ]; then
  tck_ports=""
  for n in $ha_nodes; do [ "$n" = "$leader" ] || tck_ports+="$(ha_var CLIENT_PORT "$n"),"; done
  tck_ports+=$(ha_var CLIENT_PORT "$leader")
  echo "ha: TCK on the cluster (ports $tck_ports, leader $leader last)"
  t0=$SECONDS
  PGHOST=$hosts PGPORT=$tck_ports PGTARGETSESSIONATTRS=read-write PGUSER=postgres PGDATABASE=postgres \
    PGCONNECT_TIMEOUT=5 "$tck_bin" --gtest_brief=1 --gtest_filter="$tck_filter" || trc=$?
  echo "ha: TCK exit $trc in $((SECONDS - t0)) s"
fi
echo "ha: run took ${SECONDS} s with bring-up"
if [ "$nrc" -ne 0 ] || [ "$crc" -ne 0 ] || [ "$settled" = 0 ] || [ "$agree" = 0 ] || [ "$runs_stopped" = 0 ] ||
  [ "$trc" -ne 0 ]; then
  keep=1
  ha_log_tails 10
  echo "ha/run.sh: FAILED (nemesis $nrc, checker $crc, settled $settled, nodes agree $agree," \
    "simba run stopped $runs_stopped, TCK $trc)" >&2
  exit 1
fi
