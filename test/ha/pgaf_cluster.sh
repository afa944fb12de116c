# simba HA suite: the pg_auto_failover cluster on loopback, sourced by run.sh
# (--manager pgaf: brings it up and tears it down) and pgaf_faults.sh (which
# breaks it).
#
# One monitor and three PostgreSQL 15 data nodes n1..n3, each run by its own
# `pg_autoctl run` (Debian 12's pg_auto_failover 2.0), every process as the
# unprivileged user (postgres when we are root), data, logs and pg_autoctl's
# own files (XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_RUNTIME_DIR) in $dir. Ports:
# the monitor's and each node's PostgreSQL are free loopback ports picked
# here; in front of each node a simba_fault_proxy for the clients (the
# keepers, monitor and replication talk to the nodes directly).
#
# Functions expect: $dir, and after ha_load_env, the variables of $dir/env.

here=${here:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
. "$here/common.sh"
ha_label="HA pg_auto_failover"
ha_fault_script=$here/pgaf_faults.sh
ha_default_kinds=pg-kill,node-kill,switchover,pause,client-partition,client-blackhole,monitor-restart,stall-kill
ha_modes="strict async"
ha_tools="pg_autoctl"
# Longer than Patroni's 20 s: a pg-kill is healed at the kill, and when the
# keeper, blocked on its restarting PostgreSQL, stays silent 5 s the monitor
# fails over: unhealthy + demote timeout + election is 17-22 s (see ha_up)
# before simba's part (a reconnect and a 1 s + 0.5 s lease) begins.
ha_bound_ms=30000
# Past run.sh's --duration for the kinds not injected yet: on the CI machine
# a node kill, a switchover and a pause took 25-47 s each and the health
# waits between them as much again (7 kinds in 212 s).
ha_extra_s=300

# pg_autoctl as the unprivileged user, its files under $dir, never in a home.
pgaf_env() {
  env=(env HOME="$dir" XDG_CONFIG_HOME="$dir/xdg/config" XDG_DATA_HOME="$dir/xdg/data"
    XDG_RUNTIME_DIR="$dir/xdg/run")
}
pgaf() { local env; pgaf_env; ha_as_pg "${env[@]}" pg_autoctl "$@"; }

pgaf_monitor_url() { echo "postgres://autoctl_node@127.0.0.1:$MONITOR_PORT/pg_auto_failover?sslmode=disable"; }

# SQL on the monitor's database.
pgaf_monitor_sql() { # sql
  PGCONNECT_TIMEOUT=2 psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$MONITOR_PORT" -U postgres \
    -d pg_auto_failover -c "$1"
}

# `pg_autoctl run` of a node or of the monitor ($dir/NODE/data), in the
# background; its log is $dir/NODE/autoctl.log.
pgaf_start() { # node|monitor
  local env; pgaf_env
  # The monitor's listener service connects to its own socket
  # ("postgres://autoctl_node@:PORT/..."), moved to $dir once created.
  [ "$1" = monitor ] && env+=(PGHOST="$dir")
  ha_spawn "$dir/$1/autoctl.pid" "$dir/$1/autoctl.log" "${env[@]}" pg_autoctl run --pgdata "$dir/$1/data"
}

# The supervisor (`pg_autoctl run`) of a node or of the monitor.
pgaf_autoctl_pid() { ha_pid_if "$dir/$1/autoctl.pid" "$dir/$1/data"; }

# Every pg_autoctl process of a node: the supervisor, its services ("node
# active", "start/stop postgres", "monitor listener"), and the service that
# started its PostgreSQL even when orphaned (its supervisor SIGKILLed alone).
pgaf_autoctl_pids() { # node|monitor
  local sup pm pp
  if sup=$(pgaf_autoctl_pid "$1"); then
    echo "$sup"
    ps -o pid= --ppid "$sup" 2>/dev/null || true
  fi
  if pm=$(ha_postmaster_pid "$1"); then
    pp=$(ps -o ppid= -p "$pm" 2>/dev/null | tr -d ' ')
    [ -n "$pp" ] && [ "$pp" != 1 ] && tr '\0' ' ' <"/proc/$pp/cmdline" 2>/dev/null | grep -q '^pg_autoctl' && echo "$pp"
  fi
  true
}

# A node's state on the monitor: "reported goal" (empty if none).
pgaf_state() { # node
  pgaf_monitor_sql "SELECT reportedstate || ' ' || goalstate FROM pgautofailover.node WHERE nodename = '$1'" 2>/dev/null || true
}

# The node the monitor has as primary (reported and assigned; wait_primary
# too: a primary whose standbys are not caught up yet), other than EXCEPT.
pgaf_primary() { # [except]
  pgaf_monitor_sql "SELECT nodename FROM pgautofailover.node
    WHERE reportedstate IN ('primary', 'wait_primary') AND goalstate = reportedstate
      AND nodename <> '${1:-}' ORDER BY nodename LIMIT 1" 2>/dev/null || true
}

# Whether the monitor has begun a failover: a node assigned a state of the
# election (report_lsn, fast_forward, prepare_promotion, ...).
pgaf_failing_over() {
  [ "$(pgaf_monitor_sql "SELECT count(*) FROM pgautofailover.node
    WHERE goalstate NOT IN ('primary', 'wait_primary', 'secondary', 'catchingup')" 2>/dev/null)" -gt 0 ] 2>/dev/null
}

# Healthy: the monitor answers and has one node in state primary and the
# other two in state secondary (reported as assigned); every node's pg_autoctl
# runs; that primary's PostgreSQL is a primary with both standbys streaming
# and, in strict mode, a synchronous standby (sync_state quorum: pg_auto_
# failover writes synchronous_standby_names = 'ANY 1 (...)'). Sets $leader.
ha_healthy() {
  local n states port sync
  states=$(pgaf_monitor_sql "SELECT string_agg(nodename || '=' || reportedstate || '/' || goalstate, ' '
      ORDER BY nodename) FROM pgautofailover.node" 2>/dev/null) || return 1
  leader=""
  for n in $ha_nodes; do
    pgaf_autoctl_pid "$n" >/dev/null || return 1
    case " $states " in
      *" $n=primary/primary "*) [ -z "$leader" ] || return 1; leader=$n ;;
      *" $n=secondary/secondary "*) ;;
      *) return 1 ;;
    esac
  done
  [ -n "$leader" ] || return 1
  port=$(ha_var PG_PORT "$leader")
  [ "$(ha_psql "$port" -At -c "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ] || return 1
  sync=$(ha_psql "$port" -At -c "SELECT count(*) FILTER (WHERE state = 'streaming'),
      count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum'))
      FROM pg_stat_replication WHERE application_name LIKE 'pgautofailover_standby_%'" 2>/dev/null) || return 1
  [ "${sync%|*}" = 2 ] || return 1
  if [ "$HA_MODE" = strict ]; then
    [ "${sync#*|}" -ge 1 ] || return 1
    [ -n "$(ha_psql "$port" -At -c "SHOW synchronous_standby_names" 2>/dev/null)" ] || return 1
  fi
  return 0
}

