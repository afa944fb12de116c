#!/usr/bin/env bash
# `make bench`: installs what is missing, builds and installs the extension,
# builds the benchmark programs, then runs every benchmark against one
# throwaway cluster (test/with-cluster.sh) and a private redis-server on a
# unix socket. Prints one table per benchmark; writes build/bench-results/results.json,
# build/bench-results/bench.log and the charts build/bench-results/throughput.{png,svg},
# build/bench-results/handoff.{png,svg}. Benchmark 1 also runs at a 0.2 ms
# round trip, through simba_fault_proxy (test/fault_proxy) on TCP loopback.
#
#   bench/run.sh                  everything (about 6 minutes on 2 cores)
#   BENCH_QUICK=1 bench/run.sh    shorter runs, for trying changes
#   bench/run.sh --suite [N...]   inside an existing cluster (PG* set): only benchmarks N
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/bench-results
bin=$out/cmake/bench

if [ "${1:-}" != --suite ]; then
  bench/install-deps.sh
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  make -s -j2 SIMBA_WERROR=yes
  $sudo make -s install >/dev/null
  make -s portable
  cmake -S . -B "$out/cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIMBA_WERROR=ON -DSIMBA_BUILD_BENCH=ON >/dev/null
  cmake --build "$out/cmake" -j2 --target bench_throughput bench_handoff bench_failover bench_scale bench_overhead \
    bench_memory bench_primitives simba_fault_proxy >/dev/null
  # TCP on 127.0.0.1 as well: benchmark 1 also runs through a delay proxy.
  SIMBA_CLUSTER_TCP=1 exec test/with-cluster.sh "$0" --suite "$@"
fi
shift
want=${*:-1 2 3 4 5 6 8}
on() { [[ " $want " == *" $1 "* ]]; }

mkdir -p "$out"
: > "$out/bench.log"
log() { tee -a "$out/bench.log"; }
quick=${BENCH_QUICK:-0}

