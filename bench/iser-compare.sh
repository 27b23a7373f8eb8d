#!/usr/bin/env bash
# iser-compare.sh: stock tgt's iSER against rbio's iSER transport, with the
# kernel's iSER initiator (open-iscsi iface iser) over soft-RoCE (rdma_rxe)
# in ONE qemu guest, side by side.
#
#   bench/iser-compare.sh [--rounds R] [--seconds S] [--size-mb N]
#                         [--bstype rdwr|rbio] [--quick] [--out DIR]
#
#   --rounds R    interleaved rounds; the table gives medians (default 3)
#   --seconds S   seconds per point (default 6)
#   --size-mb N   size of each tmpfs backing file (default 256)
#   --bstype B    backing store of both targets (default rdwr, so that only
#                 the transport differs; rbio's store does small tmpfs I/O
#                 inline in tgtd's one thread, which under TCG costs more
#                 than rdwr's 16 threads)
#   --quick       smoke run: 1 round of 3 s per point
#   --out DIR     keep the guest run's files in DIR (results.md, raw.tsv)
#
# Targets, each a `--lld iser` target exporting a fallocated tmpfs file of
# the same size, over 10.99.0.1:3260 (an rxe device on a veth):
#   stock  tgtd with RBIO_TRANSPORT=off RBIO_ISER=off: tgt's own iSER
#          driver; bound to -I ALL and to this initiator's IQN (tgt 1.0.85
#          refuses iSER logins otherwise);
#   rbio   tgtd with bs_rbio.so's iSER transport, bound to -I ALL.
# Both listen on the iSER port 3260 (tgtd 1.0.85's `--iser port=N` is
# unusable: it tests a stale errno and refuses any port), so they take
# turns: each round starts one tgtd, logs in, runs every workload, logs out
# and stops it, then the other; the first of the two alternates by round.
# Workloads (fio, libaio, direct=1, raw disks): 4 KiB random read and write
# with 1 and 32 in flight, 1 MiB sequential read and write with 8 in flight.
#
# Columns: IOPS and MB/s per target, rbio/stock (median of per-round
# ratios), tgtd CPU time per I/O (utime+stime from /proc/PID/stat), and
# rbio's counters per point from its statistics file: work requests per
# ibv_post_send call, signalled completions per I/O, completions per
# ibv_poll_cq call, completion-channel wake-ups per I/O. Issue 6's goals:
# >= 8 work requests per post and <= 0.25 signalled per I/O at 32 in
# flight; >= 1.5x stock IOPS at 4 KiB, 32 in flight.
#
# Run time: about 40 s of boot and set-up, then per round and target about
# 40 s of start-up and login plus 6 points x (S + about 4) s; the default
# takes about 10 minutes, --quick about 4.
# Under TCG every instruction is emulated, rxe included: absolute numbers
# measure CPU cost per I/O, not a wire; read the ratios. Run it by hand on
# an otherwise idle machine; it is not part of ctest.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"

die() { printf 'iser-compare: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3 SECONDS_PER=6 SIZE_MB=256 OUT="" QUICK=0 BS_ALL=rdwr
args=("$@")
while (( $# )); do
  case $1 in
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) SECONDS_PER=${2:-}; shift 2 ;;
    --size-mb) SIZE_MB=${2:-}; shift 2 ;;
    --bstype) BS_ALL=${2:-}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --out) OUT=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'iser-compare: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
if (( QUICK )); then ROUNDS=1 SECONDS_PER=3; fi
[[ $BS_ALL == rdwr || $BS_ALL == rbio ]] || die "--bstype takes rdwr or rbio (got '$BS_ALL')"
for v in ROUNDS SECONDS_PER SIZE_MB; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer (got '${!v}')"
done

# ------------------------------------------------------------ on the host
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  [[ $(id -u) -eq 0 ]] || die "run as root (it boots a qemu guest)"
  [[ -f ${RBIO_BUILD_DIR:-$ROOT/build}/modules/bs_rbio.so ]] \
    || die "no build: cmake -S . -B build && cmake --build build"
  limit=$(( 400 + ROUNDS * 12 * (SECONDS_PER + 10) ))
  mem=$(( 1536 + 2 * SIZE_MB ))
  run=(--timeout "$limit" --mem "$mem")
  [[ -n $OUT ]] && run+=(--out "$OUT")
  echo "iser-compare: host load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  rc=0
  "$ROOT/scripts/vm/run.sh" "${run[@]}" "$HERE/iser-compare.sh" "${args[@]}" || rc=$?
  echo "iser-compare: host load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  exit "$rc"
