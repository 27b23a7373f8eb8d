#!/usr/bin/env bash
# kernel-anchors.sh: the real Linux initiator (open-iscsi, iscsi_tcp, sd)
# against three targets side by side in ONE qemu guest: stock tgtd, tgtd
# with bs_rbio.so, and LIO (the kernel's own target) as the anchors.
#
#   bench/kernel-anchors.sh [--rounds R] [--seconds S] [--size-mb N]
#                           [--quick] [--out DIR]
#
#   --rounds R    interleaved rounds; the table gives medians (default 3)
#   --seconds S   seconds per point (default 8)
#   --size-mb N   size of each tmpfs backing file (default 256)
#   --quick       smoke run: 1 round of 3 s per point (about 3 min)
#   --out DIR     keep the guest run's files in DIR: results.md (the
#                 table), raw.tsv (every point), stdout, console.log
#
# Run time: about 15 s of boot and 50-65 s of set-up in the guest, then per
# round 15 points of S seconds plus about 25 s (one fio start, about 5 s
# under TCG, and 1-2 s around each point). The default (3 rounds of 8 s)
# takes 8.5-10 minutes, --quick about 3. Run it by hand, on an otherwise
# idle machine (TCG uses both cores; other load slows the guest unevenly,
# which is why the rounds are interleaved); it is not part of ctest.
#
# Targets, each exporting a fallocated (non-sparse) file of the same size
# on the guest's tmpfs, one session each, all over the guest's loopback:
#   stock  tgtd with RBIO_TRANSPORT=off (tgt's own transport), bs rdwr,
#          portal 127.0.0.1:3261 (it loads build/modules/bs_rbio.so, which
#          then leaves it exactly stock);
#   rbio   tgtd with bs rbio and rbio's transport (the default), portal
#          127.0.0.1:3262;
#   lio    LIO, configured through configfs: a fileio backstore with
#          buffered I/O (like targetcli's default write_back), demo-mode
#          ACLs (generate_node_acls), authentication off, portal
#          127.0.0.1:3260.
# Workloads (fio, libaio, direct=1, on the raw disks): 4 KiB random read
# and random write with 1 and 32 in flight, 1 MiB sequential read with 8
# in flight. Each round runs every workload against the three targets
# back to back, in an order rotated per workload and round, so that
# whatever else disturbs the guest hits them alike.
#
# Columns: IOPS and MB/s (10^6 bytes/s) per target; rbio/stock and
# lio/stock (medians of the per-round ratios); then CPU time per I/O,
# sampled right before and after each fio job, two ways:
#   target  the target's own threads: utime+stime of the tgtd process
#           (/proc/PID/stat) for the two tgtds; for LIO, which works in
#           kernel threads, utime+stime of its connection's receive and
#           transmit threads (iscsi_trx, iscsi_ttx). That LIO figure is a
#           lower bound: command completion runs in shared kworker threads
#           (target_completion workqueue) and TCP receive in softirqs,
#           which no thread of LIO's own is charged for;
#   guest   the whole guest's busy CPU per I/O: vCPUs x elapsed time
#           minus idle and iowait time (/proc/uptime, /proc/stat): the
#           initiator, fio, the network stack and the target together, the
#           same measure for all three; the initiator's share is about the
#           same for each, so differences between the columns are
#           differences of the targets. (Busy time is derived from idle
#           time because the kernel measures idle time exactly but samples
#           user and system time per timer tick, and under TCG ticks are
#           irregular: in a trial run their sum came out below what the
#           stock tgtd alone had used.)
# Under TCG everything is emulated: absolute numbers are low and measure
# CPU cost per I/O rather than the wire; read the ratios.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"

die() { printf 'kernel-anchors: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3 SECONDS_PER=8 SIZE_MB=256 OUT="" QUICK=0
args=("$@")
while (( $# )); do
  case $1 in
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) SECONDS_PER=${2:-}; shift 2 ;;
    --size-mb) SIZE_MB=${2:-}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --out) OUT=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'kernel-anchors: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
if (( QUICK )); then ROUNDS=1 SECONDS_PER=3; fi
for v in ROUNDS SECONDS_PER SIZE_MB; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer (got '${!v}')"
done

