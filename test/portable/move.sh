#!/usr/bin/env bash
# Moving between editions (portable/move.sql; docs/portable.md, "Moving
# between editions") against the server in libpq's environment, as a superuser
# with the C extension installed: a database owned by a role without
# superuser gets the portable edition; an application role takes a mutex,
# a tenure under a session, a permit and a read hold; the move to the C
# extension keeps all four (same holders, same fences, renewable); the move
# back is refused while anything is held and then goes through; after each
# move, fences go on above every fence issued before.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s portable
script=build/portable/simba_portable.sql
db=simba_move_$$ owner=simba_move_owner_$$ app=simba_move_app_$$
psql -Xqv ON_ERROR_STOP=1 -d postgres <<SQL
CREATE ROLE $owner LOGIN;
CREATE ROLE $app LOGIN;
CREATE DATABASE $db OWNER $owner;
SQL
trap 'psql -Xq -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "DROP ROLE IF EXISTS $app" -c "DROP ROLE IF EXISTS $owner"' EXIT
as() { local role=$1; shift; psql -XAtqv ON_ERROR_STOP=1 -U "$role" -d "$db" -c 'SET search_path = simba' "$@"; }
# One "... ok" line per check (make test counts them); the first failure ends the run.
fail() { echo "move: $* ... FAILED" >&2; exit 1; }
expect() { [ "$2" = "$3" ] || fail "$1: expected '$3', got '$2'"; echo "move: $1 ... ok"; }
move() { psql -XAtq -d "$db" -v schema=simba -v to="$1" -v portable_script="$script" -f portable/move.sql 2>&1; }

psql -XAtqv ON_ERROR_STOP=1 -U "$owner" -d "$db" -v schema=simba -f "$script"
as "$owner" -c "SELECT simba_grant('$app')" >/dev/null
expect "portable: no C function" "$(as "$owner" -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'simba'::regnamespace AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')")" 0
as "$app" -c "SELECT fence FROM simba_acquire('m', 'a', '60s', '5s')" >/dev/null
sid=$(as "$app" -c "SELECT session_id FROM simba_session_open('60s', '5s')")
as "$app" -c "SELECT fence FROM simba_acquire('ms', 'b', session_id => '$sid')" >/dev/null
token=$(as "$app" -c "SELECT token FROM simba_semaphore_acquire('k', 'h', 2, '60s')")
as "$app" -c "SELECT fence FROM simba_rwlock_acquire('rw', 'r', 'read', '60s')" >/dev/null
expect "a writer's fence" "$(as "$app" -c "SELECT fence FROM simba_rwlock_acquire('rw2', 'w', 'write', '60s')")" 1
before=$(as "$app" -c "SELECT string_agg(mutex || ':' || owner_id || ':' || fence, ' ' ORDER BY mutex) FROM simba_mutex_status")

move extension >/dev/null || fail "move to the extension"
expect "extension installed" "$(as "$app" -c "SELECT extnamespace::regnamespace FROM pg_extension WHERE extname = 'simba'")" simba
expect "tenures kept" "$(as "$app" -c "SELECT string_agg(mutex || ':' || owner_id || ':' || fence, ' ' ORDER BY mutex) FROM simba_mutex_status")" "$before"
expect "renewal with the same fence" "$(as "$app" -c "SELECT fence FROM simba_renew('m', 'a', 1, '60s', '5s')")" 1
as "$app" -c "SELECT simba_fence_check('m', 'a', 1)" >/dev/null
expect "session kept" "$(as "$app" -c "SELECT revoked FROM simba_session_keepalive('$sid')")" 0
expect "permit kept" "$(as "$app" -c "SELECT simba_semaphore_refresh('k', '$token', '60s')")" t
expect "read hold kept" "$(as "$app" -c "SELECT granted FROM simba_rwlock_acquire('rw', 'r', 'read', '60s')")" t
expect "fences go on" "$(as "$app" -c "SELECT fence FROM simba_acquire('m2', 'c')")" 3

out=$(move portable) && fail "move back while held: $out"
[[ $out == *"simba holds live leases"* ]] || fail "move back while held: $out"
echo "move: move back refused while held ... ok"
as "$app" -c "SELECT simba_release('m', 'a'), simba_release('m2', 'c'), simba_session_close('$sid'),
                     simba_semaphore_release('k', '$token'), simba_rwlock_release('rw', 'r'),
                     simba_rwlock_release('rw2', 'w')" >/dev/null
move portable >/dev/null || fail "move back"
expect "portable again" "$(as "$app" -c "SELECT count(*) FROM pg_extension WHERE extname = 'simba'")" 0
expect "owned by the schema's owner" "$(as "$app" -c "SELECT proowner::regrole FROM pg_proc WHERE oid = 'simba_acquire(text, text, interval, interval, uuid)'::regprocedure")" "$owner"
expect "mutex fences go on" "$(as "$app" -c "SELECT fence FROM simba_acquire('m', 'a')")" 4
expect "permit fences go on" "$(as "$app" -c "SELECT fence FROM simba_semaphore_acquire('k', 'h', 2)")" 2
expect "write fences go on" "$(as "$app" -c "SELECT fence FROM simba_rwlock_acquire('rw', 'w', 'write')")" 2