fi

# ------------------------------------------------------------ in the guest
source "$ROOT/tests/vm/lib-rxe.sh"
rxe_up || die "soft-RoCE did not come up"
source "$ROOT/tests/vm/lib.sh"
VM_CLEANUP_HOOKS+=('iscsiadm -m node --logoutall=all >/dev/null 2>&1')
T0=$EPOCHREALTIME
CONFIGS=(stock rbio)
declare -A CTLPORT=([stock]=5701 [rbio]=5702)
declare -A TCP_PORT=([stock]=3271 [rbio]=3272) BSTYPE=([stock]=$BS_ALL [rbio]=$BS_ALL)
declare -A ENVS=([stock]="RBIO_TRANSPORT=off RBIO_ISER=off" [rbio]="RBIO_ISER=on")
declare -A IQN=() DEV=() TGTD_PID=() STATS=()
for c in "${CONFIGS[@]}"; do IQN[$c]=iqn.2026-11.io.rbio:iser-$c; done
MY_IQN=$(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi)
PORTAL=$RXE_ADDR:3260
WORKLOADS=(
  "4k-randread-qd1 randread 4096 1"
  "4k-randread-qd32 randread 4096 32"
  "4k-randwrite-qd1 randwrite 4096 1"
  "4k-randwrite-qd32 randwrite 4096 32"
  "1m-read-qd8 read 1048576 8"
  "1m-write-qd8 write 1048576 8"
)
RESULTS="${VM_OUT:-$WORK}"
RAW="$RESULTS/raw.tsv"
CLK_TCK=$(getconf CLK_TCK)
COUNTERS=(work_requests post_calls signaled completions poll_calls channel_wakeups rdma_reads)
for c in "${CONFIGS[@]}"; do
  must "a ${SIZE_MB} MiB allocated tmpfs file for $c" fallocate -l "${SIZE_MB}M" "$WORK/$c.img"
done
modprobe -a ib_iser sd_mod || die "cannot load ib_iser"
setsid iscsid -f > "$WORK/iscsid.log" 2>&1 &
ISCSID_PID=$!

# up CONFIG: its tgtd, target and session; sets DEV[CONFIG], TGTD_PID[CONFIG].
up() {
  local c=$1 state="$WORK/tgtd-$1" ctl=${CTLPORT[$1]}
  STATS[$c]=$state/rbio.stats
  # shellcheck disable=SC2086  # ENVS holds env(1) arguments
  env ${ENVS[$c]} RBIO_STATS_FILE="${STATS[$c]}" "$SANDBOX" start "$state" --modules "$MODULES" \
    --control-port "$ctl" --portal "127.0.0.1:${TCP_PORT[$c]}" -- --iser pool_sz_mb=128 || return 1
  TGTD_PID[$c]=$(cat "$state/tgtd.pid")
  tgtadm -C "$ctl" --lld iser --op new --mode target --tid 1 -T "${IQN[$c]}" &&
  tgtadm -C "$ctl" --lld iser --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/$c.img" \
    --bstype "${BSTYPE[$c]}" &&
  tgtadm -C "$ctl" --lld iser --op bind --mode target --tid 1 -I ALL || return 1
  if [[ $c == stock ]]; then
    tgtadm -C "$ctl" --lld iser --op bind --mode target --tid 1 -Q "$MY_IQN" || return 1
    grep -q "rbio: iser: transport off" "$state/tgtd.log" || { echo "stock: rbio took iSER"; return 1; }
  else
    grep -q "served by rbio's transport" "$state/tgtd.log" || { echo "rbio: no takeover"; return 1; }
  fi
  # iscsid may still be starting on the first round: retry discovery.
  local i
  for (( i = 0; i < 20; i++ )); do
    iscsiadm -m discovery -t st -p "$PORTAL" -I iser 2>/dev/null | grep -q " ${IQN[$c]}\$" && break
    sleep 0.5
  done
  (( i < 20 )) &&
  iscsiadm -m node -T "${IQN[$c]}" -p "$PORTAL" -I iser --login > /dev/null &&
  { wait_disk_of "${IQN[$c]}" 1 || wait_disk_of "${IQN[$c]}" 1; } || return 1
  DEV[$c]=$DISK
}
down() {
  local c=$1
  iscsiadm -m node -T "${IQN[$c]}" -p "$PORTAL" -I iser --logout > /dev/null || return 1
  grep "rbio: iser: .*connection ended; pdus_in=[1-9]" "$WORK/tgtd-$c/tgtd.log" | tail -1
  "$SANDBOX" stop "$WORK/tgtd-$c"
  iscsiadm -m node -T "${IQN[$c]}" -p "$PORTAL" -I iser -o delete > /dev/null 2>&1 || true
}
VM_CLEANUP_HOOKS+=('for c in stock rbio; do "$SANDBOX" stop "$WORK/tgtd-$c" 2>/dev/null; done')
{
  echo "# iSER: stock tgt vs rbio's transport, kernel iSER initiator, soft-RoCE"
  echo
  echo "guest: Linux $(uname -r) under qemu TCG, $(nproc) vCPUs, rdma_rxe on a veth pair; tgt $(dpkg-query -W -f '${Version}' tgt 2>/dev/null);"
  echo "fio $(fio --version), libaio, direct=1; ${ROUNDS} round(s) of ${SECONDS_PER} s per point, medians;"
  echo "each target: a ${SIZE_MB} MiB fallocated tmpfs file, bs $BS_ALL; stock: tgt's iSER driver, rbio: rbio's iSER transport;"
  echo "the two tgtds take turns on port 3260 (one session at a time)."
} > "$RESULTS/header.md"
cat "$RESULTS/header.md"; echo