# Stops everything this dir started, the cluster being thrown away: SIGCONT
# (a paused node), SIGKILL every pg_autoctl (so none restarts its
# PostgreSQL), immediate shutdown of every PostgreSQL, then the proxies.
ha_teardown() {
  local n pid
  # The monitor's record of every state change, for the logs.
  pgaf_monitor_sql "SELECT eventtime, nodename, reportedstate, goalstate, description
    FROM pgautofailover.event ORDER BY eventid" >"$dir/monitor/events.txt" 2>&1 || true
  for n in $ha_nodes monitor; do
    for pid in $(ha_pg_pids "$n"); do kill -CONT "$pid" 2>/dev/null || true; done
    for pid in $(pgaf_autoctl_pids "$n"); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for n in $ha_nodes monitor; do ha_pg_stop_now "$n"; done
  ha_stop_proxies
  true
}

ha_mode_text() {
  case "$HA_MODE" in
    strict) echo "number_sync_standbys 1, replication quorum, synchronous_commit on" ;;
    async) echo "number_sync_standbys 0, synchronous_commit local" ;;
  esac
}

# The settings every data node gets (n1's postgresql.conf, which the
# standbys' pg_basebackup copies). pg_autoctl includes its own settings file
# at the top of postgresql.conf, so these lines override it.
pgaf_node_settings() {
  local commit=on
  [ "$HA_MODE" = async ] && commit=local  # the control: commits do not wait for a standby
  cat <<CONF
# simba HA suite (test/ha/pgaf_cluster.sh)
synchronous_commit = $commit
track_commit_timestamp = on      # the checker orders commits by it
wal_log_hints = on               # pg_rewind of a demoted primary
fsync = on
wal_sender_timeout = 5s
wal_receiver_timeout = 5s
unix_socket_directories = '$dir'
log_min_messages = warning
CONF
}

