#!/usr/bin/env bash
# `make demo`: on a fresh Debian 12 machine, installs what is missing, builds
# and installs the extension, builds the `simba` CLI, and runs the live
# scenario (test/demo/scenario.sh) on a throwaway cluster that is stopped and
# removed afterwards: five `simba run` contenders, a crash, a takeover, a
# paused leader whose late write is refused by the fence check, a clean
# handoff; a timeline on stdout and an SVG under build/demo/.
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
build=${SIMBA_BUILD_DIR:-build}
echo "simba: building the simba CLI ($build/client/simba)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target simba_cli >/dev/null
exec test/with-cluster.sh env SIMBA_BIN="$PWD/$build/client/simba" SIMBA_DEMO_OUT="$PWD/$build/demo" \
  test/demo/scenario.sh
