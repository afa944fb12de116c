#!/usr/bin/env bash
# Installs the Debian 12 packages simba builds and tests with, only those
# missing, plus any packages named as arguments (bench/install-deps.sh).
# Needs root (or sudo) when anything is missing; prints what it does.
set -euo pipefail

pkgs=(
  make g++ cmake pkg-config
  postgresql-15 postgresql-server-dev-15 postgresql-contrib
  libpq-dev libpqxx-dev libgtest-dev
  nlohmann-json3-dev libhiredis-dev libcli11-dev
  libcpp-httplib-dev prometheus prometheus-postgres-exporter tmux python3-yaml
  pgbouncer valgrind clang
  python3-psycopg python3-pytest python3-pytest-xdist python3-setuptools python3-pip
  patroni etcd-server etcd-client procps postgresql-15-auto-failover
  "$@"
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "simba: installing missing packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "simba: run as root or install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
# The tests run their own throwaway cluster: keep Debian from creating and
# starting a system-wide one when the server package is installed.
if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
  $sudo mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
log=$(mktemp)
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
       $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "simba: apt-get failed (see above)" >&2
  exit 1
fi
rm -f "$log"
