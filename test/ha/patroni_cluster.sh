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

ha_nodes="n1 n2 n3"
ha_scope=simba-ha

ha_as_pg() {
  if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else "$@"; fi
}

# Starts CMD in the background as the unprivileged user, output appended to
# LOG, and writes its pid (the process itself, not a subshell's) to PIDFILE.
ha_spawn() { # pidfile log cmd...
  local pidfile=$1 log=$2; shift 2
  if [ "$(id -u)" -eq 0 ]; then
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$@" >>"$log" 2>&1 </dev/null &
  else
    "$@" >>"$log" 2>&1 </dev/null &
  fi
  echo $! >"$pidfile"
  disown  # ours to stop (ha_teardown), not the shell's to report
}

ha_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# ha_pick_port VAR: sets VAR to a free loopback port not picked before, below
# the ephemeral range: a restarted Patroni or PostgreSQL binds its port again,
# and a client connection's local port from that range could hold it.
ha_picked=" "
ha_pick_port() {
  local p low
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  [ "$low" -gt 21000 ] || { echo "ha: ephemeral ports start at $low, no room below" >&2; return 1; }
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % (low - 20000)))
    case "$ha_picked" in *" $p "*) continue ;; esac
    if ha_port_free "$p"; then ha_picked+="$p "; printf -v "$1" %s "$p"; return; fi
  done
  echo "ha: no free port" >&2; return 1
}

ha_load_env() { . "$dir/env"; }

# Starts a fault proxy in the background; sets $proxy_listen $proxy_control.
ha_start_proxy() { # name target-port
  local name=$1 target=$2 out="$dir/proxy-$1.out"
  "$ha_proxy_bin" --target-port "$target" >"$out" 2>&1 </dev/null &
  echo $! >"$dir/proxy-$name.pid"
  for _ in $(seq 1 100); do
    if read -r word proxy_listen proxy_control 2>/dev/null <"$out" && [ "$word" = ready ]; then return 0; fi
    sleep 0.05
  done
  echo "ha: proxy $name did not start" >&2; cat "$out" >&2; return 1
}

# One line to a proxy's control port; fails unless it answers "ok".
ha_proxy_cmd() { # control-port command...
  local port=$1 reply; shift
  exec 5<>"/dev/tcp/127.0.0.1/$port" || return 1
  echo "$*" >&5
  read -r -t 5 reply <&5 || reply="(no answer)"
  exec 5<&- 5>&-
  [ "$reply" = ok ] || { echo "ha: proxy $port: $* -> $reply" >&2; return 1; }
}

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

# The live pid in FILE if its command line contains WHAT (pids get reused).
ha_pid_if() { # file what
  local pid
  pid=$(head -n 1 "$1" 2>/dev/null || true)
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2" &&
    echo "$pid"
}

ha_patroni_pid() { ha_pid_if "$dir/$1/patroni.pid" "$dir/$1.yml"; }
ha_postmaster_pid() { ha_pid_if "$dir/$1/data/postmaster.pid" "$dir/$1/data"; }
ha_etcd_pid() { ha_pid_if "$dir/etcd.pid" "$dir/etcd"; }

# Every process of a node's PostgreSQL: the postmaster and its children.
ha_pg_pids() { # node
  local pm
  pm=$(ha_postmaster_pid "$1") || return 0
  echo "$pm"
  ps -o pid= --ppid "$pm" 2>/dev/null || true
}

ha_psql() { # port args... (direct to a node, bypassing the proxies)
  local port=$1; shift
  PGCONNECT_TIMEOUT=2 psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"
}

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

# Polls ha_healthy until DEADLINE_S seconds; sets $leader and $healthy_s.
ha_wait_healthy() { # seconds
  local start=$SECONDS
  while ! ha_healthy; do
    if [ $((SECONDS - start)) -ge "$1" ]; then return 1; fi
    sleep 0.2
  done
  healthy_s=$((SECONDS - start))
}

# ha_var NAME NODE -> value of NAME_NODE from the env file.
ha_var() { local v="$1_$2"; echo "${!v}"; }

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
  local n pid f
  for n in $ha_nodes; do
    for pid in $(ha_pg_pids "$n"); do kill -CONT "$pid" 2>/dev/null || true; done
    pid=$(ha_patroni_pid "$n") && kill -KILL "$pid" 2>/dev/null || true
  done
  for n in $ha_nodes; do
    if ha_postmaster_pid "$n" >/dev/null; then
      ha_as_pg "$PG_BIN/pg_ctl" -D "$dir/$n/data" -m immediate -w -t 20 stop >/dev/null 2>&1 || true
    fi
    for pid in $(ha_pg_pids "$n"); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  pid=$(ha_etcd_pid) && { kill -CONT "$pid"; kill -TERM "$pid"; } 2>/dev/null || true
  for f in "$dir"/proxy-*.pid; do
    [ -e "$f" ] || continue
    pid=$(ha_pid_if "$f" simba_fault_proxy) && kill -TERM "$pid" 2>/dev/null || true
  done
  pid=$(ha_etcd_pid) && { sleep 0.5; kill -KILL "$pid" 2>/dev/null || true; }
  true
}
