#!/usr/bin/env bash
# `make tsan`: the client's unit and PostgreSQL tests built with
# ThreadSanitizer and run against a throwaway cluster (test/with-cluster.sh).
# Fails if a test fails or ThreadSanitizer reports anything (a race, a lock
# order inversion): halt_on_error makes a report fail its test. About 4
# minutes on 2 cores, more than half of it the build. See README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/tsan

# The client and its tests built with ThreadSanitizer. --build does only this
# (make test runs it in the background beside ctest): it leaves the installed
# extension alone, which running tests load. Debug info as line tables only
# (-g1): the reports keep file:line, the compile takes half as long.
build_client() {
  cmake -S client -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DSIMBA_WERROR=ON \
    -DSIMBA_BUILD_TESTS=ON -DSIMBA_BUILD_EXAMPLES=OFF -DSIMBA_BUILD_CLI=OFF \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
  cmake --build "$build" -j2 --target simba_unit_tests simba_pg_tests simba_fault_tests
}
if [ "${1:-}" = --build ]; then
  build_client
  exit
fi
if [ "${1:-}" != --suites ]; then
  test/install-deps.sh
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  make -s -j2 SIMBA_CLI=no SIMBA_WERROR=yes
  $sudo make -s install SIMBA_CLI=no >/dev/null
  build_client
  exec test/with-cluster.sh "$0" --suites
fi

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
# The long repetitions ran at full length in the plain suite; here they only
# need to run the same code under the race detector.
export SIMBA_OWNERSHIP_RUNS=${SIMBA_OWNERSHIP_RUNS:-1} SIMBA_LOCKER_LOSS_RUNS=${SIMBA_LOCKER_LOSS_RUNS:-50} \
  SIMBA_SCOPED_LOCK_SECONDS=${SIMBA_SCOPED_LOCK_SECONDS:-5}
# pg.always reruns tests that run here already, on a server setting that
# changes nothing in the client. Two at once: most wait on leases.
ctest --test-dir "$build" -R '^(unit|pg\.)' -E 'ThousandServices|^pg\.always$' --output-on-failure --timeout 300 -j2
