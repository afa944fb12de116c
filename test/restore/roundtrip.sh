#!/usr/bin/env bash
# Dump and restore a database that uses simba, the way operators do, and
# check nothing is lost or issued twice. Runs inside a throwaway cluster
# (test/with-cluster.sh: PGHOST etc. and SIMBA_PG_BIN set, PGUSER a
# superuser). Two round trips of the same source:
#   A  pg_dump -Fc, createdb, pg_restore -d
#   B  pg_dump -Fc -C, pg_restore -C: CREATE DATABASE and its
#      `ALTER DATABASE ... SET simba.history = on` come back first, so the
#      restore's COPY runs with history on (this once crashed the server)
# With --portable, the portable edition (portable/, `make portable`) in
# round trip A: its databases belong to a role without superuser, which
# installs the script, dumps and restores, as a managed service's admin
# would; history is on in simba_settings, which is dumped with the rest.
# Each check prints "roundtrip: <check> ... ok" or "... FAILED: <why>";
# the last line is "roundtrip: N passed, N failed".
set -euo pipefail
bin=${SIMBA_PG_BIN:-$(pg_config --bindir)}
src=simba_rt_src dst=simba_rt_dst created=simba_rt_created
app=simba_rt_app other=simba_rt_other owner=simba_rt_owner
portable=no
# the C extension's history setting in a restored database without its own
history_on=(-c "SET simba.history = on")
if [ "${1:-}" = --portable ]; then
  history_on=()  # in simba_settings, restored with the rest
  portable=yes
  make -s -C "$(dirname "$0")/../.." portable
  script=$(cd "$(dirname "$0")/../.." && pwd)/build/portable/simba_portable.sql
fi
work=$(mktemp -d)
passed=0 failed=0

