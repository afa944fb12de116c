#!/usr/bin/env bash
# The live scenario behind `make demo`, run inside test/with-cluster.sh (and
# by the `demo` ctest). Five `simba run` contenders compete for one mutex;
# the leader's worker (test/demo/worker.sh) writes fenced rows. Then:
#   1. the leader is SIGKILLed: another takes over within ttl + transition (+ jitter);
#   2. the new leader's machine "freezes" (simba run, its watchdog and its
#      worker SIGSTOPped) past its lease; another takes over; its worker wakes
#      first and its late write is refused by simba_fence_check;
#   3. a clean stop (SIGTERM): the lock is handed over at once (NOTIFY);
# and prints a timeline from simba_mutex_history + the ledger, writes an SVG,
# checks the outcome (exit 1 if the takeover or the refusal did not happen,
# or a ledger row was committed under an older fence than one before it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
simba=${SIMBA_BIN:-$root/build/client/simba}
outdir=${SIMBA_DEMO_OUT:-$root/build/demo}
mutex=demo-job ttl=1s transition=500ms
db=simba_demo
[ -x "$simba" ] || { echo "demo: no simba binary at $simba (build client/ first)" >&2; exit 1; }
mkdir -p "$outdir"
svg=$outdir/timeline.svg
export SIMBA_DEMO_DIR; SIMBA_DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/simba-demo.XXXXXX")
chmod 777 "$SIMBA_DEMO_DIR"

declare -A pid=()
frozen_watchdog=''
cleanup() {
  [ -n "$frozen_watchdog" ] && kill -CONT "$frozen_watchdog" 2>/dev/null || true
  for p in "${pid[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done
  for f in "$SIMBA_DEMO_DIR"/*.pid; do
    [ -e "$f" ] && { kill -CONT -- "-$(cat "$f")" 2>/dev/null || true; kill -KILL -- "-$(cat "$f")" 2>/dev/null || true; }
  done
  wait 2>/dev/null || true
  rm -rf "$SIMBA_DEMO_DIR"
}
trap cleanup EXIT

t0=$(date +%s.%N)
say() { printf '%6.2fs  %s\n' "$(echo "$(date +%s.%N) $t0" | awk '{print $1 - $2}')" "$*"; }
q() { psql -X -At -v ON_ERROR_STOP=1 -c "$1"; }
event() { q "INSERT INTO demo_events (who, what, detail) VALUES ('$1', '$2', '${3:-}')" >/dev/null; }
leader() { "$simba" owner --mutex "$mutex" 2>/dev/null || true; }
wait_until() { # seconds description command...
  local limit=$1 what=$2; shift 2
  local end; end=$(awk -v t="$(date +%s.%N)" -v l="$limit" 'BEGIN{printf "%.3f", t + l}')
  until "$@"; do
    if awk -v t="$(date +%s.%N)" -v e="$end" 'BEGIN{exit !(t > e)}'; then
      echo "demo: FAILED: no $what within ${limit}s" >&2; exit 1
    fi
    sleep 0.05
  done
}
watchdog_of() { # the watchdog a simba run forked: its child named simba-watchdog
  local parent=$1 f line
  for f in /proc/[0-9]*/stat; do
    line=$(cat "$f" 2>/dev/null) || continue
    case $line in *" (simba-watchdog) "*) ;; *) continue ;; esac
    set -- ${line##*) }  # state ppid ...
    [ "$2" = "$parent" ] && { echo "${f//[^0-9]/}"; return; }
  done
}
is_leader_other_than() { local l; l=$(leader); [ -n "$l" ] && [ "$l" != "$1" ]; }
rows_by() { [ "$(q "SELECT count(*) FROM demo_ledger WHERE writer = '$1'")" -ge "$2" ]; }
refused_by() { [ "$(q "SELECT count(*) FROM demo_events WHERE who = '$1' AND what = 'refused'")" -ge 1 ]; }

