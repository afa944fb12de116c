#!/usr/bin/env bash
# `make check`: the inner loop. Builds and installs the extension, builds the
# client's unit tests (fake clocks, no server), and runs them and the Python
# client's (python/tests/test_lease.py: the deadline rule) with the
# extension's call-graph check (test/check-call-graph.sh) and the pg_regress
# and isolation suites (test/pg-suites.sh) on a throwaway cluster
# (test/with-cluster.sh). About 2 minutes once built; `make test` runs
# everything else too.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != --suites ]; then
  test/install-deps.sh
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  make -s -j2 SIMBA_CLI=no SIMBA_WERROR=yes
  $sudo make -s install SIMBA_CLI=no >/dev/null
  # The build tree make test uses, configured once with the tests on.
  [ -f build/CMakeCache.txt ] ||
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIMBA_WERROR=ON -DSIMBA_BUILD_TESTS=ON >/dev/null
  cmake --build build -j2 --target simba_unit_tests simba_metrics_tests simba_cli_unit_tests
  SECONDS=0
  test/with-cluster.sh "$0" --suites && rc=0 || rc=$?
  echo "simba: make check's suites took $SECONDS s"
  exit $rc
fi

rc=0
test/check-call-graph.sh || rc=1
ctest --test-dir build -L unit --output-on-failure -j2 || rc=1
/usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests/test_lease.py || rc=1
test/pg-suites.sh || rc=1
exit $rc
