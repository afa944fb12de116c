#!/usr/bin/env bash
# `make ha`: the long HA run on the Patroni cluster (30 minutes by default;
# SIMBA_HA_SECONDS overrides), strict synchronous mode, every fault kind;
# then the asynchronous control; then 10 minutes of the same on
# pg_auto_failover (SIMBA_HA_PGAF_SECONDS) and its control. Builds what it
# needs first, like `make test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
test/install-deps.sh
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
make -s -j2
$sudo make -s install >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIMBA_BUILD_TESTS=ON >/dev/null
cmake --build build -j2 --target simba_chaos_worker simba_chaos_nemesis simba_chaos_checker simba_chaos_run_cmd \
  simba_fault_proxy simba_cli simba_tck_postgres
bins=(--bin-dir build/test/chaos --proxy-bin build/test/fault_proxy/simba_fault_proxy --simba-bin build/client/simba)
test/ha/run.sh "${bins[@]}" --tck-bin build/tck/simba_tck_postgres --mode strict --duration "${SIMBA_HA_SECONDS:-1800}"
test/ha/run.sh "${bins[@]}" --mode async --kinds stall-kill --duration 60
test/ha/run.sh "${bins[@]}" --manager pgaf --mode strict --duration "${SIMBA_HA_PGAF_SECONDS:-600}"
test/ha/run.sh "${bins[@]}" --manager pgaf --mode async --kinds stall-kill --duration 25
