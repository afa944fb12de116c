#!/usr/bin/env bash
# The Python client (python/): its pytest suite against the server in
# libpq's environment (make test runs it inside its throwaway cluster),
# importing the source tree's package (also against the portable edition),
# then `pip install ./python` offline (Debian's setuptools, no build
# isolation) into a scratch directory and an import from there. Prints one "python: TEST ... ok" / "... FAILED" line
# per test (pytest's own report above them); exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The system's interpreter, which has python3-psycopg: not a pyenv's or a
# virtualenv's first on PATH.
py=${SIMBA_PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/simba-python.XXXXXX")
trap 'rm -rf "$work"' EXIT

# test_portable.py installs the portable edition's script as a database owner
make -s portable >/dev/null
export SIMBA_PORTABLE_SCRIPT=$PWD/build/portable/simba_portable.sql
rc=0
# Two workers, a test file each at a time (a file's tests share its
# database): most of the suite waits out leases.
workers=(); "$py" -c 'import xdist' 2>/dev/null && workers=(-n 2 --dist loadfile)
"$py" -m pytest -v -p no:cacheprovider -o faulthandler_timeout=60 "${workers[@]}" python/tests >"$work/pytest.log" 2>&1 || rc=1
cat "$work/pytest.log"
# "path::test PASSED" alone, "[gw0] [ 10%] PASSED path::test" with workers
sed -nE 's/^([^ ]*test_[^ ]*::[^ ]+) (PASSED|XPASS).*/python: \1 ... ok/p
         s/^([^ ]*test_[^ ]*::[^ ]+) (FAILED|ERROR).*/python: \1 ... FAILED/p
         s/^\[gw[0-9]+\] \[ *[0-9]+%\] (PASSED|XPASS) ([^ ]*test_[^ ]*::[^ ]+).*/python: \2 ... ok/p
         s/^\[gw[0-9]+\] \[ *[0-9]+%\] (FAILED|ERROR) ([^ ]*test_[^ ]*::[^ ]+).*/python: \2 ... FAILED/p' "$work/pytest.log"

# From a copy: a build in place would leave build/ and *.egg-info behind.
pip_install() {
  mkdir "$work/src" && cp -r python/pyproject.toml python/README.md python/simba "$work/src/" &&
    "$py" -m pip install -q --root-user-action=ignore --no-build-isolation --no-deps --no-index \
      --target "$work/site" "$work/src" &&
    (cd "$work" && PYTHONPATH=$work/site "$py" -c \
      'import sys, simba; assert simba.__file__.startswith(sys.argv[1]), simba.__file__' "$work/site/simba/")
}
if pip_install >"$work/pip.log" 2>&1; then
  echo "python: pip install ./python offline, then import simba from there ... ok"
else
  cat "$work/pip.log"; echo "python: pip install ./python offline, then import simba from there ... FAILED"; rc=1
fi
exit $rc
