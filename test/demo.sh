#!/usr/bin/env bash
# `make demo`: install what is missing, build and install the extension, and
# walk through test/demo.sql on a throwaway cluster that is removed afterwards.
# `make psql` (SIMBA_DEMO_SHELL=1) opens an interactive psql there instead.
set -euo pipefail
cd "$(dirname "$0")/.."
test/install-deps.sh
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
make -s
$sudo make -s install >/dev/null
if [ "${SIMBA_DEMO_SHELL:-0}" = 1 ]; then
  exec test/with-cluster.sh sh -c 'psql -X -c "CREATE EXTENSION simba" && psql -X'
fi
exec test/with-cluster.sh psql -X -q -f test/demo.sql
