#!/usr/bin/env bash
# paper.sh: the seed paper's analysis (../shared/seeds/001_*.txt: remote
# block I/O bound by (a) interrupt cost, (b) request size, (c) protocol
# message size; its techniques together up to +100% over an unoptimized
# configuration) reproduced on this machine, in ONE run, with CSV, plots and
# a report.
#
#   bench/paper.sh [--quick] [--out DIR] [--resume] [--points N] [--iser]
#       [--rounds R] [--seconds S] [--size-mb N] [--control-port N]
#       [--portal-port P] [--modules DIR]
#
#   --quick          smoke run, under 10 min: 1 round of 1 s per point,
#                    4 KiB / 64 KiB / 1 MiB at 1 and 32 in flight
#   --out DIR        where everything goes (default build/paper): points.csv
#                    (every point as measured), summary.csv (medians and
#                    spread), *.png, report.md, run.conf, the tgtds' logs
#   --resume         continue the run in DIR (killed or failed) from the last
#                    finished point; the options must be those of that run
#   --points N       only the first N workloads of each part (smoke tests)
#   --iser           also iSER in the guest on soft-RoCE, after the rest:
#                    bench/iser-compare.sh (stock tgt against rbio, whole
#                    stacks, kernel and rbio initiators, 1 round of 6 s per
#                    point; 4 KiB, 64 KiB and 1 MiB random reads and writes
#                    at 32 in flight, 4 KiB at 1) and
#                    bench/iser-instructions.sh (callgrind: instructions per
#                    command), into DIR/iser; not with --quick
#   --rounds R       interleaved rounds (default 3; --quick 1)
#   --seconds S      seconds per point (default 2; --quick 1)
#   --size-mb N      backing file per LU (default 64), on the root file
#                    system (not tmpfs: there rbio's store does its I/O
#                    inline and io_uring batching would not show)
#   --control-port N tgtd control ports N..N+5 (default 5960)
#   --portal-port P  portals 127.0.0.1:P..P+5, iperf3 on P+9 (default 13960)
#
# Configurations, each one LU on a file of its own, client and target on
# loopback on this machine's cores:
#   stock        tgtd without bs_rbio.so, `--bstype rdwr`: tgt as it ships
#   unopt        rbio, every technique off: transport batch_reads=off,
#                coalesce=off, send_inline=off, rx_wait_pdus=0 (no receive
#                moderation; it stays off in the next three too); store
#                batch=off, coalesce=off, inline_reap=off (the
#                "unoptimized" baseline)
#   batching     unopt + request batching (batch_reads=on: every request
#                that arrived in one receive call)
#   coalescing   unopt + message coalescing (coalesce=on: a pass's
#                responses in one sendmsg)
#   async-send   unopt + the send path inline (send_inline=on: responses
#                leave in the pass that made them, no EPOLLOUT round trip)
#   store-batch  unopt + the store's batched submission (batch=on: a pass's
#                commands in one io_uring_enter)
#   all          everything on (rbio's defaults)
#   wire         one loopback iperf3 stream writing the same request size
# Parts (each round: the wire, the sweep, then the message sizes; within a
# workload the configurations run back to back in an order rotated per
# round, so the shared machine's noise hits them alike):
#   sweep    4, 16, 64, 256, 1024 KiB x read, write x 1, 8, 32 in flight
#   msgsize  64 KiB and 1 MiB, read and write, 8 in flight, stock and all,
#            one target per login-parameter set (tgtadm --mode target
#            --op update): tgt-default (MaxRecvDataSegmentLength 8192,
#            FirstBurstLength 65536, MaxBurstLength 262144,
#            ImmediateData Yes, InitialR2T Yes), mrdsl-256k, burst-1m
#            (First/MaxBurstLength 1 MiB), no-immediate (ImmediateData No),
#            large (MRDSL 1 MiB, bursts 1 MiB, InitialR2T No)
# Per point: IOPS, MB/s; CPU per I/O of tgtd (/proc/PID/stat) and of the
# client (perf stat user_time/system_time), user and system apart; events
# per I/O counted by perf on tgtd's threads during the point (system
# calls, epoll_wait returns = event-loop wake-ups, context switches,
# io_uring_enter calls and the io_uring I/Os each submitted) and on the
# client (system calls, context switches); PDUs per receive and per send
# call and the transport's system calls per I/O from rbio's statistics file;
# the machine's load average and the CPU others used or the hypervisor
# stole. The client is build/bench/iscsi-rwperf (libiscsi; sequential LBAs,
# fixed size, N in flight, one session). Each LU's own counters (logged by
# bs_rbio when it is removed) end up in lu-counters.txt.
# Run time (measured): default 32 min (3 rounds x 255 points) at load ~10,
# 40 min at load ~18; --quick 3.5 min. --iser adds the guest: 17 min of
# iser-compare.sh and 5-10 min of iser-instructions.sh on the shared
# machine (62 min in all, 2026-12-02); idle about 8 and 3 (estimated).
# The report is rebuilt from points.csv by bench/paper-report.py DIR.
set -euo pipefail

