#!/usr/bin/env bash
# `make install` as a user gets it, into staging directories only (make test
# runs this inside its throwaway cluster; about 30 s on 2 cores, most of
# it building the library without the CLI):
#   make install DESTDIR=<stage>: the extension, libsimba-client, its headers,
#   the CMake package simba-client, simba-client.pc, the simba command and
#   the Python package simba (imported from there, holding a mutex);
#   a C++20 program (consumer.cpp) built with `pkg-config simba-client` and
#   one built with find_package(simba-client), against those files only, then
#   run (holding a mutex on the cluster and fence-checking it in a libpqxx
#   transaction when there is one: PGHOST set by
#   test/with-cluster.sh); make install-client prefix=<dir> (GNU's prefix);
#   make and make install when CLI11 and nlohmann-json cannot be found: the
#   library without the simba command, and one line naming the packages;
#   ldconfig run by the install step for /usr and /usr/local without DESTDIR
#   only, and a failing ldconfig not failing the install (a stub ldconfig
#   first in PATH: the system's linker cache is never touched).
# Nothing is installed outside the staging directories. Prints one
# "... ok" / "... FAILED" line per check.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${SIMBA_BUILD:-build}
work=$(cd "$(mktemp -d "${TMPDIR:-/tmp}/simba-install.XXXXXX")" && pwd -P)
trap 'rm -rf "$work"' EXIT

failed=0
check() { # description command...
  local what=$1; shift
  if "$@"; then echo "install: $what ... ok"; else echo "install: $what ... FAILED"; failed=1; fi
}

# A stub ldconfig ahead of the real one: it records its calls and fails when
# $work/ldconfig.fail exists.
mkdir "$work/bin"
cat >"$work/bin/ldconfig" <<EOF
#!/bin/sh
echo "ldconfig \$*" >>"$work/ldconfig.calls"
[ ! -e "$work/ldconfig.fail" ]
EOF
chmod 755 "$work/bin/ldconfig"
export PATH="$work/bin:$PATH"
ldconfig_calls() { [ -e "$work/ldconfig.calls" ] && wc -l <"$work/ldconfig.calls" || echo 0; }

# --- make install DESTDIR=... -----------------------------------------------
stage=$work/stage
usr=$stage/usr/local
# where the system's python3 reads /usr/local's packages (cmake/SimbaPython.cmake)
pydir=$usr/lib/python$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages
make_install() {
  make -s install DESTDIR="$stage" >"$work/install.log" 2>&1 || { cat "$work/install.log"; return 1; }
}
check "make install DESTDIR=$stage" make_install
installed_files() {
  local f missing=0
  for f in lib/libsimba-client.so lib/libsimba-client.so.2 include/simba/simba.hpp include/simba/semaphore.hpp \
           lib/cmake/simba-client/simba-client-config.cmake lib/cmake/simba-client/simba-client-config-version.cmake \
           lib/cmake/simba-client/simba-client-targets.cmake lib/pkgconfig/simba-client.pc bin/simba; do
    [ -e "$usr/$f" ] || { echo "missing: $usr/$f"; missing=1; }
  done
  [ -e "$pydir/simba/__init__.py" ] || { echo "missing: $pydir/simba/__init__.py"; missing=1; }
  local ext; ext=$(pg_config --sharedir)/extension/simba.control
  [ -e "$stage$ext" ] || { echo "missing: $stage$ext"; missing=1; }
  return $missing
}
check "it installed the library, headers, CMake package, simba-client.pc, simba, the Python client and the extension" installed_files
check "no ldconfig under DESTDIR" test "$(ldconfig_calls)" -eq 0
check "the CMake package asks for cxx_std_17 as a compile feature, no -std= option" \
  sh -c "grep -q 'INTERFACE_COMPILE_FEATURES \"cxx_std_17\"' '$usr/lib/cmake/simba-client/simba-client-targets.cmake' &&
         ! grep -n -- '-std=' '$usr/lib/cmake/simba-client/'*.cmake"

# The headers a build read, from its dependency file: all simba/ headers
# must be the staged ones (not /usr/include's or /usr/local/include's).
staged_headers() { # depfile
  local used others
  used=$(tr ' \\' '\n\n' <"$1" | grep '/simba/[a-z_]*\.hpp$' | xargs -r realpath -m)
  grep -qx "$usr/include/simba/simba.hpp" <<<"$used" || { echo "simba.hpp not from $usr/include in $1"; return 1; }
  others=$(grep -v "^$usr/include/simba/" <<<"$used" || true)
  [ -z "$others" ] || { echo "headers from elsewhere: $others"; return 1; }
}
# The program loads the staged library.
staged_lib() { # program
  local libs  # (not ldd | grep -q: with pipefail, ldd's SIGPIPE would fail it)
  libs=$(LD_LIBRARY_PATH=$usr/lib ldd "$1")
  grep -q "libsimba-client.so.2 => $usr/lib/libsimba-client.so.2 " <<<"$libs" || { echo "$libs"; return 1; }
}

