#!/usr/bin/env bash
# Runs COMMAND against a throwaway PostgreSQL cluster, then stops and removes it.
#
#   test/with-cluster.sh COMMAND [ARGS...]
#
# The cluster lives in a fresh temp dir, listens on a unix socket there only
# (no TCP port to collide with), trusts local connections and runs as an
# unprivileged user: postgres when started by root, since PostgreSQL refuses
# to run as root. COMMAND sees PGHOST, PGPORT, PGUSER and PGDATABASE and, for
# tests that restart or signal the server, SIMBA_PGDATA and SIMBA_PG_BIN.
# The cluster is stopped on every exit path; COMMAND's exit status is ours.
# SIMBA_KEEP_CLUSTER=1 keeps the directory (logs, data) for a post-mortem.
# SIMBA_CLUSTER_TCP=1 also listens on 127.0.0.1 at a free port (exported as
# SIMBA_PG_TCP_PORT, and PGPORT becomes that number for the socket too);
# PGHOST stays the unix socket directory. Off by default.
# SIMBA_VALGRIND=1 runs the postmaster, and so every backend it forks, under
# valgrind memcheck (test/valgrind/run.sh); logs go to $SIMBA_VALGRIND_LOGS.
# SIMBA_VALGRIND_ORIGINS=no leaves out --track-origins (where an undefined
# value came from): the same findings, about a third less CPU (make test).
# SIMBA_PG_PRELOAD=/path/lib.so starts the server with LD_PRELOAD=that library
# and SIMBA_CLOCK_OFFSET_FILE passed through (test/clock: a shim that steps the
# server's wall clock). SIMBA_PG_BIN then names a directory of links to the
# server's programs whose pg_ctl is a wrapper setting the same two variables,
# so a test's pg_ctl start / restart keeps the library (pg_ctl itself runs
# under it too: it compares its clock with the postmaster's start time).
# COMMAND's own environment is left as it was. Off by default.
# A server process that dies by a signal or a PANIC fails the run, its lines of
# server.log printed.
# SIMBA_PG_CONF="name = value; ..." appends those settings to postgresql.conf
# (pg.always: simba.notify = always for every connection).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

PG_CONFIG=${PG_CONFIG:-pg_config}
bin=$("$PG_CONFIG" --bindir)
dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-pg.XXXXXX")

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"

stop_cluster() {
  as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  if [ "${SIMBA_KEEP_CLUSTER:-0}" = 1 ]; then
    echo "simba: cluster kept in $dir" >&2
  else
    rm -rf "$dir"
  fi
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM

listen=''
port=5432
if [ "${SIMBA_CLUSTER_TCP:-0}" = 1 ]; then
  listen=127.0.0.1
  . "$(dirname "${BASH_SOURCE[0]}")/free-port.sh"
  pick_port port
fi

as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C \
  --no-instructions >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
cat >>"$dir/data/postgresql.conf" <<CONF
# throwaway test cluster: durability traded for speed, room for many clients
listen_addresses = '$listen'
unix_socket_directories = '$dir'
port = $port
fsync = off
synchronous_commit = on
max_connections = 300
shared_preload_libraries = 'pg_stat_statements'
log_min_messages = warning
CONF
if [ -n "${SIMBA_PG_CONF:-}" ]; then tr ';' '\n' <<<"$SIMBA_PG_CONF" >>"$dir/data/postgresql.conf"; fi
start_opts=(-t 60)
if [ "${SIMBA_VALGRIND:-0}" = 1 ]; then
  : "${SIMBA_VALGRIND_LOGS:?set SIMBA_VALGRIND_LOGS to a directory the postgres user can write}"
  cat >"$dir/postgres-valgrind" <<WRAP
#!/bin/sh
exec valgrind --quiet --error-exitcode=0 --leak-check=no --track-origins=${SIMBA_VALGRIND_ORIGINS:-yes} --num-callers=30 \\
  --suppressions=$(cd "$(dirname "$0")" && pwd)/valgrind/postgres.supp \\
  --log-file=$SIMBA_VALGRIND_LOGS/valgrind.%p.log "$bin/postgres" "\$@"
WRAP
  chmod 755 "$dir/postgres-valgrind"
  start_opts=(-t 300 -p "$dir/postgres-valgrind")
fi
pg_bin=$bin
if [ -n "${SIMBA_PG_PRELOAD:-}" ]; then
  pg_bin=$dir/bin
  mkdir "$pg_bin"
  ln -s "$bin"/* "$pg_bin/"
  rm "$pg_bin/pg_ctl"
  printf '#!/usr/bin/env bash\nLD_PRELOAD=%q SIMBA_CLOCK_OFFSET_FILE=%q exec %q "$@"\n' \
    "$SIMBA_PG_PRELOAD" "${SIMBA_CLOCK_OFFSET_FILE:-}" "$bin/pg_ctl" >"$pg_bin/pg_ctl"
  chmod 755 "$pg_bin/pg_ctl"
fi
if ! as_pg "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w "${start_opts[@]}" start >/dev/null; then
  cat "$dir/server.log" >&2
  exit 1
fi

export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
if [ -n "$listen" ]; then export SIMBA_PG_TCP_PORT=$port; fi
export SIMBA_PGDATA=$dir/data SIMBA_PG_BIN=$pg_bin
set +e
"$@"
rc=$?
set -e
# A server process that died by a signal restarts the whole server and cuts
# every connection: whatever failed after it, name the cause first.
if grep -qE 'was terminated by signal|PANIC:' "$dir/server.log"; then
  echo "with-cluster: a server process crashed (server.log):" >&2
  grep -B6 -E 'was terminated by signal|PANIC:' "$dir/server.log" | head -n 60 >&2
  [ $rc -ne 0 ] || rc=1
fi
exit $rc