# ------------------------------------------------------------ on the host
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  [[ $(id -u) -eq 0 ]] || die "run as root (it boots a qemu guest)"
  [[ -f ${RBIO_BUILD_DIR:-$ROOT/build}/modules/bs_rbio.so ]] \
    || die "no build: cmake -S . -B build && cmake --build build"
  # Guest time: set-up, 15 points per round, a margin; memory: the three
  # tmpfs files on top of what the guest needs.
  limit=$(( 300 + ROUNDS * 15 * (SECONDS_PER + 15) ))
  mem=$(( 1024 + 3 * SIZE_MB )); (( mem >= 2048 )) || mem=2048
  run=(--timeout "$limit" --mem "$mem")
  [[ -n $OUT ]] && run+=(--out "$OUT")
  # Other load on the host slows the emulated guest: say how busy it was.
  echo "kernel-anchors: host load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  rc=0
  "$ROOT/scripts/vm/run.sh" "${run[@]}" "$HERE/kernel-anchors.sh" "${args[@]}" || rc=$?
  echo "kernel-anchors: host load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; the guest alone makes about 2)" >&2
  exit "$rc"
fi

# ------------------------------------------------------------ in the guest
source "$ROOT/tests/vm/lib.sh"
# Cleanup hooks run before lib.sh's own logout: log out first here, then
# the hooks added below stop the tgtds and remove the LIO target.
VM_CLEANUP_HOOKS+=('iscsiadm -m node --logoutall=all >/dev/null 2>&1')
T0=$EPOCHREALTIME
CONFIGS=(stock rbio lio)
declare -A ADDR=([lio]=127.0.0.1:3260 [stock]=127.0.0.1:3261 [rbio]=127.0.0.1:3262)
declare -A CTLPORT=([stock]=5701 [rbio]=5702)
declare -A IQN=() DEV=() TGTD_PID=() TARGET_PIDS=()
for c in "${CONFIGS[@]}"; do IQN[$c]=iqn.2026-11.io.rbio:anchor-$c; done
# Workloads: NAME RW BLOCK-SIZE IN-FLIGHT
WORKLOADS=(
  "4k-randread-qd1 randread 4096 1"
  "4k-randread-qd32 randread 4096 32"
  "4k-randwrite-qd1 randwrite 4096 1"
  "4k-randwrite-qd32 randwrite 4096 32"
  "1m-read-qd8 read 1048576 8"
)
RESULTS="${VM_OUT:-$WORK}"
RAW="$RESULTS/raw.tsv"
CLK_TCK=$(getconf CLK_TCK)

# --- backing files -------------------------------------------------------------
for c in "${CONFIGS[@]}"; do
  must "a ${SIZE_MB} MiB allocated tmpfs file for $c" fallocate -l "${SIZE_MB}M" "$WORK/$c.img"
done

# --- the two tgtds ----------------------------------------------------------------
start_tgtd() {  # start_tgtd CONFIG BSTYPE ENV-ARGS...
  local c=$1 bs=$2; shift 2
  local state="$WORK/tgtd-$c" ctl=${CTLPORT[$c]}
  env "$@" "$SANDBOX" start "$state" --modules "$MODULES" --control-port "$ctl" --portal "${ADDR[$c]}" || return 1
  VM_CLEANUP_HOOKS+=("\"\$SANDBOX\" stop \"$state\"")
  TGTD_PID[$c]=$(cat "$state/tgtd.pid")
  [[ $(< "/proc/${TGTD_PID[$c]}/comm") == tgtd ]] || { echo "pid ${TGTD_PID[$c]} is not tgtd"; return 1; }
  tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T "${IQN[$c]}" &&
  tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/$c.img" --bstype "$bs" &&
  tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 -I ALL
}
must "stock tgtd (RBIO_TRANSPORT=off, bs rdwr) on ${ADDR[stock]}" start_tgtd stock rdwr RBIO_TRANSPORT=off
must "rbio tgtd (rbio's transport, bs rbio) on ${ADDR[rbio]}" start_tgtd rbio rbio -u RBIO_TRANSPORT
must "the stock tgtd keeps tgt's own transport" eval '! grep -q "served by rbio" "$WORK/tgtd-stock/tgtd.log"'
must "rbio's transport serves the rbio tgtd's portal" \
  grep -q "portal ${ADDR[rbio]} served by rbio's transport" "$WORK/tgtd-rbio/tgtd.log"

