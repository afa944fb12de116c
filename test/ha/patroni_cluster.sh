# simba HA suite: the Patroni cluster on loopback, sourced by run.sh (which
# brings it up and tears it down) and faults.sh (which breaks it).
#
# One etcd, three PostgreSQL 15 nodes n1..n3 each run by Patroni, every
# process as the unprivileged user (postgres when we are root), data and logs
# in $dir. Ports: etcd, each node's PostgreSQL and REST API are free loopback
# ports picked here; in front of them, simba_fault_proxy instances (their
# own ports): one per node for the clients, one per node between its Patroni
# and etcd. Everything the fault script needs is in $dir/env.
#
# Functions expect: $dir, and after ha_load_env, the variables of $dir/env.

here=${here:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
. "$here/common.sh"
ha_scope=simba-ha
ha_label="HA Patroni"
ha_fault_script=$here/faults.sh
ha_default_kinds=pg-kill,patroni-kill,switchover,pg-restart,client-partition,client-blackhole,etcd-partition,pause,etcd-restart,stall-kill
ha_modes="strict sync async"
ha_bound_ms=20000  # see ha_up
ha_extra_s=120  # past run.sh's --duration for the kinds not injected yet

ha_start_etcd() {
  ha_spawn "$dir/etcd.pid" "$dir/etcd.log" etcd --name e1 --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e1=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --heartbeat-interval 100 --election-timeout 1000 --enable-v2=true
}

ha_etcd_healthy() {
  ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$ETCD_PORT" --command-timeout=2s endpoint health >/dev/null 2>&1
}

ha_start_patroni() { # node
  local n=$1
  ha_spawn "$dir/$n/patroni.pid" "$dir/$n/patroni.log" patroni "$dir/$n.yml"
}

ha_patroni_pid() { ha_pid_if "$dir/$1/patroni.pid" "$dir/$1.yml"; }
ha_etcd_pid() { ha_pid_if "$dir/etcd.pid" "$dir/etcd"; }

# A Patroni key's value in etcd (empty if none), through the API Patroni
# uses: v2 for its `etcd:` DCS, v3 for `etcd3:`.
ha_dcs_get() { # key below /service/SCOPE/
  if [ "$HA_DCS" = etcd3 ]; then
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$ETCD_PORT" --command-timeout=2s \
      get "/service/$ha_scope/$1" --print-value-only 2>/dev/null || true
  else
    ETCDCTL_API=2 etcdctl --endpoints "http://127.0.0.1:$ETCD_PORT" --timeout 2s --total-timeout 3s \
      get "/service/$ha_scope/$1" 2>/dev/null || true
  fi
}

# The member holding Patroni's leader key in etcd (empty if none).
ha_leader_key() { ha_dcs_get leader; }

# Patroni's /sync key: {"leader":"n1","sync_standby":"n2"} (empty if none).
ha_sync_key() { ha_dcs_get sync; }

# Healthy: etcd answers, a leader key names a node whose PostgreSQL is a
# primary with both replicas streaming, and every node's Patroni runs; in
# sync mode also Patroni's /sync key names this leader and a standby that
# streams synchronously (what a switchover or failover needs). Sets $leader.
ha_healthy() {
  local n port want=2 sync key standby
  ha_etcd_healthy || return 1
  leader=$(ha_leader_key)
  [ -n "$leader" ] || return 1
  for n in $ha_nodes; do ha_patroni_pid "$n" >/dev/null || return 1; done
  port=$(ha_var PG_PORT "$leader")
  [ "$(ha_psql "$port" -At -c "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ] || return 1
  # Replicas by name: a replica's pg_basebackup streams WAL too, as "pg_basebackup".
  sync=$(ha_psql "$port" -At -c "SELECT count(*) FILTER (WHERE state = 'streaming'),
      count(*) FILTER (WHERE state = 'streaming' AND sync_state = 'sync') FROM pg_stat_replication
      WHERE application_name IN ('n1', 'n2', 'n3')" 2>/dev/null) || return 1
  [ "${sync%|*}" = "$want" ] || return 1
  if [ "$HA_MODE" != async ]; then
    key=$(ha_sync_key)
    [[ $key =~ \"leader\":\"$leader\" ]] || return 1
    [[ $key =~ \"sync_standby\":\"([a-z0-9]+)\" ]] || return 1
    standby=${BASH_REMATCH[1]}
    [ "$(ha_psql "$port" -At -c "SELECT sync_state FROM pg_stat_replication
        WHERE application_name = '$standby' AND state = 'streaming'" 2>/dev/null)" = sync ] || return 1
  fi
  return 0
}

ha_write_patroni_yml() { # node
  local n=$1 sync=true strict=false
  [ "$HA_MODE" = async ] && sync=false
  [ "$HA_MODE" = strict ] && strict=true
  mkdir -p "$dir/$n"
  cat >"$dir/$n.yml" <<YML
scope: $ha_scope
name: $n
restapi:
  listen: 127.0.0.1:$(ha_var API_PORT "$n")
  connect_address: 127.0.0.1:$(ha_var API_PORT "$n")
$HA_DCS:
  # this node's own fault proxy in front of etcd (the etcd-partition fault)
  hosts: 127.0.0.1:$(ha_var ETCD_PROXY_PORT "$n")
  use_proxies: true
bootstrap:
  dcs:
    ttl: $HA_TTL
    loop_wait: $HA_LOOP_WAIT
    retry_timeout: $HA_RETRY_TIMEOUT
    maximum_lag_on_failover: 1048576
    synchronous_mode: $sync
    synchronous_mode_strict: $strict
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        fsync: "on"
        synchronous_commit: "on"
        track_commit_timestamp: "on"
        max_connections: 100
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        wal_sender_timeout: 5s
        wal_receiver_timeout: 5s
        log_min_messages: warning
  initdb:
    - encoding: UTF8
    - locale: C
postgresql:
  listen: 127.0.0.1:$(ha_var PG_PORT "$n")
  connect_address: 127.0.0.1:$(ha_var PG_PORT "$n")
  data_dir: $dir/$n/data
  bin_dir: $PG_BIN
  pgpass: $dir/$n/pgpass
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: postgres
      password: simba
    replication:
      username: replicator
      password: simba
  parameters:
    unix_socket_directories: $dir/$n
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
YML
}

# Stops everything this dir started, the cluster being thrown away: SIGCONT
# (a paused node), SIGKILL every Patroni (so none restarts its PostgreSQL),
# immediate shutdown of every PostgreSQL, then etcd and the proxies.
ha_teardown() {
  local n pid
  for n in $ha_nodes; do
    for pid in $(ha_pg_pids "$n"); do kill -CONT "$pid" 2>/dev/null || true; done
    pid=$(ha_patroni_pid "$n") && kill -KILL "$pid" 2>/dev/null || true
  done
  for n in $ha_nodes; do ha_pg_stop_now "$n"; done
  pid=$(ha_etcd_pid) && { kill -CONT "$pid"; kill -TERM "$pid"; } 2>/dev/null || true
  ha_stop_proxies
  pid=$(ha_etcd_pid) && { sleep 0.5; kill -KILL "$pid" 2>/dev/null || true; }
  true
}

# For run.sh: what must be installed (CI installs these, test/install-deps.sh).
ha_tools="patroni patronictl etcd etcdctl"

ha_mode_text() {
  case "$HA_MODE" in
    strict) echo "synchronous_mode true, synchronous_mode_strict true" ;;
    sync) echo "synchronous_mode true, synchronous_mode_strict false" ;;
    async) echo "synchronous_mode false" ;;
  esac
}

# Brings the cluster up in $dir (run.sh wrote the common part of $dir/env)
# and waits until it is healthy; sets $leader and $describe. Exits on failure
# (run.sh's trap tears down; keep=1 keeps the logs).
#
# Patroni timing: ttl 10 s, loop_wait 2 s, retry_timeout 3 s (loop_wait +
# 2 * retry_timeout <= ttl, as Patroni requires for a leader to survive a
# DCS retry). The liveness bound (run.sh --bound-ms) is ttl + loop_wait + the
# workers' lease (1.5 s) + jitter and reconnect backoff (1 s), plus slack for
# a shared 2-core machine: see README.md.
ha_up() {
  local n
  pick_port ETCD_PORT; pick_port ETCD_PEER_PORT
  for n in $ha_nodes; do pick_port "PG_PORT_$n"; pick_port "API_PORT_$n"; done
  {
    echo "HA_DCS=$HA_DCS"
    echo "HA_TTL=10 HA_LOOP_WAIT=2 HA_RETRY_TIMEOUT=3"
    echo "ETCD_PORT=$ETCD_PORT ETCD_PEER_PORT=$ETCD_PEER_PORT"
    for n in $ha_nodes; do echo "PG_PORT_$n=$(ha_var PG_PORT "$n") API_PORT_$n=$(ha_var API_PORT "$n")"; done
  } >>"$dir/env"
  ha_load_env
  ha_start_etcd
  for _ in $(seq 1 150); do ha_etcd_healthy && break; sleep 0.2; done
  ha_etcd_healthy || { keep=1; tail -n 20 "$dir/etcd.log" >&2; echo "ha: etcd did not start" >&2; exit 1; }
  for n in $ha_nodes; do
    ha_start_proxy "etcd-$n" "$ETCD_PORT"
    echo "ETCD_PROXY_PORT_$n=$proxy_listen ETCD_PROXY_CTL_$n=$proxy_control" >>"$dir/env"
    ha_start_proxy "pg-$n" "$(ha_var PG_PORT "$n")"
    echo "CLIENT_PORT_$n=$proxy_listen CLIENT_CTL_$n=$proxy_control" >>"$dir/env"
  done
  ha_load_env
  for n in $ha_nodes; do
    ha_write_patroni_yml "$n"
    [ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir/$n" "$dir/$n.yml"
    ha_start_patroni "$n"
  done
  # patronictl talks to etcd directly, not through a node's proxy.
  printf 'scope: %s\n%s:\n  hosts: 127.0.0.1:%s\n' "$ha_scope" "$HA_DCS" "$ETCD_PORT" >"$dir/ctl.yml"
  ha_up_healthy
  describe="etcd 127.0.0.1:$ETCD_PORT; ttl $HA_TTL s, loop_wait $HA_LOOP_WAIT s"
}

ha_log_tails() { # lines
  local n
  for n in $ha_nodes; do echo "--- $n patroni log (tail)"; tail -n "$1" "$dir/$n/patroni.log" || true; done
}
