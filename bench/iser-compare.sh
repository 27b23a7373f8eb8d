#!/usr/bin/env bash
# iser-compare.sh: stock tgt's iSER against rbio's iSER transport over
# soft-RoCE (rdma_rxe) in ONE qemu guest, side by side, with two
# initiators: the kernel's iSER initiator (open-iscsi iface iser, fio) and
# rbio's userspace one (`rbio bench --transport iser`).
#
#   bench/iser-compare.sh [--rounds R] [--seconds S] [--size-mb N]
#                         [--bstype B|S,R] [--initiators LIST]
#                         [--workloads LIST] [--mtu N] [--quick] [--out DIR]
#
#   --rounds R    interleaved rounds; the tables give medians (default 3)
#   --seconds S   seconds per point (default 6)
#   --size-mb N   size of each tmpfs backing file (default 256)
#   --bstype B|S,R  backing store of both targets, or of stock's and of
#                 rbio's (default rdwr, so that only the transport differs;
#                 rdwr,rbio compares the whole stacks: stock tgt as it ships
#                 against rbio's transport over its io_uring store)
#   --initiators LIST  comma-separated, from kernel and rbio (default
#                 kernel,rbio): which initiators run the workloads
#   --workloads LIST  comma-separated SIZE-RW-qdN names (SIZE 1k..16m as
#                 Nk or Nm; RW read, write, randread or randwrite), instead
#                 of the six below; bench/paper.sh uses it for its request
#                 sizes
#   --mtu N       the veth pair's MTU under rxe (default: the veth's 1500,
#                 so rxe's RoCE MTU is 1024; 9000 makes it 4096 and a 4 KiB
#                 RDMA WRITE one packet instead of four)
#   --quick       smoke run: 1 round of 3 s per point
#   --out DIR     keep the guest run's files in DIR (results.md, raw.tsv,
#                 rbio-bench/: each `rbio bench` run's report and samples)
#
# Targets, each a `--lld iser` target exporting a fallocated tmpfs file of
# the same size, over 10.99.0.1:3260 (an rxe device on a veth):
#   stock  tgtd with RBIO_TRANSPORT=off RBIO_ISER=off: tgt's own iSER
#          driver; bound to -I ALL and to both initiators' IQNs (tgt
#          1.0.85 refuses iSER logins otherwise);
#   rbio   tgtd with bs_rbio.so's iSER transport, bound to -I ALL.
# Both tgtds run with `--iser pool_sz_mb=128,buf_sz_kb=1024`: stock's iSER
# moves at most buf_sz_kb per command and drops the connection on more; the
# kernel initiator splits I/O at 512 KiB, the rbio initiator sends 1 MiB.
# Both listen on the iSER port 3260 (tgtd 1.0.85's `--iser port=N` is
# unusable: it tests a stale errno and refuses any port), so they take
# turns: each round starts one tgtd, runs every workload with the kernel
# initiator (one login, one fio run, logout), then with the rbio initiator
# (one `rbio bench` per workload, each its own session), and stops it, then
# the other; the first of the two tgtds alternates by round.
# Workloads (default; --workloads for others): 4 KiB random read and write
# with 1 and 32 in flight, 1 MiB sequential read and write with 8 in
# flight; kernel: fio, libaio, direct=1, raw disks; rbio: `rbio bench --rw R --bs B --iodepth Q --time S`
# on LUN 1 (its own login, TEST UNIT READY, READ CAPACITY, SYNCHRONIZE
# CACHE and logout fall inside its point's CPU and counter samples).
#
# Tables in results.md: first issue 6's goals at 4 KiB x 32, met or not;
# then one per initiator: IOPS and MB/s per target,
# rbio/stock (median of per-round ratios), tgtd CPU time per I/O
# (utime+stime from /proc/PID/stat), and rbio's counters per point from
# its statistics file: work requests per ibv_post_send call, signalled
# completions per I/O, completions per ibv_poll_cq call, completion-channel
# wake-ups per I/O, RDMA READs per I/O. A third table gives the rbio
# initiator's own counters (as `rbio bench` prints them) against each
# target, and its latency percentiles. Issue 6's goals: >= 8 work
# requests per post and <= 0.25 signalled per I/O at 32 in flight; >= 1.5x
# stock IOPS at 4 KiB, 32 in flight.
#
# Run time: about 40 s of boot and set-up, then per round and target about
# 40 s of start-up and login plus 6 points x (S + about 4) s for the kernel
# initiator and 6 x (S + 2 to 6) s for the rbio one (a process and a login
# per point; on rbio's tgtd also a fresh statistics file before and after
# each); the default takes about 15 minutes (about 10 with --initiators
# kernel), --quick 4-4.5 (measured), not counting a wait for another guest.
# Under TCG every instruction is emulated, rxe included: absolute numbers
# measure CPU cost per I/O, not a wire; read the ratios. Run it by hand on
# an otherwise idle machine; it is not part of ctest.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=iser-compare
source "$HERE/lib.sh"

