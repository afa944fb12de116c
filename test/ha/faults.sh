#!/usr/bin/env bash
# simba HA faults on the Patroni cluster of run.sh, one per call:
#
#   SIMBA_HA_DIR=DIR test/ha/faults.sh KIND
#
# Run by simba_chaos_nemesis (--fault-cmd), which timestamps the lines this
# prints on stdout: "start" when the fault begins and "healed DETAIL" when
# it ends (the checker measures the time to a new owner from there). First
# waits (90 s at most) until the cluster is healthy again after the
# previous fault: three nodes, both replicas streaming, one synchronous in
# sync mode; then prints "healthy" (until then the previous fault may still
# explain a lapsed fair queue entry). Exits non-zero (the nemesis logs an
# error, the run fails) if it is not, or if the fault could not be injected.
#
# Kinds (all aimed at the current leader):
#   pg-kill           SIGKILL its postmaster and every backend; Patroni
#                     restarts it. Healed at the kill.
#   patroni-kill      SIGKILL its Patroni (PostgreSQL keeps running); wait
#                     for another node to take the leader key (ttl), then
#                     start the Patroni again (it demotes and rewinds the old
#                     primary). Healed at the restart.
#   switchover        patronictl switchover (planned). Healed when it returns.
#   pg-restart        patronictl restart of the leader. Healed when it returns.
#   client-partition  its client fault proxy blackholes every connection for
#                     4 s (accepts, takes bytes, never answers), then resets
#                     them and passes again: a partition the connections do
#                     not survive (longer than tcp_user_timeout). Healed then.
#   client-blackhole  the same without the reset: connections stay open, the
#                     bytes sent during the 4 s are never answered (a frozen
#                     VM or a stuck pooler): the client's deadlines must
#                     give them up.
#   etcd-partition    the fault proxy between its Patroni and etcd blackholes
#                     until Patroni demoted it and another node leads, then
#                     passes (and resets the stale connections). Healed then.
#   pause             SIGSTOP its postmaster and backends for ttl + 3 s (and
#                     until another node leads), then SIGCONT. Healed at SIGCONT.
#   etcd-restart      SIGTERM etcd, start it again. Healed when it answers.
#   stall-kill        SIGSTOP its walsenders for HA_STALL_MS (replication
#                     lag), then SIGKILL its Patroni and PostgreSQL; once
#                     another node leads, start the Patroni again. Healed then.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${SIMBA_HA_DIR:?SIMBA_HA_DIR is not set}
kind=${1:?usage: faults.sh KIND}
. "$here/patroni_cluster.sh"
ha_load_env

fail() { echo "faults.sh $kind: $*" >&2; exit 1; }

ha_wait_healthy 90 || fail "cluster not healthy 90 s after the previous fault (leader '${leader:-}')"
echo healthy  # the previous fault's effects are over (the checker's rule 9b)
old=$leader

# Polls until another node than $old holds the leader key, at most S seconds;
# sets $new (empty if none took it).
wait_new_leader() { # seconds
  local end=$((SECONDS + $1))
  new=""
  while [ $SECONDS -lt $end ]; do
    new=$(ha_leader_key)
    [ -n "$new" ] && [ "$new" != "$old" ] && return 0
    sleep 0.1
  done
  new=""
  return 1
}

