#!/usr/bin/env bash
# simba HA faults on the pg_auto_failover cluster of run.sh --manager pgaf,
# one per call:
#
#   SIMBA_HA_DIR=DIR test/ha/pgaf_faults.sh KIND
#
# The protocol of faults.sh (run by simba_chaos_nemesis --fault-cmd): first
# waits (90 s at most) until the cluster is healthy again (the monitor has a
# primary and two secondaries, both streaming, a synchronous one in strict
# mode) and prints "healthy"; prints "start" when the fault begins and
# "healed DETAIL" when it ends; exits non-zero if the cluster is not
# healthy or the fault could not be injected.
#
# Kinds (all aimed at the current primary):
#   pg-kill           SIGKILL its postmaster and every backend (its
#                     pg_autoctl's restarts held meanwhile: README.md,
#                     finding 4); it restarts it. Healed at the kill.
#   node-kill         SIGKILL its pg_autoctl (supervisor and services) and
#                     its PostgreSQL at once (a node crash); once the monitor
#                     promoted another node, start its pg_autoctl again (it
#                     rejoins as a standby, pg_rewind). Healed at the restart.
#   switchover        pg_autoctl perform switchover. Healed when it returns
#                     and another node is primary.
#   pause             SIGSTOP its postmaster and backends (pg_autoctl keeps
#                     running) until the monitor promoted another node, or
#                     for unhealthy + primary_demote_timeout + 15 s (30 s)
#                     at most, then SIGCONT (or once a failover the
#                     monitor began meanwhile ends: README.md, finding 4).
#                     Healed at SIGCONT. (A keeper
#                     that keeps reporting "PostgreSQL is running" can keep
#                     the monitor from failing over: see README.md.)
#   client-partition  as in faults.sh: its client proxy blackholes 4 s, then
#                     resets the connections and passes.
#   client-blackhole  the same without the reset.
#   monitor-restart   SIGTERM the monitor's pg_autoctl (it stops the
#                     monitor's PostgreSQL), start it again. Healed when the
#                     monitor answers.
#   stall-kill        SIGSTOP its walsenders for HA_STALL_MS (replication
#                     lag), then node-kill. Healed at the restart.
#   wait-primary-kill (not in the default list: a double fault, to
#                     reproduce README.md's pg_auto_failover finding)
#                     node-kill the primary; once another node is promoted
#                     (wait_primary: synchronous replication still off),
#                     SIGSTOP the third node's pg_autoctl and PostgreSQL so
#                     that it does not become a secondary, let the new
#                     primary take writes for 3 s, node-kill it too,
#                     SIGCONT the third node and
#                     restart the first; once the monitor has a primary
#                     again (or after 60 s), restart the second. Healed then.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${SIMBA_HA_DIR:?SIMBA_HA_DIR is not set}
kind=${1:?usage: pgaf_faults.sh KIND}
. "$here/pgaf_cluster.sh"
ha_load_env

fail() { echo "pgaf_faults.sh $kind: $*" >&2; exit 1; }

ha_wait_healthy 90 || fail "cluster not healthy 90 s after the previous fault (primary '${leader:-}')"
echo healthy  # the previous fault's effects are over (the checker's rule 9b)
old=$leader

# Polls until the monitor has another node than $old as primary, at most S
# seconds; sets $new (empty if none).
wait_new_primary() { # seconds
  local end=$((SECONDS + $1))
  while [ $SECONDS -lt $end ]; do
    new=$(pgaf_primary "$old")
    [ -n "$new" ] && return 0
    sleep 0.1
  done
  new=""
  return 1
}

# SIGKILLs the node's pg_autoctl processes and its PostgreSQL together.
kill_node() { # node
  local pids
  pids=$(pgaf_autoctl_pids "$1")
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true  # one may have exited meanwhile
  echo $(($(wc -w <<<"$pids") + $(ha_pg_kill_all "$1")))
}

# The longest a failover may take here: unhealthy + demote timeout + the
# standbys' election and promotion, with room for a loaded machine.
failover_s=$((HA_UNHEALTHY_S + HA_DEMOTE_S + 30))