# --- LIO ---------------------------------------------------------------------------
CFS=/sys/kernel/config/target
LIO_DEV=$CFS/core/fileio_0/anchor
LIO_TPG=$CFS/iscsi/${IQN[lio]}/tpgt_1
lio_setup() {
  modprobe -a target_core_mod target_core_file iscsi_target_mod || return 1
  mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config || return 1
  VM_CLEANUP_HOOKS+=(lio_teardown)
  mkdir -p "$LIO_DEV" &&
  echo "fd_dev_name=$WORK/lio.img,fd_dev_size=$(( SIZE_MB << 20 )),fd_buffered_io=1" > "$LIO_DEV/control" &&
  echo 1 > "$LIO_DEV/enable" &&
  mkdir -p "$LIO_TPG/lun/lun_0" &&
  ln -s "$LIO_DEV" "$LIO_TPG/lun/lun_0/anchor" &&
  mkdir "$LIO_TPG/np/${ADDR[lio]}" &&
  echo 1 > "$LIO_TPG/attrib/generate_node_acls" &&
  echo 1 > "$LIO_TPG/attrib/cache_dynamic_acls" &&
  echo 0 > "$LIO_TPG/attrib/demo_mode_write_protect" &&
  echo 0 > "$LIO_TPG/attrib/authentication" &&
  echo 1 > "$LIO_TPG/enable"
}
lio_teardown() {
  [[ -d $LIO_TPG ]] && {
    echo 0 > "$LIO_TPG/enable"
    rmdir "$LIO_TPG/np/${ADDR[lio]}"
    rm -f "$LIO_TPG/lun/lun_0/anchor"; rmdir "$LIO_TPG/lun/lun_0"
    rmdir "$LIO_TPG" "${LIO_TPG%/*}"
  } 2>/dev/null
  [[ -d $LIO_DEV ]] && rmdir "$LIO_DEV" "${LIO_DEV%/*}" 2>/dev/null
  true
}
must "LIO exports a fileio backstore on ${ADDR[lio]}" lio_setup

# --- one kernel session per target ----------------------------------------------
start_initiator
# lib.sh's node helpers use $PORTAL: set it per call.
discover_at() { PORTAL=${ADDR[$1]} discover "${IQN[$1]}" > /dev/null; }
login_at() {
  PORTAL=${ADDR[$1]} set_node "${IQN[$1]}" "${FAST[@]}" && PORTAL=${ADDR[$1]} login "${IQN[$1]}" > /dev/null
}
for c in "${CONFIGS[@]}"; do
  must "$c: discovery finds ${IQN[$c]}" discover_at "$c"
  must "$c: login" login_at "$c"
  must "$c: its LUN appears as a disk" wait_disk_of "${IQN[$c]}" "$([[ $c == lio ]] && echo 0 || echo 1)"
  DEV[$c]=$DISK
