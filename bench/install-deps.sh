#!/usr/bin/env bash
# Installs what `make bench` needs on Debian 12, only what is missing: the
# project's build and test packages, plus the benchmarks' own: redis-server
# (the in-memory reference of benchmark 1; the benchmark starts its own
# instance on a unix socket, no TCP port), gnuplot-nox (charts), and etcd-server
# with python3 (benchmark 7, make bench-scale).
set -euo pipefail
cd "$(dirname "$0")/.."
exec test/install-deps.sh redis-server gnuplot-nox etcd-server python3
