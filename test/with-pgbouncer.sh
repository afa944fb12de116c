#!/usr/bin/env bash
# Runs COMMAND with a PgBouncer in transaction pooling mode in front of the
# server in libpq's environment (normally test/with-cluster.sh's), then stops it.
#
#   test/with-cluster.sh test/with-pgbouncer.sh COMMAND [ARGS...]
#
# PgBouncer listens on a unix socket in a fresh temp dir only, trusts local
# clients and runs as the unprivileged postgres user when started by root
# (it refuses to run as root). COMMAND sees SIMBA_POOLER_DSN, a libpq
# connection string to the pooler; PG* still point at the server itself.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
: "${PGHOST:?run inside test/with-cluster.sh or set PGHOST}"
command -v pgbouncer >/dev/null || PATH=$PATH:/usr/sbin
command -v pgbouncer >/dev/null || { echo "with-pgbouncer: pgbouncer is not installed" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-pgbouncer.XXXXXX")
as_pooler() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
port=6432
user=${PGUSER:-$(id -un)}
cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$PGHOST port=${PGPORT:-5432}

[pgbouncer]
listen_addr =
listen_port = $port
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
admin_users = $user
# any role of the server may connect (as with trust on the server itself)
auth_user = $user
max_client_conn = 1000
default_pool_size = 20
; after a failed server login (the server restarting) PgBouncer refuses
; clients this long (15 s by default): longer than the tests' leases
server_login_retry = 1
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
printf '"%s" ""\n' "$user" >"$dir/userlist.txt"
[ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir"

stop_pooler() {
  if [ -s "$dir/pgbouncer.pid" ]; then
    kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
    for _ in $(seq 50); do [ -e "$dir/pgbouncer.pid" ] || break; sleep 0.1; done
  fi
  rm -rf "$dir"
}
trap stop_pooler EXIT
trap 'exit 130' INT TERM

as_pooler pgbouncer -d "$dir/pgbouncer.ini"
for _ in $(seq 100); do
  [ -S "$dir/.s.PGSQL.$port" ] && break
  sleep 0.05   # polling for the socket to appear: pgbouncer offers no readiness signal
done
[ -S "$dir/.s.PGSQL.$port" ] || { cat "$dir/pgbouncer.log" >&2; exit 1; }

export SIMBA_POOLER_DSN="host=$dir port=$port"
set +e
"$@"
rc=$?
set -e
exit $rc