# A sample: tgtd's utime+stime, then (rbio) the counters. The statistics
# file is rewritten once a second: wait for a fresh one.
sample() {  # sample CONFIG
  local c=$1
  [[ $c == rbio ]] && sleep 1.2
  awk '{ print "cpu=" $14 + $15 }' "/proc/${TGTD_PID[$c]}/stat"
  [[ $c == rbio ]] && cat "${STATS[$c]}"
  true
}

jobs_for() {  # jobs_for CONFIG: its fio job file on stdout
  local c=$1 w name rw bs qd
  printf '[global]\ndirect=1\nioengine=libaio\ntime_based\nruntime=%s\nnorandommap\nrandrepeat=0\nstonewall\n' \
    "$SECONDS_PER"
  for w in "${WORKLOADS[@]}"; do
    read -r name rw bs qd <<< "$w"
    printf '\n[%s@%s]\nfilename=%s\nrw=%s\nbs=%s\niodepth=%s\n' "$name" "$c" "${DEV[$c]}" "$rw" "$bs" "$qd"
    printf 'exec_prerun=%s\nexec_postrun=%s\n' "$SAMPLER $c" "$SAMPLER $c"
  done
}
SAMPLER="$WORK/sample.sh"
write_sampler() {
  {
    echo '#!/bin/bash'
    declare -p TGTD_PID STATS
    declare -f sample
    echo 'sample "$1"'
  } > "$SAMPLER"
  chmod +x "$SAMPLER"
}