# A private Redis: unix socket only (port 0 = no TCP), no persistence.
redis_dir=$(mktemp -d "${TMPDIR:-/tmp}/simba-redis.XXXXXX")
redis_pid=""
proxy_pid=""
cleanup() {
  [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null || true
  [ -z "$proxy_pid" ] || kill "$proxy_pid" 2>/dev/null || true
  rm -rf "$redis_dir"
}
trap cleanup EXIT
if on 1; then
  redis-server --port 0 --unixsocket "$redis_dir/redis.sock" --save '' --appendonly no \
    --logfile "$redis_dir/redis.log" &
  redis_pid=$!
  for _ in $(seq 50); do [ -S "$redis_dir/redis.sock" ] && break; sleep 0.1; done
fi

{
  echo "simba benchmarks — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, PostgreSQL $(psql -XAtc 'SHOW server_version'), $(redis-server --version | cut -d' ' -f3)"
  echo "command: make bench (bench/run.sh); throwaway cluster with fsync=off, unix socket"
} | log

psql -XqAt -c "CREATE EXTENSION IF NOT EXISTS simba" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"

if [ "$quick" = 1 ]; then
  b1=(--seconds 1 --rounds 1); b2=(--handoffs 200 --pairs 50); b3=(--trials 20); b4=(--services 1000,10000 --per-lock 10000 --warmup 12 --window 10); b5=(--batches 3); b6=(--cycles 100000); b9=(--batches 3 --locks 2000)
else
  b1=(--seconds 1.2 --rounds 3); b2=(--handoffs 1000 --pairs 100); b3=(--trials 50); b4=(--services 1000,10000 --per-lock 10000 --warmup 15 --window 20); b5=(--batches 6); b6=(--cycles 1000000); b9=(--batches 6 --locks 10000)
fi

rc=0
if on 1; then
  "$bin/bench_throughput" "${b1[@]}" --redis "$redis_dir/redis.sock" --portable "$root/build/portable/simba_portable.sql" \
    --json "$out/throughput.json" 2>&1 | log || rc=1
  # The same statements at a datacenter round trip (0.2 ms: 100 us each way
  # through simba_fault_proxy), one client: what a service across the
  # network sees, where round trips cost what the server's work does.
  coproc PROXY { exec "$out/cmake/test/fault_proxy/simba_fault_proxy" --target-port "$SIMBA_PG_TCP_PORT" --delay-us 100; }
  proxy_pid=$PROXY_PID
  read -r _ proxy_port _ <&"${PROXY[0]}"
  echo "benchmark 1 at a 0.2 ms round trip (simba_fault_proxy on port $proxy_port, 100 us each way), 1 client" | log
  "$bin/bench_throughput" "${b1[@]}" --clients 1 --host 127.0.0.1 --port "$proxy_port" \
    --only simba/pair,floor/pair,jdbc/pair,shedlock/pair,simba/renew,floor/renew,jdbc/renew,shedlock/renew \
    --json "$out/throughput-rtt.json" 2>&1 | log || rc=1
  kill "$proxy_pid" 2>/dev/null || true
  proxy_pid=""
fi
if on 2; then "$bin/bench_handoff" "${b2[@]}" --ttl 1 --transition 1 --json "$out/handoff.json" 2>&1 | log || rc=1; fi
if on 3; then
  "$bin/bench_failover" "${b3[@]}" --ttl 1 --transition 1 --label " (ttl 1 s, transition 1 s)" --json "$out/failover-1s.json" 2>&1 | log || rc=1
  "$bin/bench_failover" "${b3[@]}" --ttl 10 --transition 6 --label " (defaults)" --json "$out/failover-default.json" 2>&1 | log || rc=1
fi
if on 4; then "$bin/bench_scale" "${b4[@]}" --ttl 10 --transition 6 --json "$out/scale.json" 2>&1 | log || rc=1; fi
if on 5; then "$bin/bench_overhead" "${b5[@]}" --json "$out/overhead.json" 2>&1 | log || rc=1; fi
if on 6; then "$bin/bench_memory" "${b6[@]}" --json "$out/memory.json" 2>&1 | log || rc=1; fi
if on 8; then "$bin/bench_primitives" "${b1[@]}" --json "$out/primitives.json" 2>&1 | log || rc=1; fi
# The Python client beside the C++ Locker (bench/python_cost.py), with the
# system's interpreter (python3-psycopg)
if on 9; then
  /usr/bin/python3 bench/python_cost.py --overhead-bin "$bin/bench_overhead" "${b9[@]}" --json "$out/python.json" 2>&1 |
    log || rc=1
fi

# One JSON document with every benchmark that ran.
{
  echo "{\"date\": \"$(date -u +%FT%TZ)\", \"cores\": $(nproc),"
  sep=""
  for name in throughput throughput-rtt handoff failover-1s failover-default scale overhead memory primitives python; do
    [ -s "$out/$name.json" ] || continue
    printf '%s"%s": ' "$sep" "$name"; cat "$out/$name.json"; sep=", "
  done
  echo "}"
} > "$out/results.json"

if command -v gnuplot >/dev/null; then
  for t in "png:pngcairo size 960,520 font ',10'" "svg:svg size 960,520"; do
    ext=${t%%:*} term=${t#*:}
    [ -s "$out/throughput-pair.dat" ] && { gnuplot -e "term=\"$term\"; out='$out/throughput.$ext'; dat='$out/throughput'" bench/throughput.gp 2>&1 | log || true; }
    [ -s "$out/handoff.dat" ] && { gnuplot -e "term=\"$term\"; out='$out/handoff.$ext'; dat='$out/handoff.dat'" bench/handoff.gp 2>&1 | log || true; }
  done
fi
echo | log
echo "results: $out/results.json, log: $out/bench.log, charts: $(ls "$out"/*.png "$out"/*.svg 2>/dev/null | tr '\n' ' ')" | log
exit $rc