case "$kind" in
  pg-kill)
    ha_postmaster_pid "$old" >/dev/null || fail "no postmaster on $old"
    echo start
    echo "healed postgres of $old SIGKILLed ($(ha_pg_kill_all "$old") processes)"
    ;;
  patroni-kill)
    pid=$(ha_patroni_pid "$old") || fail "no patroni on $old"
    echo start
    t0=$(ha_now_ms)
    kill -KILL "$pid"
    wait_new_leader $((HA_TTL * 3)) && took="$new leads after $(ha_since "$t0")" || took="no new leader in $((HA_TTL * 3)) s"
    ha_start_patroni "$old"
    echo "healed patroni of $old SIGKILLed, $took, patroni restarted"
    ;;
  switchover)
    echo start
    t0=$(ha_now_ms)
    out=$(patronictl -c "$dir/ctl.yml" switchover "$ha_scope" --leader "$old" --force 2>&1) ||
      fail "patronictl switchover: $out"
    wait_new_leader 30 || fail "switchover returned but $old still leads: $out"
    echo "healed switchover $old -> $new in $(ha_since "$t0")"
    ;;
  pg-restart)
    echo start
    t0=$(ha_now_ms)
    out=$(patronictl -c "$dir/ctl.yml" restart "$ha_scope" "$old" --force 2>&1) ||
      fail "patronictl restart: $out"
    echo "healed patronictl restart of $old in $(ha_since "$t0")"
    ;;
  client-partition|client-blackhole)
    ha_client_cut "$kind" "$old" || fail "fault proxy"
    ;;
  etcd-partition)
    ctl=$(ha_var ETCD_PROXY_CTL "$old")
    port=$(ha_var PG_PORT "$old")
    echo start
    t0=$(ha_now_ms)
    ha_proxy_cmd "$ctl" blackhole || fail "proxy blackhole"
    demoted=""
    end=$((SECONDS + HA_TTL * 3))
    while [ $SECONDS -lt $end ]; do
      [ -z "$demoted" ] && [ "$(ha_psql "$port" -At -c "SELECT pg_is_in_recovery()" 2>/dev/null || true)" != f ] &&
        demoted="demoted after $(ha_since "$t0")"
      new=$(ha_leader_key)
      [ -n "$demoted" ] && [ -n "$new" ] && [ "$new" != "$old" ] && break
      sleep 0.1
    done
    ha_proxy_cmd "$ctl" pass || fail "proxy pass"
    ha_proxy_cmd "$ctl" reset || fail "proxy reset"
    echo "healed $old cut from etcd: ${demoted:-not demoted}, leader ${new:-none} after $(ha_since "$t0")"
    ;;
  pause)
    ha_postmaster_pid "$old" >/dev/null || fail "no postmaster on $old"
    pids=$(ha_pg_pids "$old")
    echo start
    t0=$(ha_now_ms)
    # shellcheck disable=SC2086
    kill -STOP $pids
    sleep $((HA_TTL + 3))  # past Patroni's ttl: the pause's length
    wait_new_leader 20 && took="$new leads" || took="no new leader"
    # shellcheck disable=SC2086
    kill -CONT $pids
    echo "healed postgres of $old SIGSTOPped $(ha_since "$t0") ($(wc -w <<<"$pids") processes), $took"
    ;;
  etcd-restart)
    pid=$(ha_etcd_pid) || fail "no etcd"
    echo start
    t0=$(ha_now_ms)
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    ha_start_etcd
    end=$((SECONDS + 30))
    until ha_etcd_healthy; do [ $SECONDS -lt $end ] || fail "etcd not back in 30 s"; sleep 0.05; done
    echo "healed etcd restarted, down $(ha_since "$t0")"
    ;;
  stall-kill)
    pm=$(ha_postmaster_pid "$old") || fail "no postmaster on $old"
    ppid=$(ha_patroni_pid "$old") || fail "no patroni on $old"
    walsenders=$(ps -o pid=,args= --ppid "$pm" | awk '/walsender/ { print $1 }')
    [ -n "$walsenders" ] || fail "no walsender on $old"
    echo start
    t0=$(ha_now_ms)
    # shellcheck disable=SC2086
    kill -STOP $walsenders
    sleep "$(awk -v ms="$HA_STALL_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"  # the stall's length
    kill -KILL "$ppid"
    ha_pg_kill_all "$old" >/dev/null
    wait_new_leader $((HA_TTL * 3)) && took="$new leads after $(ha_since "$t0")" || took="no new leader in $((HA_TTL * 3)) s"
    ha_start_patroni "$old"
    echo "healed $old's walsenders stopped ${HA_STALL_MS} ms, then its patroni and postgres SIGKILLed, $took, patroni restarted"
    ;;
  *) fail "unknown fault kind" ;;
esac
