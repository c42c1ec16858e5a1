#!/bin/sh
# Multi-host SPMD on one machine: two "hosts" are two network namespaces joined by a veth
# pair (as tests/support/two_hosts.h makes them; needs root and iproute2's ip).
#
#   bench/multihost.sh [BUILD_DIR] [ROUNDS]      # default build, 3 rounds
#
# 1. all-reduce bandwidth (axle-multihost-allreduce): SPMD within one host (4 device
#    threads, shared memory), SPMD across 2 hosts x 2 devices (reduce within the host,
#    Gloo across, broadcast within) and 2 hosts x 1 device, and a raw Gloo all-reduce of ours
#    between the same two namespaces (Debian's libgloo-dev ships no benchmark program).
# 2. the SPMD cnn of tests/dist/multihost_spmd_worker.cpp, seconds per step (after the first):
#    2 hosts x 2 devices, 1 host x 4 devices, and DDP with 4 processes on one host.
# Rounds alternate the configurations; each line is one round. Print the processor with it.
set -eu
BUILD=${1:-build}
ROUNDS=${2:-3}
BIN=$BUILD/bin
W=$BIN/multihost_spmd_worker
AR=$BIN/axle-multihost-allreduce
IP=$(command -v ip)
ID=axmhb$$
A=${ID}a B=${ID}b
TMP=$(mktemp -d)
cleanup() { $IP netns del $A 2>/dev/null || true; $IP netns del $B 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
$IP netns add $A
$IP netns add $B
$IP -n $A link add ${ID}x type veth peer name ${ID}y netns $B
$IP -n $A addr add 198.18.0.1/24 dev ${ID}x
$IP -n $B addr add 198.18.0.2/24 dev ${ID}y
for ns in $A $B; do $IP -n $ns link set lo up; done
$IP -n $A link set ${ID}x up
$IP -n $B link set ${ID}y up

grep -m1 "model name" /proc/cpuinfo
echo "cores: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg)"
CLEAN="env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u AXLE_CPU_DEVICES"
PORT=29600
# two_hosts DEVICES_PER_HOST CMD...: rank 0 on A, rank 1 on B; prints rank 0's stdout.
two_hosts() {
  d=$1; shift
  PORT=$((PORT + 1))
  $IP netns exec $B $CLEAN RANK=1 WORLD_SIZE=2 MASTER_ADDR=198.18.0.1 MASTER_PORT=$PORT AXLE_CPU_DEVICES=$d "$@" >/dev/null &
  $IP netns exec $A $CLEAN RANK=0 WORLD_SIZE=2 MASTER_ADDR=198.18.0.1 MASTER_PORT=$PORT AXLE_CPU_DEVICES=$d "$@"
  wait
}
raw_gloo() {
  G=$TMP/gloo$PORT; PORT=$((PORT + 1)); mkdir -p "$G"
  $IP netns exec $B $CLEAN RANK=1 WORLD_SIZE=2 AXLE_BENCH_GLOO_DIR=$G AXLE_BENCH_HOST=198.18.0.2 $AR gloo >/dev/null &
  $IP netns exec $A $CLEAN RANK=0 WORLD_SIZE=2 AXLE_BENCH_GLOO_DIR=$G AXLE_BENCH_HOST=198.18.0.1 $AR gloo
  wait
}
steps() { python3 -c "import json,sys,statistics as s; t=json.load(open(sys.argv[1]))['step_seconds']; print('%-22s median %.4f s/step (min %.4f, max %.4f, %d steps)' % (sys.argv[2], s.median(t), min(t), max(t), len(t)))" "$1" "$2"; }

for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r: all-reduce (float32 sum)"
  echo "-- 1 host x 4 devices (shared memory)"; $CLEAN AXLE_CPU_DEVICES=4 $AR spmd
  echo "-- 2 hosts x 2 devices (Gloo across)"; two_hosts 2 $AR spmd
  echo "-- 2 hosts x 1 device (Gloo across)"; two_hosts 1 $AR spmd
  echo "-- raw Gloo, 2 processes across the veth"; raw_gloo
  echo "== round $r: cnn, batch 128, 30 steps"
  two_hosts 2 $W cnn 30 "$TMP/two.json"; steps "$TMP/two.json" "spmd 2 hosts x 2"
  $CLEAN AXLE_CPU_DEVICES=4 $W cnn 30 "$TMP/one.json"; steps "$TMP/one.json" "spmd 1 host x 4"
  $CLEAN AXLE_NUM_DEVICES=4 $W ddp 30 "$TMP/ddp.json" >/dev/null; steps "$TMP/ddp.json" "ddp 4 processes"
done
