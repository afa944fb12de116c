#!/usr/bin/env bash
# Instruction counts of the acquire + release path, free of machine noise:
# one PostgreSQL backend in single-user mode under valgrind --tool=callgrind
# runs N pairs of prepared EXECUTEs (the statements of benchmark 1) for
#   floor            the bare conditional UPDATE ... RETURNING + release UPDATE
#                    on a copy of simba_mutex without triggers
#   simba            simba_acquire + simba_release as installed (the history
#                    triggers fire; the C function returns at once for renewals
#                    and while simba.history is off)
#   simba_session    the same under a session (the waiter's below)
#   simba_notrigger  simba's, with simba_mutex's triggers disabled
#   portable         the portable edition's simba_acquire + simba_release
#                    (make portable's script, in schema simba_portable)
# and prints instructions per pair and the ratio to the floor; then a
# waiter's losing attempts (simba_acquire on mutexes another holder holds
# live, each in a transaction of its own) for
#   lose_session     holder and waiter each under a session of their own
#   lose_lease       holder and waiter each with leases of their own
#   lose_all_session a multi-lock's poll (simba_acquire_all) of two mutexes
#                    the holder holds, each under a session
#   lose_portable, lose_portable_session  the portable edition's, with
#                    leases of their own and under sessions
# and prints instructions and WAL bytes per attempt. Not part of `make
# bench` (about 3 minutes); needs valgrind and the installed extension.
#
#   bench/callgrind.sh [PAIRS]        (default 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-2000}
command -v valgrind >/dev/null || { echo "bench/callgrind.sh: install valgrind (apt-get install valgrind)" >&2; exit 1; }
PG_CONFIG=${PG_CONFIG:-pg_config}
bin=$("$PG_CONFIG" --bindir)
out=$PWD/build/bench-results/callgrind
mkdir -p "$out"
dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-cg.XXXXXX")
trap 'rm -rf "$dir"' EXIT
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
single() { as_pg "$bin/postgres" --single -c fsync=off -D "$dir/data" postgres; }
sql() { echo "$1" | single >/dev/null 2>"$dir/err" || { cat "$dir/err" >&2; exit 1; }; }

sql "CREATE EXTENSION simba"
# The portable edition's script needs psql: a server started for it alone.
make -s portable
as_pg "$bin/pg_ctl" -D "$dir/data" -o "-k $dir -c listen_addresses=" -w start >/dev/null
as_pg psql -Xq -h "$dir" -d postgres -v ON_ERROR_STOP=1 -v schema=simba_portable -f - \
  < build/portable/simba_portable.sql >/dev/null
as_pg "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null
sql "SELECT count(simba_portable.simba_release('bm' || i, 'setup')) FROM generate_series(0, 999) i, LATERAL simba_portable.simba_acquire('bm' || i, 'setup') o"
sql "CREATE TABLE bench_floor (LIKE simba_mutex INCLUDING ALL) WITH (fillfactor = 50)"
sql "INSERT INTO bench_floor (mutex) SELECT 'bm' || i FROM generate_series(0, 999) i"
sql "SELECT count(simba_release('bm' || i, 'setup')) FROM generate_series(0, 999) i, LATERAL simba_acquire('bm' || i, 'setup') o"

