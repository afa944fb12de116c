#!/usr/bin/env bash
# The project's test command (`make test`, .ci/run). On a fresh Debian 12
# machine: installs what is missing, builds and installs the extension and the
# C++ client, starts one throwaway cluster (test/with-cluster.sh) and runs
# every suite against it, the client's tests building meanwhile. Prints each
# suite's failures and a closing "N passed, N failed" line; exits non-zero if
# anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export ci_cxx_flags="-O2 -g1 -DNDEBUG"

if [ "${1:-}" != --suites ]; then
  # and Debian's packaging tools, for the package suite (test/package/smoke.sh)
  test/install-deps.sh dpkg-dev debhelper postgresql-server-dev-all help2man lintian
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  # The build tree configured first, with the tests, examples and benchmarks
  # (built inside the cluster, beside the first suites), so make's build
  # below compiles the library and the CLI once, as those will link them.
  # Debug info as line tables only (-g1): backtraces and sanitizer reports
  # keep file:line, and the C++ compiles take half as long.
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$ci_cxx_flags" \
    -DSIMBA_WERROR=ON -DSIMBA_REQUIRE_CLI=ON -DSIMBA_BUILD_TESTS=ON -DSIMBA_BUILD_EXAMPLES=ON \
    -DSIMBA_BUILD_BENCH=ON >/dev/null
  make -s -j2 SIMBA_WERROR=yes
  $sudo make -s install >/dev/null
  echo "simba: setup and build took $SECONDS s"
  exec test/with-cluster.sh "$0" --suites
fi

# --- inside the throwaway cluster ---------------------------------------
passed=0 failed=0 failed_suites=()
# What each failed suite said about its failure, printed again at the very
# end: CI keeps only the tail of a run's output.
why=$(mktemp)
tally() { # suite-name passed failed log
  passed=$((passed + $2)); failed=$((failed + $3))
  echo "simba: suite $1 took $((SECONDS - suite_start)) s"
  [ "$3" -eq 0 ] && return
  failed_suites+=("$1")
  local lines
  lines=$(grep -E '\.\.\. FAILED|^[0-9/ ]+Test +#.*(Failed|Timeout|Exception)|^valgrind finding:|failed:' "$4" || true)
  { echo "--- $1:"; head -8 <<<"${lines:-$(tail -5 "$4")}"; } >>"$why"
}

# Runs a suite command, echoing its output; counts "... ok" / "... FAILED"
# lines (pg_regress, isolation), and one failure if it broke without any.
run_pg_suite() { # name command...
  local name=$1 log rc; shift
  log=$(mktemp) suite_start=$SECONDS
  set +e; "$@" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}; set -e
  count_pg_suite "$name" "$rc" "$log"
  rm -f "$log"
}
# A finished suite's log, shown and counted as run_pg_suite counts it.
run_pg_suite_log() { # name rc log
  cat "$3"
  count_pg_suite "$@"
}
count_pg_suite() { # name rc log
  local ok bad
  ok=$(grep -cE '\.\.\. ok' "$3" || true)
  bad=$(grep -cE '\.\.\. FAILED' "$3" || true)
  [ "$2" -eq 0 ] || [ "$bad" -gt 0 ] || bad=1
  tally "$1" "$ok" "$bad" "$3"
}
# A suite run in the background (bg_suite) beside one in front, and shown
# and counted once it is done (bg_suite_done).
bg_suite() { # name command...
  local name=$1; shift
  (set +e; "$@" >"$bg_log/suite.$name" 2>&1; echo $? >"$bg_log/suite.$name.rc") &
  eval "bg_suite_pid_${name//-/_}=$! bg_suite_start_${name//-/_}=$SECONDS"
}
bg_suite_done() { # name
  local pid start
  eval "pid=\$bg_suite_pid_${1//-/_} start=\$bg_suite_start_${1//-/_}"
  wait "$pid" || true
  suite_start=$start
  run_pg_suite_log "$1" "$(cat "$bg_log/suite.$1.rc")" "$bg_log/suite.$1"
}
# Background builds, niced into the CPU the suites in front leave idle; a
# suite that needs one waits for it (built).
bg_log=$(mktemp -d)
# Waits for a background build; on failure prints its log's end and counts
# the suite that needed it as failed.
built() { # name pid
  suite_start=$SECONDS
  wait "$2" && { echo "simba: build $1 waited for $((SECONDS - suite_start)) s"; return 0; }
  echo "$1: its build failed:"; tail -40 "$bg_log/$1"
  tally "$1" 0 1 "$bg_log/$1"
  return 1
}
# The client's tests, examples and benchmarks, while the suites that need only
# the installed extension run (they mostly wait on leases).
nice -n 19 cmake --build build -j2 >"$bg_log/client" 2>&1 & client_build=$!

