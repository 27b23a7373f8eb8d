#!/usr/bin/env bash
# transport-compare.sh: tgt's stock iSCSI/TCP transport against rbio's
# transport, side by side in ONE run, with loopback iperf3 as the ceiling.
#
#   bench/transport-compare.sh [--quick] [--rounds R] [--seconds S] [--out DIR]
#       [--size-mb N] [--strace-store rbio|null] [--modules DIR]
#       [--control-port N] [--portal-port P] [--bsopts-rbio "..."]
#       [--mrdsl BYTES] [--shapes "BYTES:DEPTH ..."]
#
#   --quick          smoke run, under 2 min: 2 s per point, 1 round, only
#                    4 KiB at 1 and 32 in flight and 1 MiB at 32 in flight
#   --rounds R       interleaved rounds; the tables give medians (default 3;
#                    --quick: 1). The default run takes about 8 minutes.
#   --seconds S      seconds per measurement (default 3, --quick 2; whole
#                    seconds, iscsi-perf takes nothing else)
#   --out DIR        also write results.md, results.tsv (medians), raw.tsv
#                    (every measurement), iperf3.tsv and the strace summaries
#   --size-mb N      size of the sparse tmpfs file behind bs rbio (default 256)
#   --strace-store   backing store of the strace pass (default rbio)
#   --control-port N tgtd control ports N (stock) and N+1 (rbio); default 5910
#   --portal-port P  portals 127.0.0.1:P (stock) and P+1 (rbio), iperf3 on
#                    P+9; default 13910
#   --bsopts-rbio    --bsopts for the rbio LUNs
#   --mrdsl BYTES    MaxRecvDataSegmentLength every target declares (both
#                    transports alike; default: tgt's, 8192). With 8192 a
#                    1 MiB write is 128 Data-Out PDUs and the client's own
#                    system calls limit it; 262144 shows the transport.
#   --shapes "B:D .." request sizes and depths to run, each read and
#                    written (default: the matrix below; --quick: 4096:1
#                    4096:32 1048576:32); iperf3 runs (and its port is
#                    checked) only when a 1 MiB shape is in the list
#
# Matrix: transport {stock, rbio} x backing store {null, rbio (sparse file on
# tmpfs)} x {4 KiB at 1, 32, 128 in flight; 64 KiB, 256 KiB, 1 MiB at 32 in
# flight} x {read, write}. Each round runs every workload against the four
# configurations back to back (the stores' order rotated per workload and
# round, and which transport goes first alternating with them), so
# the noise of the shared 2-core machine hits them alike; the ratio
# rbio/stock is the median of the per-round ratios of those pairs. Writes
# run before reads in every round, so once a 1 MiB write has wrapped the
# sparse file the reads hit written pages in both transports (the header
# says whether that happened before the first read).
#
# Transports: two tgtds (scripts/tgtd-sandbox.sh, both loading
# build/modules/bs_rbio.so so `--bstype rbio` exists in both). A tgtd that
# loads the module serves TCP with rbio's transport by default; the "stock"
# tgtd is started with RBIO_TRANSPORT=off, which keeps tgt's own transport.
# The "rbio" tgtd runs with RBIO_TRANSPORT unset. Until rbio's transport
# exists both are stock tgt and every ratio should be about 1.0.
#
# Per-row columns (medians over rounds):
#   IOPS, MB/s (10^6 bytes/s), rbio/stock IOPS ratio;
#   tgtd CPU us per I/O (utime+stime of tgtd from /proc/PID/stat) and
#   client CPU us per I/O (the client's rusage, from bash `times`), plus
#   both as % of the wall time (2 cores = 200%), next to the CPU the rest
#   of the machine used meanwhile ("oth": /proc/stat busy time minus the
#   two) and the time the hypervisor stole ("stl"): how the cores were
#   shared, and which points other load disturbed. (A busy machine can
#   even raise 1-in-flight IOPS: a CPU that is not idle wakes up faster.);
#   strace: tgtd system calls per I/O from `strace -c -f -p TGTD`, one short
#   extra pass per transport for 4 KiB read at 32 in flight only (strace
#   slows tgtd, so its run is not a timed one);
#   PDUs per recv call, PDUs per send call, transport syscalls per I/O:
#   deltas of the module's statistics file, read before and after each
#   measurement ("-" when there is none, i.e. the stock transport);
#   1 MiB rows: the fraction of the iperf3 loopback bandwidth.
#
# Statistics file: each tgtd gets RBIO_STATS_FILE=<scratch>/<transport>.stats.
# rbio's transport rewrites it every second and when a connection closes, as
# key=value lines (transport=rbio, connections_open, connections_total,
# pdus_in, bytes_in, recv_calls, pdus_out, bytes_out, send_calls,
# would_block, epoll_ctl_calls, syscalls, pdus_per_recv, pdus_per_send).
# After a client exits the script waits until connections_open is back to
# its value before the run and connections_total has grown, at most 1.2 s.
# A file without transport=rbio is ignored.
#
# Clients (as in bench/bs-compare.sh): reads use libiscsi's iscsi-perf
# (READ(16)), writes build/bench/iscsi-rwperf (WRITE(16)); sequential LBAs,
# fixed size, N in flight, one session. iperf3 (one TCP stream, 127.0.0.1)
# runs right before the 1 MiB writes and the 1 MiB reads of every round;
# its server is started and stopped by PID.
# Ports used by default: control 5910-5911, portals 13910-13911, iperf3
# 13919. A progress line per measurement goes to stderr.
set -euo pipefail