q() { "$bin/psql" -X -q -v ON_ERROR_STOP=1 -At "$@"; }
check() { # name expected actual
  if [ "$2" = "$3" ]; then
    echo "roundtrip: $1 ... ok"; passed=$((passed + 1))
  else
    echo "roundtrip: $1 ... FAILED: expected [$2], got [$3]"; failed=$((failed + 1))
  fi
}
cleanup() {
  for db in $src $dst $created; do q -d postgres -c "DROP DATABASE IF EXISTS $db" 2>/dev/null || true; done
  q -d postgres -c "DROP ROLE IF EXISTS $app" -c "DROP ROLE IF EXISTS $other" -c "DROP ROLE IF EXISTS $owner" \
    2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cleanup
work=$(mktemp -d)

# --- the source: history on, every kind of state -------------------------
q -d postgres -c "CREATE ROLE $app" -c "CREATE ROLE $other"
if [ $portable = yes ]; then
  q -d postgres -c "CREATE ROLE $owner LOGIN" -c "CREATE DATABASE $src OWNER $owner"
  q -U $owner -d $src -v schema=public -f "$script" >/dev/null
  q -U $owner -d $src -c "UPDATE simba_settings SET history = true" \
    -c "SELECT simba_grant('$app'), simba_grant('$other')" >/dev/null
else
  q -d postgres -c "CREATE DATABASE $src"
  q -d postgres -c "ALTER DATABASE $src SET simba.history = on"
  q -d $src -c "CREATE EXTENSION simba" -c "SELECT simba_grant('$app'), simba_grant('$other')" >/dev/null
fi
q -d $src >/dev/null <<SQL
SET ROLE $app;
-- released
SELECT owner_id FROM simba_acquire('released', 'w1', '1h', '1h');
SELECT simba_release('released', 'w1');
-- a short lease taken over by another role: a takeover in the history
SELECT owner_id FROM simba_acquire('taken', 'w1', '50ms', '0s');
RESET ROLE;
-- wait for the lease to end by the server's clock (no fixed sleep)
DO \$\$ BEGIN
  WHILE clock_timestamp() <= (SELECT transition_at FROM simba_mutex WHERE mutex = 'taken') LOOP
    PERFORM pg_sleep(0.01);
  END LOOP;
END \$\$;
SET ROLE $other;
SELECT owner_id FROM simba_acquire('taken', 'w2', '1h', '1h');
RESET ROLE;
-- the first holder finishes late: a late release, logged once
SET ROLE $app;
SELECT simba_release('taken', 'w1'), simba_release('taken', 'w1');
-- live leases of a granted role, and live permits
SELECT o.owner_id FROM generate_series(1, 3) i, LATERAL simba_acquire('live-' || i, 'w1', '1h', '1h') o;
SELECT slot FROM simba_semaphore_acquire('pool', 'w2', 5, '1h');
-- a read-write lock: a writer that downgraded, a reader under its epoch, a writer waiting
SELECT fence FROM simba_rwlock_acquire('rw', 'w1', 'write', '1h', '1h');
SELECT fence FROM simba_rwlock_acquire('rw', 'w1', 'read', '1h', '1h');
SELECT fence FROM simba_rwlock_acquire('rw', 'w2', 'read', '1h', '1h');
SELECT position FROM simba_rwlock_acquire('rw', 'w3', 'write', '1h', '1h');
RESET ROLE;
SQL
# a rolled-back fence: issued, never committed, must not come back either
q -d $src -c "BEGIN" -c "SET ROLE $app" -c "SELECT fence FROM simba_acquire('rolled-back', 'w1')" -c "ROLLBACK" >/dev/null
token=$(q -d $src -c "SET ROLE $app" -c "SELECT token FROM simba_semaphore_acquire('pool', 'w1', 5, '1h')")
# a session of the granted role holding a mutex, a permit and a read hold
session=$(q -d $src -c "SET ROLE $app" -c "SELECT session_id FROM simba_session_open('1h', '0s')")
q -d $src -c "SET ROLE $app" -c "SELECT owner_id FROM simba_acquire('in-session', 'w1', session_id => '$session')" \
  -c "SELECT slot FROM simba_semaphore_acquire('session-pool', 'w1', 1, session_id => '$session')" \
  -c "SELECT mode FROM simba_rwlock_acquire('rw-session', 'w1', 'read', session_id => '$session')" >/dev/null

describe() { # db -> the state that must survive, one line per row
  q -d "$1" <<'SQL'
SELECT 'mutex', mutex, coalesce(owner_id, '-'), coalesce(owner_role::text, '-'), fence, version,
       coalesce(transition_at::text, '-') FROM simba_mutex ORDER BY mutex;
SELECT 'history', id, mutex, event, coalesce(owner_id, '-'), coalesce(owner_role::text, '-'), fence
  FROM simba_mutex_history ORDER BY id;
SELECT 'permit', key, slot, holder, coalesce(holder_role::text, '-'), token, fence, expires_at,
       coalesce(session_id::text, '-')
  FROM simba_semaphore_permit ORDER BY key, slot;
SELECT 'session', session_id, owner_role, ttl_at, transition_at, ttl, transition FROM simba_session_lease ORDER BY 2;
SELECT 'under-session', mutex, session_id FROM simba_mutex WHERE session_id IS NOT NULL ORDER BY mutex;
SELECT 'rwlock', rwlock, write_fence, version FROM simba_rwlock ORDER BY rwlock;
SELECT 'rwlock-holder', rwlock, owner_id, owner_role, mode, fence, acquired_at, transition_at,
       coalesce(session_id::text, '-')
  FROM simba_rwlock_holder ORDER BY rwlock, owner_id;
SQL
}
# the collector's state (when it last ran): not dumped, a restored database
# is collected at its next interval
[ $portable = yes ] || q -d $src -c "INSERT INTO simba_gc_state (last_run) VALUES (now())"
describe $src >"$work/src.state"
read -r max_fence max_id max_permit_fence max_rw_fence <<<"$(q -d $src -F ' ' -c "
  SELECT (SELECT last_value FROM simba_mutex_fence),
         (SELECT max(id) FROM simba_mutex_history),
         (SELECT last_value FROM simba_permit_fence),
         (SELECT last_value FROM simba_rwlock_fence)")"
started=$(q -d postgres -c "SELECT pg_postmaster_start_time()")
[ "$(grep -c '^history|' "$work/src.state")" -ge 5 ] || { echo "roundtrip: the source has too little history"; exit 1; }

# --- after a restore: the same state, and everything continues above it --
verify() { # label db
  local label=$1 db=$2
  describe "$db" >"$work/$label.state"
  check "$label: server never restarted" "$started" "$(q -d postgres -c "SELECT pg_postmaster_start_time()")"
  check "$label: every mutex, history row and permit restored as it was" \
    "$(md5sum <"$work/src.state")" "$(md5sum <"$work/$label.state")"
  [ $portable = yes ] ||  # the portable edition has no collector
    check "$label: the collector's state is not restored: it collects at its next interval" "0" \
      "$(q -d "$db" -c "SELECT count(*) FROM simba_gc_state")"
  local fence
  fence=$(q -d "$db" -c "SELECT fence FROM simba_mutex WHERE mutex = 'live-1'")
  check "$label: the live lease's holder (its role) renews it, same fence" "w1 $app $fence" \
    "$(q -d "$db" -F ' ' -c "SET ROLE $app" -c "SELECT owner_id, owner_role, fence FROM simba_acquire('live-1', 'w1', '1h', '1h')")"
  check "$label: another role cannot renew it" "$app" \
    "$(q -d "$db" -c "SET ROLE $other" -c "SELECT owner_role FROM simba_acquire('live-2', 'w1', '1h', '1h')")"
  check "$label: a new holder's fence is above every fence the source issued" "t" \
    "$(q -d "$db" -c "SET ROLE $app" -c "SELECT fence > $max_fence FROM simba_acquire('new-mutex', 'w1', '1h', '1h')")"
  check "$label: a change of hands with history on gets a history id above the source's" "t" \
    "$(q -d "$db" "${history_on[@]}" -c "SET ROLE $app" -c "SELECT simba_release('new-mutex', 'w1')" >/dev/null &&
       q -d "$db" -c "SELECT max(id) > $max_id FROM simba_mutex_history")"
  check "$label: the saved permit token still refreshes" "t" \
    "$(q -d "$db" -c "SET ROLE $app" -c "SELECT simba_semaphore_refresh('pool', '$token', '1h')")"
  check "$label: a new permit's fence is above the source's" "t" \
    "$(q -d "$db" -c "SET ROLE $app" -c "SELECT fence > $max_permit_fence FROM simba_semaphore_acquire('pool', 'w3', 5, '1h')")"
  check "$label: the session's mutex and permit are still held under it" "w1 1" \
    "$(q -d "$db" -F ' ' -c "SELECT owner_id, (SELECT count(*) FROM simba_semaphore_status WHERE key = 'session-pool')
                              FROM simba_owner('in-session')")"
  check "$label: another role can neither take the session's mutex nor keep the session alive" "w1 SB004" \
    "$(q -d "$db" -F ' ' -c "SET ROLE $other" -c "SELECT owner_id FROM simba_acquire('in-session', 'w2', '1h', '1h')" |
       tr '\n' ' '; q -d "$db" -c "SET ROLE $other" -c "\\set VERBOSITY sqlstate" \
       -c "SELECT simba_session_keepalive('$session')" 2>&1 | sed 's/.*ERROR: *//')"
  check "$label: its role keeps the restored session alive" "t" \
    "$(q -d "$db" -c "SET ROLE $app" -c "SELECT transition_at > current_at FROM simba_session_keepalive('$session')")"
  check "$label: the session's read hold is still held under it: another role's writer waits" "{w1} waiting" \
    "$(q -d "$db" -c "SELECT holders FROM simba_rwlock_status WHERE rwlock = 'rw-session'" | tr '\n' ' ';
       q -d "$db" -c "SET ROLE $other" -c "SELECT mode FROM simba_rwlock_acquire('rw-session', 'w2', 'write', '1h', '0s')")"
  check "$label: the read-write lock's readers renew under the same epoch, the writer still waits" "1 1 waiting" \
    "$(q -d "$db" -F ' ' -c "SET ROLE $app" -c "SELECT (simba_rwlock_acquire('rw', 'w1', 'read', '1h', '1h')).fence,
        (simba_rwlock_acquire('rw', 'w2', 'read', '1h', '1h')).fence, (simba_rwlock_acquire('rw', 'w3', 'write', '1h', '1h')).mode")"
  check "$label: once they leave, the writer's fence is above every one the source issued" "t" \
    "$(q -d "$db" -c "SET ROLE $app" -c "SELECT simba_rwlock_release('rw', 'w1'), simba_rwlock_release('rw', 'w2')" >/dev/null &&
       q -d "$db" -c "SET ROLE $app" -c "SELECT fence > $max_rw_fence FROM simba_rwlock_acquire('rw', 'w3', 'write', '1h', '1h')")"
}

