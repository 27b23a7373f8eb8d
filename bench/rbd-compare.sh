#!/usr/bin/env bash
# rbd-compare.sh: iSCSI LUs on a Ceph RBD image, rbio against stock tgt, with
# librbd alone as the ceiling, side by side in ONE run on one single-node
# cluster (scripts/ceph-dev.sh: one monitor, one memstore OSD, loopback).
#
#   bench/rbd-compare.sh [--rounds N] [--time S] [--quick] [--csv FILE]
#       [--size-mb N] [--no-mixed] [--no-strace] [--workloads LIST]
#       [--configs LIST] [--ports N] [--ceph-port N] [--rbio-b BUILD_DIR]
#       [--no-warmup]
#
#   --rounds N    interleaved rounds; the tables give medians (default 3)
#   --time S      seconds per point (default 5)
#   --quick       smoke run: 1 round of 2 s, 4 KiB points only (~1.5 min)
#   --csv FILE    every measurement, one CSV line each
#   --size-mb N   image size (default 1024; the memstore OSD holds about
#                 twice that in RAM once the image is prefilled)
#   --no-mixed    leave out bs_rbd behind rbio's transport
#   --no-strace   leave out the system-call pass
#   --workloads LIST  only these workloads, comma-separated OP:BYTES:DEPTH:PATTERN
#                 (OP read|write, PATTERN rand|seq), e.g. write:4096:32:rand
#                 for the 4 KiB random writes at 32 in flight
#   --configs LIST    only these configurations (comma-separated; rbio is
#                 always in): rbio, bs_rbd, librbd, bs_rbd+rt
#   --ports N     tgtd control ports N (stock) and N+1 (rbio), portals
#                 N+8000 and N+8001 (default 5950)
#   --ceph-port N     Ceph monitor port; N+1 is used too (default 17000)
#   --rbio-b DIR  A/B of rbio's code: one more configuration, rbio-b, the
#                 bs_rbio.so of the build folder DIR in a third tgtd (control
#                 port N+2, portal N+8002); its rbio/this column is A over B
#   --no-warmup   measure right after the prefill (see "Warm-up" below)
#
# Configurations, all on the same image (pool rbd, created with only the
# layering feature: without exclusive-lock the clients take turns without
# handing a lock over at each switch), prefilled so reads hit written data:
#   rbio    `-b rbd:rbd/IMG --bstype rbio` in a stock tgtd loading
#           build/modules/bs_rbio.so (so rbio's TCP transport serves it);
#   bs_rbd  stock tgt's `--bstype rbd -b rbd/IMG --bsopts conf=...` (Debian
#           package tgt-rbd: blocking librbd calls from 16 worker threads)
#           in a stock tgtd with only bs_rbd.so: stock tgt end to end; its
#           ceph.conf turns librbd's cache off, as rbio and rbd bench have it;
#   librbd  `rbd bench` with the same size, depth and pattern, librbd set
#           up as rbio sets it up (--rbd_cache=false
#           --rbd_non_blocking_aio=false): librbd alone, no iSCSI, the ceiling;
#   bs_rbd+rt  bs_rbd in the rbio tgtd, behind rbio's transport (unless
#           --no-mixed): splits rbio's gain into transport and store.
# The two tgtds are the same Debian binary, sandboxed
# (scripts/tgtd-sandbox.sh); the iSCSI client is the rbio initiator's
# `rbio bench` (one session). Workloads: 4 KiB random at 1 and 32 in
# flight, 64 KiB and 1 MiB sequential at 32, writes then reads. Every round
# runs each workload against every configuration back to back, the order
# rotated per workload and round; ratios are medians of per-round ratios.
# `rbd bench` has no time limit, only a total: it gets the IOPS of its last
# run (a short calibration run first) times --time.
#
# Warm-up: an OSD trims a PG's log only once it holds
# osd_max_pg_log_entries (10,000 on pacific) entries, and from then on
# every write costs it more: 4 KiB random writes on the single memstore
# OSD here drop from ~10,500 to ~6,600 IOPS after 8 PGs x 10,000 writes.
# Without a warm-up the points that happen to run before that (the first
# of round 1) are measured on a cheaper OSD than the rest. So before the
# rounds `rbd bench` writes 1.25 x that many 4 KiB blocks at random.
#
# Per point: IOPS, MB/s (10^6), median latency (rbio bench), CPU per I/O of
# tgtd (utime+stime from /proc/PID/stat, all threads), of the client (rbio
# bench or rbd bench, from `times`) and of the OSD, and the share of the
# two cores each took, with what the rest of the machine used ("oth") and
# the hypervisor stole ("stl"). After the rounds: one strace -c -f pass per
# configuration (4 KiB random reads at 32) for system calls per I/O, and
# the rbio engine's counters (logged when its LU is removed).
# Ports (defaults): Ceph monitor 17000-17001, tgtd control 5950-5951,
# portals 13950-13951. Everything started is stopped by PID at exit.
set -euo pipefail