ORIG_ARGS=("$@")
BENCH_NAME=transport-compare
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------- options
MODULES=${RBIO_BUILD_DIR:-$ROOT/build}/modules  # the build the other benches measure
SECONDS_PER=3 SECONDS_SET=0
ROUNDS=3 ROUNDS_SET=0
SIZE_MB=256
QUICK=0
OUT=""
CPORT=5910
PPORT=13910
BSOPTS_RBIO=""
MRDSL=""
STRACE_STORE=rbio
SHAPES_OPT=""

while (( $# )); do
  case $1 in
    --quick) QUICK=1; shift ;;
    --rounds) ROUNDS=${2:-}; ROUNDS_SET=1; shift 2 ;;
    --seconds) SECONDS_PER=${2:-}; SECONDS_SET=1; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    --size-mb) SIZE_MB=${2:-}; shift 2 ;;
    --strace-store) STRACE_STORE=${2:-}; shift 2 ;;
    --modules) MODULES=${2:-}; shift 2 ;;
    --control-port) CPORT=${2:-}; shift 2 ;;
    --portal-port) PPORT=${2:-}; shift 2 ;;
    --bsopts-rbio) BSOPTS_RBIO=${2:-}; shift 2 ;;
    --mrdsl) MRDSL=${2:-}; [[ $MRDSL =~ ^[0-9]+$ ]] || die "--mrdsl takes a number of bytes"; shift 2 ;;
    --shapes) SHAPES_OPT=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'transport-compare: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done

if (( QUICK )); then
  (( SECONDS_SET )) || SECONDS_PER=2
  (( ROUNDS_SET )) || ROUNDS=1
fi
for v in SECONDS_PER SIZE_MB CPORT PPORT ROUNDS; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer (got '${!v}')"
done
[[ $STRACE_STORE == rbio || $STRACE_STORE == null ]] || die "--strace-store must be rbio or null"
STRACE_SECONDS=$(( SECONDS_PER < 3 ? SECONDS_PER : 3 ))
[[ -f $MODULES/bs_rbio.so ]] || die "$MODULES/bs_rbio.so does not exist: build first (cmake -S . -B build && cmake --build build)"

TRANSPORTS=(stock rbio)
STORES=(null rbio)
declare -A T_CPORT=([stock]=$CPORT [rbio]=$(( CPORT + 1 )))
declare -A T_PPORT=([stock]=$PPORT [rbio]=$(( PPORT + 1 )))
IPERF_PORT=$(( PPORT + 9 ))

# Workloads OP:BYTES:DEPTH in the order they run in a round: writes first
# (see the header), reads after. The tables list reads first.
if (( QUICK )); then
  SHAPES=(4096:1 4096:32 1048576:32)
else
  SHAPES=(4096:1 4096:32 4096:128 65536:32 262144:32 1048576:32)
