#!/usr/bin/env bash
# Runs COMMAND against PostgreSQL with the simba extension created (with
# SIMBA_TEST_EDITION=portable: the portable edition, see below).
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
  if [ "${SIMBA_TEST_EDITION:-}" = portable ]; then
    # The portable edition (SIMBA_PORTABLE_SCRIPT, by default the one the
    # build writes, build/portable/simba_portable.sql) in a database of its
    # own, which a role without superuser (SIMBA_PORTABLE_OWNER) owns and
    # installs it into, as a managed service's admin would. Into schema
    # public: the client names simba's functions unqualified, and public is
    # on every role's default search_path. PGUSER stays the superuser the
    # tests' hooks need (pg_terminate_backend, CREATE ROLE, ...).
    : "${SIMBA_PORTABLE_SCRIPT:=$here/../../build/portable/simba_portable.sql}"
    [ -f "$SIMBA_PORTABLE_SCRIPT" ] ||
      { echo "pg-run.sh: no portable script $SIMBA_PORTABLE_SCRIPT (make portable)" >&2; exit 1; }
    SIMBA_PORTABLE_SCRIPT=$(cd "$(dirname "$SIMBA_PORTABLE_SCRIPT")" && pwd)/$(basename "$SIMBA_PORTABLE_SCRIPT")
    export SIMBA_PORTABLE_SCRIPT SIMBA_PORTABLE_OWNER=${SIMBA_PORTABLE_OWNER:-simba_portable_owner}
    export PGDATABASE=${SIMBA_PORTABLE_DATABASE:-simba_portable}
    psql -X -q -d postgres -c "CREATE ROLE $SIMBA_PORTABLE_OWNER LOGIN" >/dev/null 2>&1 || true
    psql -X -q -d postgres -c "CREATE DATABASE $PGDATABASE OWNER $SIMBA_PORTABLE_OWNER" >/dev/null 2>&1 || true
    # Parallel tests may race on the first install: retry once (the script
    # does nothing where the edition is there).
    install=(psql -X -q -v ON_ERROR_STOP=1 -U "$SIMBA_PORTABLE_OWNER" -v schema=public -f "$SIMBA_PORTABLE_SCRIPT")
    "${install[@]}" >/dev/null 2>&1 || "${install[@]}" >/dev/null
    # The cluster's simba.* settings (SIMBA_PG_CONF, e.g. pg.always's
    # simba.notify = always) are GUCs the portable edition never reads:
    # its owner puts them in simba_settings instead.
    while IFS='=' read -r name value; do
      name=$(echo "$name" | tr -d ' ') value=$(echo "$value" | sed "s/^ *//; s/ *$//; s/^'//; s/'$//")
      case $name in
        simba.*) psql -X -q -v ON_ERROR_STOP=1 -U "$SIMBA_PORTABLE_OWNER" -v v="$value" >/dev/null \
                   <<<"UPDATE simba_settings SET ${name#simba.} = :'v'" ;;
      esac
    done < <(tr ';' '\n' <<<"${SIMBA_PG_CONF:-}")
    exec "$@"
  fi
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
