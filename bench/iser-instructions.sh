#!/usr/bin/env bash
# iser-instructions.sh: what tgtd's own code costs per SCSI command over
# iSER, counted rather than timed: stock tgt's iSER driver against rbio's
# iSER transport, each tgtd run under valgrind's callgrind in one qemu
# guest over soft-RoCE (rdma_rxe), loaded by the rbio initiator.
#
#   bench/iser-instructions.sh [--seconds S] [--bstype B|S,R] [--out DIR]
#
#   --seconds S   seconds counted per point (default 15), after 6 s of
#                 warm-up in the same session
#   --bstype B|S,R  backing store of both targets, or of stock's and of
#                 rbio's (default rdwr,rbio: each stack as it ships)
#   --out DIR     keep the guest run's files in DIR (results.md, the
#                 callgrind profiles, each `rbio bench` report)
#
# Points: 4 KiB random reads and writes with 32 in flight (`rbio bench
# --transport iser`, one session per point); then, for rbio's target only,
# 64 KiB random writes with 8 in flight from the kernel's iSER initiator
# (fio) on a target set to InitialR2T=No, with the defaults (the session
# gets InitialR2T=Yes: the data past the immediate 8 KiB comes by RDMA
# READ into the block its immediate data arrived in), with `write_in_place
# = off` (the admin's No kept: seven unsolicited Data-Outs per write, each
# copied) and with `iser_receive_kib = 16` (the 8 KiB of immediate data
# copied into a buffer of the command's size). Per point and target, from
# the profile of the counted seconds (callgrind_control turns counting on
# and off in a running tgtd): instructions per command (all of tgtd's
# threads: tgt's core, the transport, the backing store, libc, rxe's
# user-space provider; callgrind counts no kernel work), that total split
# by object, malloc/calloc/realloc calls per command, and the functions
# that cost most. Commands are the calls of tgt's target_cmd_queue(), which
# every SCSI command passes once in both targets.
#
# Why: under TCG a tgtd's CPU time is mostly the kernel's (rxe's software
# RDMA runs in its system calls; bench/iser-compare.sh shows the user/
# system split), and timings move by tens of percent from run to run;
# instruction counts repeat, and they are what the hot path's rules (no
# allocation per I/O, no extra copy) can be checked against. Valgrind
# slows tgtd about fiftyfold, so the IOPS here mean nothing.
#
# Run time: about 5 minutes idle; on a loaded machine (load ~13, other
# guests on the two cores) well over 9. Run it on an otherwise idle
# machine; it is not part of ctest.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=iser-instructions
source "$HERE/lib.sh"

SECONDS_PER=15 BS_ALL=rdwr,rbio OUT=""
args=("$@")
while (( $# )); do
  case $1 in
    --seconds) SECONDS_PER=${2:-}; shift 2 ;;
    --bstype) BS_ALL=${2:-}; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'iser-instructions: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
[[ $SECONDS_PER =~ ^[0-9]+$ && $SECONDS_PER -gt 0 ]] || die "--seconds takes a positive integer (got '$SECONDS_PER')"
split_bstypes "$BS_ALL"
WARM=6

# ------------------------------------------------------------ on the host
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  [[ $(id -u) -eq 0 ]] || die "run as root (it boots a qemu guest)"
  build=${RBIO_BUILD_DIR:-$ROOT/build}
  [[ -f $build/modules/bs_rbio.so && -x $build/initiator/rbio ]] \
    || die "no build in $build: cmake -S . -B build && cmake --build build"
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
    || die "valgrind is not installed (scripts/setup.sh installs it)"
  # Three times the idle run's time: on a shared machine (load ~13, other
  # guests) the guest took over 9 min for what takes 3 idle; the limit is
  # there for a hung guest, not a slow one.
  run=(--timeout $(( 3 * (300 + 6 * (SECONDS_PER + WARM + 40)) )) --mem 3072)
  [[ -n $OUT ]] && run+=(--out "$OUT")
  exec "$ROOT/scripts/vm/run.sh" "${run[@]}" "$HERE/iser-instructions.sh" "${args[@]}"
fi

# ------------------------------------------------------------ in the guest
source "$ROOT/tests/vm/lib-rxe.sh"
rxe_up || die "soft-RoCE did not come up"
source "$ROOT/tests/vm/lib.sh"
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
PORTAL=$RXE_ADDR:3260
RESULTS="${VM_OUT:-$WORK}"
INITIATOR=iqn.2026-11.io.rbio:iser-instructions
CTL=5703
declare -A BSTYPE=([stock]=$BS_STOCK [rbio]=$BS_RBIO)
declare -A ENVS=([stock]="RBIO_TRANSPORT=off RBIO_ISER=off" [rbio]="RBIO_ISER=on")
WORKLOADS=("4k-randread-qd32 randread" "4k-randwrite-qd32 randwrite")
fallocate -l 256M "$WORK/disk.img" || die "no room for the 256 MiB backing file"

