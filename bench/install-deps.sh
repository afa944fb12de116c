#!/usr/bin/env bash
# Installs what `make bench` needs on Debian 12, only what is missing: the
# project's build and test packages (test/install-deps.sh), plus the
# benchmarks' own: redis-server (the in-memory reference of benchmark 1; the
# benchmark starts its own instance on a unix socket, no TCP port),
# gnuplot-nox (charts) and postgresql-contrib (pg_stat_statements, pgbench).
set -euo pipefail
cd "$(dirname "$0")/.."
test/install-deps.sh

pkgs=(redis-server gnuplot-nox postgresql-contrib)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "simba bench: installing missing packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "simba bench: run as root or install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
