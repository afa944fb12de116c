# simba HA suite: what both cluster harnesses share (patroni_cluster.sh,
# pgaf_cluster.sh source it): running as the unprivileged user, free ports,
# the fault proxies, processes by pid file, psql to a node, the client-side
# faults.
#
# Functions expect: $dir, and after ha_load_env, the variables of $dir/env;
# the sourcing harness defines ha_healthy (for ha_wait_healthy).

ha_nodes="n1 n2 n3"

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

# pick_port VAR: a free loopback port below the ephemeral range (a restarted
# manager or PostgreSQL binds its port again).
. "$(dirname "${BASH_SOURCE[0]}")/../free-port.sh"

ha_load_env() { . "$dir/env"; }

# ha_var NAME NODE -> value of NAME_NODE from the env file.
ha_var() { local v="$1_$2"; echo "${!v}"; }

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

ha_stop_proxies() {
  local f pid
  for f in "$dir"/proxy-*.pid; do
    [ -e "$f" ] || continue
    pid=$(ha_pid_if "$f" simba_fault_proxy) && kill -TERM "$pid" 2>/dev/null || true
  done
}

# The live pid in FILE if its command line contains WHAT (pids get reused).
ha_pid_if() { # file what
  local pid
  pid=$(head -n 1 "$1" 2>/dev/null || true)
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2" &&
    echo "$pid"
}

ha_postmaster_pid() { ha_pid_if "$dir/$1/data/postmaster.pid" "$dir/$1/data"; }

# Every process of a node's PostgreSQL: each "postgres" process whose
# working directory is the node's data directory (a postmaster changes to
# it, its children inherit it). That includes a backend forked after its
# postmaster's children were listed, and one orphaned since.
ha_pg_pids() { # node (builtins only: it reads every process)
  local p comm
  for p in /proc/[0-9]*; do
    read -r comm 2>/dev/null <"$p/comm" || continue
    [ "$comm" = postgres ] && [ "$p/cwd" -ef "$dir/$1/data" ] && echo "${p#/proc/}"
  done
  true
}

# SIGKILL a node's PostgreSQL until none of the processes it had is left;
# prints how many that took. One pass is not enough: a backend forked
# between the listing and the kill outlives its postmaster, and one stuck on
# a lock a killed process held never exits. It keeps the shared memory
# attached, so PostgreSQL refuses to start there again ("pre-existing shared
# memory block is still in use": pg_auto_failover's node came back after
# 20 s, or never). The old instance's processes are those started before
# its postmaster was dead (it forks no more then), so that moment is waited
# for; a PostgreSQL its manager started again since is left alone.
ha_pg_kill_all() { # node
  local since pids p stat all pm i
  pm=$(ha_postmaster_pid "$1" || true)
  all=$(ha_pg_pids "$1" | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -z "$all" ] || kill -KILL $all 2>/dev/null || true  # one may have exited meanwhile
  # a zombie has no working directory: dead
  for i in $(seq 200); do [ -n "$pm" ] && [ "/proc/$pm/cwd" -ef "$dir/$1/data" ] || break; sleep 0.01; done
  since=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%d", $1 * hz }' /proc/uptime)
  for i in $(seq 100); do
    pids=""
    for p in $(ha_pg_pids "$1"); do
      # field 22 of stat: the start time, in clock ticks since boot
      read -r -a stat 2>/dev/null <"/proc/$p/stat" && [ "${stat[21]}" -le "$since" ] && pids="$pids $p"
    done
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    all="$all $pids"
    sleep 0.05
  done
  tr ' ' '\n' <<<"$all" | sort -u | grep -c . || true
}

ha_psql() { # port args... (direct to a node, bypassing the proxies)
  local port=$1; shift
  PGCONNECT_TIMEOUT=2 psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres "$@"
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

# The end of a manager's ha_up: healthy within 120 s, or the run fails with
# the managers' log tails (and keeps the dir).
ha_up_healthy() {
  ha_wait_healthy 120 && return 0
  keep=1
  ha_log_tails 15
  echo "ha: the cluster did not become healthy in 120 s" >&2
  exit 1
}

# Immediate shutdown of a node's PostgreSQL ($dir/NODE/data), then SIGKILL
# what is left.
ha_pg_stop_now() { # node
  local pid
  if ha_postmaster_pid "$1" >/dev/null; then
    ha_as_pg "$PG_BIN/pg_ctl" -D "$dir/$1/data" -m immediate -w -t 20 stop >/dev/null 2>&1 || true
  fi
  ha_pg_kill_all "$1" >/dev/null
}

# For the fault scripts: the time in ms, and since a time.
ha_now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
ha_since() { echo "$(( $(ha_now_ms) - $1 )) ms"; }

# The client-side faults, the same under any manager: the node's client
# fault proxy blackholes every connection for 4 s (accepts, takes bytes,
# never answers), then (client-partition) resets them, and passes again.
# Prints start/healed for the nemesis.
ha_client_cut() { # kind node
  local kind=$1 node=$2 ctl
  ctl=$(ha_var CLIENT_CTL "$node")
  echo start
  ha_proxy_cmd "$ctl" blackhole || return 1
  sleep 4  # the partition's length, not a wait for a condition
  if [ "$kind" = client-partition ]; then ha_proxy_cmd "$ctl" reset || return 1; fi
  ha_proxy_cmd "$ctl" pass || return 1
  echo "healed clients cut from $node for 4 s$([ "$kind" = client-partition ] && echo ", connections reset")"
}
