#!/bin/sh
# The demo's worker: the CMD each `simba run` starts once it is the leader.
# Every 200 ms it appends a row to demo_ledger in a transaction that first
# calls simba_fence_check with the fence `simba run` handed it, so a write
# commits only while this worker really holds the lock. A refused write is
# recorded in demo_events and ends the worker (exit 3), as a fenced worker
# should: someone else is the leader now.
set -u
m=$SIMBA_MUTEX c=$SIMBA_CONTENDER f=$SIMBA_FENCE
err=$(mktemp)
[ -n "${SIMBA_DEMO_DIR:-}" ] && echo $$ >"$SIMBA_DEMO_DIR/$c.pid"  # our pid = our process group (simba run made it so)
trap 'rm -f "$err"' EXIT
while :; do
  # One query string = one round trip: the transaction never waits on this
  # process between the check and the commit (a paused writer cannot hold the
  # mutex row's FOR SHARE lock and stall the takeover).
  if ! psql -X -q -v ON_ERROR_STOP=1 -c "BEGIN; SELECT simba_fence_check('$m', '$c', $f);
        INSERT INTO demo_ledger (writer, fence) VALUES ('$c', $f); COMMIT;" >/dev/null 2>"$err"; then
    msg=$(sed -n 's/^ERROR: *//p' "$err" | head -n 1 | sed "s/'/''/g")
    psql -X -q -c "INSERT INTO demo_events (who, what, detail) VALUES ('$c', 'refused', 'fence $f: $msg')" >/dev/null
    exit 3
  fi
  sleep 0.2
done