# tgtd under callgrind, counting nothing until told (callgrind_control -i on).
WRAPPER="$WORK/tgtd-callgrind"
cat > "$WRAPPER" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --instr-atstart=no --dump-instr=no \\
  --callgrind-out-file="$RESULTS/callgrind.%p.out" --log-file="$WORK/valgrind.%p.log" \\
  "$(command -v tgtd)" "\$@"
EOF
chmod +x "$WRAPPER"

# bench_started OUT PID: `rbio bench` (PID) printed its first progress line
# to OUT, or ended.
bench_started() { grep -q '^\[ *[0-9]*s\]' "$1" || ! kill -0 "$2" 2>/dev/null; }
# profile_point CONFIG NAME RW: one session of the rbio initiator; callgrind
# counts the seconds after the warm-up and dumps them as part NAME.
profile_point() {
  local c=$1 name=$2 rw=$3 pid=$4 bench
  bench="$RESULTS/bench-$name@$c.out"
  # Generous connect and login limits: tgtd under valgrind in a TCG guest
  # on a loaded host took longer than the default 5 s to accept the
  # connection (rbio's transport's first connection: valgrind translates
  # its code then).
  "$RBIO" bench --transport iser -T "iqn.2026-11.io.rbio:instr-$c" -p "$PORTAL" --lun 1 \
    --connect-timeout 60 --login-timeout 60 \
    --initiator-name "$INITIATOR" --rw "$rw" --bs 4096 --iodepth 32 --time $(( WARM + SECONDS_PER + 4 )) \
    > "$bench" 2>&1 &
  local bp=$!
  # The warm-up runs from the first progress line (logged in, I/O under
  # way), so that however long the login takes, it is never counted.
  wait_for 120 bench_started "$bench" "$bp" \
    || { kill "$bp"; tail -5 "$bench" >&2; die "$c: rbio bench $name did not start I/O within 120 s"; }
  kill -0 "$bp" 2>/dev/null || { wait "$bp" || :; tail -5 "$bench" >&2; die "rbio bench $name failed on $c"; }
  sleep "$WARM"
  callgrind_control -i on "$pid" > /dev/null 2>&1 || { kill "$bp"; die "$c: callgrind_control cannot reach tgtd"; }
  sleep "$SECONDS_PER"
  callgrind_control -i off "$pid" > /dev/null 2>&1
  callgrind_control --dump="$name" "$pid" > /dev/null 2>&1
  wait "$bp" || { tail -5 "$bench" >&2; die "rbio bench $name failed on $c"; }
}

source "$HERE/callgrind.sh"
# keep_profile CONFIG NAME: the profile tgtd dumped as part NAME, kept as
# callgrind-NAME@CONFIG.out and summarised; no such profile is an error.
keep_profile() {
  local c=$1 name=$2 f
  f=$(grep -l "^desc: Trigger: dump $name\$" "$RESULTS"/callgrind.*.out* 2>/dev/null | head -1) && [[ -n $f ]] \
    || die "$c: no callgrind profile for $name"
  mv "$f" "$RESULTS/callgrind-$name@$c.out"
  summarise "$c" "$name" "$RESULTS/callgrind-$name@$c.out"
}

: > "$WORK/rows.md"; : > "$WORK/top.md"
for c in stock rbio; do
  state="$WORK/tgtd-$c"
  # shellcheck disable=SC2086  # ENVS holds env(1) arguments
  env ${ENVS[$c]} "$SANDBOX" start "$state" --modules "$MODULES" --tgtd "$WRAPPER" \
    --control-port "$CTL" --portal "127.0.0.1:3273" -- --iser pool_sz_mb=128,buf_sz_kb=1024 > /dev/null \
    || die "$c: tgtd under callgrind did not start"
  VM_CLEANUP_HOOKS+=("\"\$SANDBOX\" stop \"$state\" 2>/dev/null")
  pid=$(cat "$state/tgtd.pid")
  tgtadm -C "$CTL" --lld iser --op new --mode target --tid 1 -T "iqn.2026-11.io.rbio:instr-$c" &&
  tgtadm -C "$CTL" --lld iser --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/disk.img" --bstype "${BSTYPE[$c]}" &&
  tgtadm -C "$CTL" --lld iser --op bind --mode target --tid 1 -I ALL &&
  tgtadm -C "$CTL" --lld iser --op bind --mode target --tid 1 -Q "$INITIATOR" \
    || die "$c: cannot set up the target"
  for w in "${WORKLOADS[@]}"; do
    read -r name rw <<< "$w"
    echo "iser-instructions: $c: $name, ${SECONDS_PER} s counted" >&2
    profile_point "$c" "$name" "$rw" "$pid"
  done
  "$SANDBOX" stop "$state"
  for w in "${WORKLOADS[@]}"; do
    read -r name _ <<< "$w"
    keep_profile "$c" "$name"
  done
  rm -f "$RESULTS"/callgrind.*.out*
done