workload() { # header-file -> workload on stdout: N random pairs, the same for every variant
  cat "$1"
  awk -v n="$pairs" 'BEGIN { srand(1); for (i = 0; i < n; i++) { m = int(rand() * 1000);
    printf "EXECUTE acq('"'"'bm%d'"'"', '"'"'c1'"'"', '"'"'10 s'"'"', '"'"'6 s'"'"');\nEXECUTE rel('"'"'bm%d'"'"', '"'"'c1'"'"');\n", m, m } }'
}
cat > "$dir/simba.h.sql" <<'SQL'
PREPARE acq(text, text, interval, interval) AS SELECT o.owner_id FROM simba_acquire($1, $2, $3, $4) AS o;
PREPARE rel(text, text) AS SELECT simba_release($1, $2);
SQL
cat > "$dir/floor.h.sql" <<'SQL'
PREPARE acq(text, text, interval, interval) AS UPDATE bench_floor AS m SET owner_id = $2, acquired_at = c.t, ttl_at = c.t + $3::interval, transition_at = c.t + $3::interval + $4::interval, version = m.version + 1, fence = m.fence + CASE WHEN m.owner_id = $2 AND m.transition_at > c.t THEN 0 ELSE 1 END FROM (SELECT pg_catalog.clock_timestamp() AS t) AS c WHERE m.mutex = $1 AND (m.owner_id IS NULL OR m.owner_id = $2 OR m.transition_at <= c.t) RETURNING m.owner_id, m.mutex, m.acquired_at, m.ttl_at, m.transition_at, m.version, m.fence, c.t;
PREPARE rel(text, text) AS WITH u AS (UPDATE bench_floor AS m SET owner_id = NULL, acquired_at = NULL, ttl_at = NULL, transition_at = NULL, version = m.version + 1 WHERE m.mutex = $1 AND m.owner_id = $2 AND m.transition_at > pg_catalog.clock_timestamp() RETURNING m.mutex) SELECT pg_catalog.pg_notify('simba_floor', u.mutex) FROM u;
SQL
workload "$dir/simba.h.sql" > "$dir/simba.sql"
sed 's/simba_\(acquire\|release\)(/simba_portable.simba_\1(/' "$dir/simba.h.sql" > "$dir/portable.h.sql"
workload "$dir/portable.h.sql" > "$dir/portable.sql"
workload "$dir/floor.h.sql" > "$dir/floor.sql"

measure() { # name workload -> instructions
  as_pg valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$bin/postgres" --single -c fsync=off \
    -D "$dir/data" postgres < "$2" > "$dir/$1.log" 2>&1
  cp "$dir/cg.out" "$out/callgrind.$1.out"
  sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$dir/$1.log" | tr -d ,
}
# The waiter's losing attempts: 'holder' holds lm0..999 under one session
# and ll0..999 with its own leases; the waiter polls them under another.
# (one line each: the single-user backend ends a statement at a newline)
sql "CREATE TABLE bench_session AS SELECT 'holder' AS who, (simba_session_open('24 h', '0 s')).session_id AS sid UNION ALL SELECT 'waiter', (simba_session_open('24 h', '0 s')).session_id"
sql "SELECT count(o.owner_id) FROM generate_series(0, 999) i, bench_session s, LATERAL simba_acquire('lm' || i, 'holder', session_id => s.sid) o WHERE s.who = 'holder'"
sql "SELECT count(o.owner_id) FROM generate_series(0, 999) i, LATERAL simba_acquire('ll' || i, 'holder', '24 h', '0 s') o"
sql "CREATE TABLE bench_portable_session AS SELECT 'holder' AS who, (simba_portable.simba_session_open('24 h', '0 s')).session_id AS sid UNION ALL SELECT 'waiter', (simba_portable.simba_session_open('24 h', '0 s')).session_id"
sql "SELECT count(o.owner_id) FROM generate_series(0, 999) i, bench_portable_session s, LATERAL simba_portable.simba_acquire('lm' || i, 'holder', session_id => s.sid) o WHERE s.who = 'holder'"
sql "SELECT count(o.owner_id) FROM generate_series(0, 999) i, LATERAL simba_portable.simba_acquire('ll' || i, 'holder', '24 h', '0 s') o"
portable_waiter_sid=$(echo "SELECT sid FROM bench_portable_session WHERE who = 'waiter'" | single 2>/dev/null | sed -n 's/.*sid = "\([^"]*\)".*/\1/p')
waiter_sid=$(echo "SELECT sid FROM bench_session WHERE who = 'waiter'" | single 2>/dev/null | sed -n 's/.*sid = "\([^"]*\)".*/\1/p')
[ -n "$waiter_sid" ] || { echo "bench/callgrind.sh: no waiter session" >&2; exit 1; }
losing() { # prefix session-argument -> N losing attempts
  echo "PREPARE lose(text) AS SELECT o.owner_id FROM simba_acquire(\$1, 'waiter', '10 s', '6 s', $2) AS o;"
  awk -v n="$pairs" -v p="$1" 'BEGIN { srand(2); for (i = 0; i < n; i++)
    printf "EXECUTE lose('"'"'%s%d'"'"');\n", p, int(rand() * 1000) }'
}
losing lm "'$waiter_sid'::uuid" > "$dir/lose_session.sql"
losing ll NULL > "$dir/lose_lease.sql"
losing ll NULL | sed 's/simba_acquire(/simba_portable.simba_acquire(/' > "$dir/lose_portable.sql"
losing lm "'$portable_waiter_sid'::uuid" | sed 's/simba_acquire(/simba_portable.simba_acquire(/' > "$dir/lose_portable_session.sql"
{ echo "PREPARE lose(text, text) AS SELECT count(o.owner_id) FROM simba_acquire_all(ARRAY[\$1, \$2], 'waiter', '10 s', '6 s', '$waiter_sid'::uuid) AS o;"
  awk -v n="$pairs" 'BEGIN { srand(2); for (i = 0; i < n; i++) { m = int(rand() * 999)
    printf "EXECUTE lose('"'"'lm%d'"'"', '"'"'lm%d'"'"');\n", m, m + 1 } }'; } > "$dir/lose_all_session.sql"
