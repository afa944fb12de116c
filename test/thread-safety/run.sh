#!/usr/bin/env bash
# The client library built with clang's thread-safety analysis
# (-DSIMBA_THREAD_SAFETY=ON: client/src/thread_annotations.hpp): fails on any
# warning. Then canary.cpp, compiled with the command the build used for a
# library source, must fail with the three warnings it asks for, so the suite
# cannot pass because the flags went missing. The library only (no tests),
# at -O0: the analysis does not need the optimizer. In build-tsa/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD build=$PWD/build-tsa
command -v clang++ >/dev/null || { echo "thread-safety: no clang++ (test/install-deps.sh installs it) ... FAILED"; exit 1; }

log=$(mktemp) out=$(mktemp -d)
trap 'rm -rf "$log" "$out"' EXIT
CC=clang CXX=clang++ cmake -S client -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DSIMBA_WERROR=ON -DSIMBA_THREAD_SAFETY=ON \
  -DSIMBA_BUILD_TESTS=OFF -DSIMBA_BUILD_EXAMPLES=OFF -DSIMBA_BUILD_CLI=OFF >/dev/null
if ! cmake --build "$build" -j2 --target simba_client >"$log" 2>&1 || grep -q 'warning:' "$log"; then
  cat "$log"
  echo "thread-safety: the library ... FAILED"
  exit 1
fi
echo "thread-safety: the library, clang $(clang++ -dumpversion) -Wthread-safety ... ok"

# The canary, by the command that compiled hold_gate.cpp (its flags, its
# include path): each of its wrongs must be reported as an error.
cmd=$(python3 - "$build/compile_commands.json" "$root/client/src/hold_gate.cpp" \
  "$root/test/thread-safety/canary.cpp" "$out/canary.o" <<'PY'
import json, shlex, sys
db, src, canary, obj = sys.argv[1:]
entry = next(e for e in json.load(open(db)) if e["file"] == src)
args = entry.get("arguments") or shlex.split(entry["command"])
out = []
skip = False
for a in args:
    if skip:
        skip = False
        continue
    if a == "-o":
        out += ["-o", obj]
        skip = True
    elif a == src or a.endswith("/hold_gate.cpp"):
        out.append(canary)
    else:
        out.append(a)
print("cd " + shlex.quote(entry["directory"]) + " && " + shlex.join(out))
PY
)
for flag in -Wthread-safety -Werror=thread-safety; do
  grep -q -- "$flag" <<<"$cmd" || { echo "thread-safety: the library is built without $flag ... FAILED"; exit 1; }
done
if (eval "$cmd") >"$log" 2>&1; then
  cat "$log"
  echo "thread-safety: the canary compiled: the check catches nothing ... FAILED"
  exit 1
fi
for want in "writing variable 'n_' requires holding mutex 'm_'" "calling function 'zero' requires holding mutex 'm_'" \
  "calling function 'send' requires holding role 'io_state'"; do
  if ! grep -q "error: $want" "$log"; then
    cat "$log"
    echo "thread-safety: the canary's \"$want\" was not reported ... FAILED"
    exit 1
  fi
done
echo "thread-safety: the canary's unguarded access is an error ... ok"