# the release version agrees across the control file, NEWS.md and debian/changelog
run_pg_suite version test/check-version.sh
# every relative link and #anchor of the markdown resolves (test/check-docs.sh)
run_pg_suite docs test/check-docs.sh
# the extension's files call each other without a cycle (from the objects built above)
run_pg_suite call-graph test/check-call-graph.sh
# pg_regress (test/sql/) and isolation (test/specs/), several runs at once, each
# in a database of its own (test/pg-suites.sh; make check runs them too)
# Beside them, as they mostly wait on leases: the same suites against the
# portable edition (portable/), installed by a database's owner without
# superuser (an alternate expected output or a skip only where docs/portable.md's
# table of differences explains it)
bg_suite portable test/portable/suites.sh
run_pg_suite regress+isolation test/pg-suites.sh
# the move between the editions with live leases
run_pg_suite portable-move test/portable/move.sh
# pg_dump / pg_restore of a database using simba: nothing lost, nothing reissued
run_pg_suite restore test/restore/roundtrip.sh
run_pg_suite portable-restore test/restore/roundtrip.sh --portable
# the Python client (python/): its pytest suite against this cluster, and
# pip install ./python offline (test/python/run.sh); beside the clock suite,
# which waits on a cluster of its own
bg_suite python test/python/run.sh
# the server's wall clock stepped an hour forward and back (an LD_PRELOAD
# shim), live and across restarts: no lease shortened or lengthened (30 s)
run_pg_suite clock test/clock/step.sh
bg_suite_done python
# (the portable suites went on beside the four above: their databases, roles
# and names are their own)
bg_suite_done portable
client=no
built client "$client_build" && client=yes
# the regress and isolation suites again, every backend of a second throwaway
# cluster under valgrind memcheck (make valgrind; here without the upgrade
# test and without --track-origins, which names where an undefined value came
# from, not whether there is one: make valgrind has both). Alone: beside a
# build, even a niced one, it took twice its 5 minutes. It leaves the build
# directory alone.
run_pg_suite valgrind env SIMBA_VALGRIND_SKIP=upgrade SIMBA_VALGRIND_ORIGINS=no test/valgrind/run.sh
# make install into staging directories (never / or /usr/local): what it
# installs, a C++20 program built with pkg-config and one with
# find_package(simba-client) against those files, each holding a mutex here,
# the build without CLI11 and nlohmann-json, and when ldconfig runs (30 s)
if [ $client = yes ]; then run_pg_suite install test/install/run.sh; fi

# Runs a command that ends in ctest, echoing its output; counts ctest's
# closing "N tests failed out of M" line (one failure if there is none).
run_ctest_suite() { # name command...
  local name=$1 log line total nbad; shift
  log=$(mktemp) suite_start=$SECONDS
  "$@" 2>&1 | tee "$log" || true
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$log" || echo "0 tests failed out of 1")
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  nbad=$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")
  tally "$name" $((total - nbad)) "$nbad" "$log"
  rm -f "$log"
}
# While ctest runs, niced into the CPU its tests leave idle, the two builds
# the last suites need: the client under ThreadSanitizer and the Debian
# packages (their C++ with line tables only too, -g1: the package suite
# installs them, nothing ships them).
nice -n 19 test/tsan/run.sh --build >"$bg_log/tsan" 2>&1 & tsan_build=$!
DEB_CXXFLAGS_APPEND=-g1 nice -n 19 make -s deb >"$bg_log/deb" 2>&1 & deb_build=$!
# and the library built by clang with its lock annotations checked
# (test/thread-safety/run.sh: a warning fails it), as niced
bg_suite thread-safety nice -n 19 test/thread-safety/run.sh
# C++: client (unit, integration, examples), TCK, SQL fuzzer: four at once
# (most wait on leases, and each test keeps to its own database, names, roles
# or cluster; the longest start first: COST).
faults='^(chaos|ha)$'
if [ $client = yes ]; then
  run_ctest_suite ctest ctest --test-dir build --output-on-failure --timeout 300 -j4 -LE "$faults"
  # the client's PostgreSQL tests and the TCK (direct, through PgBouncer)
  # against the portable edition in a database a role without superuser
  # owns and installed it into (client/test/pg-run.sh), while the builds
  # above go on; not pg.always (the same tests again under notify =
  # always), the hundred thousand services (the client's own load) nor
  # the conformance suite through PgBouncer (the pooler's path is the
  # clients', run above and by the TCK's PgBouncer cases here), for time
  run_ctest_suite ctest-portable env SIMBA_TEST_EDITION=portable \
    SIMBA_PORTABLE_SCRIPT="$PWD/build/portable/simba_portable.sql" ctest --test-dir build --output-on-failure \
    --timeout 300 -j4 -L '^(pg|tck)$' -E '^(pg\.(always|HundredThousandServices)|tck\.conformance\.pgbouncer)$'
fi
bg_suite_done thread-safety
# the client's unit and PostgreSQL tests again, built with ThreadSanitizer on
# a cluster of their own (make tsan)
if built tsan "$tsan_build"; then run_ctest_suite tsan test/tsan/run.sh; fi
# chaos, and failover on three-node Patroni and pg_auto_failover clusters
# (test/ha), one at a time on a machine left to them: their bounds (time to
# an owner after a fault, fair order) are about the service, not about a
# busy machine (about 8 minutes)
if [ $client = yes ]; then
  run_ctest_suite faults ctest --test-dir build --output-on-failure --timeout 500 -L "$faults"
fi
# Last, as it installs the packages over `make install`'s extension files:
# lintian, then the installed packages' smoke test on a throwaway cluster of
# its own
if built deb "$deb_build"; then
  run_pg_suite package env SIMBA_SMOKE_NO_BUILD=1 test/package/smoke.sh
fi
rm -rf "$bg_log"

echo
if [ ${#failed_suites[@]} -gt 0 ]; then
  cat "$why"
  echo "failed suites: ${failed_suites[*]}"
fi
rm -f "$why"
echo "simba: $passed passed, $failed failed, the suites in $SECONDS s"
[ "$failed" -eq 0 ]