wal_lsn() { echo "SELECT pg_current_wal_lsn()::text AS lsn" | single 2>/dev/null | sed -n 's/.*lsn = "\([^"]*\)".*/\1/p'; }

declare -A ir wal
for v in lose_session lose_lease lose_all_session lose_portable lose_portable_session; do
  before=$(wal_lsn)
  ir[$v]=$(measure "$v" "$dir/$v.sql")
  wal[$v]=$(echo "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$before')::int8 AS bytes" | single 2>/dev/null |
    sed -n 's/.*bytes = "\([0-9]*\)".*/\1/p')
done
ir[floor]=$(measure floor "$dir/floor.sql")
ir[simba]=$(measure simba "$dir/simba.sql")
ir[portable]=$(measure portable "$dir/portable.sql")
{ sed "s/simba_acquire(\$1, \$2, \$3, \$4)/simba_acquire(\$1, \$2, \$3, \$4, '$waiter_sid'::uuid)/" "$dir/simba.h.sql"
  workload /dev/null; } > "$dir/simba_session.sql"
ir[simba_session]=$(measure simba_session "$dir/simba_session.sql")
sql "ALTER TABLE simba_mutex DISABLE TRIGGER USER"
ir[simba_notrigger]=$(measure simba_notrigger "$dir/simba.sql")

printf '\nInstruction counts (callgrind, single-user backend, %d acquire+release pairs incl. per-statement overhead)\n' "$pairs"
printf '%-16s  %14s  %14s  %9s\n' variant instructions per-pair /floor
printf '%s\n' "-------------------------------------------------------------"
for v in floor simba simba_session simba_notrigger portable; do
  [ -n "${ir[$v]:-}" ] || continue
  awk -v v="$v" -v i="${ir[$v]}" -v f="${ir[floor]}" -v n="$pairs" \
    'BEGIN { printf "%-16s  %14d  %14d  %9.2f\n", v, i, i / n, i / f }'
done
printf '\nLosing attempts of a waiter (%d, each its own transaction; per attempt, incl. per-statement overhead)\n' "$pairs"
printf '%-16s  %14s  %9s\n' variant instructions "WAL bytes"
printf '%s\n' "-----------------------------------------"
for v in lose_session lose_lease lose_all_session lose_portable lose_portable_session; do
  awk -v v="$v" -v i="${ir[$v]}" -v w="${wal[$v]}" -v n="$pairs" 'BEGIN { printf "%-16s  %14d  %9.1f\n", v, i / n, w / n }'
done
echo "callgrind outputs: $out/callgrind.*.out (callgrind_annotate --inclusive=yes FILE)"