val() { sed -n "s/^$2=//p" "$1" | tail -1; }
printf 'round\tworkload\tconfig\tios\tiops\tmbps\ttgtd_cpu_us_per_io\twrs_per_post\tsignaled_per_io\tcompletions_per_poll\twakeups_per_io\trdma_reads_per_io\n' > "$RAW"
declare -A BS=()
for w in "${WORKLOADS[@]}"; do read -r name _ bs _ <<< "$w"; BS[$name]=$bs; done
# parse_round ROUND: the fio run's points (terse v3: 3 job name, 5 error;
# read: 6 KiB, 9 runtime ms; write: 47 KiB, 50 runtime ms) into $RAW.
parse_round() {
  local r=$1 f job name c pre post cpu d k
  while IFS=';' read -ra f; do
    [[ ${#f[@]} -gt 50 && ${f[0]} == 3 ]] || continue
    job=${f[2]} name=${job%@*} c=${job#*@}
    (( f[4] == 0 )) || die "fio reported error ${f[4]} for $name on $c"
    pre="$WORK/$job.prerun.txt" post="$WORK/$job.postrun.txt"
    cpu=$(( $(val "$post" cpu) - $(val "$pre" cpu) ))
    d=()
    for k in "${COUNTERS[@]}"; do
      if [[ $c == rbio ]]; then d+=($(( $(val "$post" "$k") - $(val "$pre" "$k") ))); else d+=(-); fi
    done
    awk -v r="$r" -v name="$name" -v c="$c" -v bs="${BS[$name]}" -v rkb="${f[5]}" -v rms="${f[8]}" \
        -v wkb="${f[46]}" -v wms="${f[49]}" -v ticks="$cpu" -v hz="$CLK_TCK" \
        -v wr="${d[0]}" -v posts="${d[1]}" -v sig="${d[2]}" -v comp="${d[3]}" -v polls="${d[4]}" -v wake="${d[5]}" -v rd="${d[6]}" 'BEGIN {
      kb = rkb + wkb; ms = rkb > 0 ? rms : wms; ios = kb * 1024 / bs
      cpu = ios == 0 ? "-" : sprintf("%.1f", ticks / hz * 1e6 / ios)
      if (posts == "-" || posts == 0 || ios == 0) { wpp = spi = cpp = wpi = rpi = "-" }
      else { wpp = sprintf("%.2f", wr / posts); spi = sprintf("%.3f", sig / ios)
             cpp = polls > 0 ? sprintf("%.2f", comp / polls) : "-"; wpi = sprintf("%.3f", wake / ios)
             rpi = sprintf("%.3f", rd / ios) }
      printf "%s\t%s\t%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\n", r, name, c, ios, ios / (ms / 1000),
             kb * 1024 / (ms / 1000) / 1e6, cpu, wpp, spi, cpp, wpi, rpi
    }' >> "$RAW"
  done < "$WORK/round.terse"
}
echo "measuring: ${#WORKLOADS[@]} workloads x ${#CONFIGS[@]} targets x $ROUNDS round(s) x $SECONDS_PER s" >&2
for (( r = 1; r <= ROUNDS; r++ )); do
  for (( k = 0; k < ${#CONFIGS[@]}; k++ )); do
    c=${CONFIGS[$(( (k + r) % ${#CONFIGS[@]} ))]}
    must "round $r: $c up (tgtd, target, iSER login)" up "$c"
    write_sampler
    jobs_for "$c" > "$WORK/round.fio"
    rm -f "$WORK"/*.prerun.txt "$WORK"/*.postrun.txt
    (cd "$WORK" && fio --output-format=terse --terse-version=3 --output="$WORK/round.terse" round.fio) \
      || { cat "$WORK/round.terse" >&2; die "fio failed in round $r on $c"; }
    parse_round "$r"
    must "round $r: $c down (logout, tgtd stopped)" down "$c"
  done
  awk -F'\t' -v r="$r" '$1 == r { printf "  round %s  %-18s %-5s %7s IOPS %7s MB/s  tgtd %8s us/IO  wrs/post %s signaled/IO %s\n", $1, $2, $3, $5, $6, $7, $8, $9 }' "$RAW" >&2
  (( $(awk -F'\t' -v r="$r" '$1 == r' "$RAW" | wc -l) == ${#WORKLOADS[@]} * ${#CONFIGS[@]} )) \
    || die "round $r: fio reported fewer results than jobs"
done

order=$(for w in "${WORKLOADS[@]}"; do echo "${w%% *}"; done)
table=$(awk -F'\t' -v order="$order" '
  function sorted(s, a,   n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n
  }
  function median(s,   a, n) { n = sorted(s, a); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  NR > 1 { k = $2 SUBSEP $3; iops[k] = iops[k] " " $5; mbps[k] = mbps[k] " " $6; cpu[k] = cpu[k] " " $7
           if ($3 == "rbio") { wpp[$2] = wpp[$2] " " $8; spi[$2] = spi[$2] " " $9; cpp[$2] = cpp[$2] " " $10; wpi[$2] = wpi[$2] " " $11; rpi[$2] = rpi[$2] " " $12 }
           v[$1, $2, $3] = $5; rounds[$1] = 1 }
  END {
    print "| workload | stock IOPS | rbio IOPS | stock MB/s | rbio MB/s | rbio/stock | tgtd CPU us/IO stock | rbio | rbio WRs/post | signalled/IO | completions/poll | wake-ups/IO | RDMA READs/IO |"
    print "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    n = split(order, ws, "\n")
    for (i = 1; i <= n; i++) {
      w = ws[i]; rr = ""
      for (r in rounds) rr = rr " " v[r, w, "rbio"] / v[r, w, "stock"]
      printf "| %s | %.0f | %.0f | %.1f | %.1f | **%.2f** | %.0f | %.0f | %.2f | %.3f | %.2f | %.3f | %.3f |\n", w,
        median(iops[w, "stock"]), median(iops[w, "rbio"]), median(mbps[w, "stock"]), median(mbps[w, "rbio"]),
        median(rr), median(cpu[w, "stock"]), median(cpu[w, "rbio"]),
        median(wpp[w]), median(spi[w]), median(cpp[w]), median(wpi[w]), median(rpi[w])
    }
  }' "$RAW")
{ cat "$RESULTS/header.md"; echo; echo "$table"; } > "$RESULTS/results.md"
echo "$table"
echo
awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "iser-compare: done in %.0f s (in the guest)\n", b - a }'
finish
