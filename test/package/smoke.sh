#!/usr/bin/env bash
# The Debian packages as a user gets them (make test runs this; about
# 2 minutes on 2 cores, most of it the package build):
#   make deb and lintian, then apt-get install of the five packages, then on a throwaway
#   cluster (test/with-cluster.sh): CREATE EXTENSION simba from
#   postgresql-15-simba, a program built against libsimba-client-dev with
#   find_package(simba-client) and with pkg-config, `simba --help` and one
#   `simba run` from simba-cli, a lock taken with python3-simba.
# Only installed files are used, never the source tree's: the checks fail if
# a file came from elsewhere (a `make install` under /usr/local, say).
# Prints one "... ok" / "... FAILED" line per check. Needs root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo

if [ "${1:-}" != --inside ]; then
  # Debian's packaging tools, beside what make test installs.
  test/install-deps.sh dpkg-dev debhelper postgresql-server-dev-all help2man lintian
  # SIMBA_SMOKE_NO_BUILD=1: the packages already in build/deb.
  if [ "${SIMBA_SMOKE_NO_BUILD:-0}" != 1 ]; then
    mkdir -p build
    make -s deb >build/deb.log 2>&1 || { tail -40 build/deb.log; echo "package: make deb ... FAILED"; exit 1; }
    echo "package: make deb ... ok"
  fi
  # Clean but for the tags debian/*.lintian-overrides explain.
  if lintian --fail-on error,warning build/deb/simba_*.changes >build/lintian.log 2>&1; then
    echo "package: lintian ... ok"
  else
    cat build/lintian.log; echo "package: lintian ... FAILED"; exit 1
  fi
  debs=()
  for p in postgresql-15-simba libsimba-client2 libsimba-client-dev simba-cli python3-simba; do
    debs+=("$root/$(ls build/deb/${p}_*.deb)")
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    --allow-downgrades --reinstall "${debs[@]}" >build/deb-install.log 2>&1 ||
    { cat build/deb-install.log; echo "package: apt-get install ... FAILED"; exit 1; }
  echo "package: apt-get install ${debs[*]##*/} ... ok"
  exec test/with-cluster.sh "$0" --inside
fi

