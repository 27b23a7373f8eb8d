#!/usr/bin/env bash
# The main job, end to end: set up, build, start the stock tgtd with
# bs_rbio.so (in a private mount namespace: nothing is installed), export a
# sparse-file LUN with --bstype rbio on loopback, write/read/verify it with a
# libiscsi client, measure it with libiscsi's iscsi-perf, show tgtadm's view
# of the LUN, and stop tgtd.
#
#   scripts/demo.sh [--size 256M] [--seconds 5] [--bsopts "k=v;..."] [--dir DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RBIO_BUILD_DIR:-$ROOT/build}"
size=256M seconds=5 bsopts="" dir=/dev/shm
while (( $# )); do
  case $1 in
    --size) size=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --bsopts) bsopts=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "demo: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $seconds =~ ^[0-9]+$ ]] || { echo "demo: --seconds must be a whole number" >&2; exit 2; }

step() { printf '\n== %s\n' "$*"; }

step "setup and build"
bash "$ROOT/scripts/setup.sh"
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" > "$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" | tail -1

CTL=5690 PORT=13690 IQN=iqn.2026-11.io.rbio:demo
WORK=$(mktemp -d "$dir/rbio-demo-XXXXXX")
STATE="$WORK/tgtd"
cleanup() {
  "$ROOT/scripts/tgtd-sandbox.sh" stop "$STATE" || true
  rm -rf "$WORK"
}
trap cleanup EXIT

step "start stock tgtd with bs_rbio.so (control port $CTL, portal 127.0.0.1:$PORT)"
"$ROOT/scripts/tgtd-sandbox.sh" start "$STATE" --modules "$BUILD/modules" \
  --control-port $CTL --portal 127.0.0.1:$PORT
tgtadm -C $CTL --mode system --op show | sed -n '/Backing stores:/,/Device types:/p' | grep -E 'Backing|rbio'
grep -o "rbio: tcp: portal .*" "$STATE/tgtd.log" || true

step "export a $size sparse file with --bstype rbio${bsopts:+ --bsopts '$bsopts'}"
truncate -s "$size" "$WORK/lun1.img"
tgtadm -C $CTL --lld iscsi --op new --mode target --tid 1 -T $IQN
args=(--op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/lun1.img" --bstype rbio)
[[ -n $bsopts ]] && args+=(--bsopts "$bsopts")
tgtadm -C $CTL --lld iscsi "${args[@]}"
tgtadm -C $CTL --lld iscsi --op bind --mode target --tid 1 -I ALL
URL=iscsi://127.0.0.1:$PORT/$IQN/1
iscsi-inq "$URL" | grep -E 'Vendor|Product' || true

step "write, read back and verify (libiscsi client, 32 in flight)"
"$BUILD/tests/integration/iscsi_rw_check" "$URL" --inflight 32 --rounds 2 | tail -2

step "measure: 4 KiB reads for $seconds s at 1 and 32 in flight (iscsi-perf)"
for qd in 1 32; do
  printf '%2d in flight: ' $qd
  timeout $((seconds + 10)) iscsi-perf -m $qd -t "$seconds" "$URL" 2>&1 | tr '\r' '\n' \
    | grep -o 'iops average [0-9]* ([0-9]* MB/s)' | tail -1
done

step "rbio's TCP transport: what batching and coalescing achieved ($STATE/rbio.stats)"
sleep 1.2  # the file is rewritten when a connection ends and once a second
grep -E '^(connections_total|pdus_in|pdus_out|recv_calls|send_calls|syscalls|pdus_per_recv|pdus_per_send)=' \
  "$STATE/rbio.stats" | paste -sd' ' || true

step "tgtadm's view of the LUN"
tgtadm -C $CTL --lld iscsi --op show --mode target | sed -n '/LUN: 1/,$p' | sed -n 1,16p

step "stop tgtd"
tgtadm -C $CTL --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1
grep -o 'rbio: tid:1 lun:1: removed; .*' "$STATE/tgtd.log" || true
cleanup
trap - EXIT
echo "demo finished"