ORIG_ARGS=("$@")
BENCH_NAME=paper
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------- options
BUILD=${RBIO_BUILD_DIR:-$ROOT/build}
MODULES=$BUILD/modules
OUT=$BUILD/paper
QUICK=0 RESUME=0 ISER=0 POINTS=0
ROUNDS="" SECS="" SIZE_MB=64 CPORT=5960 PPORT=13960
while (( $# )); do
  case $1 in
    --quick) QUICK=1; shift ;;
    --out) OUT=${2:-}; shift 2 ;;
    --resume) RESUME=1; shift ;;
    --points) POINTS=${2:-}; shift 2 ;;
    --iser) ISER=1; shift ;;
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) SECS=${2:-}; shift 2 ;;
    --size-mb) SIZE_MB=${2:-}; shift 2 ;;
    --control-port) CPORT=${2:-}; shift 2 ;;
    --portal-port) PPORT=${2:-}; shift 2 ;;
    --modules) MODULES=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'paper: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
(( QUICK )) && { ROUNDS=${ROUNDS:-1}; SECS=${SECS:-1}; }
ROUNDS=${ROUNDS:-3} SECS=${SECS:-2}
for v in ROUNDS SECS SIZE_MB CPORT PPORT; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "--${v,,} must be a positive integer (got '${!v}')"
done
[[ $POINTS =~ ^[0-9]+$ ]] || die "--points takes a number (got '$POINTS')"
(( QUICK && ISER )) && die "--iser is not part of --quick (the guest alone takes ~10 min)"
[[ -n $OUT ]] || die "--out needs a folder"
[[ -f $MODULES/bs_rbio.so ]] || die "$MODULES/bs_rbio.so does not exist: build first (cmake -S . -B build && cmake --build build)"
RWPERF=$BUILD/bench/iscsi-rwperf
[[ -x $RWPERF ]] || die "$RWPERF is missing: build first (cmake --build build --target iscsi-rwperf)"
PY=/usr/bin/python3   # Debian's, which python3-matplotlib belongs to

command -v tgtadm >/dev/null || die "tgtadm not found (package tgt)"
need_pkg 'command -v iperf3' iperf3
need_pkg 'command -v perf' linux-perf
need_pkg "$PY -c 'import matplotlib'" python3-matplotlib
perf stat -e raw_syscalls:sys_enter -o /dev/null -- true 2>/dev/null \
  || die "perf cannot count the raw_syscalls tracepoint (tracefs, perf_event_paranoid?)"

# ---------------------------------------------------------------- the plan
if (( QUICK )); then SIZES=(4096 65536 1048576) DEPTHS=(32 1)
else SIZES=(4096 16384 65536 262144 1048576) DEPTHS=(32 8 1); fi
CONFIGS=(stock unopt batching coalescing async-send store-batch all)
MSG_CONFIGS=(stock all)
MSG_PARAMS=(tgt-default mrdsl-256k burst-1m no-immediate large)
MSG_SIZES=(1048576 65536) MSG_DEPTH=8
declare -A PARAM_SET=(
  [tgt-default]=""
  [mrdsl-256k]="MaxRecvDataSegmentLength=262144"
  [burst-1m]="MaxBurstLength=1048576 FirstBurstLength=1048576"
  [no-immediate]="ImmediateData=No"
  [large]="MaxRecvDataSegmentLength=1048576 MaxBurstLength=1048576 FirstBurstLength=1048576 InitialR2T=No"
)
# Sweep workloads OP:BYTES:DEPTH, deepest queue first (so --points 2 still
# gives a throughput-vs-size line); writes before reads within a depth, so
# reads find written pages.
SWEEP=()
for d in "${DEPTHS[@]}"; do for op in write read; do for b in "${SIZES[@]}"; do SWEEP+=("$op:$b:$d"); done; done; done
MSGW=()
for b in "${MSG_SIZES[@]}"; do for op in write read; do for p in "${MSG_PARAMS[@]}"; do MSGW+=("$op:$b:$MSG_DEPTH:$p"); done; done; done
WIRE=("${SIZES[@]}")
# iSER (bench/iser-compare.sh --workloads): random, so that the kernel
# initiator's block layer merges nothing, at 4 KiB, 64 KiB and 1 MiB with 32
# in flight (where issue 6's goals are set), then 4 KiB with 1 in flight.
ISER_W=(4k-randread-qd32 4k-randwrite-qd32 64k-randread-qd32 64k-randwrite-qd32
        1m-randread-qd32 1m-randwrite-qd32 4k-randread-qd1 4k-randwrite-qd1)