ORIG_ARGS=("$@")
BENCH_NAME=rbd-compare
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=3 SECS=5 QUICK=0 CSV="" SIZE_MB=1024 MIXED=1 STRACE=1 WL_ONLY="" CFG_ONLY="" WARMUP=1
CTL_BASE=5950 CEPH_PORT=17000 RBIO_B=""
ROUNDS_SET=0 SECS_SET=0
while (( $# )); do
  case $1 in
    --rounds) ROUNDS=${2:-}; ROUNDS_SET=1; shift 2 ;;
    --time) SECS=${2:-}; SECS_SET=1; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --csv) CSV=${2:-}; [[ -n $CSV ]] || die "--csv needs a file"; shift 2 ;;
    --size-mb) SIZE_MB=${2:-}; shift 2 ;;
    --no-mixed) MIXED=0; shift ;;
    --no-strace) STRACE=0; shift ;;
    --no-warmup) WARMUP=0; shift ;;
    --workloads) WL_ONLY=${2:-}; [[ -n $WL_ONLY ]] || die "--workloads needs a list"; shift 2 ;;
    --configs) CFG_ONLY=${2:-}; [[ -n $CFG_ONLY ]] || die "--configs needs a list"; shift 2 ;;
    --ports) CTL_BASE=${2:-}; shift 2 ;;
    --ceph-port) CEPH_PORT=${2:-}; shift 2 ;;
    --rbio-b) RBIO_B=${2:-}; [[ -f $RBIO_B/modules/bs_rbio.so ]] || die "--rbio-b: no $RBIO_B/modules/bs_rbio.so"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'rbd-compare: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
if (( QUICK )); then
  (( ROUNDS_SET )) || ROUNDS=1
  (( SECS_SET )) || SECS=2
