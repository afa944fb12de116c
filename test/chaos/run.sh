#!/usr/bin/env bash
# simba fault-injection run: workload + nemesis + checker on a cluster of its own.
#
#   test/chaos/run.sh --bin-dir DIR [--duration SECONDS] [--control] [--quiet-ms MS]
#
# Starts a fresh throwaway cluster (test/with-cluster.sh; never a shared one,
# since the nemesis crashes it) and makes it durable for the crash-restart
# nemesis: fsync = on, synchronous_commit = on, plus track_commit_timestamp
# (the checker orders ledger rows and grants by commit time) and
# simba.history = on (the server's record of every change of hands).
# Then 8 workers contend for 3 mutexes (ttl 1 s, transition 500 ms), and each
# takes a read-write lock, a multi-lock and a fair lock too, while the
# nemesis injects kill / stop / term / restart / listen faults in turn with
# quiet periods between, and the checker prints its report at the end.
#
# --control: the workers skip every fence check and the only fault is SIGSTOP
# of an owner in the middle of its write; the run passes only if the checker
# reports stale writes. Logs are kept on failure (or with SIMBA_CHAOS_KEEP=1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

bin_dir="" duration=120 control=0 quiet_ms=""
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --control) control=1; shift ;;
    --quiet-ms) quiet_ms=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin_dir/simba_chaos_worker" ] || { echo "run.sh: no simba_chaos_worker in '$bin_dir'" >&2; exit 2; }
command -v pg_config >/dev/null || { echo "run.sh: no PostgreSQL (pg_config)" >&2; exit 77; }

if [ "${SIMBA_CHAOS_CLUSTER:-}" != 1 ]; then
  # A cluster of our own, even when called inside another with-cluster.sh.
  exec env SIMBA_CHAOS_CLUSTER=1 "$root/test/with-cluster.sh" "$0" "${args[@]}"
fi

as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pguser=""; [ "$(id -u)" -eq 0 ] && pguser=postgres
pglog="$PGHOST/server.log"
psql_q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

# Durable: an acknowledged commit must survive pg_ctl restart -m immediate.
psql_q -c "ALTER SYSTEM SET fsync = on" -c "ALTER SYSTEM SET synchronous_commit = on" \
  -c "ALTER SYSTEM SET full_page_writes = on" -c "ALTER SYSTEM SET track_commit_timestamp = on"
as_pg "$SIMBA_PG_BIN/pg_ctl" -D "$SIMBA_PGDATA" -m fast -w -t 60 -l "$pglog" restart >/dev/null
psql_q -c "CREATE EXTENSION IF NOT EXISTS simba" \
  -c "ALTER DATABASE $PGDATABASE SET simba.history = on"
psql_q -f "$here/setup.sql"  # the ledgers, and the audit of read-write holds and fair queues
psql_q -At -c "SELECT 'server: ' || version() || ', fsync=' || current_setting('fsync')
  || ', synchronous_commit=' || current_setting('synchronous_commit')
  || ', track_commit_timestamp=' || current_setting('track_commit_timestamp')"

logdir=$(mktemp -d "${TMPDIR:-/tmp}/simba-chaos.XXXXXX")
chmod 755 "$logdir"
keep=${SIMBA_CHAOS_KEEP:-0}
cleanup() {
  if [ "$keep" = 1 ]; then echo "run.sh: logs kept in $logdir" >&2; else rm -rf "$logdir"; fi
}
trap cleanup EXIT

nemesis=("$bin_dir/simba_chaos_nemesis" --workers 8 --worker-bin "$bin_dir/simba_chaos_worker"
  --logdir "$logdir" --conninfo "" --duration-s "$duration" --worker-arg=--hold-ms --worker-arg 3000
  --pgdata "$SIMBA_PGDATA" --pgbin "$SIMBA_PG_BIN" --pglog "$pglog")
# Every worker also runs the new primitives' lockers, whose holders are fault
# targets too: a read-write lock, a multi-lock over two of the mutexes and one
# of its own, a fair lock.
nemesis+=(--worker-arg=--rwlock --worker-arg chaos-rw --worker-arg=--multi --worker-arg chaos-b,chaos-c,chaos-m
  --worker-arg=--fair --worker-arg chaos-fair --targets chaos-m,chaos-fair --rwlocks chaos-rw)
[ -n "$pguser" ] && nemesis+=(--pguser "$pguser")
checker=("$bin_dir/simba_chaos_checker" --logdir "$logdir" --conninfo "" --bound-ms 8000)
if [ "$control" = 1 ]; then
  # Long work inside each write transaction, the lockers' writes back to back
  # too: a SIGSTOP nearly always lands mid-write.
  nemesis+=(--kinds stop --quiet-ms "${quiet_ms:-3000}" --worker-arg=--no-fence-check
    --worker-arg=--work-ms --worker-arg 20 --worker-arg=--locker-pause-ms --worker-arg 3)
  checker+=(--expect-stale --label "chaos control (no fence check)")
else
  nemesis+=(--kinds kill,stop,term,restart,listen --quiet-ms "${quiet_ms:-6000}")
  checker+=(--label "chaos ${duration} s")
fi

set +e
"${nemesis[@]}"
nrc=$?
"${checker[@]}"
crc=$?
set -e
if [ "$nrc" -ne 0 ] || [ "$crc" -ne 0 ]; then
  keep=1
  [ -s "$pglog" ] && { echo "--- server log (tail)"; tail -n 30 "$pglog"; }
  echo "run.sh: FAILED (nemesis $nrc, checker $crc)" >&2
  exit 1
fi
