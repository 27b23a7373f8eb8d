#!/usr/bin/env bash
# The main job, end to end: set up, build, start the stock tgtd with
# bs_rbio.so (in a private mount namespace: nothing is installed), export a
# sparse-file LUN with --bstype rbio on loopback, write/read/verify it with a
# libiscsi client, measure it with libiscsi's iscsi-perf, show tgtadm's view
# of the LUN, and stop tgtd.
#
#   scripts/demo.sh [--size 256M] [--seconds 5] [--bsopts "k=v;..."] [--dir DIR] [--no-build]
#
# --no-build runs it on the existing build ($RBIO_BUILD_DIR, else build/)
# without setup and build (integration.demo runs it so on the tree under test).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RBIO_BUILD_DIR:-$ROOT/build}"
size=256M seconds=5 bsopts="" dir=/dev/shm build=1
while (( $# )); do
  case $1 in
    --size) size=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --bsopts) bsopts=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n 2,11p "$0" | cut -c3-; exit 0 ;;
    *) echo "demo: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $seconds =~ ^[0-9]+$ ]] || { echo "demo: --seconds must be a whole number" >&2; exit 2; }

step() { printf '\n== %s\n' "$*"; }

if (( build )); then
  step "setup and build"
  bash "$ROOT/scripts/setup.sh"
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" > "$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
  cmake --build "$BUILD" -j"$(nproc)" | tail -1
else
  [[ -f $BUILD/modules/bs_rbio.so && -x $BUILD/tests/integration/iscsi_rw_check ]] ||
    { echo "demo: --no-build: $BUILD has no bs_rbio.so or iscsi_rw_check (build with tests first)" >&2; exit 2; }
fi

CTL=5690 PORT=13690 IQN=iqn.2026-11.io.rbio:demo
WORK=$(mktemp -d "$dir/rbio-demo-XXXXXX")
STATE="$WORK/tgtd"
# stop_tgtd: ends the demo's tgtd; fails when it did not exit cleanly.
stop_tgtd() { "$ROOT/scripts/tgtd-sandbox.sh" stop "$STATE"; }
# On an early exit the step that failed has said why (and set the status);
# this tidies up, and says so when tgtd did not stop cleanly either.
cleanup() {
  stop_tgtd || echo "demo: tgtd did not stop cleanly either (see above)" >&2
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
# The file is rewritten when a connection ends and once a second: wait for
# the one written after iscsi-perf's connection ended.
settled=0
for _ in $(seq 50); do  # up to 5 s
  if grep -qx 'connections_open=0' "$STATE/rbio.stats" 2>/dev/null; then settled=1; break; fi
  sleep 0.1
done
if [[ -f $STATE/rbio.stats ]]; then
  (( settled )) || echo "(a connection was still open after 5 s: the figures below may be partial)"
  grep -E '^(connections_open|connections_total|pdus_in|pdus_out|recv_calls|send_calls|syscalls|pdus_per_recv|pdus_per_send)=' \
    "$STATE/rbio.stats" | paste -sd' '
else
  echo "(none: tgt's own transport served the portal; tgtd's log says why:)"
  grep 'rbio: ' "$STATE/tgtd.log" | tail -3
fi

step "tgtadm's view of the LUN"
tgtadm -C $CTL --lld iscsi --op show --mode target | sed -n '/LUN: 1/,$p' | sed -n 1,16p

step "stop tgtd"
tgtadm -C $CTL --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1
grep -o 'rbio: tid:1 lun:1: removed; .*' "$STATE/tgtd.log" || true
trap - EXIT
stop_rc=0
stop_tgtd || stop_rc=$?
rm -rf "$WORK"
(( stop_rc == 0 )) || { echo "demo: tgtd did not stop cleanly (see above)" >&2; exit 1; }
echo "demo finished"