fi
if [[ -n $SHAPES_OPT ]]; then
  read -r -a SHAPES <<< "$SHAPES_OPT"
  (( ${#SHAPES[@]} )) || die "--shapes is empty"
  for sh in "${SHAPES[@]}"; do
    [[ $sh =~ ^([0-9]+):([0-9]+)$ ]] && (( BASH_REMATCH[1] >= 512 && BASH_REMATCH[1] % 512 == 0 && BASH_REMATCH[2] >= 1 )) \
      || die "--shapes: '$sh' is not BYTES:DEPTH (BYTES a multiple of 512, DEPTH >= 1)"
  done
fi
RUN_ORDER=() SHOW_ORDER=()
# iperf3 is the ceiling of the 1 MiB rows only: without one, no server.
NEED_IPERF=0
for sh in "${SHAPES[@]}"; do [[ $sh == 1048576:* ]] && NEED_IPERF=1; done
for sh in "${SHAPES[@]}"; do RUN_ORDER+=("write:$sh"); done
for sh in "${SHAPES[@]}"; do RUN_ORDER+=("read:$sh"); SHOW_ORDER+=("read:$sh"); done
for sh in "${SHAPES[@]}"; do SHOW_ORDER+=("write:$sh"); done

# ---------------------------------------------------------------- tools
T_START=$EPOCHREALTIME
command -v tgtadm >/dev/null || die "tgtadm not found (package tgt)"
need_pkg 'command -v iscsi-perf' libiscsi-bin
need_pkg 'command -v strace' strace
(( NEED_IPERF )) && need_pkg 'command -v iperf3' iperf3
RWPERF=${RBIO_BUILD_DIR:-$ROOT/build}/bench/iscsi-rwperf
[[ -x $RWPERF ]] || die "$RWPERF is missing: build the project first (cmake -S . -B build && cmake --build build)"

# ---------------------------------------------------------------- scratch + cleanup
WORK=$(mktemp -d /tmp/transport-compare.XXXXXX)
SHM=$(mktemp -d /dev/shm/transport-compare.XXXXXX)
declare -A TGTD_PID=() STATE=() STATS=() NTARGETS=()
STARTED=()
STRACE_PID=""
IPERF_PID=""

cleanup() {
  local rc=$? t tid
  trap - EXIT INT TERM
  if [[ -n $STRACE_PID ]]; then kill -INT "$STRACE_PID" 2>/dev/null || true; wait "$STRACE_PID" 2>/dev/null || true; fi
  if [[ -n $IPERF_PID ]]; then kill -TERM "$IPERF_PID" 2>/dev/null || true; wait "$IPERF_PID" 2>/dev/null || true; fi
  for t in "${STARTED[@]}"; do
    if (( rc != 0 )) && [[ -f ${STATE[$t]}/tgtd.log ]]; then
      note "last lines of the $t tgtd's log:"; tail -n 10 "${STATE[$t]}/tgtd.log" >&2 || true
    fi
    # Targets first: with targets left the sandbox's stop waits 30 s.
    for (( tid = 1; tid <= ${NTARGETS[$t]:-0}; tid++ )); do
      tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op delete --mode target --tid "$tid" --force >/dev/null 2>&1 || true
    done
    "$SANDBOX" stop "${STATE[$t]}" >/dev/null 2>&1 || true
  done
  rm -rf "$WORK" "$SHM"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for t in "${TRANSPORTS[@]}"; do
  port_busy "${T_CPORT[$t]}" && die "control port ${T_CPORT[$t]} is already in use"
  port_busy "${T_PPORT[$t]}" && die "portal port ${T_PPORT[$t]} is already in use"
done
(( NEED_IPERF )) && port_busy "$IPERF_PORT" && die "iperf3 port $IPERF_PORT is already in use"

# ---------------------------------------------------------------- two tgtds
IQN_BASE=iqn.2026-01.local.transport-compare
INITIATOR=$IQN_BASE:client
declare -A URL=() BLOCKSIZE=()
for t in "${TRANSPORTS[@]}"; do
  STATE[$t]=$WORK/tgtd-$t
  STATS[$t]=$WORK/$t.stats
  envset=(env RBIO_STATS_FILE="${STATS[$t]}")
  if [[ $t == stock ]]; then envset+=(RBIO_TRANSPORT=off); else envset=(env -u RBIO_TRANSPORT RBIO_STATS_FILE="${STATS[$t]}"); fi
  STARTED+=("$t")
  "${envset[@]}" "$SANDBOX" start "${STATE[$t]}" --modules "$MODULES" \
    --control-port "${T_CPORT[$t]}" --portal "127.0.0.1:${T_PPORT[$t]}" >/dev/null
  pid=$(cat "${STATE[$t]}/tgtd.pid")
  # The sandbox's PID is unshare's, which execs sh, which execs tgtd.
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == tgtd ]] || die "pid $pid of the $t tgtd is not tgtd"
  TGTD_PID[$t]=$pid
  tid=0
  for s in "${STORES[@]}"; do
    tid=$(( tid + 1 ))
    tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op new --mode target --tid "$tid" -T "$IQN_BASE:$t-$s"
    NTARGETS[$t]=$tid
    if [[ $s == null ]]; then
      lun=(--bstype null --backing-store /dev/null)   # bs_null ignores the path
    else
      # One sparse file per tgtd: the two never share a backing file.
      truncate -s "${SIZE_MB}M" "$SHM/$t.img"
      lun=(--bstype rbio --backing-store "$SHM/$t.img")
      [[ -n $BSOPTS_RBIO ]] && lun+=(--bsopts "$BSOPTS_RBIO")
    fi
    tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op new --mode logicalunit --tid "$tid" --lun 1 "${lun[@]}" \
      || die "the $t tgtd refused a LUN with bstype $s"
    tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op bind --mode target --tid "$tid" -I ALL
    if [[ -n $MRDSL ]]; then
      tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op update --mode target --tid "$tid" \
        --name MaxRecvDataSegmentLength --value "$MRDSL" || die "tgtd refused MaxRecvDataSegmentLength=$MRDSL"
    fi
    URL[$t/$s]=iscsi://127.0.0.1:${T_PPORT[$t]}/$IQN_BASE:$t-$s/1
    bl=$(iscsi-readcapacity16 -i "$INITIATOR" "${URL[$t/$s]}" | awk -F: '/LOGICAL BLOCK LENGTH/ {print $2+0}')
    [[ $bl =~ ^[0-9]+$ && $bl -gt 0 ]] || die "cannot read the block size of ${URL[$t/$s]}"
    BLOCKSIZE[$t/$s]=$bl
  done
done
grep -qz '^RBIO_TRANSPORT=off$' "/proc/${TGTD_PID[stock]}/environ" \
  || die "the stock tgtd did not inherit RBIO_TRANSPORT=off"

# ---------------------------------------------------------------- iperf3 server
(( NEED_IPERF )) && iperf_server_start "$IPERF_PORT" "$WORK/iperf3-server.log"

# ---------------------------------------------------------------- measuring
# TICKS=utime+stime of every thread of the tgtd of transport $1 (no fork).
tgtd_ticks() { proc_ticks "${TGTD_PID[$1]}" || die "the $1 tgtd (pid ${TGTD_PID[$1]}) is gone"; }

# measure T S OP BYTES DEPTH SECS: one client run against transport T, store
# S. Sets M_OK, M_IOPS, M_IOS, M_TCPU/M_CCPU (us per I/O), M_TPCT/M_CPCT (%
# of wall time), M_PPR, M_PPS, M_SPI, M_WBPI, M_EPCPI (statistics deltas or
# "-"), M_OPCT/M_SPCT (% of wall time the machine spent busy outside tgtd
# and the client, and stolen: other processes, other guests). Runs in this
# shell so `times` sees the client.
measure() {
  local t=$1 s=$2 op=$3 bytes=$4 depth=$5 secs=$6
  local limit=$(( secs + 60 )) out=$WORK/client.out rc=0 t0 t1 c0 c1 w0 w1 b0 b1 st0 st1 ios iops
  local -A S0=() S1=()
  local have0=0 have1=0
  stats_read "${STATS[$t]}" S0 && have0=1
  tgtd_ticks "$t"; t0=$TICKS
  child_ms; c0=$CHILD_MS
  sys_ticks; b0=$SYS_BUSY st0=$SYS_STEAL
  w0=$EPOCHREALTIME
  if [[ $op == read ]]; then
    timeout --foreground "$limit" iscsi-perf -i "$INITIATOR" -m "$depth" \
      -b $(( bytes / BLOCKSIZE[$t/$s] )) -t "$secs" "${URL[$t/$s]}" > "$out" 2>&1 || rc=$?
  else
    timeout --foreground "$limit" "$RWPERF" -w -i "$INITIATOR" -m "$depth" -s "$bytes" \
      -t "$secs" "${URL[$t/$s]}" > "$out" 2>&1 || rc=$?
  fi
  w1=$EPOCHREALTIME
  sys_ticks; b1=$SYS_BUSY st1=$SYS_STEAL
  child_ms; c1=$CHILD_MS
  tgtd_ticks "$t"; t1=$TICKS
  M_OK=1 M_IOPS=nan M_IOS=0
  if (( rc != 0 )); then
    M_OK=0
    note "client failed (exit $rc) on $t/$s $op $bytes x$depth: $(tr '\r' '\n' < "$out" | grep -v '^ *$' | tail -n 2 | tr '\n' ' ')"
  elif [[ $op == read ]]; then
    # The last "iops average N" is iscsi-perf's summary over the run; it
    # prints no I/O count, so I/Os = average x seconds.
    iops=$(tr '\r' '\n' < "$out" | awk '/iops average/ { for (i = 1; i < NF; i++) if ($i == "average") v = $(i + 1) } END { print v }')
    if [[ $iops =~ ^[0-9]+$ ]]; then M_IOPS=$iops M_IOS=$(( iops * secs )); else M_OK=0; note "cannot parse iscsi-perf output"; fi
  else
    read -r ios iops <<< "$(awk '/^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } print r["ios"], r["iops"] }' "$out")"
    if [[ ${ios:-} =~ ^[0-9]+$ && ${iops:-} =~ ^[0-9]+$ ]]; then M_IOPS=$iops M_IOS=$ios; else M_OK=0; note "cannot parse iscsi-rwperf output: $(cat "$out")"; fi
  fi
  # The statistics file: wait until it shows this client's connection gone
  # (open back to before, total grown), at most 1.2 s after the client exit.
  if (( have0 )) || [[ -e ${STATS[$t]} ]]; then
    local deadline i
    deadline=$(awk -v w="$w1" 'BEGIN { printf "%.6f", w + 1.2 }')
    for (( i = 0; i < 60; i++ )); do
      if stats_read "${STATS[$t]}" S1; then
        have1=1
        (( have0 )) || break   # the file appeared during the run: no baseline
        (( S1[connections_open] <= S0[connections_open] && S1[connections_total] > S0[connections_total] )) && break
      fi
      [[ ${EPOCHREALTIME/./} -ge ${deadline/./} ]] && break
      sleep 0.05
    done
  fi
  local wall dt dc
  wall=$(awk -v a="$w0" -v b="$w1" 'BEGIN { print b - a }')
  dt=$(awk -v d=$(( t1 - t0 )) -v hz="$CLK_TCK" 'BEGIN { print d / hz }')
  dc=$(awk -v d=$(( c1 - c0 )) 'BEGIN { print d / 1000 }')
  if (( M_IOS > 0 )); then
    # Two decimals: the medians and cost.sh's verdicts (<= 2 us) are taken
    # from these, and one would round 2.04 down to a met goal.
    M_TCPU=$(awk -v c="$dt" -v n="$M_IOS" 'BEGIN { printf "%.2f", c * 1e6 / n }')
    M_CCPU=$(awk -v c="$dc" -v n="$M_IOS" 'BEGIN { printf "%.2f", c * 1e6 / n }')
  else
    M_TCPU=nan M_CCPU=nan
  fi
  M_TPCT=$(awk -v c="$dt" -v w="$wall" 'BEGIN { printf "%.0f", c / w * 100 }')
  M_CPCT=$(awk -v c="$dc" -v w="$wall" 'BEGIN { printf "%.0f", c / w * 100 }')
  M_OPCT=$(awk -v b=$(( b1 - b0 )) -v hz="$CLK_TCK" -v t="$dt" -v c="$dc" -v w="$wall" \
    'BEGIN { o = (b / hz - t - c) / w * 100; printf "%.0f", o < 0 ? 0 : o }')
  M_SPCT=$(awk -v d=$(( st1 - st0 )) -v hz="$CLK_TCK" -v w="$wall" 'BEGIN { printf "%.0f", d / hz / w * 100 }')
  M_PPR=- M_PPS=- M_SPI=- M_WBPI=- M_EPCPI=-
  if (( have0 && have1 && M_IOS > 0 )); then
    local d_pin=$(( S1[pdus_in] - S0[pdus_in] )) d_rc=$(( S1[recv_calls] - S0[recv_calls] ))
    local d_pout=$(( S1[pdus_out] - S0[pdus_out] )) d_sc=$(( S1[send_calls] - S0[send_calls] ))
    M_PPR=$(fdiv "$d_pin" "$d_rc")
    M_PPS=$(fdiv "$d_pout" "$d_sc")
    M_SPI=$(fdiv $(( S1[syscalls] - S0[syscalls] )) "$M_IOS")
    M_WBPI=$(fdiv $(( S1[would_block] - S0[would_block] )) "$M_IOS" 3)
    M_EPCPI=$(fdiv $(( S1[epoll_ctl_calls] - S0[epoll_ctl_calls] )) "$M_IOS" 3)
  fi
  kill -0 "${TGTD_PID[$t]}" 2>/dev/null || die "the $t tgtd (pid ${TGTD_PID[$t]}) died; see ${STATE[$t]}/tgtd.log"
}

wl_label() {
  local op bytes depth unit
  IFS=: read -r op bytes depth <<< "$1"
  if (( bytes >= 1048576 )); then unit="$(( bytes / 1048576 )) MiB"; else unit="$(( bytes / 1024 )) KiB"; fi
  echo "$unit $op, $depth in flight"
}
mbs() { awk -v i="$1" -v b="$2" 'BEGIN { if (i == "nan") print "nan"; else printf "%.1f", i * b / 1e6 }'; }

# iperf3 once: sets IP_MBS (MB/s received) and IP_CPU ("sender%/receiver%").
IP_SECS=$(( SECONDS_PER < 5 ? SECONDS_PER : 5 ))
run_iperf() { iperf_run "$IPERF_PORT" "$IP_SECS" "$WORK/iperf3.json"; }

# ---------------------------------------------------------------- the run
NPROC=$(nproc)
TGT_VERSION=$(dpkg-query -W -f '${Version}' tgt 2>/dev/null || echo '?')
CONFIGS=()
for s in "${STORES[@]}"; do for t in "${TRANSPORTS[@]}"; do CONFIGS+=("$t/$s"); done; done
NC=${#CONFIGS[@]}
total=$(( ROUNDS * ${#RUN_ORDER[@]} * NC ))
est=$(( total * (SECONDS_PER * 1000 + 450) / 1000 + 2 * ROUNDS * (IP_SECS + 1) + 2 * (STRACE_SECONDS + 3) ))
note "$total measurements, $(( 2 * ROUNDS )) iperf3 runs, 2 strace passes: about $(( est / 60 )) min $(( est % 60 )) s"

HEADER="tgt $TGT_VERSION, two tgtds loading $MODULES/bs_rbio.so: stock (pid ${TGTD_PID[stock]}, RBIO_TRANSPORT=off, portal 127.0.0.1:${T_PPORT[stock]}) and rbio (pid ${TGTD_PID[rbio]}, RBIO_TRANSPORT unset, portal 127.0.0.1:${T_PPORT[rbio]}) | ${SECONDS_PER} s per measurement, ${ROUNDS} round(s), medians | bs rbio on a ${SIZE_MB} MiB sparse tmpfs file per tgtd; bs null; target MaxRecvDataSegmentLength ${MRDSL:-8192 = tgt default} | nproc $NPROC, load at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$HEADER" | sed 's/ | /\n  /g'
echo "Client and tgtd share the same $NPROC core(s) over loopback: absolute numbers are CPU-bound and noisy; compare within this run."
[[ -n $BSOPTS_RBIO ]] && echo "rbio --bsopts: $BSOPTS_RBIO"

RAW=$WORK/raw.tsv
printf 'round\top\tbytes\tdepth\ttransport\tstore\tok\tiops\tios\tMBps\ttgtd_us_per_io\tclient_us_per_io\ttgtd_pct\tclient_pct\tother_pct\tsteal_pct\tpdus_per_recv\tpdus_per_send\txport_syscalls_per_io\twould_block_per_io\tepoll_ctl_per_io\n' > "$RAW"
IPTSV=$WORK/iperf3.tsv
printf 'round\tbefore\tMBps\tcpu_sender/receiver\n' > "$IPTSV"

declare -A R_IOPS=() R_TCPU=() R_CCPU=() R_TPCT=() R_CPCT=() R_OPCT=() R_SPCT=() R_PPR=() R_PPS=() R_SPI=() R_RATIO=() WRITTEN=()
declare -A IP_ALL=()
FAILS=0 COVER_NOTE=""
n=0
for (( r = 0; r < ROUNDS; r++ )); do
  for (( w = 0; w < ${#RUN_ORDER[@]}; w++ )); do
    wl=${RUN_ORDER[w]}
    IFS=: read -r op bytes depth <<< "$wl"
    # The ceiling for the 1 MiB rows, measured right before them (once
    # before the writes, once before the reads), so it saw the same load.
    if (( bytes == 1048576 )); then
      run_iperf
      IP_ALL[$op]+="$IP_MBS "
      printf '%d\t1 MiB %s\t%s\t%s\n' $(( r + 1 )) "$op" "$IP_MBS" "$IP_CPU" >> "$IPTSV"
      note "round $(( r + 1 ))/$ROUNDS: iperf3 127.0.0.1, 1 stream, before the 1 MiB ${op}s: $IP_MBS MB/s (CPU sender/receiver $IP_CPU)"
    fi
    if (( r == 0 )) && [[ $op == read && -z $COVER_NOTE ]]; then
      COVER_NOTE="the sparse files were fully written before the first read:"
      for t in "${TRANSPORTS[@]}"; do
        if (( ${WRITTEN[$t]:-0} >= SIZE_MB * 1048576 )); then COVER_NOTE+=" $t yes"; else COVER_NOTE+=" $t NO ($(( ${WRITTEN[$t]:-0} / 1048576 )) MiB)"; fi
      done
    fi
    declare -A ROUND_IOPS=()
    for (( k = 0; k < NC; k++ )); do
      # Stores rotate with the workload and round; within a store the
      # transport that goes first alternates with them too. (A rotation
      # of the four configurations alone put stock before rbio in three
      # of its four positions, for both stores.)
      si=$(( (k / ${#TRANSPORTS[@]} + r + w) % ${#STORES[@]} )) ti=$(( k % ${#TRANSPORTS[@]} ))
      (( (r + w) % 2 )) && ti=$(( ${#TRANSPORTS[@]} - 1 - ti ))
      cfg=${TRANSPORTS[ti]}/${STORES[si]}
      t=${cfg%/*} s=${cfg#*/}
      measure "$t" "$s" "$op" "$bytes" "$depth" "$SECONDS_PER"
      n=$(( n + 1 ))
      mb=$(mbs "$M_IOPS" "$bytes")
      key="$wl|$t|$s"
      if (( M_OK )); then
        R_IOPS[$key]+="$M_IOPS " R_TCPU[$key]+="$M_TCPU " R_CCPU[$key]+="$M_CCPU "
        R_TPCT[$key]+="$M_TPCT " R_CPCT[$key]+="$M_CPCT " R_OPCT[$key]+="$M_OPCT " R_SPCT[$key]+="$M_SPCT "
        R_PPR[$key]+="$M_PPR " R_PPS[$key]+="$M_PPS " R_SPI[$key]+="$M_SPI "
        ROUND_IOPS[$t/$s]=$M_IOPS
        if [[ $op == write && $s == rbio ]] && (( M_IOS * bytes > ${WRITTEN[$t]:-0} )); then WRITTEN[$t]=$(( M_IOS * bytes )); fi
      else
        FAILS=$(( FAILS + 1 ))
      fi
      printf '%d\t%s\t%d\t%d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $(( r + 1 )) "$op" "$bytes" "$depth" "$t" "$s" \
        "$M_OK" "$M_IOPS" "$M_IOS" "$mb" "$M_TCPU" "$M_CCPU" "$M_TPCT" "$M_CPCT" "$M_OPCT" "$M_SPCT" "$M_PPR" "$M_PPS" "$M_SPI" "$M_WBPI" "$M_EPCPI" >> "$RAW"
      extra=""
      [[ $M_PPR != - ]] && extra=", PDUs/recv $M_PPR, PDUs/send $M_PPS, xport syscalls/IO $M_SPI"
      note "[$n/$total] r$(( r + 1 )) $(wl_label "$wl"), transport $t, bs $s: $M_IOPS IOPS, $mb MB/s, CPU/IO tgtd $M_TCPU us (${M_TPCT}%) client $M_CCPU us (${M_CPCT}%), others ${M_OPCT}%, steal ${M_SPCT}%$extra"
    done
    for s in "${STORES[@]}"; do
      if [[ -n ${ROUND_IOPS[rbio/$s]:-} && -n ${ROUND_IOPS[stock/$s]:-} ]] && (( ROUND_IOPS[stock/$s] > 0 )); then
        R_RATIO[$wl|$s]+="$(fdiv "${ROUND_IOPS[rbio/$s]}" "${ROUND_IOPS[stock/$s]}" 4) "
      fi
    done
    unset ROUND_IOPS
  done
done

# ---------------------------------------------------------------- strace pass
# strace -c -f -p attaches to all of tgtd's threads; it slows tgtd, so only
# its counts are used, in a run of its own. The module's own syscalls
# counter over the same run is the cross-check.
declare -A SC_TOTAL=() SC_TOP=() SC_MOD=()
for t in "${TRANSPORTS[@]}"; do
  sc=$WORK/strace-$t.txt
  strace -c -f -p "${TGTD_PID[$t]}" -o "$sc" 2> "$WORK/strace-$t.err" &
  STRACE_PID=$!
  strace_attached "${TGTD_PID[$t]}" || die "strace did not attach to every thread of tgtd ($(cat "$WORK/strace-$t.err"))"
  measure "$t" "$STRACE_STORE" read 4096 32 "$STRACE_SECONDS"
  kill -INT "$STRACE_PID" 2>/dev/null || true
  wait "$STRACE_PID" 2>/dev/null || true
  STRACE_PID=""
  SC_MOD[$t]=$M_SPI
  calls=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { c += $4 } END { print c + 0 }' "$sc" 2>/dev/null || echo 0)
  if (( calls == 0 || M_IOS == 0 )); then
    note "strace pass on the $t tgtd gave no usable summary ($(head -c 300 "$WORK/strace-$t.err" 2>/dev/null))"
    SC_TOTAL[$t]=-; SC_TOP[$t]=""; continue
  fi
  SC_TOTAL[$t]=$(fdiv "$calls" "$M_IOS" 3)
  SC_TOP[$t]=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { print $4, $NF }' "$sc" \
    | sort -k1,1nr | head -n 6 | awk -v n="$M_IOS" '{ printf "%s%s %.2f", (NR > 1 ? ", " : ""), $2, $1 / n }')
  note "strace on the $t tgtd: ${SC_TOTAL[$t]} syscalls per 4 KiB read at 32 in flight on bs $STRACE_STORE ($M_IOS I/Os, $M_IOPS IOPS under strace); module counter: ${SC_MOD[$t]}"
done

# Did rbio's transport run at all? Only its statistics file says so.
declare -A XPORT_SEEN=()
for t in "${TRANSPORTS[@]}"; do
  declare -A SX=()
  if stats_read "${STATS[$t]}" SX; then XPORT_SEEN[$t]="rbio (statistics file present, connections_total=${SX[connections_total]})"
  else XPORT_SEEN[$t]="tgt stock (no rbio statistics file)"; fi
  unset SX
done

# ---------------------------------------------------------------- tables
# median of a space-separated list; "-" and "nan" are skipped; "-" if empty.
median() {
  awk -v p="${2:-}" '{ for (i = 1; i <= NF; i++) if ($i != "-" && $i != "nan") v[++n] = $i }
    END { if (!n) { print "-"; exit }
          for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] + 0 > x + 0; j--) v[j + 1] = v[j]; v[j + 1] = x }
          m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
          if (p == "") print m; else printf "%.*f\n", p, m }' <<< "$1"
}
declare -A IP_MED=([read]=$(median "${IP_ALL[read]:-}" 1) [write]=$(median "${IP_ALL[write]:-}" 1))
# ratio_cell LIST: "median [min-max]" of per-round ratios (just the median
# with one round).
ratio_cell() {
  local m
  m=$(median "$1" 2)
  awk -v m="$m" '{ for (i = 1; i <= NF; i++) { if (!n++ || $i < lo) lo = $i; if (n == 1 || $i > hi) hi = $i } }
    END { if (n > 1) printf "%s [%.2f-%.2f]\n", m, lo, hi; else print m }' <<< "$1"
}
# How much else ran on the machine during the measurements (all of them).
OTHER_ALL="" STEAL_ALL=""
for k in "${!R_OPCT[@]}"; do OTHER_ALL+="${R_OPCT[$k]} " STEAL_ALL+="${R_SPCT[$k]} "; done
OTHER_MED=$(median "$OTHER_ALL" 0) STEAL_MED=$(median "$STEAL_ALL" 0)

TABLE=$WORK/table.md
TSV=$WORK/results.tsv
printf 'op\tbytes\tdepth\tstore\ttransport\tiops\tMBps\trbio_over_stock\ttgtd_us_per_io\tclient_us_per_io\ttgtd_pct\tclient_pct\tother_pct\tsteal_pct\tstrace_syscalls_per_io\tpdus_per_recv\tpdus_per_send\txport_syscalls_per_io\tfraction_of_iperf3\n' > "$TSV"
{
  agg="median of $ROUNDS rounds"; (( ROUNDS > 1 )) || agg="1 round"
  echo "Transport comparison ($agg, ${SECONDS_PER} s each). MB/s = 10^6 B/s. rbio/stock = median of per-round IOPS ratios of the back-to-back pair."
  echo "CPU: us per I/O, and % of wall time (the machine has $NPROC core(s) = $(( NPROC * 100 ))%) for tgtd / client / everything else busy on the machine / stolen by the hypervisor."
  echo "strace = tgtd syscalls/IO from strace -c -f (4 KiB read, 32 in flight, bs $STRACE_STORE only)."
  echo "PDUs/recv, PDUs/send, xport sys/IO: rbio transport statistics deltas ('-': no statistics file, i.e. tgt's stock transport)."
  echo "iperf3 127.0.0.1 (1 TCP stream, ${IP_SECS} s, run right before the 1 MiB rows, median): ${IP_MED[write]} MB/s before the writes, ${IP_MED[read]} MB/s before the reads; 'of iperf3' = MB/s / that."
  echo "Other load during the measurements (median): ${OTHER_MED}% CPU busy outside tgtd and the client, ${STEAL_MED}% stolen."
  if [[ $OTHER_MED != - ]] && (( OTHER_MED > 25 )); then
    echo "WARNING: other processes took a large share of the $NPROC core(s): single points are unreliable, trust medians of several rounds and the [lowest-highest] spread."
  fi
  echo
  ROWFMT='| %-27s | %-4s | %-9s | %8s | %7s | %10s | %10s | %10s | %-18s | %6s | %9s | %9s | %7s | %9s |\n'
  # shellcheck disable=SC2059
  printf "$ROWFMT" workload bs transport IOPS MB/s rbio/stock "tgtd us/IO" "clnt us/IO" "CPU% tgtd/clnt/oth/stl" strace "PDUs/recv" "PDUs/send" "sys/IO" "of iperf3"
  echo "|-----------------------------|------|-----------|---------:|--------:|-----------:|-----------:|-----------:|--------------------|-------:|----------:|----------:|--------:|----------:|"
  for wl in "${SHOW_ORDER[@]}"; do
    IFS=: read -r op bytes depth <<< "$wl"
    for s in "${STORES[@]}"; do
      for t in "${TRANSPORTS[@]}"; do
        key="$wl|$t|$s"
        iops=$(median "${R_IOPS[$key]:-}" 0)
        mb=-; [[ $iops != - ]] && mb=$(mbs "$iops" "$bytes")
        ratio=-; [[ $t == rbio ]] && ratio=$(median "${R_RATIO[$wl|$s]:-}" 2)
        tc=$(median "${R_TCPU[$key]:-}" 2); cc=$(median "${R_CCPU[$key]:-}" 2)
        tp=$(median "${R_TPCT[$key]:-}" 0); cp=$(median "${R_CPCT[$key]:-}" 0)
        op_=$(median "${R_OPCT[$key]:-}" 0); sp=$(median "${R_SPCT[$key]:-}" 0)
        st=-; [[ $op == read && $bytes == 4096 && $depth == 32 && $s == "$STRACE_STORE" ]] && st=${SC_TOTAL[$t]:--}
        ppr=$(median "${R_PPR[$key]:-}" 2); pps=$(median "${R_PPS[$key]:-}" 2); spi=$(median "${R_SPI[$key]:-}" 2)
        fr=-; [[ $bytes == 1048576 && $mb != - && ${IP_MED[$op]} != - ]] && fr=$(fdiv "$mb" "${IP_MED[$op]}" 2)
        [[ $iops == - ]] && iops=FAILED
        # shellcheck disable=SC2059
        printf "$ROWFMT" "$(wl_label "$wl")" "$s" "$t" "$iops" "$mb" "$ratio" "$tc" "$cc" "$tp/$cp/$op_/$sp" "$st" "$ppr" "$pps" "$spi" "$fr"
        printf '%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$op" "$bytes" "$depth" "$s" "$t" \
          "$iops" "$mb" "$ratio" "$tc" "$cc" "$tp" "$cp" "$op_" "$sp" "$st" "$ppr" "$pps" "$spi" "$fr" >> "$TSV"
      done
    done
  done
  echo
  echo "rbio/stock IOPS at a glance (median of the per-round ratios$( (( ROUNDS > 1 )) && echo ', [lowest-highest round]')):"
  echo
  printf '| %-27s | %-18s | %-18s |\n' workload "bs null" "bs rbio"
  echo "|-----------------------------|--------------------|--------------------|"
  for wl in "${SHOW_ORDER[@]}"; do
    printf '| %-27s | %-18s | %-18s |\n' "$(wl_label "$wl")" "$(ratio_cell "${R_RATIO[$wl|null]:-}")" "$(ratio_cell "${R_RATIO[$wl|rbio]:-}")"
  done
  echo
  echo "tgtd system calls per 4 KiB read at 32 in flight, bs $STRACE_STORE (strace -c -f, ${STRACE_SECONDS} s pass per transport; top 6 per I/O; module = the statistics file's syscalls counter over the same pass):"
  echo
  printf '| %-9s | %8s | %7s | %-80s |\n' transport strace module "top system calls per I/O"
  echo "|-----------|---------:|--------:|----------------------------------------------------------------------------------|"
  for t in "${TRANSPORTS[@]}"; do
    printf '| %-9s | %8s | %7s | %-80s |\n' "$t" "${SC_TOTAL[$t]:--}" "${SC_MOD[$t]:--}" "${SC_TOP[$t]:-}"
  done
  echo
  for t in "${TRANSPORTS[@]}"; do echo "Transport seen in the '$t' tgtd: ${XPORT_SEEN[$t]}"; done
  [[ -n $COVER_NOTE ]] && echo "bs rbio: $COVER_NOTE"
  (( FAILS )) && echo "FAILED measurements: $FAILS (see stderr; they are left out of the medians)"
} > "$TABLE"

echo
cat "$TABLE"
ELAPSED=$(awk -v a="$T_START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }')
echo
echo "Run took $(( ELAPSED / 60 )) min $(( ELAPSED % 60 )) s; load at end $(cut -d' ' -f1-3 /proc/loadavg)."

if [[ -n $OUT ]]; then
  mkdir -p "$OUT"
  {
    echo "# Transport comparison ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "$HEADER" | sed 's/ | /\n- /g; s/^/- /'
    echo "- Reads: iscsi-perf (libiscsi $(dpkg-query -W -f '${Version}' libiscsi-bin 2>/dev/null || echo '?')); writes: build/bench/iscsi-rwperf (WRITE(16)); sequential LBAs; iperf3 $(iperf3 --version 2>/dev/null | awk 'NR == 1 { print $2 }')."
    echo "- Command: \`bench/transport-compare.sh${ORIG_ARGS[*]+$(printf ' %q' "${ORIG_ARGS[@]}")}\`; run took $(( ELAPSED / 60 )) min $(( ELAPSED % 60 )) s"
    echo
    cat "$TABLE"
  } > "$OUT/results.md"
  cp "$TSV" "$RAW" "$IPTSV" "$OUT/"
  for t in "${TRANSPORTS[@]}"; do [[ -f $WORK/strace-$t.txt ]] && cp "$WORK/strace-$t.txt" "$OUT/"; done
  note "results in $OUT (results.md, results.tsv, raw.tsv, iperf3.tsv, strace-*.txt)"
fi
(( FAILS == 0 )) || exit 1
