#!/usr/bin/env bash
# `make bench-peers` (benchmark 10): simba against etcd (its Go client's
# concurrency.Mutex and Election), ZooKeeper (Curator's InterProcessMutex and
# LeaderLatch) and Redis (SET NX PX, Lua compare-and-delete), every store
# durable on the same disk: PostgreSQL with fsync and synchronous_commit on,
# etcd with its defaults, ZooKeeper with its defaults (forceSync=yes), Redis
# with appendfsync always. Installs what is missing (Debian's packages only),
# builds the drivers offline, and runs bench/peers.py, which starts and
# stops each store and prints the table (about 15 minutes on 2 cores).
#
#   bench/peers.sh                     everything
#   bench/peers.sh --rows c1,handoff   some rows (bench/peers.py --help)
#
# Results: build/bench-results/peers.json, peers.svg (the ratios) and peers.log.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/bench-results
work=$out/peers
bin=$out/cmake/bench

test/install-deps.sh redis-server etcd-server golang-go golang-etcd-server-dev \
  zookeeperd libcurator-recipes-java libslf4j-java default-jdk-headless
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
make -s -j2 SIMBA_WERROR=yes
$sudo make -s install >/dev/null
cmake -S . -B "$out/cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIMBA_WERROR=ON -DSIMBA_BUILD_BENCH=ON >/dev/null
cmake --build "$out/cmake" -j2 --target bench_peers >/dev/null

rm -rf "$work" && mkdir -p "$work/data"
# etcd's driver: GOPATH mode on Debian's packaged sources, no network.
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$work/gocache GOFLAGS= \
  go build -o "$work/bench_peers_etcd" ./bench/peers/etcd
# Curator's driver: javac against Debian's jars (their manifests' Class-Path
# brings in ZooKeeper, jute, Guava and slf4j's API); slf4j-simple logs.
cp=/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-simple.jar
javac -Xlint:all,-path -d "$work/curator" -cp "$cp" bench/peers/curator/BenchPeersCurator.java

SIMBA_PG_CONF="fsync = on; synchronous_commit = on; max_connections = 400" \
  test/with-cluster.sh bash -c '
    set -euo pipefail
    psql -qXc "CREATE EXTENSION simba" >/dev/null
    exec "$@"' _ /usr/bin/python3 bench/peers.py --dir "$work/data" \
      --simba-driver "$bin/bench_peers" --etcd-driver "$work/bench_peers_etcd" \
      --curator-driver "java -cp $work/curator:$cp BenchPeersCurator" \
      --json "$out/peers.json" "$@" 2>"$out/peers.err" |
  tee "$out/peers.log"
