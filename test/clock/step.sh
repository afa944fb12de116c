#!/usr/bin/env bash
# Steps of the server's wall clock must neither shorten nor lengthen a live
# lease (security review, finding 7): a +90 s step once handed a 60 s lease's
# mutex to another contender while its holder still held it, and a -1 h step
# made a 5 s lease last an hour.
#
#   test/clock/step.sh
#
# Builds test/clock/clockshift.c (an LD_PRELOAD shim that adds the offset in
# a file to every wall-clock read) into a temp dir and runs itself inside a
# throwaway cluster of its own (test/with-cluster.sh with SIMBA_PG_PRELOAD),
# so only the server's clock moves, never the machine's or this script's.
# Needs the simba extension installed and a C compiler; run as root or as a
# user who can run with-cluster.sh. Takes about 30 s.
#
# Cases, in a fresh database, each on a mutex / key of its own, the clock back
# at 0 between them (a = the holder, b = another contender; times are real
# time, read from /proc/uptime, never from the stepped clock):
#   forward   +1 h while a holds a 40 s + 20 s lease and a 60 s permit:
#             a still owns the mutex, passes its fence checks, keeps its fence
#             on renewal and refreshes its permit; b wins neither.
#   backward  -1 h while a holds a 2 s + 1 s lease and a 3 s permit: b wins
#             each once its lease has ended (not before), within 2 s of slack.
#   restart   the server stopped, the clock stepped +1 h, the server started:
#             a's 20 s lease holds right after the restart (a lease is never
#             shortened), and ends within 20 s of the restart + 2 s of slack.
#             The same with -1 h and a 5 s + 1 s lease: it ends within 6 s of
#             the restart + 2 s (longer than asked, but bounded).
# Each check prints "step: <check> ... ok" or "... FAILED: <why>"; the last
# line is "step: N passed, N failed", and the exit status is 1 if any failed.
# SIMBA_CLOCK_STEP=N steps by N s instead of 3600 (say 90, as in the finding);
# SIMBA_CLOCK_STEP=0 is the control run: no step, so every check must pass on
# any version (it shows the checks and their timing hold on a steady clock).
# SIMBA_KEEP_CLUSTER=1 keeps the cluster (server.log shows the stepped time).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if [ "${SIMBA_CLOCK_CLUSTER:-}" != 1 ]; then
  command -v pg_config >/dev/null || { echo "step.sh: no PostgreSQL (pg_config)" >&2; exit 77; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/simba-clock.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  chmod 755 "$work"  # the server (user postgres) loads the shim and reads the offset from here
  "${CC:-cc}" -shared -fPIC -O2 -Wall -o "$work/clockshift.so" "$here/clockshift.c" -ldl
  echo 0 >"$work/offset"
  chmod 644 "$work/offset"
  # A cluster of our own, even when called inside another with-cluster.sh.
  SIMBA_CLOCK_CLUSTER=1 SIMBA_PG_PRELOAD=$work/clockshift.so SIMBA_CLOCK_OFFSET_FILE=$work/offset \
    "$root/test/with-cluster.sh" "$0" && rc=0 || rc=$?
  exit "$rc"
fi

: "${SIMBA_CLOCK_OFFSET_FILE:?}" "${SIMBA_PGDATA:?}" "${SIMBA_PG_BIN:?}"
STEP=${SIMBA_CLOCK_STEP:-3600}
[[ $STEP =~ ^[0-9]+$ ]] || { echo "step.sh: SIMBA_CLOCK_STEP must be a whole number of seconds" >&2; exit 2; }
SLACK_MS=2000
passed=0 failed=0

as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
q() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
ok() { echo "step: $1 ... ok"; passed=$((passed + 1)); }
bad() { echo "step: $1 ... FAILED: $2"; failed=$((failed + 1)); }
check() { # name expected actual
  if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "expected [$2], got [$3]"; fi
}
# Real time in ms: the boot clock (/proc/uptime), which no shim and no step moves.
mono_ms() { local up; read -r up _ </proc/uptime; echo $((10#${up/./} * 10)); }

# The server's clock minus ours, in whole seconds (ours is not shifted).
server_offset() {
  local s
  s=$(q -d postgres -c "SELECT floor(extract(epoch FROM clock_timestamp()))::bigint")
  echo $((s - ${EPOCHREALTIME%.*}))
}
# Wait (up to 2 s) until the server's clock runs at our clock + $1 s, give or take 2 s.
server_at() {
  local want=$1 got deadline=$(($(mono_ms) + 2000))
  while :; do
    got=$(server_offset)
    [ "$got" -ge $((want - 2)) ] && [ "$got" -le $((want + 2)) ] && return 0
    [ "$(mono_ms)" -lt "$deadline" ] || { echo "$got"; return 1; }
    sleep 0.1
  done
}
# Step the server's clock to real time + $1 s: replace the offset file in one
# go (the shim re-reads it within 2 ms), then see that the server follows.
step_clock() {
  local got
  printf '%s\n' "$1" >"$SIMBA_CLOCK_OFFSET_FILE.tmp"
  chmod 644 "$SIMBA_CLOCK_OFFSET_FILE.tmp"
  mv -f "$SIMBA_CLOCK_OFFSET_FILE.tmp" "$SIMBA_CLOCK_OFFSET_FILE"
  got=$(server_at "$1") || {
    bad "harness: the server's clock follows the step to $1 s" "it is at ${got:-?} s: is the shim preloaded?"
    exit 1
  }
}
# Stop the server, step the clock while it is down, start it again.
restart_stepped() {
  local got
  as_pg "$SIMBA_PG_BIN/pg_ctl" -D "$SIMBA_PGDATA" -m fast -w -t 60 stop >/dev/null
  printf '%s\n' "$1" >"$SIMBA_CLOCK_OFFSET_FILE.tmp"
  chmod 644 "$SIMBA_CLOCK_OFFSET_FILE.tmp"
  mv -f "$SIMBA_CLOCK_OFFSET_FILE.tmp" "$SIMBA_CLOCK_OFFSET_FILE"
  as_pg "$SIMBA_PG_BIN/pg_ctl" -D "$SIMBA_PGDATA" -l "$PGHOST/server.log" -w -t 60 start >/dev/null
  restarted_ms=$(mono_ms)
  if got=$(server_at "$1"); then
    ok "harness: the server restarted under the shim, its clock at $1 s"
  else
    bad "harness: the server restarted under the shim, its clock at $1 s" "it is at ${got:-?} s"
    exit 1
  fi
}

# b's attempts: succeed when b holds the mutex / got a permit.
b_wins_mutex() { [ "$(q -c "SELECT owner_id FROM simba_acquire('$1', 'b', '10s', '0s')")" = b ]; }
b_gets_permit() {
  [ "$(q -c "SELECT token IS NOT NULL FROM simba_semaphore_acquire('$1', 'b', 1, '10s')")" = t ]
}
# Poll every 100 ms until `$@` succeeds (b wins) or the deadline passes; two checks:
#   not early: b does not win before a's lease can have ended: a call that
#     returned before a's acquire started + the lease length is certainly early
#     (give or take the 10 ms steps of /proc/uptime);
#   in time: b wins by a call that returned by the deadline.
b_wins_between() { # what a_start_ms lease_ms deadline_ms why_deadline cmd...
  local what=$1 a_start=$2 lease=$3 deadline=$4 why=$5 won='' end
  shift 5
  while :; do
    if "$@"; then won=$(mono_ms); break; fi
    end=$(mono_ms)
    [ "$end" -lt "$deadline" ] || break
    sleep 0.1
  done
  if [ -n "$won" ] && [ $((won + 10)) -lt $((a_start + lease)) ]; then
    bad "$what: b does not win before a's ${lease} ms lease ends" \
      "b won $((won - a_start)) ms after a took it"
  else
    ok "$what: b does not win before a's ${lease} ms lease ends"
  fi
  if [ -n "$won" ] && [ "$won" -le "$deadline" ]; then
    ok "$what: b wins within $why"
  elif [ -n "$won" ]; then
    bad "$what: b wins within $why" "b won $((won - deadline)) ms after the deadline"
  else
    bad "$what: b wins within $why" "b had not won at the deadline, $((end - a_start)) ms after a took it"
  fi
}

db=simba_clock
q -d postgres -c "CREATE DATABASE $db"
export PGDATABASE=$db
q <<'SQL'
CREATE EXTENSION simba;
-- 'passed', or the SQLSTATE and message a fence check raised
CREATE FUNCTION fence_check(m text, id text, f bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM simba_fence_check(m, id, f);
  RETURN 'passed';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
CREATE FUNCTION permit_fence_check(k text, t uuid, f bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  PERFORM simba_semaphore_fence_check(k, t, f);
  RETURN 'passed';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
SQL
echo "step: simba $(q -c "SELECT extversion FROM pg_extension WHERE extname = 'simba'"), $(q -c "SHOW server_version")"
step_clock 0

# --- forward: +1 h must not shorten a live lease ---------------------------
IFS='|' read -r owner fence < <(q -c "SELECT owner_id, fence FROM simba_acquire('m', 'a', '40s', '20s')")
check "forward: a takes m (40 s + 20 s)" a "$owner"
IFS='|' read -r token pfence < <(q -c "SELECT token, fence FROM simba_semaphore_acquire('s', 'a', 1, '60s')")
check "forward: a takes the permit of s (1 permit, 60 s)" t "$([ -n "$token" ] && echo t || echo f)"
step_clock "$STEP"
check "forward +$STEP s: a still owns m" a "$(q -c "SELECT coalesce(owner_id, '(free)') FROM simba_owner('m')")"
check "forward +$STEP s: a's fence check on m passes" passed "$(q -c "SELECT fence_check('m', 'a', $fence)")"
check "forward +$STEP s: b does not win m" a "$(q -c "SELECT coalesce(owner_id, '(free)') FROM simba_acquire('m', 'b', '40s', '20s')")"
check "forward +$STEP s: a's renewal of m keeps its fence" "a $fence" \
  "$(q -F ' ' -c "SELECT owner_id, fence FROM simba_acquire('m', 'a', '40s', '20s')")"
check "forward +$STEP s: a's permit fence check on s passes" passed \
  "$(q -c "SELECT permit_fence_check('s', '$token', $pfence)")"
check "forward +$STEP s: b gets no permit of s (NULL)" t \
  "$(q -c "SELECT token IS NULL FROM simba_semaphore_acquire('s', 'b', 1, '60s')")"
check "forward +$STEP s: a's refresh of its permit returns true" t \
  "$(q -c "SELECT simba_semaphore_refresh('s', '$token', '60s')")"
step_clock 0

# --- backward: -1 h must not lengthen a live lease -------------------------
a_start=$(mono_ms)
check "backward: a takes m2 (2 s + 1 s)" a "$(q -c "SELECT owner_id FROM simba_acquire('m2', 'a', '2s', '1s')")"
check "backward: a takes the permit of s2 (1 permit, 3 s)" t \
  "$(q -c "SELECT token IS NOT NULL FROM simba_semaphore_acquire('s2', 'a', 1, '3s')")"
step_clock "-$STEP"
b_wins_between "backward -$STEP s, m2" "$a_start" 3000 $((a_start + 3000 + SLACK_MS)) "3 s + 2 s of a taking it" \
  b_wins_mutex m2
b_wins_between "backward -$STEP s, permit of s2" "$a_start" 3000 $((a_start + 3000 + SLACK_MS)) \
  "3 s + 2 s of a taking it" b_gets_permit s2
step_clock 0

# --- restart +1 h: a lease written before a restart is never shortened -----
a_start=$(mono_ms)
IFS='|' read -r owner fence < <(q -c "SELECT owner_id, fence FROM simba_acquire('m3', 'a', '20s', '0s')")
check "restart: a takes m3 (20 s + 0 s)" a "$owner"
restart_stepped "$STEP"
check "restart +$STEP s: a's fence check on m3 passes right after the restart" passed \
  "$(q -c "SELECT fence_check('m3', 'a', $fence)")"
check "restart +$STEP s: b does not win m3 right after the restart" a \
  "$(q -c "SELECT coalesce(owner_id, '(free)') FROM simba_acquire('m3', 'b', '10s', '0s')")"
b_wins_between "restart +$STEP s, m3" "$a_start" 20000 $((restarted_ms + 20000 + SLACK_MS)) \
  "20 s + 2 s of the restart" b_wins_mutex m3
step_clock 0

# --- restart -1 h: ... and lasts at most one more lease length -------------
a_start=$(mono_ms)
check "restart: a takes m4 (5 s + 1 s)" a "$(q -c "SELECT owner_id FROM simba_acquire('m4', 'a', '5s', '1s')")"
restart_stepped "-$STEP"
b_wins_between "restart -$STEP s, m4" "$a_start" 6000 $((restarted_ms + 6000 + SLACK_MS)) \
  "6 s + 2 s of the restart" b_wins_mutex m4
step_clock 0

echo "step: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