# The first burst of a 64 KiB write from the kernel's iSER initiator, on a
# target set to InitialR2T=No (open-iscsi offers No too).
FB_NAME=64k-randwrite-qd8-kernel FB_IQN=iqn.2026-11.io.rbio:instr-firstburst
modprobe -a ib_iser sd_mod || die "the kernel's iSER initiator does not load"
start_iscsid
kadm() { iscsiadm -m node -T "$FB_IQN" -p "$PORTAL" -I iser "$@"; }
# Two controls: write_in_place = off (the unsolicited data copied) and
# 16 KiB receive blocks (the immediate data of a 64 KiB write copied).
declare -A FB_CONF=([rbio]="write_in_place = on" [rbio-write_in_place-off]="write_in_place = off"
                    [rbio-receive-16k]="iser_receive_kib = 16")
for c in rbio rbio-write_in_place-off rbio-receive-16k; do
  state="$WORK/tgtd-fb-$c"
  printf '%s\n' "${FB_CONF[$c]}" > "$WORK/fb-$c.conf"
  RBIO_CONFIG="$WORK/fb-$c.conf" RBIO_ISER=on "$SANDBOX" start "$state" --modules "$MODULES" --tgtd "$WRAPPER" \
    --control-port "$CTL" --portal "127.0.0.1:3273" -- --iser pool_sz_mb=128,buf_sz_kb=1024 > /dev/null \
    || die "$c: tgtd under callgrind did not start"
  VM_CLEANUP_HOOKS+=("kadm --logout 2>/dev/null; \"\$SANDBOX\" stop \"$state\" 2>/dev/null")
  pid=$(cat "$state/tgtd.pid")
  tgtadm -C "$CTL" --lld iser --op new --mode target --tid 1 -T "$FB_IQN" &&
  tgtadm -C "$CTL" --lld iser --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/disk.img" --bstype rbio &&
  tgtadm -C "$CTL" --lld iser --op bind --mode target --tid 1 -I ALL &&
  tgtadm -C "$CTL" --lld iser --op update --mode target --tid 1 --name InitialR2T --value No \
    || die "$c: cannot set up the target"
  iscsiadm -m discovery -t sendtargets -p "$PORTAL" -I iser > /dev/null || die "$c: iSER discovery failed"
  kadm -o update -n 'node.conn[0].timeo.login_timeout' -v 60 || die "$c: cannot set the login timeout"
  kadm --login > /dev/null || die "$c: the kernel's initiator cannot log in"
  wait_disk_of "$FB_IQN" 1 || wait_disk_of "$FB_IQN" 1 || die "$c: no disk for the LUN"
  echo "iser-instructions: $c: $FB_NAME ($(iscsiadm -m session -P 2 | grep -o 'InitialR2T: [A-Za-z]*')), ${SECONDS_PER} s counted" >&2
  fio --name="$FB_NAME" --filename="$DISK" --direct=1 --ioengine=libaio --rw=randwrite --bs=64k --iodepth=8 \
    --size=64M --time_based --runtime=$(( WARM + SECONDS_PER + 4 )) --output="$RESULTS/fio-$FB_NAME@$c.log" &
  fp=$!
  sleep "$WARM"
  callgrind_control -i on "$pid" > /dev/null 2>&1 || { kill "$fp"; die "$c: callgrind_control cannot reach tgtd"; }
  sleep "$SECONDS_PER"
  callgrind_control -i off "$pid" > /dev/null 2>&1
  callgrind_control --dump="$FB_NAME" "$pid" > /dev/null 2>&1
  wait "$fp" || die "$c: fio failed (see $RESULTS/fio-$FB_NAME@$c.log)"
  kadm --logout > /dev/null || die "$c: logout failed"
  "$SANDBOX" stop "$state"
  keep_profile "$c" "$FB_NAME"
  rm -f "$RESULTS"/callgrind.*.out*
done

{
  echo "# tgtd's user-space instructions per SCSI command over iSER (callgrind)"
  echo
  echo "guest: Linux $(uname -r) under qemu TCG, $(nproc) vCPUs, rdma_rxe on a veth pair; tgt $(dpkg-query -W -f '${Version}' tgt 2>/dev/null); $(valgrind --version);"
  echo "initiator: \`rbio bench --transport iser\`, 4 KiB, 32 in flight; ${SECONDS_PER} s counted after ${WARM} s of warm-up;"
  echo "$FB_NAME: the kernel's iSER initiator (fio, libaio), rbio's target set to InitialR2T=No, with the defaults, with \`write_in_place = off\` and with \`iser_receive_kib = 16\`;"
  echo "backing store: stock bs $BS_STOCK, rbio bs $BS_RBIO; a 256 MiB fallocated tmpfs file."
  echo
  echo "| workload | target | commands | instructions/command | tgtd | bs_rbio.so | libc | librxe | other | allocations/command | memcpy calls/command | memcpy instructions/command |"
  echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
  sort -t'|' -k2,2 -k3,3r "$WORK/rows.md"
  cat "$WORK/top.md"
} > "$RESULTS/results.md"
cat "$RESULTS/results.md"
finish