# Brings the cluster up in $dir (run.sh wrote the common part of $dir/env)
# and waits until it is healthy; sets $leader and $describe. Exits on failure
# (run.sh's trap tears down; keep=1 keeps the logs).
#
# Timing: the monitor's health checks every 1 s (1 s connect timeout, 2
# retries 0.5 s apart), a node that has not reported for 5 s and fails them
# is unhealthy (defaults: 5 s checks, 20 s), and a failover waits at most
# 10 s for the old primary to demote itself (primary_demote_timeout, 30 s by
# default), which stays above the keepers' network_partition_timeout (5 s,
# 20 s by default: a primary that reaches neither the monitor nor a standby
# for that long stops itself).
ha_up() {
  local n
  pick_port MONITOR_PORT
  for n in $ha_nodes; do pick_port "PG_PORT_$n"; done
  {
    echo "MONITOR_PORT=$MONITOR_PORT HA_PARTITION_S=5 HA_DEMOTE_S=10 HA_UNHEALTHY_S=5"
    for n in $ha_nodes; do echo "PG_PORT_$n=$(ha_var PG_PORT "$n")"; done
  } >>"$dir/env"
  ha_load_env
  for n in $ha_nodes; do
    ha_start_proxy "pg-$n" "$(ha_var PG_PORT "$n")"
    echo "CLIENT_PORT_$n=$proxy_listen CLIENT_CTL_$n=$proxy_control" >>"$dir/env"
  done
  ha_load_env
  mkdir -p "$dir/monitor" "$dir/xdg/run"
  chmod 700 "$dir/xdg/run"
  [ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir/monitor" "$dir/xdg" "$dir"/n?

  pgaf create monitor --pgdata "$dir/monitor/data" --pgport "$MONITOR_PORT" --pgctl "$PG_BIN/pg_ctl" \
    --hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl >"$dir/monitor/create.log" 2>&1 ||
    { keep=1; tail -n 20 "$dir/monitor/create.log" >&2; echo "ha: pg_autoctl create monitor failed" >&2; exit 1; }
  ha_as_pg tee -a "$dir/monitor/data/postgresql.conf" >/dev/null <<CONF
unix_socket_directories = '$dir'
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 2
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = $((HA_UNHEALTHY_S * 1000))
pgautofailover.primary_demote_timeout = $((HA_DEMOTE_S * 1000))
CONF
  pgaf_start monitor
  local end=$((SECONDS + 30))
  until pgaf_monitor_sql "SELECT 1" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || { keep=1; tail -n 20 "$dir/monitor/autoctl.log" >&2; echo "ha: the monitor did not start" >&2; exit 1; }
    sleep 0.2
  done

  # n1 from our own initdb (so the standbys copy its settings), then n2, n3
  # by pg_basebackup from it once it runs.
  ha_as_pg "$PG_BIN/initdb" -D "$dir/n1/data" -U postgres --auth trust -E UTF8 --locale C >"$dir/n1/initdb.log" 2>&1
  pgaf_node_settings | ha_as_pg tee -a "$dir/n1/data/postgresql.conf" >/dev/null
  for n in $ha_nodes; do
    pgaf_create_node "$n"
    pgaf_start "$n"
    if [ "$n" = n1 ]; then
      end=$((SECONDS + 60))
      until [ "$(pgaf_state n1)" = "single single" ]; do
        [ $SECONDS -lt $end ] || { keep=1; ha_log_tails 20; echo "ha: n1 did not become primary" >&2; exit 1; }
        sleep 0.2
      done
    fi
  done
  # Commits wait for one standby of the two (the default for two standbys;
  # set anyway: what this suite tests). The control: none. (SQL: pg_autoctl
  # 2.0's `set formation number-sync-standbys` rejects every value.)
  # The monitor refuses while the primary is still changing state
  # (wait_primary): retried until it takes, 60 s at most.
  end=$((SECONDS + 60))
  until pgaf_monitor_sql "SELECT pgautofailover.set_formation_number_sync_standbys('default',
      $([ "$HA_MODE" = async ] && echo 0 || echo 1))" >/dev/null 2>"$dir/sync-standbys.err"; do
    [ $SECONDS -lt $end ] || { keep=1; cat "$dir/sync-standbys.err" >&2; echo "ha: number_sync_standbys not set" >&2; exit 1; }
    sleep 0.5
  done
  ha_up_healthy
  describe="monitor 127.0.0.1:$MONITOR_PORT; unhealthy after ${HA_UNHEALTHY_S} s, primary_demote_timeout ${HA_DEMOTE_S} s"
}