ROUNDS=3 SECONDS_PER=6 SIZE_MB=256 OUT="" QUICK=0 BS_ALL=rdwr INITIATOR_LIST=kernel,rbio MTU=""
WORKLOAD_LIST=4k-randread-qd1,4k-randread-qd32,4k-randwrite-qd1,4k-randwrite-qd32,1m-read-qd8,1m-write-qd8
args=("$@")
while (( $# )); do
  case $1 in
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) SECONDS_PER=${2:-}; shift 2 ;;
    --size-mb) SIZE_MB=${2:-}; shift 2 ;;
    --bstype) BS_ALL=${2:-}; shift 2 ;;
    --initiators) INITIATOR_LIST=${2:-}; shift 2 ;;
    --workloads) WORKLOAD_LIST=${2:-}; shift 2 ;;
    --mtu) MTU=${2:-}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --out) OUT=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'iser-compare: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
if (( QUICK )); then ROUNDS=1 SECONDS_PER=3; fi
split_bstypes "$BS_ALL"
IFS=, read -ra INITIATORS <<< "$INITIATOR_LIST"
(( ${#INITIATORS[@]} )) || die "--initiators takes kernel, rbio or kernel,rbio"
declare -A WANT=()
for i in "${INITIATORS[@]}"; do
  [[ $i == kernel || $i == rbio ]] || die "--initiators takes kernel, rbio or kernel,rbio (got '$INITIATOR_LIST')"
  [[ -z ${WANT[$i]:-} ]] || die "--initiators names $i twice"
  WANT[$i]=1
done
for v in ROUNDS SECONDS_PER SIZE_MB; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer (got '${!v}')"
done
# WORKLOADS: "NAME RW BYTES DEPTH" per --workloads entry.
WORKLOADS=()
IFS=, read -ra names <<< "$WORKLOAD_LIST"
(( ${#names[@]} )) || die "--workloads needs at least one SIZE-RW-qdN"
for w in "${names[@]}"; do
  [[ $w =~ ^([0-9]+)([km])-(read|write|randread|randwrite)-qd([0-9]+)$ ]] \
    || die "--workloads: '$w' is not SIZE-RW-qdN (e.g. 4k-randread-qd32, 1m-write-qd8)"
  unit=1024; [[ ${BASH_REMATCH[2]} == m ]] && unit=1048576
  bytes=$(( 10#${BASH_REMATCH[1]} * unit )) depth=$(( 10#${BASH_REMATCH[4]} ))
  (( bytes >= 1024 && bytes <= 16777216 && depth >= 1 && depth <= 128 )) \
    || die "--workloads: '$w' wants 1k..16m and 1..128 in flight"
  [[ " ${WORKLOADS[*]} " != *" $w "* ]] || die "--workloads names $w twice"
  WORKLOADS+=("$w ${BASH_REMATCH[3]} $bytes $depth")
done
[[ -z $MTU || ( $MTU =~ ^[0-9]+$ && $MTU -ge 1280 && $MTU -le 9000 ) ]] \
  || die "--mtu takes 1280 to 9000 (got '$MTU')"

# ------------------------------------------------------------ on the host
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  [[ $(id -u) -eq 0 ]] || die "run as root (it boots a qemu guest)"
  build=${RBIO_BUILD_DIR:-$ROOT/build}
  [[ -f $build/modules/bs_rbio.so && ( -z ${WANT[rbio]:-} || -x $build/initiator/rbio ) ]] \
    || die "no build in $build: cmake -S . -B build && cmake --build build"
  # 2 points (2 targets) per workload, initiator and round; an rbio bench
  # point costs a few seconds more than a fio one (see Run time), and a
  # guest on a loaded machine (load ~14 on the 2 cores, other guests)
  # takes about twice as long: the limit stops a hung guest, not a slow one.
  limit=$(( 400 + ROUNDS * 2 * ${#WORKLOADS[@]} * 2 * (${WANT[kernel]:-0} * (SECONDS_PER + 10) + ${WANT[rbio]:-0} * (SECONDS_PER + 15)) ))
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
RXE_MTU=$MTU rxe_up || die "soft-RoCE did not come up"
source "$ROOT/tests/vm/lib.sh"
VM_CLEANUP_HOOKS+=('iscsiadm -m node --logoutall=all >/dev/null 2>&1')
T0=$EPOCHREALTIME
CONFIGS=(stock rbio)
declare -A CTLPORT=([stock]=5701 [rbio]=5702)
declare -A TCP_PORT=([stock]=3271 [rbio]=3272) BSTYPE=([stock]=$BS_STOCK [rbio]=$BS_RBIO)
declare -A ENVS=([stock]="RBIO_TRANSPORT=off RBIO_ISER=off" [rbio]="RBIO_ISER=on")
declare -A IQN=() DEV=() TGTD_PID=() STATS=()
for c in "${CONFIGS[@]}"; do IQN[$c]=iqn.2026-11.io.rbio:iser-$c; done
MY_IQN=$(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi)
RBIO_IQN=iqn.2026-11.io.rbio:iser-bench   # the rbio initiator's name
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
PORTAL=$RXE_ADDR:3260
RESULTS="${VM_OUT:-$WORK}"
RAW="$RESULTS/raw.tsv"
BENCH_OUT="$RESULTS/rbio-bench"
CLK_TCK=$(getconf CLK_TCK)
# What `rbio bench` reports of the initiator's own side (its "iser:" and
# "latency_us:" lines), in raw.tsv's last columns.
RBIO_FIELDS=(wrs_per_post signaled_per_io completions_per_poll channel_wakeups_per_io p50 p99)
for c in "${CONFIGS[@]}"; do
  must "a ${SIZE_MB} MiB allocated tmpfs file for $c" fallocate -l "${SIZE_MB}M" "$WORK/$c.img"
done
if [[ -n ${WANT[kernel]:-} ]]; then
  modprobe -a ib_iser sd_mod || die "cannot load ib_iser"
  setsid iscsid -f > "$WORK/iscsid.log" 2>&1 &
  ISCSID_PID=$!
fi

# tgtd_up CONFIG: its tgtd and target; sets TGTD_PID[CONFIG], STATS[CONFIG].
tgtd_up() {
  local c=$1 state="$WORK/tgtd-$1" ctl=${CTLPORT[$1]} q
  STATS[$c]=$state/rbio.stats
  # shellcheck disable=SC2086  # ENVS holds env(1) arguments
  env ${ENVS[$c]} RBIO_STATS_FILE="${STATS[$c]}" "$SANDBOX" start "$state" --modules "$MODULES" \
    --control-port "$ctl" --portal "127.0.0.1:${TCP_PORT[$c]}" -- --iser pool_sz_mb=128,buf_sz_kb=1024 \
    || return 1
  TGTD_PID[$c]=$(cat "$state/tgtd.pid")
  tgtadm -C "$ctl" --lld iser --op new --mode target --tid 1 -T "${IQN[$c]}" &&
  tgtadm -C "$ctl" --lld iser --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/$c.img" \
    --bstype "${BSTYPE[$c]}" &&
  tgtadm -C "$ctl" --lld iser --op bind --mode target --tid 1 -I ALL || return 1
  if [[ $c == stock ]]; then
    for q in "$MY_IQN" "$RBIO_IQN"; do
      tgtadm -C "$ctl" --lld iser --op bind --mode target --tid 1 -Q "$q" || return 1
    done
    grep -q "rbio: iser: transport off" "$state/tgtd.log" || { echo "stock: rbio took iSER"; return 1; }
  else
    grep -q "served by rbio's transport" "$state/tgtd.log" || { echo "rbio: no takeover"; return 1; }
  fi
}
tgtd_down() {
  local c=$1
  # Only rbio's transport logs its connections' counters; tgt's iSER
  # driver logs none (must's check fails a step that finds nothing).
  if [[ $c == rbio ]]; then
    grep "rbio: iser: .*connection ended; pdus_in=[1-9]" "$WORK/tgtd-$c/tgtd.log" | tail -1
  fi
  "$SANDBOX" stop "$WORK/tgtd-$c"
}
# kernel_login CONFIG: the kernel initiator's session; sets DEV[CONFIG].
kernel_login() {
  local c=$1 i
  # iscsid may still be starting on the first round: retry discovery.
  for (( i = 0; i < 20; i++ )); do
    iscsiadm -m discovery -t st -p "$PORTAL" -I iser 2>/dev/null | grep -q " ${IQN[$c]}\$" && break
    sleep 0.5
  done
  (( i < 20 )) &&
  iscsiadm -m node -T "${IQN[$c]}" -p "$PORTAL" -I iser --login > /dev/null &&
  { wait_disk_of "${IQN[$c]}" 1 || wait_disk_of "${IQN[$c]}" 1; } || return 1
  DEV[$c]=$DISK
}
kernel_logout() {
  local c=$1
  iscsiadm -m node -T "${IQN[$c]}" -p "$PORTAL" -I iser --logout > /dev/null || return 1
  iscsiadm -m node -T "${IQN[$c]}" -p "$PORTAL" -I iser -o delete > /dev/null 2>&1 || true
}
VM_CLEANUP_HOOKS+=('for c in stock rbio; do "$SANDBOX" stop "$WORK/tgtd-$c" 2>/dev/null; done')
{
  echo "# iSER: stock tgt vs rbio's transport, soft-RoCE; initiators: ${INITIATORS[*]}"
  echo
  echo "guest: Linux $(uname -r) under qemu TCG, $(nproc) vCPUs, rdma_rxe on a veth pair (MTU $(cat /sys/class/net/rbio-veth0/mtu)); tgt $(dpkg-query -W -f '${Version}' tgt 2>/dev/null);"
  [[ -n ${WANT[kernel]:-} ]] && echo "kernel initiator: ib_iser, fio $(fio --version), libaio, direct=1;"
  [[ -n ${WANT[rbio]:-} ]] && echo "rbio initiator: \`rbio bench --transport iser\`, one session per point;"
  echo "${ROUNDS} round(s) of ${SECONDS_PER} s per point, medians;"
  echo "each target: a ${SIZE_MB} MiB fallocated tmpfs file; backing store: stock bs $BS_STOCK, rbio bs $BS_RBIO; stock: tgt's iSER driver, rbio: rbio's iSER transport;"
  echo "the two tgtds take turns on port 3260 (one session at a time)."
} > "$RESULTS/header.md"
cat "$RESULTS/header.md"; echo

# A sample: tgtd's utime+stime and its utime alone, then (rbio) the counters. The statistics
# file is rewritten once a second: wait for a fresh one.
# With it, the guest's busy and total jiffies over all vCPUs and per vCPU
# (/proc/stat: user nice system idle iowait irq softirq steal): how much of
# the guest's CPU an I/O costs besides tgtd's (initiator, rxe, fio), and
# whether one vCPU was saturated while the other had time to spare; and
# tgtd's read- and write-family system calls (/proc/PID/io syscr+syscw, all
# threads): rxe's verbs (post send, arm a CQ) are write()s on the uverbs
# fd, completion-channel and eventfd wake-ups are read()s, and each one
# under TCG is costly, so what batching saves shows up there.
# The statistics file's wait comes before the pre sample and after the
# post one's /proc readings, so that the guest's busy share covers the
# point and not an idle second.
sample() {  # sample CONFIG pre|post
  local c=$1 when=$2
  if [[ $c == rbio && $when == pre ]]; then stats_rewritten "${STATS[$c]}" || die "tgtd did not rewrite ${STATS[$c]}"; fi
  awk 'FILENAME ~ /stat$/ && FNR == NR { print "cpu=" $14 + $15; print "cpu_user=" $14; next }
       $1 == "syscr:" || $1 == "syscw:" { rw += $2 }
       $1 == "syscw:" { print "tgtd_rw_syscalls=" rw }
       /^cpu/ { print "guest_busy" substr($1, 4) "=" $2 + $3 + $4 + $7 + $8 + $9
                print "guest_all" substr($1, 4) "=" $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' \
    "/proc/${TGTD_PID[$c]}/stat" "/proc/${TGTD_PID[$c]}/io" /proc/stat
  if [[ $c == rbio && $when == post ]]; then stats_rewritten "${STATS[$c]}" || die "tgtd did not rewrite ${STATS[$c]}"; fi
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
    printf 'exec_prerun=%s\nexec_postrun=%s\n' "$SAMPLER $c pre" "$SAMPLER $c post"
  done
}
SAMPLER="$WORK/sample.sh"
write_sampler() {
  {
    echo '#!/bin/bash'
    declare -p TGTD_PID STATS
    declare -f sample
    echo 'sample "$1" "$2"'
  } > "$SAMPLER"
  chmod +x "$SAMPLER"
}

printf 'round\tworkload\tconfig\tinitiator\tios\tiops\tmbps\ttgtd_cpu_us_per_io\twrs_per_post\tsignaled_per_io\tcompletions_per_poll\twakeups_per_io\trdma_reads_per_io\tinit_wrs_per_post\tinit_signaled_per_io\tinit_completions_per_poll\tinit_wakeups_per_io\tinit_lat_p50_us\tinit_lat_p99_us\tguest_cpu_us_per_io\tguest_busy_pct\tbusiest_vcpu_pct\ttgtd_rw_syscalls_per_io\ttgtd_user_us_per_io\n' > "$RAW"
declare -A BS=()
for w in "${WORKLOADS[@]}"; do read -r name _ bs _ <<< "$w"; BS[$name]=$bs; done
# record_point ROUND WORKLOAD CONFIG INITIATOR IOS MS PRE POST [FIELD...]:
# one row of $RAW from a point's I/Os done in MS milliseconds and the
# samples taken before (PRE) and after (POST) it; the FIELDs (the
# initiator's own, RBIO_FIELDS) default to "-". One awk reads both samples:
# under TCG every extra process costs tens of milliseconds.
record_point() {
  local r=$1 name=$2 c=$3 ini=$4 ios=$5 ms=$6 pre=$7 post=$8 own
  shift 8
  own=("$@")
  (( ${#own[@]} )) || own=(- - - - - -)
  awk -F= -v r="$r" -v name="$name" -v c="$c" -v ini="$ini" -v bs="${BS[$name]}" -v ios="$ios" -v ms="$ms" \
      -v hz="$CLK_TCK" -v own="${own[*]}" '
    FNR == NR { a[$1] = $2; next }
    { b[$1] = $2 }
    END {
      for (k in b) d[k] = b[k] - a[k]
      cpu = ios == 0 ? "-" : sprintf("%.1f", d["cpu"] / hz * 1e6 / ios)
      if (c != "rbio" || d["post_calls"] == 0 || ios == 0) { wpp = spi = cpp = wpi = rpi = "-" }
      else { wpp = sprintf("%.2f", d["work_requests"] / d["post_calls"]); spi = sprintf("%.3f", d["signaled"] / ios)
             cpp = d["poll_calls"] > 0 ? sprintf("%.2f", d["completions"] / d["poll_calls"]) : "-"
             wpi = sprintf("%.3f", d["channel_wakeups"] / ios); rpi = sprintf("%.3f", d["rdma_reads"] / ios) }
      gcpu = ios == 0 ? "-" : sprintf("%.1f", d["guest_busy"] / hz * 1e6 / ios)
      gbusy = d["guest_all"] > 0 ? sprintf("%.0f", 100 * d["guest_busy"] / d["guest_all"]) : "-"
      top = -1
      for (k in d) if (k ~ /^guest_busy[0-9]+$/) {
        n = substr(k, 11); if (d["guest_all" n] > 0 && 100 * d[k] / d["guest_all" n] > top) top = 100 * d[k] / d["guest_all" n] }
      gtop = top < 0 ? "-" : sprintf("%.0f", top)
      sys = ios == 0 ? "-" : sprintf("%.2f", d["tgtd_rw_syscalls"] / ios)
      user = ios == 0 ? "-" : sprintf("%.1f", d["cpu_user"] / hz * 1e6 / ios)
      gsub(/ /, "\t", own)
      printf "%s\t%s\t%s\t%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r, name, c, ini, ios, ios / (ms / 1000),
             ios * bs / (ms / 1000) / 1e6, cpu, wpp, spi, cpp, wpi, rpi, own, gcpu, gbusy, gtop, sys, user
    }' "$pre" "$post" >> "$RAW"
}

# parse_fio ROUND: the fio run's points (terse v3: 3 job name, 5 error;
# read: 6 KiB, 9 runtime ms; write: 47 KiB, 50 runtime ms) into $RAW.
parse_fio() {
  local r=$1 f job name c ms
  while IFS=';' read -ra f; do
    [[ ${#f[@]} -gt 50 && ${f[0]} == 3 ]] || continue
    job=${f[2]} name=${job%@*} c=${job#*@}
    (( f[4] == 0 )) || die "fio reported error ${f[4]} for $name on $c"
    if (( f[5] > 0 )); then ms=${f[8]}; else ms=${f[49]}; fi
    record_point "$r" "$name" "$c" kernel $(( (f[5] + f[46]) * 1024 / ${BS[$name]} )) "$ms" \
      "$WORK/$job.prerun.txt" "$WORK/$job.postrun.txt"
  done < "$WORK/round.terse"
}
# run_kernel ROUND CONFIG: every workload through the kernel initiator: one
# login, one fio run (jobs back to back, each sampled by fio's
# exec_prerun/exec_postrun), logout.
run_kernel() {
  local r=$1 c=$2
  must "round $r: kernel initiator logged in to $c" kernel_login "$c"
  write_sampler
  jobs_for "$c" > "$WORK/round.fio"
  rm -f "$WORK"/*.prerun.txt "$WORK"/*.postrun.txt
  (cd "$WORK" && fio --output-format=terse --terse-version=3 --output="$WORK/round.terse" round.fio) \
    || { cat "$WORK/round.terse" >&2; die "fio failed in round $r on $c"; }
  parse_fio "$r"
  must "round $r: kernel initiator logged out of $c" kernel_logout "$c"
}

# bench_field FILE KEY: KEY's value in a `rbio bench` report (KEY=VALUE
# words; "time=3.00s" gives 3.00).
bench_field() {
  awk -v k="$2" '{ for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) {
    v = substr($i, length(k) + 2); sub(/s$/, "", v); print v; exit } }' "$1"
}
# run_rbio ROUND CONFIG: every workload through the rbio initiator, one
# `rbio bench` (its own session) per workload, sampled right before and
# after it as fio's jobs are.
run_rbio() {
  local r=$1 c=$2 w name rw bs qd out k v own
  mkdir -p "$BENCH_OUT"
  for w in "${WORKLOADS[@]}"; do
    read -r name rw bs qd <<< "$w"
    out="$BENCH_OUT/round$r-$name@$c"
    sample "$c" pre > "$out.pre"
    timeout $(( SECONDS_PER + 120 )) "$RBIO" bench --transport iser -T "${IQN[$c]}" -p "$PORTAL" --lun 1 \
      --initiator-name "$RBIO_IQN" --rw "$rw" --bs "$bs" --iodepth "$qd" --time "$SECONDS_PER" \
      > "$out.out" 2> "$out.err" \
      || { cat "$out.out" >&2; tail -5 "$out.err" >&2; die "rbio bench $name failed in round $r on $c"; }
    sample "$c" post > "$out.post"
    own=()
    for k in "${RBIO_FIELDS[@]}"; do v=$(bench_field "$out.out" "$k"); own+=("${v:--}"); done
    record_point "$r" "$name" "$c" rbio "$(bench_field "$out.out" ios)" \
      "$(awk -v s="$(bench_field "$out.out" time)" 'BEGIN { print s * 1000 }')" "$out.pre" "$out.post" "${own[@]}"
  done
}

echo "measuring: ${#WORKLOADS[@]} workloads x ${#CONFIGS[@]} targets x ${#INITIATORS[@]} initiator(s) x $ROUNDS round(s) x $SECONDS_PER s" >&2
for (( r = 1; r <= ROUNDS; r++ )); do
  for (( k = 0; k < ${#CONFIGS[@]}; k++ )); do
    c=${CONFIGS[$(( (k + r) % ${#CONFIGS[@]} ))]}
    must "round $r: $c up (tgtd, target)" tgtd_up "$c"
    if [[ -n ${WANT[kernel]:-} ]]; then run_kernel "$r" "$c"; fi
    if [[ -n ${WANT[rbio]:-} ]]; then run_rbio "$r" "$c"; fi
    must "round $r: $c down (tgtd stopped)" tgtd_down "$c"
  done
  awk -F'\t' -v r="$r" '$1 == r { printf "  round %s  %-18s %-5s %-6s %7s IOPS %7s MB/s  tgtd %8s us/IO  wrs/post %s signaled/IO %s\n", $1, $2, $3, $4, $6, $7, $8, $9, $10 }' "$RAW" >&2
  (( $(awk -F'\t' -v r="$r" '$1 == r' "$RAW" | wc -l) == ${#WORKLOADS[@]} * ${#CONFIGS[@]} * ${#INITIATORS[@]} )) \
    || die "round $r: fewer results than points"
done

order=$(for w in "${WORKLOADS[@]}"; do echo "${w%% *}"; done)
MEDIAN_AWK='
  function sorted(s, a,   n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n
  }
  function median(s,   a, n) { n = sorted(s, a); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }'
# target_table INITIATOR: stock against rbio's transport with that initiator
# (medians over the rounds; the ratio is the median of per-round ratios).
target_table() {
  awk -F'\t' -v order="$order" -v ini="$1" "$MEDIAN_AWK"'
  NR > 1 && $4 == ini {
           k = $2 SUBSEP $3; iops[k] = iops[k] " " $6; mbps[k] = mbps[k] " " $7; cpu[k] = cpu[k] " " $8
           if ($3 == "rbio") { wpp[$2] = wpp[$2] " " $9; spi[$2] = spi[$2] " " $10; cpp[$2] = cpp[$2] " " $11; wpi[$2] = wpi[$2] " " $12; rpi[$2] = rpi[$2] " " $13 }
           v[$1, $2, $3] = $6; rounds[$1] = 1 }
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
  }' "$RAW"
}
# cpu_table INITIATOR: where the guest's CPU goes per I/O. When the guest
# is CPU-bound (busy near 100 %), no target can gain more than the stock
# point's guest CPU over what is left without its tgtd: that is the
# ceiling, rbio's IOPS if its tgtd cost nothing (median of per-round ones).
# A busiest vCPU near 100 % with the whole guest well below says one
# thread's path (tgtd's, or the softirq work it carries) is the bound.
# tgtd's user time per I/O is what its own code costs (tgt's core, the
# transport, the store's submission); the rest of its CPU is the kernel's:
# rxe's software RDMA (packets, checksums, copies) and the network softirqs
# that run in tgtd's system calls, for both ends of the veth pair. A
# transport cuts that part only by making fewer calls.
cpu_table() {
  awk -F'\t' -v order="$order" -v ini="$1" "$MEDIAN_AWK"'
  NR > 1 && $4 == ini && $20 != "-" {
           k = $2 SUBSEP $3; g[k] = g[k] " " $20; busy[k] = busy[k] " " $21; top[k] = top[k] " " $22; sys[k] = sys[k] " " $23
           user[k] = user[k] " " $24
           if ($3 == "stock" && $20 > $8) { share[$2] = share[$2] " " $8 / $20; ceil[$2] = ceil[$2] " " $20 / ($20 - $8) } }
  END {
    print "| workload | guest CPU us/IO stock | rbio | guest busy % stock | rbio | busiest vCPU % stock | rbio | tgtd syscalls/IO stock | rbio | tgtd user us/IO stock | rbio | stock tgtd share | ceiling (tgtd free) |"
    print "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    n = split(order, ws, "\n")
    for (i = 1; i <= n; i++) {
      w = ws[i]
      printf "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f | %.0f | %.2f | %.2fx |\n", w, median(g[w, "stock"]), median(g[w, "rbio"]),
        median(busy[w, "stock"]), median(busy[w, "rbio"]), median(top[w, "stock"]), median(top[w, "rbio"]),
        median(sys[w, "stock"]), median(sys[w, "rbio"]), median(user[w, "stock"]), median(user[w, "rbio"]),
        median(share[w]), median(ceil[w])
    }
  }' "$RAW"
}
# initiator_table: the rbio initiator's own counters against each target.
initiator_table() {
  awk -F'\t' -v order="$order" "$MEDIAN_AWK"'
  NR > 1 && $4 == "rbio" { k = $2 SUBSEP $3; for (f = 14; f <= 19; f++) m[k, f] = m[k, f] " " $f }
  END {
    print "| workload | target | initiator WRs/post | signalled/IO | completions/poll | wake-ups/IO | latency p50 us | p99 us |"
    print "|---|---|--:|--:|--:|--:|--:|--:|"
    n = split(order, ws, "\n")
    for (i = 1; i <= n; i++)
      for (t = 1; t <= 2; t++) {
        c = t == 1 ? "stock" : "rbio"; k = ws[i] SUBSEP c
        printf "| %s | %s | %.2f | %.3f | %.2f | %.3f | %.0f | %.0f |\n", ws[i], c,
          median(m[k, 14]), median(m[k, 15]), median(m[k, 16]), median(m[k, 17]), median(m[k, 18]), median(m[k, 19])
      }
  }' "$RAW"
}
# goals_table: issue 6's goals at 4 KiB with 32 in flight, per initiator
# and workload (medians; the ratio is the median of per-round ratios):
# >= 8 work requests per post and <= 0.25 signalled completions per I/O on
# rbio's tgtd, >= 1.5x stock's IOPS. Met or not, as measured.
goals_table() {
  awk -F'\t' "$MEDIAN_AWK"'
  function verdict(ok) { return ok ? "met" : "**not met**" }
  NR > 1 && $2 ~ /^4k-rand(read|write)-qd32$/ {
    k = $4 SUBSEP $2; v[$1, k, $3] = $6; rounds[$1] = 1; seen[k] = 1
    if ($3 == "rbio") { wpp[k] = wpp[k] " " $9; spi[k] = spi[k] " " $10 } }
  END {
    print "| initiator | workload | WRs/post (>= 8) | signalled/IO (<= 0.25) | rbio/stock IOPS (>= 1.5) |"
    print "|---|---|--:|--:|--:|"
    split("kernel rbio", inis, " "); split("4k-randread-qd32 4k-randwrite-qd32", ws, " ")
    for (i = 1; i <= 2; i++) for (j = 1; j <= 2; j++) {
      k = inis[i] SUBSEP ws[j]; if (!(k in seen)) continue
      rr = ""; for (r in rounds) rr = rr " " v[r, k, "rbio"] / v[r, k, "stock"]
      w = median(wpp[k]); sg = median(spi[k]); x = median(rr)
      printf "| %s | %s | %.2f %s | %.3f %s | %.2f %s |\n", inis[i], ws[j], w, verdict(w >= 8), sg, verdict(sg <= 0.25),
        x, verdict(x >= 1.5)
    }
  }' "$RAW"
}
{
  printf "\n## Issue 6's goals at 4 KiB, 32 in flight (rbio's tgtd; medians)\n\n"; goals_table
  if [[ -n ${WANT[kernel]:-} ]]; then
    printf '\n## Kernel iSER initiator (ib_iser, fio)\n\n'; target_table kernel
    printf "\nThe guest's CPU per I/O (all vCPUs, /proc/stat):\n\n"; cpu_table kernel
  fi
  if [[ -n ${WANT[rbio]:-} ]]; then
    printf '\n## rbio initiator (`rbio bench --transport iser`)\n\n'; target_table rbio
    printf "\nThe guest's CPU per I/O (all vCPUs, /proc/stat):\n\n"; cpu_table rbio
    printf "\nThe rbio initiator's own counters, per point (medians):\n\n"; initiator_table
  fi
} > "$RESULTS/tables.md"
cat "$RESULTS/header.md" "$RESULTS/tables.md" > "$RESULTS/results.md"
cat "$RESULTS/tables.md"
echo
awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "iser-compare: done in %.0f s (in the guest)\n", b - a }'
finish