done
# LIO serves a connection with a receive and a transmit kernel thread,
# created at login: the CPU samples below count them as LIO's. The
# discovery connection's pair ends shortly after discovery; should it still
# be there after 10 s, the session's pair is the one started last.
lio_scan() {  # "START PID NAME" of each LIO connection thread, newest first
  local p comm start
  for p in /proc/[0-9]*; do
    { comm=$(< "$p/comm") && start=$(awk '{ print $22 }' "$p/stat"); } 2>/dev/null || continue
    if [[ $comm == iscsi_trx || $comm == iscsi_ttx ]]; then echo "$start ${p#/proc/} $comm"; fi
  done | sort -k1,1nr -k3,3
}
lio_threads() {
  local i
  for (( i = 0; i < 100; i++ )); do
    lio_scan > "$WORK/lio-threads"
    (( $(wc -l < "$WORK/lio-threads") == 2 )) && break
    sleep 0.1
  done
  sed 's/^/  LIO thread (start, pid, name): /' "$WORK/lio-threads"
  mapfile -t LIO_PIDS < <(awk '!seen[$3]++ { print $2 }' "$WORK/lio-threads")
  echo "  counted as LIO's session: pids ${LIO_PIDS[*]:-none}"
  (( ${#LIO_PIDS[@]} == 2 ))
}
must "lio: one receive and one transmit thread serve the session" lio_threads
TARGET_PIDS=([stock]="${TGTD_PID[stock]}" [rbio]="${TGTD_PID[rbio]}" [lio]="${LIO_PIDS[*]}")

sysq() { cat "/sys/block/${DEV[$1]#/dev/}/queue/$2"; }
{
  echo "# Kernel initiator anchors: stock tgt, tgt + bs_rbio.so, LIO"
  echo
  echo "guest: Linux $(uname -r) under qemu TCG, $(nproc) vCPUs; tgt $(dpkg-query -W -f '${Version}' tgt 2>/dev/null);"
  echo "fio $(fio --version), libaio, direct=1; ${ROUNDS} round(s) of ${SECONDS_PER} s per point, medians;"
  echo "each target: a ${SIZE_MB} MiB fallocated tmpfs file, one session over loopback."
  echo
  for c in "${CONFIGS[@]}"; do
    printf -- '- %s: %s on %s, %s (max_sectors_kb %s, queue_depth %s)\n' "$c" "${IQN[$c]}" "${ADDR[$c]}" \
      "${DEV[$c]}" "$(sysq "$c" max_sectors_kb)" "$(cat "/sys/block/${DEV[$c]#/dev/}/device/queue_depth")"
  done
} > "$RESULTS/header.md"
cat "$RESULTS/header.md"
echo

# --- measuring --------------------------------------------------------------------
# One fio run per round, its jobs one after the other (stonewall): under
# TCG fio alone takes about 5 s to start (it links 60 libraries). Each job
# samples CPU time right before and after its I/O (exec_prerun/exec_postrun,
# run by the job itself; fio saves their output in the working folder as
# JOB.prerun.txt and JOB.postrun.txt): one line "TARGET UPTIME IDLE" in
# clock ticks: utime+stime of the target's threads, the guest's uptime and
# its idle+iowait time summed over its vCPUs.
cat > "$WORK/cpu-sample.sh" <<'SAMPLE'
# cpu-sample.sh PID...: "TARGET UPTIME IDLE" clock ticks (see kernel-anchors.sh)
for p in "$@"; do set -- "$@" "/proc/$p/stat"; shift; done
awk -v hz="$(getconf CLK_TCK)" '
  FILENAME == "/proc/uptime" { up = $1 * hz; next }
  FILENAME == "/proc/stat" { if ($1 == "cpu") idle = $5 + $6; next }
  { target += $14 + $15 }
  END { printf "%d %.0f %d\n", target, up, idle }' "$@" /proc/uptime /proc/stat
SAMPLE
NCPU=$(nproc)
printf 'round\tworkload\tconfig\tios\tiops\tmbps\ttarget_cpu_us_per_io\tguest_cpu_us_per_io\n' > "$RAW"
round_jobs() {  # round_jobs ROUND: the round's fio job file on stdout
  local r=$1 w k c name rw bs qd
  printf '[global]\ndirect=1\nioengine=libaio\ntime_based\nruntime=%s\nnorandommap\nrandrepeat=0\nstonewall\n' \
    "$SECONDS_PER"
  for (( w = 0; w < ${#WORKLOADS[@]}; w++ )); do
    read -r name rw bs qd <<< "${WORKLOADS[$w]}"
    for (( k = 0; k < ${#CONFIGS[@]}; k++ )); do
      c=${CONFIGS[$(( (k + r + w) % ${#CONFIGS[@]} ))]}
      printf '\n[%s@%s]\nfilename=%s\nrw=%s\nbs=%s\niodepth=%s\n' "$name" "$c" "${DEV[$c]}" "$rw" "$bs" "$qd"
      printf 'exec_%s=sh %s %s\n' prerun "$WORK/cpu-sample.sh" "${TARGET_PIDS[$c]}" \
        postrun "$WORK/cpu-sample.sh" "${TARGET_PIDS[$c]}"
    done
  done
}
echo "measuring: ${#WORKLOADS[@]} workloads x ${#CONFIGS[@]} targets x $ROUNDS round(s) x $SECONDS_PER s" >&2
declare -A BS=()
for w in "${WORKLOADS[@]}"; do read -r name _ bs _ <<< "$w"; BS[$name]=$bs; done
for (( r = 1; r <= ROUNDS; r++ )); do
  round_jobs "$r" > "$WORK/round.fio"
  rm -f "$WORK"/*.prerun.txt "$WORK"/*.postrun.txt
  w0=$EPOCHREALTIME
  (cd "$WORK" && fio --output-format=terse --terse-version=3 --output="$WORK/round.terse" round.fio) \
    || { cat "$WORK/round.terse" >&2; die "fio failed in round $r"; }
  # terse v3: 3 job name, 5 error; read: 6 KiB, 9 runtime ms; write: 47 KiB,
  # 50 runtime ms.
  while IFS=';' read -ra f; do
    [[ ${#f[@]} -gt 50 && ${f[0]} == 3 ]] || continue
    job=${f[2]} name=${job%@*} c=${job#*@}
    (( f[4] == 0 )) || die "fio reported error ${f[4]} for $name on $c"
    pre=$(tail -1 "$WORK/$job.prerun.txt" 2>/dev/null) post=$(tail -1 "$WORK/$job.postrun.txt" 2>/dev/null)
    [[ $pre =~ ^[0-9]+\ [0-9]+\ [0-9]+$ && $post =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]] \
      || die "no CPU sample for $job ($WORK/$job.prerun.txt, .postrun.txt: '$pre', '$post')"
    awk -v r="$r" -v name="$name" -v c="$c" -v bs="${BS[$name]}" -v rkb="${f[5]}" -v rms="${f[8]}" \
        -v wkb="${f[46]}" -v wms="${f[49]}" -v pre="$pre" -v post="$post" -v hz="$CLK_TCK" -v ncpu="$NCPU" '
    function per_io(ticks) { return ios == 0 ? "-" : sprintf("%.1f", ticks / hz * 1e6 / ios) }
    BEGIN {
      kb = rkb + wkb; ms = rkb > 0 ? rms : wms; ios = kb * 1024 / bs
      split(pre, a, " "); split(post, b, " ")
      printf "%s\t%s\t%s\t%d\t%.0f\t%.1f\t%s\t%s\n", r, name, c, ios, ios / (ms / 1000),
        kb * 1024 / (ms / 1000) / 1e6, per_io(b[1] - a[1]), per_io((b[2] - a[2]) * ncpu - (b[3] - a[3]))
    }' >> "$RAW"
  done < "$WORK/round.terse"
  awk -F'\t' -v r="$r" '$1 == r { printf "  round %s  %-18s %-5s %7s IOPS %7s MB/s  target %8s us/IO  guest %8s us/IO\n", $1, $2, $3, $5, $6, $7, $8 }' "$RAW" >&2
  awk -v r="$r" -v a="$w0" -v b="$EPOCHREALTIME" 'BEGIN { printf "  round %s: %.0f s\n", r, b - a }' >&2
  (( $(awk -F'\t' -v r="$r" '$1 == r' "$RAW" | wc -l) == ${#WORKLOADS[@]} * ${#CONFIGS[@]} )) \
    || die "round $r: fio reported fewer results than jobs (see $WORK/round.terse)"
done

# --- the table -------------------------------------------------------------------
order=$(for w in "${WORKLOADS[@]}"; do echo "${w%% *}"; done)
table=$(awk -F'\t' -v order="$order" '
  function sorted(s, a,   n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n
  }
  function median(s,   a, n) { n = sorted(s, a); return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  # median of the per-round ratios, with their range when there are several
  function ratio(s,   a, n) {
    n = sorted(s, a)
    return n > 1 ? sprintf("%.2f [%.2f-%.2f]", median(s), a[1], a[n]) : sprintf("%.2f", median(s))
  }
  NR > 1 { k = $2 SUBSEP $3; iops[k] = iops[k] " " $5; mbps[k] = mbps[k] " " $6; cpu[k] = cpu[k] " " $7
           guest[k] = guest[k] " " $8; v[$1, $2, $3] = $5; rounds[$1] = 1 }
  END {
    print "| workload | stock IOPS | rbio IOPS | LIO IOPS | stock MB/s | rbio MB/s | LIO MB/s | rbio/stock | LIO/stock " \
          "| target CPU us/IO: stock tgtd | rbio tgtd | LIO threads (lower bound) " \
          "| guest busy CPU us/IO (all of it): stock | rbio | LIO |"
    print "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    n = split(order, ws, "\n")
    for (i = 1; i <= n; i++) {
      w = ws[i]; rr = ""; rl = ""
      for (r in rounds) {
        rr = rr " " v[r, w, "rbio"] / v[r, w, "stock"]; rl = rl " " v[r, w, "lio"] / v[r, w, "stock"]
      }
      printf "| %s | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f | **%s** | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", w,
        median(iops[w, "stock"]), median(iops[w, "rbio"]), median(iops[w, "lio"]),
        median(mbps[w, "stock"]), median(mbps[w, "rbio"]), median(mbps[w, "lio"]),
        ratio(rr), ratio(rl), median(cpu[w, "stock"]), median(cpu[w, "rbio"]), median(cpu[w, "lio"]),
        median(guest[w, "stock"]), median(guest[w, "rbio"]), median(guest[w, "lio"])
    }
  }' "$RAW")
{ cat "$RESULTS/header.md"; echo; echo "$table"; } > "$RESULTS/results.md"
echo "$table"
echo
awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "kernel-anchors: done in %.0f s (in the guest)\n", b - a }'
finish
