#!/usr/bin/env bash
# tcp-instructions.sh: what tgtd's own code costs per SCSI command over
# iSCSI/TCP, counted rather than timed: tgt's stock transport against rbio's
# (the same bs_rbio.so loaded, RBIO_TRANSPORT=off or on), each tgtd run
# under valgrind's callgrind on loopback, loaded by a client that sends one
# PDU per call (bench/iscsi-rwperf, libiscsi).
#
#   bench/tcp-instructions.sh [--seconds S] [--warm S] [--bstype LIST] [--config FILE]
#       [--out DIR] [--control-port N] [--portal-port P] [--tgtd BINARY]
#
#   --seconds S     seconds counted per point (default 10), after 4 s of
#                   warm-up in the same session
#   --warm S        seconds of warm-up per point (default 4)
#   --bstype LIST   backing stores, comma-separated (default null,rbio: tgt's
#                   null store, which does no I/O, and rbio's on a tmpfs file)
#   --config FILE   the rbio transport's settings file (default none: its
#                   defaults), e.g. `write_in_place = off` for an A/B run
#   --out DIR       keep the profiles and results.md in DIR
#   --control-port N, --portal-port P   tgtd's ports (default 5955, 13955)
#   --tgtd BINARY   the tgtd to profile (default: the installed one). Debian's
#                   is stripped, so its own functions show as one lump; a
#                   tgtd built with symbols from the same source package
#                   splits tgt's core by function (bench/README, "tgt's core
#                   per command")
#
# Points: 4 KiB reads and writes, 32 in flight, per backing store and
# transport. Per point: instructions per command (all of tgtd's threads;
# callgrind counts no kernel work) split by object, malloc/calloc/realloc
# calls per command, memcpy/memmove calls and instructions per command, and
# the costliest functions (bench/callgrind.sh).
# Issue 18's goal: rbio's transport at most 0.7x stock's instructions per
# command on the same workload; the last table gives the ratio.
#
# Instruction counts repeat from run to run and do not depend on the
# machine's load, unlike timings; valgrind slows tgtd about fiftyfold, so
# the IOPS here mean nothing. About 3 minutes; not part of ctest.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
BENCH_NAME=tcp-instructions
source "$HERE/lib.sh"
source "$HERE/callgrind.sh"

SECONDS_PER=10 BSTYPES=null,rbio OUT="" WARM=4 CONFIG=/dev/null CTL=5955 PORT=13955 TGTD=""
while (( $# )); do
  case $1 in
    --seconds) SECONDS_PER=${2:-}; shift 2 ;;
    --bstype) BSTYPES=${2:-}; shift 2 ;;
    --warm) WARM=${2:-}; shift 2 ;;
    --config) CONFIG=${2:-}; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    --control-port) CTL=${2:-}; shift 2 ;;
    --portal-port) PORT=${2:-}; shift 2 ;;
    --tgtd) TGTD=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'tcp-instructions: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
[[ $SECONDS_PER =~ ^[0-9]+$ && $SECONDS_PER -gt 0 ]] || die "--seconds takes a positive integer (got '$SECONDS_PER')"
[[ $WARM =~ ^[0-9]+$ && $WARM -gt 0 ]] || die "--warm takes a positive integer (got '$WARM')"
for v in CTL PORT; do [[ ${!v} =~ ^[0-9]+$ ]] || die "ports are numbers (got '${!v}')"; done
[[ -r $CONFIG ]] || die "--config: cannot read '$CONFIG'"
CONFIG=$(realpath "$CONFIG")
if [[ -n $TGTD ]]; then
  [[ -f $TGTD && -x $TGTD ]] || die "--tgtd: '$TGTD' is not an executable file"
  TGTD=$(realpath "$TGTD")
else
  TGTD=$(command -v tgtd) || die "tgtd is not installed (scripts/setup.sh installs it)"
fi
IFS=, read -ra STORES <<< "$BSTYPES"
for s in "${STORES[@]}"; do
  [[ $s == null || $s == rbio || $s == rdwr ]] || die "--bstype: '$s' is not null, rbio or rdwr"
done
[[ $(id -u) -eq 0 ]] || die "run as root (tgtd runs in a private mount namespace)"
BUILD=${RBIO_BUILD_DIR:-$ROOT/build}
MODULES="$BUILD/modules"
PERF="$BUILD/bench/iscsi-rwperf"
[[ -f $MODULES/bs_rbio.so && -x $PERF ]] || die "no build in $BUILD: cmake -S . -B build && cmake --build build"
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
  || die "valgrind is not installed (scripts/setup.sh installs it)"
SANDBOX="$ROOT/scripts/tgtd-sandbox.sh"
port_busy "$PORT" && die "port $PORT is in use"

