# Sourced by test/with-cluster.sh and test/ha/common.sh (bash only: no python
# on a bare machine).
#
# pick_port VAR: sets VAR to a loopback port nothing listens on and not
# picked before in this shell, below the kernel's ephemeral range: a server
# restarted by a test binds its port again, and a client connection's local
# port from that range could hold it meanwhile ("could not bind ... Address
# already in use", seen in CI).
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
picked_ports=" "
pick_port() {
  local p low
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  [ "$low" -gt 21000 ] || { echo "pick_port: ephemeral ports start at $low, no room below" >&2; return 1; }
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % (low - 20000)))
    case "$picked_ports" in *" $p "*) continue ;; esac
    if port_free "$p"; then picked_ports+="$p "; printf -v "$1" %s "$p"; return; fi
  done
  echo "pick_port: no free port" >&2; return 1
}
