#!/usr/bin/env bash
# The pg_regress (test/sql/) and isolation (test/specs/) suites against the
# server in libpq's environment (make check, make test, make valgrind),
# SIMBA_SUITE_JOBS (default 3) runs at once: the test/sql/ tests in one
# pg_regress run (they share roles, which are the cluster's) and the specs
# dealt out to the other runs, those that sleep first (they wait out real
# leases, so they set the pace); each run in a database of its own (the test/sql/
# runs share contrib_regression). A database per run, not per spec: under
# valgrind a CREATE EXTENSION (the 1.0 script and every upgrade) costs about
# half a minute.
# Tests that replace the cluster's clock origin file run alone at the end: a
# backend of every database counts from that file.
#
#   test/pg-suites.sh [--skip "NAME ..."]
#
# Prints each run's "test NAME ... ok" lines (the whole output of a run that
# failed) and every diff; exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
skip=" "
[ "${1:-}" = --skip ] && skip=" $2 "
jobs=${SIMBA_SUITE_JOBS:-3}
alone=" clock_file clock_origin_file "

regress=() specs=() last=()
for t in $(make -s print-regress); do
  [[ $skip == *" $t "* ]] && continue
  if [[ $alone == *" $t "* ]]; then last+=("regress:$t"); else regress+=("$t"); fi
done
# The specs, those that call pg_sleep first (most calls first).
for f in test/specs/*.spec; do
  t=$(basename "$f" .spec)
  [[ $skip == *" $t "* ]] && continue
  if [[ $alone == *" $t "* ]]; then last+=("isolation:$t"); continue; fi
  specs+=("$(grep -c pg_sleep "$f" || true) $t")
done
mapfile -t specs < <(printf '%s\n' "${specs[@]}" | sort -k1,1nr -k2 | cut -d' ' -f2)
# dealt round, one group per run left beside the regress one
groups=$((jobs - (${#regress[@]} > 0 ? 1 : 0)))
[ "$groups" -ge 1 ] || groups=1
spec_runs=()
for i in "${!specs[@]}"; do
  spec_runs[i % groups]+="${spec_runs[i % groups]:+ }${specs[i]}"
done

rm -rf output_suites
mkdir -p output_suites
# One run: "regress:a b c" or "isolation:a b c", its output in a file of its
# own, shown when it ends (whole if it failed).
run() {
  local kind=${1%%:*} tests=${1#*:} dir log rc=0
  dir=output_suites/${kind}_${tests%% *}
  mkdir -p "$dir"
  log=$dir/run.log
  if [ "$kind" = regress ]; then
    # contrib_regression, which the expected outputs name; its runs are one after another
    make -s installcheck ISOLATION= REGRESS="$tests" EXTRA_REGRESS_OPTS="--outputdir=$dir" >"$log" 2>&1 || rc=$?
  else
    make -s installcheck REGRESS= ISOLATION="$tests" ISOLATION_TESTDB="simba_iso_${tests%% *}" \
      EXTRA_REGRESS_OPTS="--outputdir=$dir" >"$log" 2>&1 || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then grep -E '^(test|ok|not ok) ' "$log" || true; else cat "$log"; fi
  return "$rc"
}
export -f run

rc=0
{
  [ ${#regress[@]} -eq 0 ] || echo "regress:${regress[*]}"
  [ ${#spec_runs[@]} -eq 0 ] || printf 'isolation:%s\n' "${spec_runs[@]}"
} | xargs -d '\n' -P "$jobs" -I{} bash -c 'run "$1"' _ {} || rc=1
for r in "${last[@]}"; do run "$r" || rc=1; done

for diffs in output_suites/*/regression.diffs; do
  if [ -s "$diffs" ]; then echo "=== $diffs"; cat "$diffs"; fi
done
exit "$rc"
