#!/usr/bin/env bash
# `make valgrind`: the pg_regress and isolation suites with every backend of
# a throwaway cluster under valgrind memcheck. Fails if a suite fails or if
# valgrind reports anything (after test/valgrind/postgres.supp, which holds
# the stock server's own false positives, each explained). See README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" != --suites ]; then
  test/install-deps.sh
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  make -s -j2 SIMBA_CLI=no SIMBA_WERROR=yes
  $sudo make -s install SIMBA_CLI=no >/dev/null
  logs=$(mktemp -d "${TMPDIR:-/tmp}/simba-valgrind.XXXXXX")
  chmod 777 "$logs"
  SIMBA_VALGRIND=1 SIMBA_VALGRIND_LOGS=$logs test/with-cluster.sh "$0" --suites "$logs" && rc=0 || rc=$?
  if [ $rc -eq 0 ]; then rm -rf "$logs"; else echo "valgrind: logs kept in $logs"; fi
  exit $rc
fi

logs=$2
failed=()
# SIMBA_VALGRIND_SKIP: regress tests left out (make test leaves out upgrade:
# 2 minutes under valgrind installing every version's scripts, whose C entry
# points the other tests call too).
# Two runs at once, each in its own database (test/pg-suites.sh): under
# valgrind the regress suite keeps a core busy while the specs mostly wait on
# their sessions' locks and sleeps. With three, a backend slowed that much
# more missed the 8 s leases of the session specs.
SIMBA_SUITE_JOBS=${SIMBA_SUITE_JOBS:-2} test/pg-suites.sh --skip "${SIMBA_VALGRIND_SKIP:-}" ||
  failed+=(regress+isolation)
# With --quiet, valgrind writes a process's log only when it finds something.
reports=$(find "$logs" -name 'valgrind.*.log' -size +0 | sort)
if [ -n "$reports" ]; then
  failed+=(valgrind)
  # the first report in full, then each process's first finding
  echo "=== $(echo "$reports" | head -1)"; head -80 "$(echo "$reports" | head -1)"
  for f in $reports; do echo "$f: $(grep -m1 -E '^==[0-9]+== [A-Z]' "$f")"; done
  # each process's first finding on one line, with the functions of its
  # stack: the part of the output CI keeps shows where it was
  for f in $reports; do
    echo "valgrind finding: $(awk '/^==[0-9]+== [A-Z]/ && !k { sub(/^==[0-9]+== /, ""); k = $0; next }
      k && /^==[0-9]+== +(at|by) / { n++; if (n <= 10) s = s " < " $4 }
      k && /^==[0-9]+==  [A-Z]/ { n = 0; s = s " | origin:" }
      k && /^==[0-9]+== *$/ { exit }
      END { print k " at" substr(s, 3) }' "$f")"
  done
fi
echo "valgrind: $(find "$logs" -name 'valgrind.*.log' | wc -l) processes, $(echo -n "$reports" | grep -c . || true) with findings"
[ ${#failed[@]} -eq 0 ] || { echo "valgrind: failed: ${failed[*]}"; exit 1; }
echo "valgrind: clean"