WORK=$(mktemp -d /dev/shm/rbio-tcp-instr-XXXXXX)
STATE=""
cleanup() {
  [[ -n $STATE ]] && "$SANDBOX" stop "$STATE" > /dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
RESULTS=${OUT:-$WORK/results}
mkdir -p "$RESULTS"
truncate -s 256M "$WORK/disk.img"
# Written once, so reads of the rbio store copy real pages, not holes.
dd if=/dev/zero of="$WORK/disk.img" bs=1M count=256 conv=notrunc status=none

WRAPPER="$WORK/tgtd-callgrind"
cat > "$WRAPPER" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --instr-atstart=no --dump-instr=no \\
  --callgrind-out-file="$WORK/callgrind.%p.out" --log-file="$WORK/valgrind.%p.log" \\
  "$TGTD" "\$@"
EOF
chmod +x "$WRAPPER"
declare -A ENVS=([stock]="RBIO_TRANSPORT=off RBIO_CONFIG=/dev/null" [rbio]="RBIO_TRANSPORT=on RBIO_CONFIG=$CONFIG")

# profile_point CONFIG NAME WRITE PID: one session; callgrind counts the
# seconds after the warm-up and dumps them as part NAME.
profile_point() {
  local c=$1 name=$2 write=$3 pid=$4 out="$RESULTS/perf-$2@$1.out" args=(-m 32 -s 4096)
  (( write )) && args+=(-w)
  "$PERF" "${args[@]}" -i iqn.2026-11.io.rbio:tcp-instructions -t $(( WARM + SECONDS_PER + 3 )) \
    "iscsi://127.0.0.1:$PORT/iqn.2026-11.io.rbio:instr/1" > "$out" 2>&1 &
  local bp=$!
  sleep "$WARM"   # a fixed stretch of the run, not a condition
  callgrind_control -i on "$pid" > /dev/null 2>&1 || { kill "$bp"; die "$c: callgrind_control cannot reach tgtd"; }
  sleep "$SECONDS_PER"
  callgrind_control -i off "$pid" > /dev/null 2>&1
  callgrind_control --dump="$name" "$pid" > /dev/null 2>&1
  wait "$bp" || { tail -5 "$out" >&2; die "iscsi-rwperf $name failed on $c"; }
}

: > "$WORK/rows.md"; : > "$WORK/top.md"
for c in stock rbio; do
  STATE="$WORK/tgtd-$c"
  # shellcheck disable=SC2086  # ENVS holds env(1) arguments
  env ${ENVS[$c]} "$SANDBOX" start "$STATE" --modules "$MODULES" --tgtd "$WRAPPER" \
    --control-port "$CTL" --portal "127.0.0.1:$PORT" > /dev/null || die "$c: tgtd under callgrind did not start"
  pid=$(cat "$STATE/tgtd.pid")
  tgtadm -C "$CTL" --lld iscsi --op new --mode target --tid 1 -T iqn.2026-11.io.rbio:instr &&
    tgtadm -C "$CTL" --lld iscsi --op bind --mode target --tid 1 -I ALL || die "$c: cannot set up the target"
  for s in "${STORES[@]}"; do
    tgtadm -C "$CTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/disk.img" --bstype "$s" \
      || die "$c: cannot add a bs $s LU"
    for rw in read write; do
      name="4k-$rw-qd32-$s"
      note "$c: $name, ${SECONDS_PER} s counted"
      profile_point "$c" "$name" "$([[ $rw == write ]] && echo 1 || echo 0)" "$pid"
    done
    tgtadm -C "$CTL" --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1
  done
  "$SANDBOX" stop "$STATE"
  STATE=""
  for s in "${STORES[@]}"; do
    for rw in read write; do
      name="4k-$rw-qd32-$s"
      prof=$(grep -l "^desc: Trigger: dump $name\$" "$WORK"/callgrind.*.out* 2>/dev/null | head -1 || true)
      [[ -n $prof ]] || die "$c: no callgrind profile for $name"
      mv "$prof" "$RESULTS/callgrind-$name@$c.out"
      summarise "$c" "$name" "$RESULTS/callgrind-$name@$c.out"
    done
  done
  rm -f "$WORK"/callgrind.*.out*
done

{
  echo "# tgtd's user-space instructions per SCSI command over iSCSI/TCP (callgrind)"
  echo
  echo "host: Linux $(uname -r), $(nproc) cores; tgt $(dpkg-query -W -f '${Version}' tgt 2>/dev/null) (tgtd: $TGTD); $(valgrind --version);"
  echo "client: bench/iscsi-rwperf (libiscsi, one PDU per call), 4 KiB, 32 in flight, on loopback;"
  echo "${SECONDS_PER} s counted after ${WARM} s of warm-up; stores: ${STORES[*]} (rbio on a 256 MiB tmpfs file)."
  [[ $CONFIG == /dev/null ]] || echo "rbio transport settings ($CONFIG): $(grep -v '^\s*#' "$CONFIG" | tr '\n' ' ')"
  echo
  echo "| workload | transport | commands | instructions/command | tgtd | bs_rbio.so | libc | librxe | other | allocations/command | memcpy calls/command | memcpy instructions/command |"
  echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
  sort -t'|' -k2,2 -k3,3r "$WORK/rows.md"
  echo
  echo "rbio / stock instructions per command (goal: at most 0.70):"
  echo
  awk -F'|' '{ gsub(/[ *]/, "", $2); gsub(/[ *]/, "", $3); gsub(/[ *]/, "", $5); v[$2 "@" $3] = $5; w[$2] = 1 }
    END { for (k in w) if (v[k "@stock"] > 0) printf "- %s: %.2f (%d / %d)\n", k, v[k "@rbio"] / v[k "@stock"], v[k "@rbio"], v[k "@stock"] }' \
    "$WORK/rows.md" | sort
  cat "$WORK/top.md"
} > "$RESULTS/results.md"
cat "$RESULTS/results.md"
