#!/usr/bin/env bash
# `make chaos`: the long fault-injection run (15 minutes by default;
# SIMBA_CHAOS_SECONDS overrides), with the same report as the CI version.
# Builds the extension and the C++ programs first, like `make test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
test/install-deps.sh
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
make -s -j2 SIMBA_WERROR=yes
$sudo make -s install >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIMBA_WERROR=ON -DSIMBA_BUILD_TESTS=ON >/dev/null
cmake --build build -j2 --target simba_chaos_worker simba_chaos_nemesis simba_chaos_checker
exec test/chaos/run.sh --bin-dir build/test/chaos --duration "${SIMBA_CHAOS_SECONDS:-900}"