# --- the C++20 consumers -----------------------------------------------------
export PKG_CONFIG_PATH=$usr/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
no_std_flag() {
  ! pkg-config --cflags simba-client | grep -- -std=
}
check "pkg-config --cflags simba-client has no -std= flag" no_std_flag
pkgconfig_build() {
  [ "$(pkg-config --variable=pcfiledir simba-client)" = "$usr/lib/pkgconfig" ] ||
    { echo "simba-client.pc found in $(pkg-config --variable=pcfiledir simba-client)"; return 1; }
  # The .pc flags last: a -std= in them would win over -std=c++20.
  # shellcheck disable=SC2046
  g++ -std=c++20 -Wall -MD -MF "$work/consumer-pc.d" -o "$work/consumer-pc" test/install/consumer.cpp \
    $(pkg-config --cflags --libs simba-client) &&
    staged_headers "$work/consumer-pc.d" && staged_lib "$work/consumer-pc"
}
check "a C++20 program built with pkg-config simba-client" pkgconfig_build
cmake_build() {
  { cmake -S test/install -B "$work/cmake" -DCMAKE_PREFIX_PATH="$usr" &&
    grep -q "^simba-client_DIR:PATH=$usr/lib/cmake/simba-client$" "$work/cmake/CMakeCache.txt" &&
    cmake --build "$work/cmake" -j2 &&
    staged_headers "$(find "$work/cmake" -name 'consumer.cpp.o.d')" &&
    staged_lib "$work/cmake/consumer"; } >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; return 1; }
}
check "a C++20 program built with find_package(simba-client)" cmake_build

# Run them on the staged library; on the cluster, each holds a mutex.
lock=()
if [ -n "${PGHOST:-}" ]; then
  export PGDATABASE=simba_install_test
  PGOPTIONS="-c client_min_messages=warning" psql -XqAt -v ON_ERROR_STOP=1 -d postgres \
    -c "DROP DATABASE IF EXISTS $PGDATABASE" -c "CREATE DATABASE $PGDATABASE" >/dev/null &&
    psql -XqAt -v ON_ERROR_STOP=1 -c "CREATE EXTENSION simba" >/dev/null ||
    { echo "install: a database with the extension ... FAILED"; failed=1; }
  lock=(--lock install-consumer)
fi
run() { # program
  [ -x "$1" ] || return 1
  LD_LIBRARY_PATH=$usr/lib "$1" "${lock[@]}"
}
check "the pkg-config program runs${lock:+ and holds a mutex}" run "$work/consumer-pc"
check "the find_package program runs${lock:+ and holds a mutex}" run "$work/cmake/consumer"
# The staged Python package, from outside the source tree (whose python/ it
# must not import), on the cluster holding a mutex.
python_client() {
  (cd "$work" && PYTHONPATH=$pydir SIMBA_LOCK=${lock:+install-python} /usr/bin/python3 - "$pydir" <<'EOF'
import os, sys
import simba
assert simba.__file__.startswith(sys.argv[1] + "/simba/"), simba.__file__
if os.environ["SIMBA_LOCK"]:
    with simba.Client("") as client:
        with client.lock(os.environ["SIMBA_LOCK"], timeout=10) as lease:
            assert lease.fence > 0, lease
EOF
  )
}
check "the Python client imports from the install${lock:+ and holds a mutex}" python_client
if [ -n "${PGHOST:-}" ]; then
  psql -XqAt -d postgres -c "DROP DATABASE IF EXISTS $PGDATABASE" >/dev/null || true
fi

# --- the guides' C++ snippets ------------------------------------------------
# Every ```cpp block of README.md and client/README.md, compiled as C++17
# (the minimum) against the staged headers and linked with the package's
# pkg-config line, so that a call it makes to a library the line misses
# fails here. A block with a main() is a whole
# program; any other is a fragment, compiled in a block inside a function
# that gives it what the guide takes as given (factory, contender, id, ...),
# its "..." lines (elided code) dropped. Errors point at the guide's lines.
mkdir "$work/snippets"
cat >"$work/snippets/given.hpp" <<'GIVEN'
#include <simba/simba.hpp>

#include <httplib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

