#!/usr/bin/env bash
# The `demo` ctest: runs the demo's scenario (test/demo/scenario.sh) and
# checks its printed output for what the demo is there to show: two
# takeovers after an expired lease, the paused leader's stale write refused
# by simba_fence_check, its simba run exiting 76, and a NOTIFY handoff.
set -uo pipefail
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$(dirname "$0")/scenario.sh" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
fail=0
expect() { grep -Eq "$1" "$out" || { echo "demo check: missing: $2" >&2; fail=1; }; }
# Fences come from one sequence (they grow, with gaps): judge the order, not the numbers.
takeovers=$(grep -E '^[0-9.]+s  worker-[1-5] took over from worker-[1-5] \(lease expired\), fence [0-9]+$' "$out" |
            sed -E 's/.*, fence ([0-9]+)$/\1/')
[ "$(wc -l <<<"$takeovers")" -ge 2 ] && sort -nc <<<"$takeovers" ||
  { echo "demo check: missing: two takeovers after expired leases (the SIGKILL, the pause), fences rising" >&2; fail=1; }
refused=$(sed -nE 's/^[0-9.]+s  worker-[1-5]: stale write REFUSED \(fence ([0-9]+): .*/\1/p' "$out")
[ -n "$refused" ] && [ "$refused" = "$(sed -n 1p <<<"$takeovers")" ] ||
  { echo "demo check: missing: the stale write refused, under the fence the paused leader took over with" >&2; fail=1; }
expect "simba run resumed, saw the lease was gone and exited 76" "exit 76 of the paused leader's simba run"
expect 'ms after the release \(NOTIFY\)$' "the NOTIFY handoff"
expect '^demo: OK ' "the scenario's own checks"
svg=$(sed -n 's/^timeline SVG: //p' "$out")
if [ -z "$svg" ] || ! grep -q '^<svg xmlns="http://www.w3.org/2000/svg"' "$svg" || ! grep -q '</svg>$' "$svg" ||
   [ "$(grep -o '<rect x=' "$svg" | wc -l)" -lt 4 ] || ! grep -q 'stale write refused' "$svg"; then
  echo "demo check: the SVG timeline ($svg) is missing or lacks the tenures / the refused write" >&2; fail=1
fi
[ "$rc" -eq 0 ] || { echo "demo check: scenario exited $rc" >&2; fail=1; }
exit $fail
