#!/usr/bin/env bash
# The release version is written in five places that must agree (make test
# runs this; NEWS.md says how to bump):
#   extension/simba.control  default_version: the source (PGXS and cmake read it)
#   an install script or an upgrade path to it (extension/simba--*.sql)
#   NEWS.md                  its newest "## X.Y" entry
#   debian/changelog         its newest entry's upstream version (X.Y-N)
#   python/pyproject.toml    the Python client's version (and simba.__version__)
# and so is the client library's ABI version N (SIMBA_CLIENT_SOVERSION in
# client/CMakeLists.txt): the Debian runtime package is libsimba-clientN.
# Prints one "... ok" / "... FAILED" line per check; exits 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=0
check() { # description command...
  local what=$1; shift
  if "$@"; then echo "version: $what ... ok"; else echo "version: $what ... FAILED"; failed=1; fi
}

v=$(sed -n "s/^default_version = '\([0-9.]*\)'$/\1/p" extension/simba.control)
news=$(sed -n 's/^## \([0-9][0-9.]*\)\( .*\)\{0,1\}$/\1/p' NEWS.md | head -1)
deb=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' debian/changelog)
deb_upstream=${deb%-*}
echo "version: control $v, NEWS.md $news, debian/changelog $deb"

check "extension/simba.control has a default_version" test -n "$v"
check "NEWS.md's newest entry is $v" test "$news" = "$v"
check "debian/changelog's newest entry is $v-N" test "$deb_upstream" = "$v"
py=$(sed -n 's/^version = "\([0-9.]*\)"$/\1/p' python/pyproject.toml)
py_module=$(sed -n 's/^__version__ = "\([0-9.]*\)"$/\1/p' python/simba/__init__.py)
check "python/pyproject.toml and simba.__version__ are $v" test "$py" = "$v" -a "$py_module" = "$v"
# CREATE EXTENSION needs simba--V.sql or an upgrade chain from an install
# script; the newest upgrade script must end at V.
install_or_upgrade() { [ -e "extension/simba--$v.sql" ] || compgen -G "extension/simba--*--$v.sql" >/dev/null; }
check "extension/simba--$v.sql or an upgrade to $v exists" install_or_upgrade
newest_upgrade() {
  local newest
  newest=$(ls extension/simba--*--*.sql 2>/dev/null | sed 's/.*--\([0-9.]*\)\.sql$/\1/' | sort -V | tail -1)
  [ -z "$newest" ] || [ "$newest" = "$v" ]
}
check "the newest upgrade script ends at $v" newest_upgrade

so=$(sed -n 's/^set(SIMBA_CLIENT_SOVERSION \([0-9]*\))$/\1/p' client/CMakeLists.txt)
echo "version: libsimba-client.so.$so"
check "client/CMakeLists.txt sets SIMBA_CLIENT_SOVERSION" test -n "$so"
runtime_package() { # the package and libsimba-client-dev's dependency on it
  local f
  for f in debian/control debian/control.in; do
    [ "$(grep -o '^Package: libsimba-client[0-9]*$' "$f")" = "Package: libsimba-client$so" ] &&
      grep -qx " libsimba-client$so (= \${binary:Version})," "$f" || { echo "$f"; return 1; }
  done
}
check "debian/control and control.in name the runtime package libsimba-client$so" runtime_package
package_files() {
  [ -e "debian/libsimba-client$so.install" ] &&
    [ -z "$(ls debian/libsimba-client[0-9]*.* | grep -v "^debian/libsimba-client$so\.")" ]
}
check "debian/libsimba-client$so.* are its files, no other libsimba-clientN's" package_files
exit $failed