struct {
    void log(const char*, const std::string&) {}
} my_logger;
inline void export_with_fence(std::int64_t) {}
inline void export_with_fence(std::int64_t, simba::SteadyClock::time_point) {}
inline void stop_exporting() {}
inline void run_worker(std::int64_t) {}
inline void cleanup() {}
inline void serve(std::int64_t) {}
inline void publish(std::int64_t) {}
inline void settle(std::int64_t, std::int64_t) {}
GIVEN
snippet_compiles() { # guide line
  local src=$work/snippets/${1//\//_}-$2.cpp
  {
    if grep -q 'int main(' "$src.body"; then
      echo "#line $(($2 + 1)) \"$1\""; cat "$src.body"
    else
      echo "#include \"$work/snippets/given.hpp\""
      echo "void snippet(simba::pg::ContendServiceFactory& factory, std::shared_ptr<simba::MutexContender> contender,"
      echo "             simba::SteadyClock::time_point until, const std::string& id) { {"
      echo "#line $(($2 + 1)) \"$1\""
      grep -vx ' *\.\.\. *' "$src.body" || true
      echo "} }"
    fi
    # linked, so that every call a snippet makes must resolve (not run: it would contend)
    grep -q 'int main(' "$src.body" || echo "int main() { return 0; }"
  } >"$src"
  # shellcheck disable=SC2046
  # (cpp-httplib: given.hpp's, for the guide's metrics endpoint)
  g++ -std=c++17 -Wno-unused-result $(pkg-config --cflags simba-client) -o "$src.out" "$src" \
    $(pkg-config --libs simba-client cpp-httplib)
}
for guide in README.md client/README.md; do
  # one file per block: <guide>-<line of its opening fence>.cpp.body
  awk -v out="$work/snippets/${guide//\//_}" '
    /^ *```(cpp|c\+\+) *$/ { body = out "-" NR ".cpp.body"; printf "" >body; next }
    /^ *``` *$/ && body != "" { close(body); body = ""; next }
    body != "" { print >>body }' "$guide"
  for line in $(awk '/^ *```(cpp|c\+\+) *$/ { print NR }' "$guide"); do
    check "$guide:$line: the C++ snippet compiles and links" snippet_compiles "$guide" "$line"
  done
done

# --- another prefix ----------------------------------------------------------
prefix=$work/prefix
prefix_install() {
  make -s install-client prefix="$prefix" >"$work/prefix.log" 2>&1 || { cat "$work/prefix.log"; return 1; }
  [ -e "$prefix/include/simba/simba.hpp" ] && [ -e "$prefix/lib/pkgconfig/simba-client.pc" ] &&
    [ -e "$prefix/lib/cmake/simba-client/simba-client-config.cmake" ] && [ -e "$prefix/bin/simba" ]
}
check "make install-client prefix=$prefix" prefix_install
check "no ldconfig for a prefix other than /usr and /usr/local" test "$(ldconfig_calls)" -eq 0
# Its simba finds its library through its RPATH.
check "$prefix/bin/simba --version" sh -c "'$prefix/bin/simba' --version >/dev/null"

# --- without CLI11 and nlohmann-json ------------------------------------------
# A build dir whose configure cannot find them (CMAKE_DISABLE_FIND_PACKAGE_*,
# as if they were not installed): make builds the library without the simba
# command and says, in one line, what to install for it.
nocli=$work/build-nocli
nocli_make() {
  cmake -S . -B "$nocli" -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON >"$work/nocli.log" 2>&1 &&
    make -s SIMBA_BUILD="$nocli" >>"$work/nocli.log" 2>"$work/nocli.err" || { cat "$work/nocli.log" "$work/nocli.err"; return 1; }
  [ "$(grep -c '^simba:' "$work/nocli.err")" -eq 1 ] &&
    grep -q '^simba: .*install libcli11-dev nlohmann-json3-dev' "$work/nocli.err" ||
    { echo "make said:"; cat "$work/nocli.err"; return 1; }
}
check "make without CLI11 and nlohmann-json names libcli11-dev and nlohmann-json3-dev" nocli_make
nocli_install() {
  make -s install-client SIMBA_BUILD="$nocli" DESTDIR="$work/stage-nocli" >"$work/nocli-install.log" 2>&1 ||
    { cat "$work/nocli-install.log"; return 1; }
  [ -e "$work/stage-nocli/usr/local/lib/libsimba-client.so.2" ] &&
    [ -e "$work/stage-nocli/usr/local/include/simba/simba.hpp" ] &&
    [ ! -e "$work/stage-nocli/usr/local/bin/simba" ]
}
check "make install without them installs the library, no simba command" nocli_install

# --- ldconfig for a system prefix --------------------------------------------
# The install step's ldconfig part alone (component ldconfig: it installs no
# file), as `sudo make install` runs it.
ldconfig_step() { # prefix
  env -u DESTDIR cmake --install "$build" --component ldconfig --prefix "$1" >"$work/ldconfig.log" 2>&1 ||
    { cat "$work/ldconfig.log"; return 1; }
  [ ! -s "$build/install_manifest_ldconfig.txt" ] || { echo "it installed files"; return 1; }
}
ran_ldconfig() { # prefix expected-calls
  ldconfig_step "$1" && [ "$(ldconfig_calls)" -eq "$2" ]
}
check "ldconfig after installing into /usr/local" ran_ldconfig /usr/local 1
check "ldconfig after installing into /usr" ran_ldconfig /usr/ 2
touch "$work/ldconfig.fail"
failing_ldconfig() {
  ldconfig_step /usr/local && [ "$(ldconfig_calls)" -eq 3 ] && grep -q 'run it as root' "$work/ldconfig.log"
}
check "a failing ldconfig does not fail the install" failing_ldconfig
exit $failed
