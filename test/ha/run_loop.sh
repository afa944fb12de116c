#!/usr/bin/env bash
# One `simba run` contender of the HA suite (run.sh): runs
#
#   simba run --mutex ha-run -- simba_chaos_run_cmd ...
#
# again and again, a new simba run process each time (a new contender id, a
# new connection through the multi-host string), until DIR/run-stop exists.
# The checker (--run-mutex ha-run) judges the CMDs' logs; each simba run's
# exit status goes to DIR/logs/run-N.exits, its stderr to DIR/logs/run-N.err.
#
#   run_loop.sh SIMBA RUN_CMD DIR N CONNINFO
set -uo pipefail
simba=$1 cmd=$2 dir=$3 n=$4 conninfo=$5
while [ ! -e "$dir/run-stop" ]; do
  # The workers' lease (ttl 1 s + transition 500 ms); CMD runs up to 12 s,
  # longer than most faults, so a fault usually strikes a running CMD, which
  # must be gone before the lease can pass on (after a failover: ~10 s).
  "$simba" run -v --dsn "$conninfo" --mutex ha-run --ttl 1s --transition 500ms -- \
    "$cmd" --log "$dir/logs/run-$n.log" --lock "$dir/run.lock" --hold-min-ms 500 --hold-max-ms 12000 \
    2>>"$dir/logs/run-$n.err"
  rc=$?
  echo "$rc" >>"$dir/logs/run-$n.exits"
  # Paces the retries when simba run fails at once (no server reachable):
  # a retry interval, like the client's reconnect backoff, not a wait.
  [ "$rc" -eq 0 ] || sleep 0.2
done
