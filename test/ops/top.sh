#!/usr/bin/env bash
# simba top under tmux (ctest ops.top): it shows the holder, then the new one
# after a handoff with the change of hands, sorts on s, and q quits with exit
# 0; piped, it prints one table (with simba_mutex_history's events when
# simba.history is on) and exits. usage: top.sh SIMBA_BIN
set -euo pipefail
simba=$1
db=simba_top_$$
sock=simba-top-$$
failed=0
check() { # description command...
  local what=$1; shift
  if "$@"; then echo "ok      $what"; else echo "FAILED  $what"; failed=1; fi
}
pane() { tmux -L "$sock" capture-pane -p -t top; }
# Polls the pane until it shows all of the extended regexes given (10 s).
shows() {
  local i re ok
  for i in $(seq 100); do
    ok=1
    for re in "$@"; do pane | grep -qE "$re" || { ok=0; break; }; done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  echo "--- the pane:"; pane; return 1
}
cleanup() {
  tmux -L "$sock" kill-server 2>/dev/null || true
  psql -Xq -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

psql -Xq -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $db" >/dev/null
q() { psql -XqAt -v ON_ERROR_STOP=1 -d "$db" "$@" >/dev/null; }
q -c "CREATE EXTENSION simba"
q -c "SELECT simba_acquire('nightly-report', 'alice', '1 hour', '1 hour')" \
  -c "SELECT simba_acquire('compactor', 'zoe', '1 hour', '1 hour')" \
  -c "SELECT simba_semaphore_acquire('workers', 'w1', 3)"

tmux -L "$sock" new-session -d -s top -x 120 -y 40 \
  "'$simba' top --dsn 'dbname=$db' --interval 200ms; echo EXIT=\$?; sleep 60"
check "top shows each mutex with its holder and the semaphore" \
  shows '^nightly-report +alice +held' '^compactor +zoe +held' '^workers +1 of 3 permits held'
q -c "SELECT simba_release('nightly-report', 'alice')" -c "SELECT simba_acquire('nightly-report', 'carol')"
check "after a handoff top shows the new holder and the change of hands" \
  shows '^nightly-report +carol +held' 'nightly-report +new holder +carol +fence [0-9]+'
tmux -L "$sock" send-keys -t top s
check "s sorts by the next column" shows 'sorted by owner'
check "... carol's row before zoe's (by mutex it comes after)" sh -c "tmux -L '$sock' capture-pane -p -t top | grep -E '^(compactor|nightly-report) ' | head -1 | grep -q '^nightly-report'"
tmux -L "$sock" send-keys -t top q
check "q quits with exit 0" shows '^EXIT=0$'

q -c "ALTER DATABASE $db SET simba.history = on"
q -c "SELECT simba_release('nightly-report', 'carol')" -c "SELECT simba_acquire('nightly-report', 'dave')"
out=$("$simba" top --dsn "dbname=$db")
check "piped: one table, the holders and the history's events" \
  grep -qE '^nightly-report +dave +held' <<<"$out"
check "... with simba_mutex_history's acquired event of dave" \
  grep -qE 'nightly-report +acquired +dave +fence' <<<"$out"
rc=0; "$simba" top --sort nope --dsn "dbname=$db" 2>/dev/null || rc=$?
check "--sort nope is a usage error (64)" test "$rc" -eq 64
rc=0; "$simba" top --dsn "dbname=${db}_missing" 2>/dev/null || rc=$?
check "a database that does not exist: exit 69" test "$rc" -eq 69
exit $failed