# --- inside the throwaway cluster ---------------------------------------
failed=0
check() { # description command...
  local what=$1; shift
  if "$@"; then echo "package: $what ... ok"; else echo "package: $what ... FAILED"; failed=1; fi
}
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$multiarch
work=$(mktemp -d "${TMPDIR:-/tmp}/simba-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The packaged library even where a `make install` put another in /usr/local/lib.
export LD_LIBRARY_PATH=$libdir

# The extension files on disk are the package's, byte for byte.
check "postgresql-15-simba's files unchanged on disk (dpkg --verify)" \
  sh -c '[ -z "$(dpkg --verify postgresql-15-simba)" ]'
check "CREATE EXTENSION simba" \
  psql -XqAt -o /dev/null -v ON_ERROR_STOP=1 -c "CREATE EXTENSION simba" -c "SELECT simba_acquire('smoke', 'sql')"

# The packaged headers, CMake package and .pc, not what a `make install` put
# under /usr/local (make test runs one before this), which compilers,
# pkg-config and find_package all search before /usr: CMAKE_PREFIX_PATH=/usr,
# PKG_CONFIG_PATH, and an -I directory whose simba/ is a link to
# /usr/include/simba. Each build's dependency file must then show every simba
# header read from /usr/include/simba.
mkdir "$work/include" && ln -s /usr/include/simba "$work/include/simba"
export PKG_CONFIG_PATH=$libdir/pkgconfig
packaged_headers() { # depfile
  local used
  used=$(tr ' \\' '\n\n' <"$1" | grep '/simba/[a-z_]*\.hpp$' | xargs -r realpath -m)
  grep -qx /usr/include/simba/simba.hpp <<<"$used" && ! grep -v '^/usr/include/simba/' <<<"$used" ||
    { echo "simba headers read: $used"; return 1; }
}
# find_package(simba-client) must find the packaged config, not another.
cmake_build() {
  cmake -S test/package -B "$work/cmake" -DCMAKE_PREFIX_PATH=/usr -DCMAKE_CXX_FLAGS="-I$work/include" \
      >"$work/cmake.log" 2>&1 &&
    grep -q "from $libdir/cmake/simba-client" "$work/cmake.log" &&
    cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1 &&
    packaged_headers "$(find "$work/cmake" -name 'smoke.cpp.o.d')" >>"$work/cmake.log" 2>&1 ||
    { cat "$work/cmake.log"; return 1; }
}
check "a program built with find_package(simba-client)" cmake_build
pkgconfig_build() {
  [ "$(pkg-config --variable=pcfiledir simba-client)" = "$libdir/pkgconfig" ] &&
    g++ -I"$work/include" -MD -MF "$work/smoke-pc.d" -o "$work/smoke-pc" test/package/smoke.cpp \
      $(pkg-config --cflags --libs simba-client) &&
    packaged_headers "$work/smoke-pc.d"
}
check "a program built with pkg-config simba-client" pkgconfig_build
packaged_lib() {  # (ldd's output first: ldd | grep -q can fail on SIGPIPE under pipefail)
  local cm pc
  cm=$(ldd "$work/cmake/smoke") && pc=$(ldd "$work/smoke-pc") &&
    grep -q "libsimba-client.so.2 => $libdir/libsimba-client.so.2 " <<<"$cm" &&
    grep -q "libsimba-client.so.2 => $libdir/libsimba-client.so.2 " <<<"$pc"
}
check "both link the packaged libsimba-client.so.2" packaged_lib
check "the find_package program holds a mutex" "$work/cmake/smoke"
check "the pkg-config program holds a mutex" "$work/smoke-pc"

check "simba --help (simba-cli)" sh -c '/usr/bin/simba --help >/dev/null'
check "simba run -- true (simba-cli)" /usr/bin/simba run --mutex package-smoke -- true
# the operators' kit ships with simba-cli, unchanged and usable where it lands
check "simba-cli's alert rules pass their tests in /usr/share/simba" \
  sh -c 'cd /usr/share/simba/prometheus && promtool test rules simba-alerts.test.yml >/dev/null'
check "simba-cli ships the dashboard and the exporter queries" \
  test -s /usr/share/simba/grafana/simba.json -a -s /usr/share/simba/postgres_exporter.yaml
# the portable edition ships with simba-cli: a database's owner, no
# superuser, installs it from /usr/share/simba/portable and takes a lock
portable() {
  psql -Xq -d postgres -c "DROP DATABASE IF EXISTS smoke_portable" -c "DROP ROLE IF EXISTS smoke_portable" \
    -c "CREATE ROLE smoke_portable LOGIN" -c "CREATE DATABASE smoke_portable OWNER smoke_portable" &&
    psql -Xq -U smoke_portable -d smoke_portable -v ON_ERROR_STOP=1 -v schema=simba \
      -f /usr/share/simba/portable/simba_portable.sql &&
    [ "$(psql -XAtq -U smoke_portable -d smoke_portable -c "SELECT owner_id FROM simba.simba_acquire('m', 'me')")" = me ] &&
    test -s /usr/share/simba/portable/move.sql
}
check "a database's owner installs the packaged portable edition and takes a lock" portable
# python3-simba: the system's python3 imports it from the package (run
# outside the source tree, whose python/ it must not find, and without
# /usr/local's packages, where make test's make install put another) and
# takes a lock
python_client() {
  (cd "$work" && /usr/bin/python3 - <<'EOF'
import sys
sys.path = [p for p in sys.path if not p.startswith("/usr/local/")]
import simba
assert simba.__file__.startswith("/usr/lib/python3/dist-packages/simba/"), simba.__file__
with simba.Client("") as client:
    with client.lock("package-smoke-py", timeout=10) as lease:
        assert lease.fence > 0, lease
EOF
  )
}
check "python3-simba's files unchanged on disk (dpkg --verify)" sh -c '[ -z "$(dpkg --verify python3-simba)" ]'
check "the packaged Python client takes a lock" python_client
exit $failed