case "$kind" in
  pg-kill)
    pm=$(ha_postmaster_pid "$old") || fail "no postmaster on $old"
    starter=$(ps -o ppid= -p "$pm" | tr -d ' ')  # pg_autoctl's "start/stop postgres" service
    echo start
    # Its restarts wait until the last process is gone (finding 4): one
    # that fails on the shared memory a dying backend still holds is
    # retried seconds later, the monitor fails over meanwhile, and may
    # pick the old primary to fast-forward from itself.
    kill -STOP "$starter"
    killed=$(ha_pg_kill_all "$old")
    kill -CONT "$starter"
    echo "healed postgres of $old SIGKILLed ($killed processes)"
    ;;
  node-kill|stall-kill)
    pgaf_autoctl_pid "$old" >/dev/null || fail "no pg_autoctl on $old"
    stalled=""
    if [ "$kind" = stall-kill ]; then
      pm=$(ha_postmaster_pid "$old") || fail "no postmaster on $old"
      walsenders=$(ps -o pid=,args= --ppid "$pm" | awk '/walsender/ { print $1 }')
      [ -n "$walsenders" ] || fail "no walsender on $old"
    fi
    echo start
    t0=$(ha_now_ms)
    if [ "$kind" = stall-kill ]; then
      # shellcheck disable=SC2086
      kill -STOP $walsenders
      sleep "$(awk -v ms="$HA_STALL_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"  # the stall's length
      stalled="walsenders stopped ${HA_STALL_MS} ms, then "
    fi
    killed=$(kill_node "$old")
    wait_new_primary "$failover_s" && took="$new primary after $(ha_since "$t0")" ||
      took="no new primary in $failover_s s"
    pgaf_start "$old"
    echo "healed ${stalled}$old's pg_autoctl and postgres SIGKILLed ($killed processes), $took, pg_autoctl restarted"
    ;;
  switchover)
    echo start
    t0=$(ha_now_ms)
    out=$(pgaf perform switchover --pgdata "$dir/monitor/data" --wait 60 2>&1) ||
      fail "pg_autoctl perform switchover: $out"
    wait_new_primary 30 || fail "switchover returned but $old is still primary: $out"
    echo "healed switchover $old -> $new in $(ha_since "$t0")"
    ;;
  pause)
    ha_postmaster_pid "$old" >/dev/null || fail "no postmaster on $old"
    pids=$(ha_pg_pids "$old")
    echo start
    t0=$(ha_now_ms)
    # shellcheck disable=SC2086
    kill -STOP $pids
    paused_s=$((HA_UNHEALTHY_S + HA_DEMOTE_S + 15))
    if wait_new_primary "$paused_s"; then
      took="$new primary"
    elif pgaf_failing_over; then
      # The monitor began a failover late in the freeze. Woken now, the old
      # primary reports the most WAL, is picked as the candidate and told to
      # fast-forward from itself, and the formation never gets a primary
      # again (README.md, finding 4): stay frozen until the failover ends.
      wait_new_primary "$failover_s" && took="$new primary (failover begun late)" ||
        took="no new primary in $((paused_s + failover_s)) s, a failover begun"
    else
      took="no new primary in $paused_s s"
    fi
    # shellcheck disable=SC2086
    kill -CONT $pids
    echo "healed postgres of $old SIGSTOPped $(ha_since "$t0") ($(wc -w <<<"$pids") processes), $took"
    ;;
  client-partition|client-blackhole)
    ha_client_cut "$kind" "$old" || fail "fault proxy"
    ;;
  monitor-restart)
    pid=$(pgaf_autoctl_pid monitor) || fail "no monitor"
    echo start
    t0=$(ha_now_ms)
    kill -TERM "$pid"
    end=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do [ $SECONDS -lt $end ] || fail "monitor not stopped in 30 s"; sleep 0.05; done
    pgaf_start monitor
    until pgaf_monitor_sql "SELECT 1" >/dev/null 2>&1; do
      [ $SECONDS -lt $end ] || fail "monitor not back in 30 s"; sleep 0.05
    done
    echo "healed monitor restarted, down $(ha_since "$t0")"
    ;;
  wait-primary-kill)
    pgaf_autoctl_pid "$old" >/dev/null || fail "no pg_autoctl on $old"
    echo start
    t0=$(ha_now_ms)
    kill_node "$old" >/dev/null
    wait_new_primary "$failover_s" || fail "no new primary in $failover_s s"
    second=$new third=""
    for n in $ha_nodes; do [ "$n" = "$old" ] || [ "$n" = "$second" ] || third=$n; done
    state2=$(pgaf_state "$second")
    # Its pg_autoctl too: the keeper would report it a secondary (in
    # join_secondary its PostgreSQL may not even run yet).
    pids="$(pgaf_autoctl_pids "$third") $(ha_pg_pids "$third")"
    # shellcheck disable=SC2086
    kill -STOP $pids
    sleep 3  # the new primary's time alone, not a wait for a condition
    state2="$state2 -> $(pgaf_state "$second")"
    kill_node "$second" >/dev/null
    # shellcheck disable=SC2086
    kill -CONT $pids
    pgaf_start "$old"
    first=$old old=$second
    wait_new_primary 60 && took="$new primary $(ha_since "$t0") after the first kill" || took="no other primary in 60 s"
    pgaf_start "$second"
    echo "healed $first killed, $second promoted ($state2), $third paused 3 s, $second killed; $took; both pg_autoctl restarted"
    ;;
  *) fail "unknown fault kind" ;;
esac
