#!/usr/bin/env bash
# The extension's files call each other without a cycle (docs/contributing.md,
# "Layout"): from the built objects (make first), file A calls file B when A
# uses a symbol B defines; tsort finds any loop. module.c, the load, is the
# top; nothing calls into it. Prints one "... ok" / "... FAILED" line per
# check (make test and make check run it); exits 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

failed=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Prints the loops tsort finds in the edges of file $1 ("A B": A calls B);
# succeeds when there is none.
no_loop() {
  local out
  if out=$(tsort "$1" 2>&1 >/dev/null) && [ -z "$out" ]; then return 0; fi
  sed -n 's/^tsort: \([^/ ][^ ]*\)$/  \1/p' <<<"$out" | head -20
  return 1
}

# The detector itself: a two-file loop must be found.
printf 'a b\nb a\n' >"$work/loop"
if no_loop "$work/loop" >/dev/null; then
  echo "call-graph: a known loop is found ... FAILED"; failed=1
else
  echo "call-graph: a known loop is found ... ok"
fi

objects=()
for c in extension/*.c; do
  o=${c%.c}.o
  if [ ! -e "$o" ] || [ "$o" -ot "$c" ]; then
    echo "call-graph: $o is missing or older than $c (run make first) ... FAILED"; exit 1
  fi
  objects+=("$o")
done
for o in "${objects[@]}"; do
  f=$(basename "$o" .o)
  nm --defined-only -g "$o" | awk -v f="$f" 'NF == 3 {print $3, f}' >>"$work/defines"
  nm -u "$o" | awk -v f="$f" '{print $2, f}' >>"$work/uses"
done
sort -o "$work/defines" "$work/defines"
sort -o "$work/uses" "$work/uses"
# symbol user definer -> "user definer", calls within a file left out
join "$work/uses" "$work/defines" | awk '$2 != $3 {print $2, $3}' | sort -u >"$work/edges"
echo "call-graph: ${#objects[@]} files, $(wc -l <"$work/edges") calls between them"

if no_loop "$work/edges"; then
  echo "call-graph: no file calls back into a file that calls it ... ok"
else
  echo "call-graph: no file calls back into a file that calls it ... FAILED (a loop through the files above)"
  failed=1
fi
if grep -q ' module$' "$work/edges"; then
  echo "call-graph: nothing calls into module.c ... FAILED: $(grep ' module$' "$work/edges" | tr '\n' ';')"
  failed=1
else
  echo "call-graph: nothing calls into module.c ... ok"
fi
exit $failed
