#!/usr/bin/env bash
# Runs COMMAND against PostgreSQL with the simba extension created.
#  - inside test/with-cluster.sh (SIMBA_PGDATA set) or with SIMBA_TEST_USE_ENV=1:
#    the server from libpq's environment;
#  - otherwise: a throwaway cluster from the repository's test/with-cluster.sh;
#  - neither available: exit 77 (ctest reports the test as skipped).
set -euo pipefail
#  --own-cluster: always a fresh cluster (for tests that restart the server).
#  [WRAPPER...] BINARY --gtest_list_tests [...]: BINARY lists its tests at once,
#    with no server (gtest_discover_tests, at build time).
for ((i = 2; i <= $#; i++)); do
  if [ "${!i}" = --gtest_list_tests ]; then exec "${@:i-1}"; fi
done
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../test/with-cluster.sh"
if [ "${1:-}" = --own-cluster ]; then
  shift
  if [ "${SIMBA_PG_RUN_INSIDE:-0}" != 1 ]; then
    [ -x "$cluster" ] || { echo "pg-run.sh: no test/with-cluster.sh" >&2; exit 77; }
    SIMBA_PG_RUN_INSIDE=1 exec "$cluster" "$0" --own-cluster "$@"
  fi
fi
if [ -n "${SIMBA_PGDATA:-}" ] || [ "${SIMBA_TEST_USE_ENV:-0}" = 1 ]; then
  # Parallel tests may race on CREATE EXTENSION: retry once.
  psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION IF NOT EXISTS simba' >/dev/null 2>&1 ||
    psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION IF NOT EXISTS simba' >/dev/null
  exec "$@"
fi
if [ -x "$cluster" ]; then
  exec "$cluster" "$0" "$@"
fi
echo "pg-run.sh: no PostgreSQL (run inside test/with-cluster.sh or set SIMBA_TEST_USE_ENV=1)" >&2
exit 77