restore() { # label command... : runs a restore step, fails the check on any error output
  local label=$1; shift
  if "$@" 2>"$work/$label.err" && ! grep -qi 'error' "$work/$label.err"; then
    check "$label: pg_restore exited 0 without errors" "ok" "ok"
  else
    check "$label: pg_restore exited 0 without errors" "ok" "$(tr '\n' ' ' <"$work/$label.err")"
  fi
}

# A: into a database made beforehand (the portable edition: by its owner)
if [ $portable = yes ]; then
  "$bin/pg_dump" -U $owner -Fc -f "$work/a.dump" $src
  q -d postgres -c "CREATE DATABASE $dst OWNER $owner"
  restore A "$bin/pg_restore" -U $owner -d $dst "$work/a.dump"
  verify A $dst
  check "A: the restored settings have history on" "t" "$(q -d $dst -c "SELECT history FROM simba_settings")"
  echo "roundtrip: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi
"$bin/pg_dump" -Fc -f "$work/a.dump" $src
q -d postgres -c "CREATE DATABASE $dst"
restore A "$bin/pg_restore" -d $dst "$work/a.dump"
verify A $dst

# B: the dump creates the database, with ALTER DATABASE ... SET simba.history = on
q -d postgres -c "ALTER DATABASE $src RENAME TO $created"
"$bin/pg_dump" -Fc -C -f "$work/b.dump" $created
q -d postgres -c "DROP DATABASE $created"
restore B "$bin/pg_restore" -C -d postgres "$work/b.dump"
check "B: the restored database has simba.history on" "simba.history=on" \
  "$(q -d postgres -c "SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = '$created'")"
verify B $created

echo "roundtrip: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