if (( POINTS )); then
  SWEEP=("${SWEEP[@]:0:POINTS}") MSGW=("${MSGW[@]:0:POINTS}") WIRE=("${WIRE[@]:0:POINTS}") ISER_W=("${ISER_W[@]:0:POINTS}")
fi
ISER_WORKLOADS=$(IFS=,; echo "${ISER_W[*]}")
# PLAN: section|round|config|op|bytes|depth|param, in run order.
PLAN=()
for (( r = 1; r <= ROUNDS; r++ )); do
  for b in "${WIRE[@]}"; do PLAN+=("wire|$r|wire|write|$b|1|-"); done
  for (( w = 0; w < ${#SWEEP[@]}; w++ )); do
    IFS=: read -r op b d <<< "${SWEEP[w]}"
    for (( k = 0; k < ${#CONFIGS[@]}; k++ )); do
      PLAN+=("sweep|$r|${CONFIGS[(k + r + w) % ${#CONFIGS[@]}]}|$op|$b|$d|-")
    done
  done
  for (( w = 0; w < ${#MSGW[@]}; w++ )); do
    IFS=: read -r op b d p <<< "${MSGW[w]}"
    for (( k = 0; k < ${#MSG_CONFIGS[@]}; k++ )); do
      PLAN+=("msgsize|$r|${MSG_CONFIGS[(k + r + w) % ${#MSG_CONFIGS[@]}]}|$op|$b|$d|$p")
    done
  done
done

# ---------------------------------------------------------------- output folder, resume
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
CSV=$OUT/points.csv
CSV_HEADER=section,round,config,op,bytes,depth,param,ok,ios,seconds,iops,MBps,tgtd_user_us_per_io,tgtd_sys_us_per_io,client_user_us_per_io,client_sys_us_per_io,tgtd_syscalls_per_io,tgtd_wakeups_per_io,tgtd_ctxsw_per_io,tgtd_uring_enters_per_io,uring_ios_per_enter,client_syscalls_per_io,client_ctxsw_per_io,pdus_per_recv,pdus_per_send,xport_syscalls_per_io,load1,other_pct,steal_pct,time
RUN_ID="quick=$QUICK rounds=$ROUNDS seconds=$SECS points=$POINTS size_mb=$SIZE_MB iser=$ISER"
declare -A MEASURED=()
if (( RESUME )); then
  [[ -f $OUT/run.conf && -f $CSV ]] || die "--resume: no run to resume in $OUT (run.conf and points.csv)"
  prev=$(sed -n 's/^options=//p' "$OUT/run.conf")
  [[ $prev == "$RUN_ID" ]] || die "--resume: $OUT holds a run with other options ($prev); give the same ones ($RUN_ID)"
  [[ $(head -n 1 "$CSV") == "$CSV_HEADER" ]] || die "--resume: $CSV has another header"
  while IFS=, read -r s r c op b d p ok _; do
    [[ $ok == 1 ]] && MEASURED["$s|$r|$c|$op|$b|$d|$p"]=1
  done < <(tail -n +2 "$CSV")
  note "resuming: ${#MEASURED[@]} of ${#PLAN[@]} points already measured in $OUT"
  printf 'resumed=%s\nload_resumed=%s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/run.conf"
else
  rm -f "$CSV" "$OUT"/*.png "$OUT/report.md" "$OUT/summary.csv" "$OUT/lu-counters.txt" "$OUT"/tgtd-*.log
  rm -rf "$OUT/iser"
  echo "$CSV_HEADER" > "$CSV"
  {
    echo "options=$RUN_ID"
    echo "command=bench/paper.sh${ORIG_ARGS[*]+$(printf ' %q' "${ORIG_ARGS[@]}")}"
    echo "started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "nproc=$(nproc)"
    echo "cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "kernel=$(uname -r)"
    echo "tgt=$(dpkg-query -W -f '${Version}' tgt 2>/dev/null || echo '?')"
    echo "libiscsi=$(dpkg-query -W -f '${Version}' libiscsi7 2>/dev/null || echo '?')"
    echo "rbio=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
  } > "$OUT/run.conf"
fi
TODO=0
for pl in "${PLAN[@]}"; do [[ -n ${MEASURED[$pl]:-} ]] || TODO=$(( TODO + 1 )); done

# ---------------------------------------------------------------- scratch, cleanup
WORK=$(mktemp -d /var/tmp/paper.XXXXXX)   # root file system: see --size-mb
TGTDS=(stock t0 t1 t2 t3 t4)
declare -A TGTD_PID=() NTARGETS=() T_CPORT=() T_PPORT=()
STARTED=() IPERF_PID=""
for (( i = 0; i < ${#TGTDS[@]}; i++ )); do
  T_CPORT[${TGTDS[i]}]=$(( CPORT + i )) T_PPORT[${TGTDS[i]}]=$(( PPORT + i ))
done
IPERF_PORT=$(( PPORT + 9 ))

# stop_tgtds: every tgtd this run started, its log kept in OUT.
stop_tgtds() {
  local t tid
  for t in "${STARTED[@]}"; do
    # Targets (and with them the LUs, which log their counters) first: with
    # targets left the sandbox's stop waits 30 s.
    for (( tid = 1; tid <= ${NTARGETS[$t]:-0}; tid++ )); do
      tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op delete --mode target --tid "$tid" --force >/dev/null 2>&1 || true
    done
    "$SANDBOX" stop "$WORK/tgtd-$t" >/dev/null 2>&1 || true
    # Appended: a resumed run keeps the log of the part before.
    cat "$WORK/tgtd-$t/tgtd.log" >> "$OUT/tgtd-$t.log" 2>/dev/null || true
  done
  STARTED=()
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  printf '\n' >&2
  if [[ -n $IPERF_PID ]]; then kill -TERM "$IPERF_PID" 2>/dev/null || true; wait "$IPERF_PID" 2>/dev/null || true; fi
  # A guest bench under way (its own process group): scripts/vm/run.sh
  # powers its guest off on TERM.
  if [[ -n ${GUEST_PID:-} ]]; then kill -TERM -- "-$GUEST_PID" 2>/dev/null || true; wait "$GUEST_PID" 2>/dev/null || true; fi
  stop_tgtds
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for t in "${TGTDS[@]}"; do
  port_busy "${T_CPORT[$t]}" && die "control port ${T_CPORT[$t]} is already in use (--control-port)"
  port_busy "${T_PPORT[$t]}" && die "portal port ${T_PPORT[$t]} is already in use (--portal-port)"
done
port_busy "$IPERF_PORT" && die "iperf3 port $IPERF_PORT is already in use (--portal-port)"

# ---------------------------------------------------------------- tgtds and LUs
# t0: every transport technique off (unopt, store-batch); t1-t3: one on;
# t4: rbio's defaults. The stock tgtd loads no module at all.
declare -A T_SETTINGS=(
  [t0]="batch_reads=off coalesce=off send_inline=off rx_wait_pdus=0"
  [t1]="batch_reads=on coalesce=off send_inline=off rx_wait_pdus=0"
  [t2]="batch_reads=off coalesce=on send_inline=off rx_wait_pdus=0"
  [t3]="batch_reads=off coalesce=off send_inline=on rx_wait_pdus=0"
  [t4]=""
)
declare -A C_TGTD=([stock]=stock [unopt]=t0 [batching]=t1 [coalescing]=t2 [async-send]=t3 [store-batch]=t0 [all]=t4)
STORE_OFF="batch=off:coalesce=off:inline_reap=off"
declare -A C_BSOPTS=([stock]="" [unopt]=$STORE_OFF [batching]=$STORE_OFF [coalescing]=$STORE_OFF
                     [async-send]=$STORE_OFF [store-batch]="batch=on:coalesce=off:inline_reap=off" [all]="")
IQN_BASE=iqn.2026-12.local.paper
INITIATOR=$IQN_BASE:client
declare -A URL=() LU_NAME=()

start_tgtd() {
  local t=$1 kv conf=$WORK/$1.conf env_=() mods=()
  : > "$conf"
  for kv in ${T_SETTINGS[$t]:-}; do echo "${kv%%=*} = ${kv#*=}" >> "$conf"; done
  if [[ $t == stock ]]; then env_=(env -u RBIO_TRANSPORT -u RBIO_STATS_FILE)
  else env_=(env -u RBIO_TRANSPORT RBIO_CONFIG="$conf" RBIO_STATS_FILE="$WORK/$t.stats"); mods=(--modules "$MODULES"); fi
  STARTED+=("$t")
  "${env_[@]}" "$SANDBOX" start "$WORK/tgtd-$t" "${mods[@]}" \
    --control-port "${T_CPORT[$t]}" --portal "127.0.0.1:${T_PPORT[$t]}" >/dev/null
  TGTD_PID[$t]=$(cat "$WORK/tgtd-$t/tgtd.pid")
  [[ $(cat "/proc/${TGTD_PID[$t]}/comm" 2>/dev/null) == tgtd ]] || die "pid ${TGTD_PID[$t]} of tgtd $t is not tgtd"
}

# add_lu CONFIG NAME [PARAM-SET]: a target with one LU of CONFIG on a file
# of its own; URL[NAME] is its LUN 1.
add_lu() {
  local c=$1 name=$2 pset=${3:-} t=${C_TGTD[$1]} tid kv img=$WORK/$2.img lu=()
  tid=$(( ${NTARGETS[$t]:-0} + 1 ))
  tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op new --mode target --tid "$tid" -T "$IQN_BASE:$name"
  NTARGETS[$t]=$tid LU_NAME[$t/$tid]=$name
  # Allocated, not sparse: writes need no block allocation, and reads fill
  # the page cache with the file's (zero) blocks as they would with data.
  fallocate -l "${SIZE_MB}M" "$img"
  if [[ $c == stock ]]; then lu=(--bstype rdwr)
  else lu=(--bstype rbio); [[ -n ${C_BSOPTS[$c]} ]] && lu+=(--bsopts "${C_BSOPTS[$c]}"); fi
  tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op new --mode logicalunit --tid "$tid" --lun 1 -b "$img" "${lu[@]}" \
    || die "tgtd $t refused the LU of $name (${lu[*]})"
  tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op bind --mode target --tid "$tid" -I ALL
  [[ -z $pset ]] || for kv in ${PARAM_SET[$pset]}; do
    tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op update --mode target --tid "$tid" \
      --name "${kv%%=*}" --value "${kv#*=}" || die "tgtd $t refused ${kv} on $name"
  done
  URL[$name]=iscsi://127.0.0.1:${T_PPORT[$t]}/$IQN_BASE:$name/1
}

note "$TODO of ${#PLAN[@]} points to measure ($ROUNDS round(s) of $SECS s per point); starting 6 tgtds"
if (( TODO )); then
  for t in "${TGTDS[@]}"; do start_tgtd "$t"; done
  for c in "${CONFIGS[@]}"; do add_lu "$c" "$c"; done
  for c in "${MSG_CONFIGS[@]}"; do for p in "${MSG_PARAMS[@]}"; do add_lu "$c" "$c-$p" "$p"; done; done
  # Each rbio tgtd must serve its portal with the settings meant for it.
  for t in "${TGTDS[@]}"; do
    [[ $t == stock ]] && continue
    want=${T_SETTINGS[$t]:-batch_reads=on coalesce=on send_inline=on rx_wait_pdus=16}
    for (( i = 0; i < 30; i++ )); do
      grep -q "served by rbio's transport" "$WORK/tgtd-$t/tgtd.log" && break; sleep 0.1
    done
    grep -q "served by rbio's transport" "$WORK/tgtd-$t/tgtd.log" \
      || die "tgtd $t: rbio's transport did not take the portal over: $(tail -n 3 "$WORK/tgtd-$t/tgtd.log")"
    for kv in $want; do
      grep -q " $kv " "$WORK/tgtd-$t/tgtd.log" || die "tgtd $t does not run with $kv: $(grep -m1 'batch_reads=' "$WORK/tgtd-$t/tgtd.log")"
    done
  done
  iperf_server_start "$IPERF_PORT" "$WORK/iperf3-server.log"
fi

# ---------------------------------------------------------------- measuring
CLK_TCK=$(getconf CLK_TCK)
TGTD_EVENTS=raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_io_uring_enter,io_uring:io_uring_submit_req
CLIENT_EVENTS=user_time,system_time,raw_syscalls:sys_enter,context-switches

# tgtd_cpu T: TUSER/TSYS = user and system ticks of every thread of tgtd T.
tgtd_cpu() {
  local line f
  read -r line < "/proc/${TGTD_PID[$1]}/stat" || die "tgtd $1 (pid ${TGTD_PID[$1]}) is gone"
  line=${line##*) }
  read -r -a f <<< "$line"
  TUSER=${f[11]} TSYS=${f[12]}
}

# perf_csv FILE ARRAY: ARRAY = event -> count of a `perf stat -x,` output.
perf_csv() {
  local -n pa=$2
  local v e
  pa=()
  while IFS=, read -r v _ e _; do
    # shellcheck disable=SC2034  # pa is a nameref: this fills the caller's array
    [[ $v =~ ^[0-9]+(\.[0-9]+)?$ && -n $e ]] && pa[$e]=${v%.*}
  done < "$1"
}

per_io() { awk -v a="$1" -v n="$2" -v s="${3:-1}" -v p="${4:-2}" 'BEGIN { if (n + 0 == 0) print "-"; else printf "%.*f", p, a * s / n }'; }

# measure CONFIG OP BYTES DEPTH URL-NAME: one client run; sets ROW (the CSV
# fields after `param`).
measure() {
  local c=$1 op=$2 bytes=$3 depth=$4 name=$5 t=${C_TGTD[$1]}
  local out=$WORK/client.out rc=0 u0 s0 u1 s1 b0 b1 st0 st1 w0 w1 load ios=0 secs=0 iops wflag=()
  local -A S0=() S1=() PT=() PC=()
  local have0=0 have1=0
  [[ $op == write ]] && wflag=(-w)
  [[ $t == stock ]] || { stats_read "$WORK/$t.stats" S0 && have0=1; }
  read -r load _ < /proc/loadavg
  tgtd_cpu "$t"; u0=$TUSER s0=$TSYS
  sys_ticks; b0=$SYS_BUSY st0=$SYS_STEAL
  w0=$EPOCHREALTIME
  perf stat -x, -o "$WORK/perf-tgtd.csv" -e "$TGTD_EVENTS" -p "${TGTD_PID[$t]}" -- \
    perf stat -x, -o "$WORK/perf-client.csv" -e "$CLIENT_EVENTS" -- \
    timeout --foreground $(( SECS + 60 )) "$RWPERF" "${wflag[@]}" -i "$INITIATOR" -m "$depth" -s "$bytes" \
      -t "$SECS" "${URL[$name]}" > "$out" 2>&1 || rc=$?
  w1=$EPOCHREALTIME
  sys_ticks; b1=$SYS_BUSY st1=$SYS_STEAL
  tgtd_cpu "$t"; u1=$TUSER s1=$TSYS
  M_OK=0
  if read -r ios secs iops < <(awk '/^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } print r["ios"], r["seconds"], r["iops"] }' "$out") \
     && [[ $ios =~ ^[0-9]+$ ]] && (( ios > 0 )); then
    M_OK=1
  else
    note "client failed (exit $rc) on $c $op $bytes x$depth: $(tr '\r' '\n' < "$out" | grep -v '^ *$' | tail -n 2 | tr '\n' ' ')"
    ios=0 secs=0 iops=0
  fi
  perf_csv "$WORK/perf-tgtd.csv" PT
  perf_csv "$WORK/perf-client.csv" PC
  # rbio's statistics file: wait until it shows this client's connection
  # gone (open back to before, total grown), at most 1.2 s.
  if (( have0 )); then
    local i
    for (( i = 0; i < 24; i++ )); do
      if stats_read "$WORK/$t.stats" S1; then
        have1=1
        (( S1[connections_open] <= S0[connections_open] && S1[connections_total] > S0[connections_total] )) && break
      fi
      sleep 0.05
    done
  fi
  local wall ppr=- pps=- xs=- wake ur=- ue=-
  wall=$(awk -v a="$w0" -v b="$w1" 'BEGIN { print b - a }')
  wake=$(( ${PT[syscalls:sys_enter_epoll_wait]:-0} + ${PT[syscalls:sys_enter_epoll_pwait]:-0} ))
  if (( have0 && have1 )); then
    ppr=$(fdiv $(( S1[pdus_in] - S0[pdus_in] )) $(( S1[recv_calls] - S0[recv_calls] )))
    pps=$(fdiv $(( S1[pdus_out] - S0[pdus_out] )) $(( S1[send_calls] - S0[send_calls] )))
    xs=$(per_io $(( S1[syscalls] - S0[syscalls] )) "$ios")
  fi
  if [[ $t != stock ]]; then
    ue=$(per_io "${PT[syscalls:sys_enter_io_uring_enter]:-0}" "$ios" 1 3)
    ur=$(fdiv "${PT[io_uring:io_uring_submit_req]:-0}" "${PT[syscalls:sys_enter_io_uring_enter]:-0}")
  fi
  ROW="$M_OK,$ios,$secs,$iops,$(awk -v i="$iops" -v b="$bytes" 'BEGIN { printf "%.1f", i * b / 1e6 }')"
  ROW+=",$(per_io $(( u1 - u0 )) "$ios" "$(( 1000000 / CLK_TCK ))" 1),$(per_io $(( s1 - s0 )) "$ios" "$(( 1000000 / CLK_TCK ))" 1)"
  ROW+=",$(per_io "${PC[user_time]:-0}" "$ios" 0.001 1),$(per_io "${PC[system_time]:-0}" "$ios" 0.001 1)"
  ROW+=",$(per_io "${PT[raw_syscalls:sys_enter]:-0}" "$ios"),$(per_io "$wake" "$ios" 1 3),$(per_io "${PT[context-switches]:-0}" "$ios" 1 3)"
  ROW+=",$ue,$ur,$(per_io "${PC[raw_syscalls:sys_enter]:-0}" "$ios"),$(per_io "${PC[context-switches]:-0}" "$ios" 1 3)"
  ROW+=",$ppr,$pps,$xs,$load"
  # CPU the rest of the machine used (busy minus tgtd and client) and steal.
  ROW+=",$(awk -v b=$(( b1 - b0 )) -v hz="$CLK_TCK" -v t=$(( u1 - u0 + s1 - s0 )) -v c="$(( ${PC[user_time]:-0} + ${PC[system_time]:-0} ))" -v w="$wall" \
    'BEGIN { o = (b - t) / hz - c / 1e9; o = o / w * 100; printf "%.0f", o < 0 ? 0 : o }')"
  ROW+=",$(awk -v d=$(( st1 - st0 )) -v hz="$CLK_TCK" -v w="$wall" 'BEGIN { printf "%.0f", d / hz / w * 100 }')"
  kill -0 "${TGTD_PID[$t]}" 2>/dev/null || die "tgtd $t (pid ${TGTD_PID[$t]}) died; see $WORK/tgtd-$t/tgtd.log"
}

size_label() { if (( $1 >= 1048576 )); then echo "$(( $1 / 1048576 )) MiB"; else echo "$(( $1 / 1024 )) KiB"; fi; }

# progress N TEXT: one line per point; on a terminal it overwrites itself.
T0=$EPOCHREALTIME
progress() {
  local n=$1 eta
  eta=$(awk -v t0="$T0" -v now="$EPOCHREALTIME" -v n="$n" -v todo="$TODO" \
    'BEGIN { if (n == 0) { print "?"; exit } s = (now - t0) / n * (todo - n); printf "%dm%02ds", s / 60, s % 60 }')
  if [[ -t 2 ]]; then printf '\r\033[K[%d/%d, %s left] %s' "$n" "$TODO" "$eta" "$2" >&2
  else printf '[%d/%d, %s left] %s\n' "$n" "$TODO" "$eta" "$2" >&2; fi
}

FAILS=0 n=0
for pl in "${PLAN[@]}"; do
  [[ -n ${MEASURED[$pl]:-} ]] && continue
  IFS='|' read -r sec r c op b d p <<< "$pl"
  if [[ $sec == wire ]]; then
    iperf_run "$IPERF_PORT" "$SECS" "$WORK/iperf3.json" "$b"
    ok=1; [[ $IP_MBS == nan ]] && ok=0
    read -r load _ < /proc/loadavg
    ROW="$ok,-,$SECS,-,$IP_MBS,-,-,-,-,-,-,-,-,-,-,-,-,-,-,$load,-,-"
    msg="r$r wire: iperf3 writes of $(size_label "$b"): $IP_MBS MB/s (CPU sender/receiver $IP_CPU)"
  else
    name=$c; [[ $sec == msgsize ]] && name=$c-$p
    measure "$c" "$op" "$b" "$d" "$name"
    ok=$M_OK
    IFS=, read -r _ _ _ iops mbps tu ts cu cs tsc wk _ <<< "$ROW"
    msg="r$r $sec $c$([[ $p != - ]] && echo " $p"): $(size_label "$b") $op x$d: $iops IOPS, $mbps MB/s, tgtd $tu+$ts us/IO, client $cu+$cs us/IO, tgtd syscalls $tsc/IO, wake-ups $wk/IO"
  fi
  (( ok )) || FAILS=$(( FAILS + 1 ))
  echo "$sec,$r,$c,$op,$b,$d,$p,$ROW,$(date -u +%H:%M:%S)" >> "$CSV"
  n=$(( n + 1 ))
  progress "$n" "$msg"
done
(( TODO )) && printf '\n' >&2

# ---------------------------------------------------------------- LU counters
# Removing the targets makes bs_rbio log each LU's counters (io_uring I/Os
# per submit, merged commands, event wake-ups) over the whole run.
# lines_removed LOG N: LOG holds N of those lines (tgtd writes each as it
# frees the LU).
lines_removed() { (( $(grep -c 'rbio: tid:.*removed;' "$1") >= $2 )); }
if (( TODO )); then
  declare -A REMOVED=()
  for t in "${TGTDS[@]}"; do
    REMOVED[$t]=0
    for (( tid = 1; tid <= ${NTARGETS[$t]:-0}; tid++ )); do
      if tgtadm -C "${T_CPORT[$t]}" --lld iscsi --op delete --mode target --tid "$tid" --force >/dev/null 2>&1
      then REMOVED[$t]=$(( REMOVED[$t] + 1 ))
      else note "could not remove target $tid of tgtd $t"; fi
    done
    NTARGETS[$t]=0
  done
  for t in "${TGTDS[@]}"; do
    [[ $t == stock ]] && continue
    wait_for 5 lines_removed "$WORK/tgtd-$t/tgtd.log" "${REMOVED[$t]}" \
      || note "tgtd $t logged the counters of fewer than ${REMOVED[$t]} LUs within 5 s"
    while read -r line; do
      [[ $line =~ tid:([0-9]+)\ lun:[0-9]+:\ removed\;\ (.*)$ ]] || continue
      echo "${LU_NAME[$t/${BASH_REMATCH[1]}]:-$t/${BASH_REMATCH[1]}}: ${BASH_REMATCH[2]}"
    done < <(grep 'rbio: tid:.*removed;' "$WORK/tgtd-$t/tgtd.log")
  done >> "$OUT/lu-counters.txt"
fi
printf 'finished=%s\nload_end=%s\nfailed_points=%s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$FAILS" >> "$OUT/run.conf"

# ---------------------------------------------------------------- iSER in the guest
# The loopback part's tgtds are done: they would only hold their ports (and
# a second run's --control-port) while the guest runs.
stop_tgtds
# guest_bench LOG COMMAND...: one of the guest benches, its output in LOG
# and its steps (check lines, the guest's boot and end) as progress lines.
# Its own session and process group, so that a killed paper.sh takes the
# guest down with it (cleanup) rather than waiting for it to end.
GUEST_PID=""
guest_bench() {
  local log=$1 follow rc=0; shift
  setsid "$@" > "$log" 2>&1 < /dev/null &
  GUEST_PID=$!
  tail -n +1 -F --pid="$GUEST_PID" "$log" 2>/dev/null \
    | grep --line-buffered -E '^(ok|FAIL|SKIP)|^vm: |^measuring|^iser-instructions: |^stopping' \
    | while IFS= read -r line; do printf '  iSER %s: %s\n' "$(date -u +%H:%M:%S)" "$line" >&2; done &
  follow=$!
  wait "$GUEST_PID" || rc=$?
  GUEST_PID=""
  wait "$follow" || true   # the progress lines only; the bench's status is rc
  return "$rc"
}
# A part is done when its results.md exists (each bench writes it last); a
# part that did not get there is run again from the start, its earlier
# files removed (raw.tsv is written point by point, so its presence says
# nothing).
if (( ISER )); then
  mkdir -p "$OUT/iser"
  if [[ ! -f $OUT/iser/results.md ]]; then
    find "$OUT/iser" -mindepth 1 -maxdepth 1 ! -name instructions ! -name instructions.log -exec rm -rf {} +
    note "iSER: bench/iser-compare.sh --rounds 1 --bstype rdwr,rbio --workloads $ISER_WORKLOADS (whole stacks)"
    guest_bench "$OUT/iser/compare.log" "$ROOT/bench/iser-compare.sh" --rounds 1 --bstype rdwr,rbio \
        --workloads "$ISER_WORKLOADS" --out "$OUT/iser" \
      || { FAILS=$(( FAILS + 1 )); note "iser-compare.sh failed: see $OUT/iser/compare.log"; }
  fi
  if [[ ! -f $OUT/iser/instructions/results.md ]]; then
    rm -rf "$OUT/iser/instructions"
    note "iSER: bench/iser-instructions.sh (instructions per command)"
    guest_bench "$OUT/iser/instructions.log" "$ROOT/bench/iser-instructions.sh" --out "$OUT/iser/instructions" \
      || { FAILS=$(( FAILS + 1 )); note "iser-instructions.sh failed: see $OUT/iser/instructions.log"; }
  fi
fi

# ---------------------------------------------------------------- report
"$PY" "$ROOT/bench/paper-report.py" "$OUT" || die "paper-report.py failed"
note "results in $OUT: report.md, points.csv, summary.csv, $(cd "$OUT" && ls ./*.png | tr '\n' ' ')"
(( FAILS == 0 )) || die "$FAILS point(s) failed (ok=0 in points.csv); --resume measures them again"