fi
for v in ROUNDS SECS SIZE_MB CTL_BASE CEPH_PORT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "${v,,} must be a positive integer (got '${!v}')"
done
(( SIZE_MB >= 64 )) || die "--size-mb must be at least 64"
(( CTL_BASE >= 1024 && CTL_BASE + 8001 <= 65535 )) || die "--ports must be 1024-57534"
(( CEPH_PORT >= 1024 && CEPH_PORT < 65535 )) || die "--ceph-port must be 1024-65534"
if [[ -n $CFG_ONLY ]]; then
  for c in ${CFG_ONLY//,/ }; do
    [[ $c =~ ^(rbio|bs_rbd|librbd|bs_rbd\+rt)$ ]] || die "--configs: unknown configuration '$c' (rbio, bs_rbd, librbd, bs_rbd+rt)"
  done
fi
if [[ -n $WL_ONLY ]]; then
  for w in ${WL_ONLY//,/ }; do
    [[ $w =~ ^(read|write):[1-9][0-9]*:[1-9][0-9]*:(rand|seq)$ ]] \
      || die "--workloads: '$w' is not OP:BYTES:DEPTH:PATTERN (e.g. write:4096:32:rand)"
    (( $(cut -d: -f2 <<< "$w") % 512 == 0 )) \
      || die "--workloads: '$w': BYTES must be a multiple of 512"
  done
fi

declare -A CTL=([rbio]=$(( CTL_BASE + 1 )) [stock]=$CTL_BASE [rbiob]=$(( CTL_BASE + 2 )))
declare -A PORTAL=([rbio]=$(( CTL_BASE + 8001 )) [stock]=$(( CTL_BASE + 8000 )) [rbiob]=$(( CTL_BASE + 8002 )))
BUILD=${RBIO_BUILD_DIR:-$ROOT/build}
RBIO=$BUILD/initiator/rbio
STOCK_BS_RBD=/usr/lib/tgt/backing-store/bs_rbd.so

# ---------------------------------------------------------------- prerequisites
for b in tgtd tgtadm; do command -v "$b" >/dev/null || die "$b not found: apt-get install tgt"; done
[[ -f $STOCK_BS_RBD ]] || die "$STOCK_BS_RBD not found (stock tgt's RBD store): apt-get install tgt-rbd"
for b in ceph-mon ceph-osd rbd; do
  command -v "$b" >/dev/null || die "$b not found: apt-get install ceph-mon ceph-osd ceph-common"
done
command -v strace >/dev/null || (( ! STRACE )) || die "strace not found: apt-get install strace (or --no-strace)"
[[ -x $RBIO && -f $BUILD/modules/bs_rbio.so ]] \
  || die "$RBIO or $BUILD/modules/bs_rbio.so missing: build first (cmake -S . -B build && cmake --build build)"
port_busy "$CEPH_PORT" || port_busy $(( CEPH_PORT + 1 )) && die "Ceph ports $CEPH_PORT-$(( CEPH_PORT + 1 )) are in use"
for t in rbio stock ${RBIO_B:+rbiob}; do
  port_busy "${CTL[$t]}" && die "control port ${CTL[$t]} is in use"
  port_busy "${PORTAL[$t]}" && die "portal port ${PORTAL[$t]} is in use"
done

# ---------------------------------------------------------------- scratch + cleanup
T_START=$EPOCHREALTIME
WORK=$(mktemp -d /tmp/rbd-compare.XXXXXX)
CEPH_DIR=$WORK/ceph
CONF=$CEPH_DIR/ceph.conf
CEPH_STARTED=0 STRACE_PID=""
declare -A TGTD_PID=() STATE=([rbio]=$WORK/tgtd-rbio [stock]=$WORK/tgtd-stock [rbiob]=$WORK/tgtd-rbiob)
TGTDS=()

cleanup() {
  local rc=$? t tid
  trap - EXIT INT TERM
  if [[ -n $STRACE_PID ]]; then kill -INT "$STRACE_PID" 2>/dev/null || true; wait "$STRACE_PID" 2>/dev/null || true; fi
  for t in "${TGTDS[@]}"; do
    if (( rc != 0 )) && [[ -f ${STATE[$t]}/tgtd.log ]]; then
      note "last lines of the $t tgtd's log:"; tail -n 8 "${STATE[$t]}/tgtd.log" >&2 || true
    fi
    # Targets first: with targets left the sandbox's stop waits 30 s.
    for tid in 1 2; do
      timeout 20 tgtadm -C "${CTL[$t]}" --lld iscsi --op delete --mode target --tid "$tid" --force >/dev/null 2>&1 || true
    done
    if ! "$SANDBOX" stop "${STATE[$t]}" >/dev/null 2>&1; then
      note "the $t tgtd did not stop cleanly; its log ends:"; tail -n 5 "${STATE[$t]}/tgtd.log" >&2 || true
    fi
  done
  if (( CEPH_STARTED )); then
    bash "$ROOT/scripts/ceph-dev.sh" stop --dir "$CEPH_DIR" >/dev/null 2>&1 || note "stopping the cluster in $CEPH_DIR failed"
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rbd_() { timeout 120 rbd -c "$CONF" "$@"; }
ceph_() { timeout 60 ceph -c "$CONF" "$@"; }
# bench_rate FILE: the ops/sec of the `rbd bench` whose output is FILE (0 if none).
bench_rate() { awk '/^elapsed:/ { for (i = 1; i < NF; i++) if ($i == "ops/sec:") r = $(i + 1) } END { print r + 0 }' "$1"; }
# rbd bench runs librbd as rbio configures it (tgt-backend/rbd/rbd_image.cpp):
# cache off, requests dispatched in the caller's thread.
LIBRBD_SETTINGS=(--rbd_cache=false --rbd_non_blocking_aio=false)

# ---------------------------------------------------------------- cluster + image
# memstore keeps every written 4 KiB page in the OSD's RAM: room for the
# prefilled image and the objects' overhead, at least the script's minimum.
CEPH_STARTED=1
bash "$ROOT/scripts/ceph-dev.sh" start --dir "$CEPH_DIR" --port "$CEPH_PORT" \
  --size $(( SIZE_MB * 2 > 1024 ? SIZE_MB * 2 : 1024 )) > "$WORK/ceph-start.log" 2>&1 \
  || die "the Ceph cluster did not start: $(tail -n 3 "$WORK/ceph-start.log")"
OSD_PID=$(cat "$CEPH_DIR/run/osd.0.pid") MON_PID=$(cat "$CEPH_DIR/run/mon.a.pid")
[[ $(cat "/proc/$OSD_PID/comm" 2>/dev/null) == ceph-osd ]] || die "pid $OSD_PID is not the ceph-osd"
IMG=rbd-compare
# Stock bs_rbd reads its settings from a ceph.conf only; librbd's default
# cache (writeback after the first SYNCHRONIZE CACHE, which rbio bench
# sends at the end of each run) would acknowledge its writes from tgtd's
# memory: unsafe with several gateways, and not what the others do.
STOCK_CONF=$CEPH_DIR/ceph-bs-rbd.conf
sed 's/^\[client\]$/[client]\nrbd cache = false/' "$CONF" > "$STOCK_CONF"
grep -q '^rbd cache = false$' "$STOCK_CONF" || die "cannot write $STOCK_CONF (no [client] section in $CONF)"
rbd_ create --size "${SIZE_MB}M" --image-feature layering "rbd/$IMG" || die "rbd create rbd/$IMG failed"
# Prefill: 4 MiB sequential writes over the whole image, so every object
# exists and reads return stored pages, not ENOENT holes.
rbd_ "${LIBRBD_SETTINGS[@]}" bench --io-type write --io-size 4M --io-threads 4 --io-pattern seq \
  --io-total "${SIZE_MB}M" "rbd/$IMG" > "$WORK/prefill.log" 2>&1 || die "prefilling rbd/$IMG failed: $(tail -n 2 "$WORK/prefill.log")"

# Warm-up (see the header): bring every PG's log to its cap, so that all
# points are measured on an OSD that trims, as it does from then on.
WARMUP_WRITES=0
if (( WARMUP )); then
  max_log=$(ceph_ daemon osd.0 config get osd_max_pg_log_entries 2>/dev/null \
    | sed -n 's/.*"osd_max_pg_log_entries": *"\([0-9]*\)".*/\1/p')
  pgs=$(ceph_ osd pool get rbd pg_num 2>/dev/null | sed -n 's/^pg_num: *\([0-9]*\)$/\1/p')
  [[ $max_log =~ ^[0-9]+$ && $pgs =~ ^[0-9]+$ ]] \
    || die "cannot read osd_max_pg_log_entries ('$max_log') or pool rbd's pg_num ('$pgs') for the warm-up (--no-warmup skips it)"
  WARMUP_WRITES=$(( max_log * pgs * 5 / 4 ))
  note "warm-up: $WARMUP_WRITES random 4 KiB writes (PG logs: $pgs x $max_log entries before trimming starts)"
  rbd_ "${LIBRBD_SETTINGS[@]}" bench --io-type write --io-size 4096 --io-threads 32 --io-pattern rand \
    --io-total $(( WARMUP_WRITES * 4096 )) "rbd/$IMG" > "$WORK/warmup.log" 2>&1 \
    || die "the warm-up writes failed: $(tail -n 2 "$WORK/warmup.log")"
  note "warm-up done: $(bench_rate "$WORK/warmup.log") IOPS on average"
fi

# ---------------------------------------------------------------- two tgtds
# Each sandbox binds its own module folder on /usr/lib/tgt/backing-store:
# the stock one holds only stock bs_rbd.so (tgt's own transport), rbio's
# holds bs_rbio.so and, for the mixed point, bs_rbd.so too. Copies, not
# links: inside the sandbox a link into /usr/lib/tgt/backing-store would
# point back at the folder itself.
mkdir -p "$WORK/mods-stock" "$WORK/mods-rbio"
cp "$STOCK_BS_RBD" "$WORK/mods-stock/"
cp "$BUILD/modules/bs_rbio.so" "$WORK/mods-rbio/"
(( MIXED )) && cp "$STOCK_BS_RBD" "$WORK/mods-rbio/"
if [[ -n $RBIO_B ]]; then mkdir -p "$WORK/mods-rbiob"; cp "$RBIO_B/modules/bs_rbio.so" "$WORK/mods-rbiob/"; fi
IQN_BASE=iqn.2026-12.local.rbd-compare
# IQNs take no '_' or '+'.
declare -A IQN=([rbio]=$IQN_BASE:rbio [bs_rbd]=$IQN_BASE:bs-rbd [bs_rbd+rt]=$IQN_BASE:bs-rbd-rt [rbio-b]=$IQN_BASE:rbio-b)
CONFIGS=(rbio bs_rbd librbd)
(( MIXED )) && CONFIGS+=(bs_rbd+rt)
if [[ -n $CFG_ONLY ]]; then
  kept=(rbio)
  for c in "${CONFIGS[@]:1}"; do [[ ",$CFG_ONLY," == *",$c,"* ]] && kept+=("$c"); done
  CONFIGS=("${kept[@]}")
fi
[[ -n $RBIO_B ]] && CONFIGS+=(rbio-b)
declare -A TGTD_OF=([rbio]=rbio [bs_rbd]=stock [bs_rbd+rt]=rbio [rbio-b]=rbiob)
declare -A TID_OF=([rbio]=1 [bs_rbd]=1 [bs_rbd+rt]=2 [rbio-b]=1)
for t in stock rbio ${RBIO_B:+rbiob}; do
  TGTDS+=("$t")
  env -u RBIO_TRANSPORT "$SANDBOX" start "${STATE[$t]}" --modules "$WORK/mods-$t" \
    --control-port "${CTL[$t]}" --portal "127.0.0.1:${PORTAL[$t]}" >/dev/null
  pid=$(cat "${STATE[$t]}/tgtd.pid")
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == tgtd ]] || die "pid $pid of the $t tgtd is not tgtd"
  TGTD_PID[$t]=$pid
done
for c in rbio bs_rbd bs_rbd+rt rbio-b; do
  [[ -n ${TGTD_OF[$c]:-} && " ${CONFIGS[*]} " == *" $c "* ]] || continue
  t=${TGTD_OF[$c]} tid=${TID_OF[$c]}
  a=(tgtadm -C "${CTL[$t]}" --lld iscsi)
  "${a[@]}" --op new --mode target --tid "$tid" -T "${IQN[$c]}"
  if [[ $c == rbio* ]]; then lu=(--bstype rbio -b "rbd:rbd/$IMG" --bsopts "rbd_conf=$CONF")
  else lu=(--bstype rbd -b "rbd/$IMG" --bsopts "conf=$STOCK_CONF"); fi
  "${a[@]}" --op new --mode logicalunit --tid "$tid" --lun 1 "${lu[@]}" \
    || die "the $t tgtd refused the $c LU (${lu[*]}); see ${STATE[$t]}/tgtd.log"
  "${a[@]}" --op bind --mode target --tid "$tid" -I ALL
done
for t in rbio ${RBIO_B:+rbiob}; do
  grep -q "served by rbio's transport" "${STATE[$t]}/tgtd.log" || die "rbio's transport does not serve the $t tgtd's portal"
done
grep -q "backing store 'rbio' registered" "${STATE[stock]}/tgtd.log" && die "the stock tgtd loaded rbio"

# ---------------------------------------------------------------- measuring
# Workloads OP:BYTES:DEPTH:PATTERN, in the order a round runs them.
if (( QUICK )); then
  WORKLOADS=(write:4096:1:rand write:4096:32:rand read:4096:1:rand read:4096:32:rand)
else
  WORKLOADS=(write:4096:1:rand write:4096:32:rand write:65536:32:seq write:1048576:32:seq
             read:4096:1:rand read:4096:32:rand read:65536:32:seq read:1048576:32:seq)
fi
[[ -n $WL_ONLY ]] && IFS=, read -r -a WORKLOADS <<< "$WL_ONLY"
declare -A EST=()   # workload -> librbd IOPS last seen (sizes rbd bench's total)

# snap: TK[name]=ticks of each process that shares the cores with the bench.
declare -A TK=()
snap() {
  local t
  for t in "${TGTDS[@]}"; do proc_ticks "${TGTD_PID[$t]}" || die "the $t tgtd (pid ${TGTD_PID[$t]}) died"; TK[$t]=$TICKS; done
  proc_ticks "$OSD_PID" || die "the OSD (pid $OSD_PID) died; see $CEPH_DIR/log"; TK[osd]=$TICKS
  proc_ticks "$MON_PID" || die "the monitor (pid $MON_PID) died; see $CEPH_DIR/log"; TK[mon]=$TICKS
  child_ms; TK[client_ms]=$CHILD_MS
  sys_ticks; TK[busy]=$SYS_BUSY TK[steal]=$SYS_STEAL
}

# run_client CFG OP BYTES DEPTH PATTERN SECS OUT: the client of one point,
# in this shell (for `times`), output in OUT; returns its exit status.
run_client() {
  local cfg=$1 op=$2 bytes=$3 depth=$4 pat=$5 secs=$6 out=$7 rw ops
  if [[ $cfg == librbd ]]; then
    ops=$(awk -v e="${EST[$op:$bytes:$depth:$pat]:-0}" -v s="$secs" -v d="$depth" \
      'BEGIN { n = int(e * s); if (n < 4 * d) n = 4 * d; if (n < 64) n = 64; print n }')
    timeout --foreground $(( secs * 10 + 60 )) rbd -c "$CONF" "${LIBRBD_SETTINGS[@]}" bench --io-type "$op" \
      --io-size "$bytes" --io-threads "$depth" --io-pattern "$pat" --io-total $(( ops * bytes )) \
      "rbd/$IMG" > "$out" 2>&1
  else
    rw=$op; [[ $pat == rand ]] && rw=rand$op
    timeout --foreground $(( secs + 60 )) "$RBIO" bench -T "${IQN[$cfg]}" \
      -p "127.0.0.1:${PORTAL[${TGTD_OF[$cfg]}]}" --lun 1 --bs "$bytes" --iodepth "$depth" \
      --rw "$rw" --time "$secs" > "$out" 2>&1
  fi
}

# measure CFG OP BYTES DEPTH PATTERN SECS: one point. Sets M_OK, M_IOS,
# M_IOPS, M_P50 (us, "-" for librbd) and M_LINE (the CSV row's CPU part).
measure() {
  local cfg=$1 op=$2 bytes=$3 depth=$4 pat=$5 secs=$6 out=$WORK/client.out rc=0 w0 w1
  local -A T0=()
  local k
  snap; for k in "${!TK[@]}"; do T0[$k]=${TK[$k]}; done
  w0=$EPOCHREALTIME
  run_client "$cfg" "$op" "$bytes" "$depth" "$pat" "$secs" "$out" || rc=$?
  w1=$EPOCHREALTIME
  snap
  M_OK=1 M_IOS=0 M_IOPS=nan M_P50=-
  if (( rc != 0 )); then
    M_OK=0; note "$cfg: client failed (exit $rc): $(grep -v '^ *$' "$out" | tail -n 2 | tr '\n' ' ')"
  elif [[ $cfg == librbd ]]; then
    read -r M_IOS M_IOPS <<< "$(awk '/^elapsed:/ { for (i = 1; i < NF; i++) { if ($i == "ops:") n = $(i + 1); if ($i == "ops/sec:") r = $(i + 1) } }
      END { print n + 0, (r == "" ? "nan" : r) }' "$out")"
    if [[ $M_IOPS =~ ^[0-9.]+$ ]]; then EST[$op:$bytes:$depth:$pat]=$M_IOPS
    else M_OK=0; note "cannot parse rbd bench: $(tail -n 2 "$out")"; fi
  else
    read -r M_IOS M_IOPS M_P50 <<< "$(awk '/ ios=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } }
      /latency_us:/ { for (i = 1; i <= NF; i++) if ($i ~ /^p50=/) p = substr($i, 5) }
      END { print r["ios"] + 0, (r["iops"] == "" ? "nan" : r["iops"]), (p == "" ? "-" : p) }' "$out")"
    [[ $M_IOPS =~ ^[0-9.]+$ ]] || { M_OK=0; note "cannot parse rbio bench: $(tail -n 2 "$out")"; }
  fi
  # CPU: seconds of each, per I/O and as % of the wall time (2 cores = 200%).
  local t=${TGTD_OF[$cfg]:-} dt=0 tall=0 x
  for x in "${TGTDS[@]}"; do tall=$(( tall + TK[$x] - T0[$x] )); done
  [[ -n $t ]] && dt=$(( TK[$t] - T0[$t] ))
  M_LINE=$(awk -v w="$(awk -v a="$w0" -v b="$w1" 'BEGIN { print b - a }')" -v n="$M_IOS" -v hz="$CLK_TCK" \
    -v tg="$dt" -v has_t="${t:+1}" -v tall="$tall" -v cl=$(( TK[client_ms] - T0[client_ms] )) \
    -v osd=$(( TK[osd] - T0[osd] )) -v mon=$(( TK[mon] - T0[mon] )) \
    -v busy=$(( TK[busy] - T0[busy] )) -v steal=$(( TK[steal] - T0[steal] )) 'BEGIN {
      tg /= hz; tall /= hz; cl /= 1000; osd /= hz; mon /= hz; busy /= hz; steal /= hz
      oth = busy - tall - cl - osd - mon; if (oth < 0) oth = 0
      printf "%s,%s,%s,%s,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.2f",
        has_t && n ? sprintf("%.1f", tg * 1e6 / n) : "-", n ? sprintf("%.1f", cl * 1e6 / n) : "-",
        n ? sprintf("%.1f", osd * 1e6 / n) : "-", has_t ? sprintf("%.0f", tg / w * 100) : "-",
        cl / w * 100, osd / w * 100, mon / w * 100, oth / w * 100, steal / w * 100, (tall - tg) / w * 100, w }')
}

wl_label() {
  local op bytes depth pat unit
  IFS=: read -r op bytes depth pat <<< "$1"
  if (( bytes >= 1048576 )); then unit="$(( bytes / 1048576 )) MiB"; else unit="$(( bytes / 1024 )) KiB"; fi
  [[ $pat == rand ]] && pat=random || pat=sequential
  echo "$unit $pat ${op}s x$depth"
}

NC=${#CONFIGS[@]}
total=$(( ROUNDS * ${#WORKLOADS[@]} * NC ))
est=$(( total * (SECS * 1000 + 1500) / 1000 + ${#WORKLOADS[@]} + STRACE * NC * 8 ))
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
note "$total points of $SECS s (configurations: ${CONFIGS[*]}), about $(( est / 60 )) min $(( est % 60 )) s; load average $LOAD_START"

# Calibration: a short rbd bench per workload sizes the first real one.
for wl in "${WORKLOADS[@]}"; do
  IFS=: read -r op bytes depth pat <<< "$wl"
  cal=$(( 256 * 1048576 / bytes )); (( cal > 2000 )) && cal=2000
  timeout 120 rbd -c "$CONF" "${LIBRBD_SETTINGS[@]}" bench --io-type "$op" --io-size "$bytes" --io-threads "$depth" \
    --io-pattern "$pat" --io-total $(( cal * bytes )) "rbd/$IMG" > "$WORK/cal.out" 2>&1 \
    || die "rbd bench failed: $(tail -n 2 "$WORK/cal.out")"
  EST[$wl]=$(bench_rate "$WORK/cal.out")
done

RAW=$WORK/raw.csv
echo "round,op,bytes,depth,pattern,config,ok,ios,iops,mbps,p50_us,tgtd_us_per_io,client_us_per_io,osd_us_per_io,tgtd_pct,client_pct,osd_pct,mon_pct,other_pct,steal_pct,idle_tgtd_pct,wall_s" > "$RAW"
n=0 FAILS=0
for (( r = 1; r <= ROUNDS; r++ )); do
  for (( w = 0; w < ${#WORKLOADS[@]}; w++ )); do
    wl=${WORKLOADS[w]}
    IFS=: read -r op bytes depth pat <<< "$wl"
    for (( k = 0; k < NC; k++ )); do
      cfg=${CONFIGS[(k + r + w) % NC]}
      measure "$cfg" "$op" "$bytes" "$depth" "$pat" "$SECS"
      n=$(( n + 1 ))
      (( M_OK )) || FAILS=$(( FAILS + 1 ))
      mb=$(awk -v i="$M_IOPS" -v b="$bytes" 'BEGIN { if (i == "nan") print "nan"; else printf "%.1f", i * b / 1e6 }')
      echo "$r,$op,$bytes,$depth,$pat,$cfg,$M_OK,$M_IOS,$M_IOPS,$mb,$M_P50,$M_LINE" >> "$RAW"
      IFS=, read -r tu cu ou tp cp op_ _ oth stl _ _ <<< "$M_LINE"
      note "[$n/$total] round $r/$ROUNDS, $(wl_label "$wl"), $cfg: $M_IOPS IOPS, $mb MB/s, CPU/IO tgtd $tu us client $cu us OSD $ou us; CPU% tgtd $tp client $cp OSD $op_ other $oth steal $stl"
    done
  done
done

# ---------------------------------------------------------------- strace pass
# strace -c -f slows what it traces: only its counts are used, in a run of
# its own (4 KiB random reads at 32 in flight). tgtd is attached by PID (all
# threads); rbd bench runs under it.
declare -A SC_TOTAL=() SC_TOP=()
if (( STRACE )); then
  SCS=$(( SECS < 3 ? SECS : 3 ))
  for cfg in "${CONFIGS[@]}"; do
    sc=$WORK/strace-$cfg.txt
    if [[ $cfg == librbd ]]; then
      ops=$(awk -v e="${EST[read:4096:32:rand]:-1000}" -v s="$SCS" 'BEGIN { n = int(e * s / 3); print n < 256 ? 256 : n }')
      timeout 120 strace -c -f -o "$sc" rbd -c "$CONF" "${LIBRBD_SETTINGS[@]}" bench --io-type read --io-size 4096 \
        --io-threads 32 --io-pattern rand --io-total $(( ops * 4096 )) "rbd/$IMG" > "$WORK/client.out" 2>&1 \
        || { note "strace of rbd bench failed"; continue; }
      ios=$ops
    else
      t=${TGTD_OF[$cfg]}
      strace -c -f -p "${TGTD_PID[$t]}" -o "$sc" 2> "$WORK/strace.err" &
      STRACE_PID=$!
      strace_attached "${TGTD_PID[$t]}" || die "strace did not attach to every thread of the $t tgtd ($(cat "$WORK/strace.err"))"
      rc=0; run_client "$cfg" read 4096 32 rand "$SCS" "$WORK/client.out" || rc=$?
      kill -INT "$STRACE_PID" 2>/dev/null || true
      wait "$STRACE_PID" 2>/dev/null || true
      STRACE_PID=""
      (( rc == 0 )) || { note "$cfg: client under strace failed"; continue; }
      ios=$(awk '/ ios=/ { for (i = 1; i <= NF; i++) if ($i ~ /^ios=/) print substr($i, 5) }' "$WORK/client.out")
    fi
    calls=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { c += $4 } END { print c + 0 }' "$sc" 2>/dev/null || echo 0)
    if (( calls == 0 || ${ios:-0} == 0 )); then note "strace pass on $cfg gave no usable summary"; continue; fi
    SC_TOTAL[$cfg]=$(awk -v c="$calls" -v n="$ios" 'BEGIN { printf "%.1f", c / n }')
    SC_TOP[$cfg]=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { print $4, $NF }' "$sc" \
      | sort -k1,1nr | head -n 6 | awk -v n="$ios" '{ printf "%s%s %.2f", (NR > 1 ? ", " : ""), $2, $1 / n }')
    note "strace, $cfg: ${SC_TOTAL[$cfg]} system calls per 4 KiB random read at 32 in flight ($ios I/Os)"
  done
fi

# The rbio engine's counters over the whole run: removing its LU logs them.
tgtadm -C "${CTL[rbio]}" --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1 >/dev/null 2>&1 || true
RBIO_COUNTERS=$(grep -o 'rbio: tid:1 lun:1: removed; .*' "${STATE[rbio]}/tgtd.log" | tail -1 | sed 's/.*removed; //')
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- tables
TABLE=$WORK/table.md
awk -F, -v cfgs="${CONFIGS[*]}" -v wls="${WORKLOADS[*]}" -v rounds="$ROUNDS" '
  function sorted(s, a,   n, i, j, x) { n = split(s, a, " "); for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x } return n }
  function median(s,   a, n) { n = sorted(s, a); if (!n) return "-"; return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function fmt(v, p) { return v == "-" ? "-" : sprintf("%.*f", p, v) }
  function spread(s,   a, n) { n = sorted(s, a); if (!n) return "-"; return n > 1 ? sprintf("%.2f [%.2f-%.2f]", median(s), a[1], a[n]) : sprintf("%.2f", a[1]) }
  function add(k, v) { if (v != "-" && v != "nan" && v != "") val[k] = val[k] " " v }
  NR > 1 && $7 == 1 {
    w = $2 ":" $3 ":" $4 ":" $5; k = w SUBSEP $6
    add(k SUBSEP "iops", $9); add(k SUBSEP "mbps", $10); add(k SUBSEP "p50", $11)
    add(k SUBSEP "tus", $12); add(k SUBSEP "cus", $13); add(k SUBSEP "ous", $14)
    if ($13 != "-" && $14 != "-") add(k SUBSEP "all", ($12 == "-" ? 0 : $12) + $13 + $14)
    add(k SUBSEP "tp", $15); add(k SUBSEP "cp", $16); add(k SUBSEP "op", $17); add(k SUBSEP "xp", $19); add(k SUBSEP "sp", $20)
    iops[$1, w, $6] = $9
  }
  END {
    nc = split(cfgs, C, " "); nw = split(wls, W, " ")
    for (i = 1; i <= nw; i++) for (r = 1; r <= rounds; r++) {
      w = W[i]; a = iops[r, w, "rbio"]
      for (j = 1; j <= nc; j++) { c = C[j]; b = iops[r, w, c]; if (c != "rbio" && a != "" && b > 0) ratio[w, c] = ratio[w, c] " " a / b }
    }
    printf "| workload | config | IOPS | MB/s | rbio/this | p50 µs | CPU µs/IO tgtd | client | OSD | all | CPU %% tgtd/client/OSD/oth/stl |\n"
    printf "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n"
    for (i = 1; i <= nw; i++) for (j = 1; j <= nc; j++) {
      w = W[i]; c = C[j]; k = w SUBSEP c
      split(w, f, ":"); unit = f[2] >= 1048576 ? f[2] / 1048576 " MiB" : f[2] / 1024 " KiB"
      label = unit " " (f[4] == "rand" ? "rand" : "seq") " " f[1] " x" f[3]
      m = median(val[k, "iops"])
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s/%s/%s/%s/%s |\n", j == 1 ? label : "", c,
        m == "-" ? "FAILED" : fmt(m, 0), fmt(median(val[k, "mbps"]), 1), c == "rbio" ? "" : spread(ratio[w, c]),
        fmt(median(val[k, "p50"]), 0), fmt(median(val[k, "tus"]), 1), fmt(median(val[k, "cus"]), 1), fmt(median(val[k, "ous"]), 1),
        fmt(median(val[k, "all"]), 0),
        fmt(median(val[k, "tp"]), 0), fmt(median(val[k, "cp"]), 0), fmt(median(val[k, "op"]), 0), fmt(median(val[k, "xp"]), 0), fmt(median(val[k, "sp"]), 0)
    }
    # At a glance: IOPS of each, the ratios of rbio, what an I/O costs the machine.
    printf "\nAt a glance (IOPS medians; rbio/x = median of per-round ratios [range]; CPU µs/IO of tgtd+client+OSD):\n\n"
    printf "| workload |"; for (j = 1; j <= nc; j++) printf " %s |", C[j]
    printf " rbio/bs_rbd | rbio/librbd | CPU/IO rbio | bs_rbd | librbd |\n|---|"
    for (j = 1; j <= nc + 5; j++) printf "--:|"
    printf "\n"
    for (i = 1; i <= nw; i++) {
      w = W[i]; split(w, f, ":"); unit = f[2] >= 1048576 ? f[2] / 1048576 " MiB" : f[2] / 1024 " KiB"
      printf "| %s %s %s x%s |", unit, f[4] == "rand" ? "rand" : "seq", f[1], f[3]
      for (j = 1; j <= nc; j++) printf " %s |", fmt(median(val[w, C[j], "iops"]), 0)
      printf " %s | %s | %s | %s | %s |\n", spread(ratio[w, "bs_rbd"]), spread(ratio[w, "librbd"]),
        fmt(median(val[w, "rbio", "all"]), 0), fmt(median(val[w, "bs_rbd", "all"]), 0), fmt(median(val[w, "librbd", "all"]), 0)
    }
    # The goals of issue 15, on the median of the per-round ratios.
    printf "\nGoals (median of per-round ratios):\n\n"
    ng = split("read:4096:32:rand librbd 0.9|write:4096:32:rand librbd 0.9|read:4096:32:rand bs_rbd 1.3|write:4096:32:rand bs_rbd 1.3|read:4096:1:rand bs_rbd 1.2|write:4096:1:rand bs_rbd 1.2", G, "|")
    for (g = 1; g <= ng; g++) {
      split(G[g], f, " "); split(f[1], q, ":")
      m = median(ratio[f[1], f[2]])
      printf "- 4 KiB random %ss x%s: rbio/%s %s, goal >= %s: %s\n", q[1], q[3], f[2], m == "-" ? "-" : sprintf("%.2f", m), f[3],
        m == "-" ? "NOT MEASURED" : (m >= f[3] ? "MET" : "MISSED")
    }
  }' "$RAW" > "$TABLE"

{
  echo
  agg="median of $ROUNDS rounds"; (( ROUNDS > 1 )) || agg="1 round"
  echo "## Ceph RBD: rbio vs stock bs_rbd vs librbd alone ($agg of $SECS s; $(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "- tgt $(dpkg-query -W -f '${Version}' tgt 2>/dev/null || echo '?'), tgt-rbd $(dpkg-query -W -f '${Version}' tgt-rbd 2>/dev/null || echo '?'), librbd $(dpkg-query -W -f '${Version}' librbd1 2>/dev/null || echo '?'); one mon + one memstore OSD on loopback; image ${SIZE_MB} MiB (layering only), prefilled$( (( WARMUP_WRITES )) && echo ", then warmed up with $WARMUP_WRITES random 4 KiB writes (PG logs at their cap)" || echo ", not warmed up (--no-warmup)")."
  echo "- nproc $(nproc); load average at start $LOAD_START, at end $LOAD_END."
  echo "- Client: rbio bench (one session) for the tgtds, rbd bench ${LIBRBD_SETTINGS[*]} for librbd; librbd's cache off for bs_rbd too. rbio/this = rbio's IOPS over that configuration's, per round."
  echo "- CPU µs/IO: tgtd (all threads, librbd's included), the client (rbio bench; rbd bench, librbd included, for librbd) and the OSD; all = their sum, what one I/O costs the machine."
  echo "- CPU % of one core (2 cores = 200%); oth = the rest of the machine (other jobs, and softirq time charged to no process), stl = stolen by the hypervisor."
  echo
  cat "$TABLE"
  if (( STRACE )); then
    echo
    echo "System calls per 4 KiB random read at 32 in flight (strace -c -f, one ${SCS:-3} s pass each; tgtd for the iSCSI configurations, the rbd bench process for librbd):"
    echo
    for cfg in "${CONFIGS[@]}"; do echo "- $cfg: ${SC_TOTAL[$cfg]:--} (${SC_TOP[$cfg]:-})"; done
  fi
  [[ -n $RBIO_COUNTERS ]] && { echo; echo "rbio engine counters over the run: $RBIO_COUNTERS"; }
  (( FAILS )) && echo "FAILED points: $FAILS (left out of the medians; see the progress lines)"
  ELAPSED=$(awk -v a="$T_START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }')
  echo
  echo "Command: bench/rbd-compare.sh${ORIG_ARGS[*]+$(printf ' %q' "${ORIG_ARGS[@]}")}; took $(( ELAPSED / 60 )) min $(( ELAPSED % 60 )) s."
} | tee "$WORK/results.md"
if [[ -n $CSV ]]; then cp "$RAW" "$CSV"; note "measurements in $CSV"; fi
(( FAILS == 0 )) || exit 1