pgaf_create_node() { # node
  local n=$1
  pgaf create postgres --pgdata "$dir/$n/data" --pgport "$(ha_var PG_PORT "$n")" --pgctl "$PG_BIN/pg_ctl" \
    --pghost 127.0.0.1 --hostname 127.0.0.1 --listen 127.0.0.1 --name "$n" --monitor "$(pgaf_monitor_url)" \
    --auth trust --no-ssl --replication-quorum true --candidate-priority 50 >"$dir/$n/create.log" 2>&1 ||
    { keep=1; tail -n 20 "$dir/$n/create.log" >&2; echo "ha: pg_autoctl create postgres $n failed" >&2; exit 1; }
  # The keeper's side of the timing above (before its first `run`).
  pgaf config set --pgdata "$dir/$n/data" timeout.network_partition_timeout "$HA_PARTITION_S" >/dev/null
}

ha_log_tails() { # lines
  local n
  pgaf show state --pgdata "$dir/monitor/data" 2>&1 || true
  for n in $ha_nodes; do echo "--- $n pg_autoctl log (tail)"; tail -n "$1" "$dir/$n/autoctl.log" || true; done
  echo "--- monitor pg_autoctl log (tail)"; tail -n "$1" "$dir/monitor/autoctl.log" || true
  # For a node that pg_autoctl cannot start again: whose PID its lock file
  # names and whether that process is still there, what its server logged
  # last, and what runs of PostgreSQL and pg_autoctl.
  local pid log
  for n in $ha_nodes; do
    pid=$(head -n 1 "$dir/$n/data/postmaster.pid" 2>/dev/null || true)
    echo "--- $n postmaster.pid: ${pid:-none} ($( [ -n "$pid" ] && ps -o stat=,etimes=,args= -p "$pid" 2>/dev/null || echo 'no such process'))"
    log=$(ls -t "$dir/$n/data/log" 2>/dev/null | head -n 1 || true)
    if [ -n "$log" ]; then tail -n 3 "$dir/$n/data/log/$log" || true; fi
  done
  echo "--- processes"; ps -eo pid,ppid,stat,etimes,args | grep -E '[p]ostgres|[p]g_autoctl' | head -n 80 || true
}
