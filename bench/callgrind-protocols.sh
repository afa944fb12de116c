#!/usr/bin/env bash
# Backend instructions per operation of any benchmark-1 variant, over the
# real wire protocol (unlike bench/callgrind.sh, which runs EXECUTEs in a
# single-user backend): the postmaster runs under callgrind, so every backend
# it forks writes its own profile; bench_throughput --ops N1, then --ops N2,
# one client, and (Ir(N2) - Ir(N1)) / (N2 - N1) cancels connection set-up.
# Not part of `make bench`; needs valgrind and the installed extension, and
# the benchmark programs built by `make bench` (or bench/run.sh).
#
#   bench/callgrind-protocols.sh simba/pair jdbc/pair simba/renew jdbc/renew ...
#   bench/callgrind-protocols.sh simba/pair portable/pair shedlock/pair simba/renew portable/renew shedlock/renew
#   (portable/...: the portable edition, installed from build/portable by make portable)
#   N1=200 N2=1200 (defaults)
#   SETUP_SQL='...' runs after CREATE EXTENSION, to price one part of a pair
#   (e.g. 'ALTER TABLE simba_mutex DISABLE TRIGGER USER': the history triggers)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- simba/pair jdbc/pair floor/pair simba/renew jdbc/renew
command -v valgrind >/dev/null || { echo "$0: install valgrind (apt-get install valgrind)" >&2; exit 1; }
bench=$PWD/build/bench-results/cmake/bench/bench_throughput
[ -x "$bench" ] || { echo "$0: build the benchmarks first (make bench)" >&2; exit 1; }
bin=$("${PG_CONFIG:-pg_config}" --bindir)
out=$PWD/build/bench-results/callgrind
mkdir -p "$out"
dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-cgp.XXXXXX")
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = 5432
fsync = off
autovacuum = off
max_connections = 20
CONF
as_pg valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" "$bin/postgres" -D "$dir/data" \
  >"$dir/server.log" 2>&1 &
vpid=$!
stop() {
  as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  wait "$vpid" 2>/dev/null || true
  rm -rf "$dir"
}
trap stop EXIT
export PGHOST=$dir PGPORT=5432 PGUSER=postgres PGDATABASE=postgres
for _ in $(seq 240); do pg_isready -q && break; sleep 0.5; done
psql -qc 'CREATE EXTENSION simba'
[ -z "${SETUP_SQL:-}" ] || psql -qc "$SETUP_SQL"

N1=${N1:-200} N2=${N2:-1200}
ir_of() { callgrind_annotate "$1" 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d , ; }
for v in "$@"; do
  declare -A ir=()
  portable=()
  [[ $v != portable/* ]] || portable=(--portable "$PWD/build/portable/simba_portable.sql")
  for n in $N1 $N2; do
    pid=$("$bench" --ops "$n" --rounds 1 --clients 1 --only "$v" "${portable[@]}" 2>&1 >/dev/null |
      sed -n 's/^client backend pid \([0-9]*\)$/\1/p' | tail -1)
    [ -n "$pid" ] || { echo "$0: no client backend for $v" >&2; exit 1; }
    # Its profile is written as it exits.
    for _ in $(seq 600); do [ ! -d "/proc/$pid" ] && [ -s "$dir/cg.$pid" ] && break; sleep 0.1; done
    ir[$n]=$(ir_of "$dir/cg.$pid")
    cp "$dir/cg.$pid" "$out/protocol.${v/\//_}.$n"
  done
  awk -v v="$v" -v a="${ir[$N1]}" -v b="${ir[$N2]}" -v n1="$N1" -v n2="$N2" \
    'BEGIN { printf "%-22s %10.0f instructions/op\n", v, (b - a) / (n2 - n1) }'
done