# ------------------------------------------------------------------ setup
PGOPTIONS='-c client_min_messages=warning' psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
export PGDATABASE=$db
psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION simba;
ALTER DATABASE $db SET simba.history = on;   -- ownership history: simba_mutex_history
CREATE TABLE demo_ledger (id bigserial PRIMARY KEY, writer text, fence bigint, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE demo_events (at timestamptz DEFAULT clock_timestamp(), who text, what text, detail text);
SQL

echo "== 5 contenders run: simba run --mutex $mutex --ttl $ttl --transition $transition -- test/demo/worker.sh"
event all start
for i in 1 2 3 4 5; do
  "$simba" run --mutex "$mutex" --contender "worker-$i" --ttl "$ttl" --transition "$transition" \
    -- "$here/worker.sh" 2>>"$SIMBA_DEMO_DIR/run-$i.log" &
  pid[worker-$i]=$!
done
wait_until 10 "leader" is_leader_other_than none
l1=$(leader)
say "$l1 is the leader; its worker writes a fenced row every 200 ms"
wait_until 10 "writes by $l1" rows_by "$l1" 5

# ------------------------------------------------------ 1. crash: SIGKILL
say "SIGKILL $l1 (simba run; its watchdog then kills the worker at once): a crash"
event "$l1" SIGKILL
kill -KILL "${pid[$l1]}"
wait "${pid[$l1]}" 2>/dev/null || true
unset "pid[$l1]"
wait_until 10 "takeover after the crash" is_leader_other_than "$l1"
l2=$(leader)
say "$l2 took over after $l1's lease ended (ttl $ttl + transition $transition + jitter)"
wait_until 10 "writes by $l2" rows_by "$l2" 3

# ------------------------------------------- 2. pause: SIGSTOP past the lease
# simba run alone stopped would not do: its watchdog kills the worker before
# the lease ends. A frozen machine stops all three; fencing covers that case.
w2=$(cat "$SIMBA_DEMO_DIR/$l2.pid")
wd2=$(watchdog_of "${pid[$l2]}")
[ -n "$wd2" ] || { echo "demo: FAILED: no watchdog under $l2's simba run" >&2; exit 1; }
say "SIGSTOP $l2, its watchdog and its worker (think: a VM pause, the whole machine frozen)"
event "$l2" SIGSTOP
frozen_watchdog=$wd2
kill -STOP "${pid[$l2]}" "$wd2"; kill -STOP -- "-$w2"
wait_until 10 "takeover from the paused leader" is_leader_other_than "$l2"
l3=$(leader)
say "$l3 took over while $l2 was paused"
say "SIGCONT $l2's worker: it wakes up first and writes with its old fence ..."
event "$l2" SIGCONT "worker"
kill -CONT -- "-$w2"
wait_until 10 "refused write by $l2" refused_by "$l2"
say "... REFUSED by simba_fence_check: $(q "SELECT detail FROM demo_events WHERE who = '$l2' AND what = 'refused'")"
event "$l2" SIGCONT "simba run"
kill -CONT "$wd2" "${pid[$l2]}"
frozen_watchdog=''

rc=0; wait "${pid[$l2]}" || rc=$?
unset "pid[$l2]"
say "$l2's simba run resumed, saw the lease was gone and exited $rc (76 = lost the lock)"
[ "$rc" -eq 76 ] || { echo "demo: FAILED: expected exit 76 from $l2's simba run, got $rc" >&2; exit 1; }
wait_until 10 "writes by $l3" rows_by "$l3" 3

# ----------------------------------------------- 3. clean stop: SIGTERM
say "SIGTERM $l3: simba run passes it to its worker, releases, and NOTIFY wakes a waiter"
event "$l3" SIGTERM
kill -TERM "${pid[$l3]}"
wait "${pid[$l3]}" 2>/dev/null || true
unset "pid[$l3]"
wait_until 10 "handoff after the release" is_leader_other_than "$l3"
l4=$(leader)
say "$l4 is the leader"
wait_until 10 "writes by $l4" rows_by "$l4" 3
say "SIGTERM to the rest"
event all stop
for p in "${pid[@]}"; do kill -TERM "$p"; done
for p in "${pid[@]}"; do wait "$p" 2>/dev/null || true; done
pid=()

# --------------------------------------------------------------- report
echo
echo "== Timeline (server clock; from simba_mutex_history, demo_events and demo_ledger)"
q "
WITH t0 AS (SELECT min(at) AS t0 FROM demo_events WHERE what = 'start'),
ev AS (
  SELECT h.at, CASE h.event
      WHEN 'acquired' THEN h.owner_id || ' acquired the lock, fence ' || h.fence
      WHEN 'taken_over' THEN h.owner_id || ' took over from ' || h.previous_owner || ' (lease expired), fence ' || h.fence
      WHEN 'reacquired' THEN h.owner_id || ' re-acquired after its own lease lapsed, fence ' || h.fence
      WHEN 'released' THEN h.owner_id || ' released, fence ' || h.fence
      WHEN 'late_release' THEN h.owner_id || ' released after its lease had ended (late release), fence ' || h.fence
      WHEN 'forced_release' THEN 'forced release of ' || h.owner_id || ', fence ' || h.fence
      ELSE h.event || ' ' || h.owner_id END AS what
    FROM simba_mutex_history h WHERE h.mutex = '$mutex'
  UNION ALL
  SELECT at, CASE WHEN what = 'refused' THEN who || ': stale write REFUSED (' || detail || ')'
                  WHEN what IN ('start', 'stop') THEN '-- ' || what || ' ' || who || ' --'
                  ELSE '>> ' || what || ' ' || who || coalesce(' ' || nullif(detail, ''), '') END
    FROM demo_events
)
SELECT to_char(extract(epoch FROM ev.at - t0.t0), 'FM9990.00') || 's  ' || ev.what FROM ev, t0 ORDER BY ev.at"
echo
echo "== Holders (fence per holder, rows written under it)"
q "
SELECT rpad(writer, 10) || ' fence ' || fence || ': ' || lpad(count(*)::text, 3) || ' rows, '
       || to_char(extract(epoch FROM min(at) - (SELECT min(at) FROM demo_events WHERE what = 'start')), 'FM9990.00') || 's .. '
       || to_char(extract(epoch FROM max(at) - (SELECT min(at) FROM demo_events WHERE what = 'start')), 'FM9990.00') || 's'
  FROM demo_ledger GROUP BY writer, fence ORDER BY fence"
echo
echo "== Handoffs"
q "
WITH acq AS (
  SELECT id, at, owner_id, fence, event,
         lag(owner_id) OVER (ORDER BY id) AS prev_owner, lag(fence) OVER (ORDER BY id) AS prev_fence
    FROM simba_mutex_history WHERE mutex = '$mutex' AND event IN ('acquired', 'taken_over', 'reacquired'))
SELECT a.prev_owner || ' (fence ' || a.prev_fence || ') -> ' || a.owner_id || ' (fence ' || a.fence || '): ' ||
       CASE WHEN r.at IS NOT NULL
            THEN round((extract(epoch FROM a.at - r.at) * 1000)::numeric, 1) || ' ms after the release (NOTIFY)'
            ELSE round(extract(epoch FROM a.at - w.last)::numeric, 2) || ' s after the last write of fence '
                 || a.prev_fence || ' (lease ' || '$ttl + $transition, then jitter)' END
  FROM acq a
  LEFT JOIN LATERAL (SELECT max(at) AS last FROM demo_ledger WHERE fence = a.prev_fence) w ON true
  LEFT JOIN LATERAL (SELECT max(h.at) AS at FROM simba_mutex_history h
                      WHERE h.mutex = '$mutex' AND h.event = 'released' AND h.fence = a.prev_fence AND h.id < a.id) r ON true
 WHERE a.prev_owner IS NOT NULL ORDER BY a.id"
echo
echo "== Per holder (simba_mutex_stats; also in \`simba metrics\`)"
psql -X -q -P footer=off -c "SELECT holder, acquisitions, releases, late_releases, expired FROM simba_mutex_stats WHERE mutex = '$mutex' ORDER BY holder"

# ------------------------------------------------------------------ SVG
q "
WITH t AS (SELECT min(at) AS t0, greatest(extract(epoch FROM max(at) - min(at)), 1) AS span
             FROM (SELECT at FROM demo_events UNION ALL SELECT at FROM demo_ledger
                   UNION ALL SELECT at FROM simba_mutex_history WHERE mutex = '$mutex') x),
k AS (SELECT t0, span, (860.0 / span)::numeric AS sx FROM t),
lane AS (SELECT 'worker-' || i AS who, 40 + i * 44 AS y FROM generate_series(1, 5) i),
hist AS (SELECT h.*, lead(h.at) OVER (ORDER BY h.id) AS next_at FROM simba_mutex_history h WHERE h.mutex = '$mutex'),
ten AS (SELECT owner_id, fence, event, at, coalesce(next_at, at) AS until FROM hist
         WHERE event IN ('acquired', 'taken_over', 'reacquired')),
parts AS (
  SELECT 0 AS z, format('<text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">simba demo: mutex %s, ttl $ttl + transition $transition</text>', '$mutex') AS s
  UNION ALL SELECT 1, format('<text x=\"10\" y=\"%s\" font-size=\"13\">%s</text><line x1=\"100\" y1=\"%s\" x2=\"960\" y2=\"%s\" stroke=\"#ddd\"/>',
                             y + 4, who, y, y) FROM lane
  UNION ALL SELECT 1, format('<line x1=\"%s\" y1=\"60\" x2=\"%s\" y2=\"290\" stroke=\"#eee\"/><text x=\"%s\" y=\"305\" font-size=\"10\" text-anchor=\"middle\">%ss</text>',
                             round(100 + s * sx, 1), round(100 + s * sx, 1), round(100 + s * sx, 1), s) FROM k, generate_series(0, floor(span)::int) s
  UNION ALL SELECT 2, format('<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"18\" rx=\"3\" fill=\"%s\" opacity=\"0.55\"><title>%s fence %s (%s)</title></rect><text x=\"%s\" y=\"%s\" font-size=\"10\">fence %s</text>',
                             round(100 + extract(epoch FROM ten.at - t0) * sx, 1), lane.y - 9,
                             greatest(round(extract(epoch FROM ten.until - ten.at) * sx, 1), 2),
                             CASE ten.event WHEN 'taken_over' THEN '#f0a030' ELSE '#4a90d9' END,
                             ten.owner_id, ten.fence, ten.event,
                             round(102 + extract(epoch FROM ten.at - t0) * sx, 1), lane.y - 12, ten.fence)
    FROM ten JOIN lane ON lane.who = ten.owner_id, k
  UNION ALL SELECT 3, format('<circle cx=\"%s\" cy=\"%s\" r=\"2.2\" fill=\"#1a7f37\"><title>row %s, fence %s</title></circle>',
                             round(100 + extract(epoch FROM d.at - t0) * sx, 1), lane.y, d.id, d.fence)
    FROM demo_ledger d JOIN lane ON lane.who = d.writer, k
  UNION ALL SELECT 4, format('<text x=\"%s\" y=\"%s\" font-size=\"16\" fill=\"#d00\" text-anchor=\"middle\">&#x2717;</text><text x=\"%s\" y=\"%s\" font-size=\"10\" fill=\"#d00\">stale write refused</text>',
                             round(100 + extract(epoch FROM e.at - t0) * sx, 1), lane.y + 6, round(106 + extract(epoch FROM e.at - t0) * sx, 1), lane.y + 18)
    FROM demo_events e JOIN lane ON lane.who = e.who, k WHERE e.what = 'refused'
  UNION ALL SELECT 5, format('<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"#900\" stroke-dasharray=\"3,2\"/><text x=\"%s\" y=\"%s\" font-size=\"10\" fill=\"#900\">%s</text>',
                             round(100 + extract(epoch FROM e.at - t0) * sx, 1), lane.y - 16, round(100 + extract(epoch FROM e.at - t0) * sx, 1), lane.y + 16,
                             round(102 + extract(epoch FROM e.at - t0) * sx, 1), lane.y + 26, e.what || coalesce(' ' || nullif(e.detail, ''), ''))
    FROM demo_events e JOIN lane ON lane.who = e.who, k WHERE e.what IN ('SIGKILL', 'SIGSTOP', 'SIGCONT', 'SIGTERM')
  UNION ALL SELECT 6, '<text x=\"100\" y=\"330\" font-size=\"11\">bars: tenures until the next holder (blue: acquired, orange: taken over after an expired lease); dots: fenced rows committed; red: signals, the refused write</text>'
)
SELECT '<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"980\" height=\"345\" font-family=\"sans-serif\">'
       || '<rect width=\"100%\" height=\"100%\" fill=\"white\"/>' || string_agg(s, '' ORDER BY z) || '</svg>'
  FROM parts" >"$svg"

# ---------------------------------------------------------------- checks
takeovers=$(q "SELECT count(*) FROM simba_mutex_history WHERE mutex = '$mutex' AND event = 'taken_over'")
refused=$(q "SELECT count(*) FROM demo_events WHERE what = 'refused'")
backwards=$(q "SELECT count(*) FROM (SELECT fence < lag(fence) OVER (ORDER BY id) AS back FROM demo_ledger) s WHERE back")
stale=$(q "SELECT count(*) FROM demo_ledger d WHERE d.writer <> (SELECT owner_id FROM simba_mutex_history h
           WHERE h.mutex = '$mutex' AND h.fence = d.fence AND h.event IN ('acquired', 'taken_over', 'reacquired') LIMIT 1)")
echo
echo "ledger: $(q 'SELECT count(*) FROM demo_ledger') rows; rows under an older fence than a row before them: $backwards; rows not written by their fence's holder: $stale"
echo "takeovers after a lease expiry: $takeovers; stale writes refused: $refused"
echo "timeline SVG: $svg"
if [ "$takeovers" -ge 2 ] && [ "$refused" -ge 1 ] && [ "$backwards" -eq 0 ] && [ "$stale" -eq 0 ]; then
  echo "demo: OK (took over twice, refused the stale write, no row out of fence order)"
else
  echo "demo: FAILED" >&2; exit 1
fi
