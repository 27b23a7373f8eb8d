#!/usr/bin/env bash
# bs-compare.sh: compare tgt backing stores side by side in ONE run.
#
# One stock tgtd (started through scripts/tgtd-sandbox.sh, so our module
# folder is bind-mounted on /usr/lib/tgt/backing-store without installing
# anything) serves one target per store over a loopback portal. Each
# workload is run against every store back to back, so machine noise (the
# host has 2 cores shared by client, target and whatever else is running)
# hits all stores alike. For each measurement we report IOPS, MiB/s, the
# ratio to rdwr, and tgtd's own CPU time per I/O; afterwards one short
# strace pass per store gives system calls per I/O.
#
#   bench/bs-compare.sh [--modules DIR] [--stores "rbio rdwr aio null"]
#       [--seconds S] [--size-mb N] [--quick] [--rounds R] [--out FILE]
#       [--control-port N] [--portal-port P] [--bsopts-rbio "..."]
#       [--workloads "read:4096:1 write:4096:1 ..."] [--lun-dir DIR]
#
# --lun-dir puts the LUN files in DIR instead of a tmpfs folder (a disk
# file system: rbio's store then goes through io_uring, not inline).
# --workloads takes OP:BYTES:DEPTH items (OP read or write; default: 4 KiB,
# 64 KiB and 1 MiB at 32 in flight and 4 KiB at 1, both directions).
# Goals in the table (rbio rows): 4 KiB at 1 in flight >= 1.5x rdwr and
# >= 0.9x null (issue 18: the store adds at most a tenth to a round trip
# that does no I/O); every 32-in-flight workload >= aio.
#
# Clients: reads use libiscsi's iscsi-perf (READ(16)), as the baselines in
# docs/ENVIRONMENT.md do. iscsi-perf 1.19 cannot write, Debian 12's fio has
# no libiscsi engine and the host kernel has no iSCSI initiator, so writes
# use bench/iscsi-rwperf.c, a small libiscsi client built with the project
# (build/bench/iscsi-rwperf). Both clients: sequential LBAs, fixed size, N requests in flight.
set -euo pipefail

ORIG_ARGS=("$@")
BENCH_NAME=bs-compare
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------- options
MODULES=${RBIO_BUILD_DIR:-$ROOT/build}/modules  # the build the other benches measure
STORES="rbio rdwr aio null"
SECONDS_PER=10
SIZE_MB=1024
SIZE_SET=0
QUICK=0
OUT=""
CPORT=5900
PPORT=13900
BSOPTS_RBIO=""
ROUNDS=1
WORKLOADS_OPT=""
LUN_DIR=""

while (( $# )); do
  case $1 in
    --modules) MODULES=$2; shift 2 ;;
    --stores) STORES=$2; shift 2 ;;
    --seconds) SECONDS_PER=$2; shift 2 ;;
    --size-mb) SIZE_MB=$2; SIZE_SET=1; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    --control-port) CPORT=$2; shift 2 ;;
    --portal-port) PPORT=$2; shift 2 ;;
    --bsopts-rbio) BSOPTS_RBIO=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --workloads) WORKLOADS_OPT=$2; shift 2 ;;
    --lun-dir) LUN_DIR=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'bs-compare: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done

if (( QUICK )); then
  # Smoke test: 2 s per measurement; a smaller LUN unless one was asked for,
  # because filling 1 GiB files costs seconds we do not have in --quick.
  SECONDS_PER=2
  (( SIZE_SET )) || SIZE_MB=256
fi
for v in SECONDS_PER SIZE_MB CPORT PPORT ROUNDS; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer (got '${!v}')"
done
# iscsi-perf takes whole seconds only.
read -r -a STORE_LIST <<< "$STORES"
(( ${#STORE_LIST[@]} )) || die "--stores is empty"
for s in "${STORE_LIST[@]}"; do
  [[ $s =~ ^[a-z0-9_]+$ ]] || die "bad store name '$s'"
done
# A strace pass needs only enough I/Os for stable per-I/O counts.
STRACE_SECONDS=$(( SECONDS_PER < 3 ? SECONDS_PER : 3 ))

has_store() { local s; for s in "${STORE_LIST[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }

# The module folder only matters for rbio (stock stores are built into
# tgtd); without it the sandbox runs stock tgtd with an empty module folder.
if has_store rbio; then
  [[ -f $MODULES/bs_rbio.so ]] || die "rbio requested but $MODULES/bs_rbio.so does not exist (build it, or pass --stores without rbio)"
fi

# ---------------------------------------------------------------- tools
T_START=$(date +%s)
command -v tgtadm >/dev/null || die "tgtadm not found (package tgt)"
need_pkg 'command -v iscsi-perf' libiscsi-bin
need_pkg 'test -f /usr/include/iscsi/iscsi.h' libiscsi-dev
need_pkg 'command -v strace' strace
BUILD=${RBIO_BUILD_DIR:-$ROOT/build}
RWPERF=$BUILD/bench/iscsi-rwperf
[[ -x $RWPERF ]] || die "$RWPERF is missing: build the project first (cmake -S . -B build && cmake --build build)"

# ---------------------------------------------------------------- scratch + cleanup
# LUN files live on tmpfs so the backing store, not a disk, is measured;
# sandbox state and the compiled client live in a scratch folder. Both go
# away at exit, whatever the exit path.
WORK=$(mktemp -d /tmp/bs-compare.XXXXXX)
if [[ -n $LUN_DIR ]]; then
  [[ -d $LUN_DIR ]] || die "--lun-dir $LUN_DIR is not a folder"
  SHM=$(mktemp -d "$LUN_DIR/bs-compare.XXXXXX")
else
  SHM=$(mktemp -d /dev/shm/bs-compare.XXXXXX)
fi
STATE=$WORK/tgtd
STARTED=0
STRACE_PID=""
NTARGETS=0

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $STRACE_PID ]]; then kill -INT "$STRACE_PID" 2>/dev/null || true; wait "$STRACE_PID" 2>/dev/null || true; fi
  if (( STARTED )); then
    if (( rc != 0 )) && [[ -f $STATE/tgtd.log ]]; then
      note "last lines of tgtd.log:"; tail -n 20 "$STATE/tgtd.log" >&2 || true
    fi
    # Delete our targets first: with targets left (and sessions seen),
    # tgtd ignores `--op delete --mode system` and the sandbox's stop then
    # waits its full 30 s before killing it.
    local t
    for (( t = 1; t <= NTARGETS; t++ )); do
      tgtadm -C "$CPORT" --lld iscsi --op delete --mode target --tid "$t" --force >/dev/null 2>&1 || true
    done
    "$SANDBOX" stop "$STATE" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK" "$SHM"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


# ---------------------------------------------------------------- tgtd
port_busy "$CPORT" && die "control port $CPORT is already in use"
port_busy "$PPORT" && die "portal port $PPORT is already in use"

sandbox_args=(--control-port "$CPORT" --portal "127.0.0.1:$PPORT")
[[ -d $MODULES ]] && sandbox_args+=(--modules "$MODULES")
STARTED=1
"$SANDBOX" start "$STATE" "${sandbox_args[@]}" >/dev/null
TGTD_PID=$(cat "$STATE/tgtd.pid")
# The sandbox records $! of `unshare`, which execs sh, which execs tgtd: the
# same PID ends up being tgtd. Verify instead of trusting it, since every
# CPU and strace number below hangs on it.
[[ $(cat "/proc/$TGTD_PID/comm" 2>/dev/null) == tgtd ]] \
  || die "pid $TGTD_PID from $STATE/tgtd.pid is not tgtd ($(cat "/proc/$TGTD_PID/comm" 2>/dev/null || echo gone))"

tgtadm_() { tgtadm -C "$CPORT" --lld iscsi "$@"; }

# Prefill source: 1 MiB of random bytes, repeated. Reads must hit real pages
# (a tmpfs hole read maps the shared zero page and is cheaper than a page
# cache read), and random data keeps anything zero-aware honest. Repeating a
# chunk with cat is ~3x faster here than /dev/urandom for the whole file.
head -c 1048576 /dev/urandom > "$WORK/chunk"
fill_file() {
  local file=$1 i
  for (( i = 0; i < SIZE_MB; i++ )); do cat "$WORK/chunk"; done > "$file"
}

# One target per store (LUN 1 each) rather than one target with a LUN per
# store: each client session then logs into exactly one store, the URL names
# the store, and per-target state in tgtd (nexus, command queue) is never
# shared between the stores being compared.
IQN_BASE=iqn.2026-01.local.bs-compare
INITIATOR=$IQN_BASE:client
declare -A URL BLOCKSIZE TID
tid=0
for s in "${STORE_LIST[@]}"; do
  tid=$(( tid + 1 ))
  tgtadm_ --op new --mode target --tid "$tid" -T "$IQN_BASE:$s"
  NTARGETS=$tid
  lun_args=(--bstype "$s")
  if [[ $s == null ]]; then
    # bs_null ignores the path and reports a fixed 1 TiB LUN; tgtadm still
    # wants a --backing-store, and /dev/null documents the intent.
    lun_args+=(--backing-store /dev/null)
  else
    fill_file "$SHM/$s.img"
    lun_args+=(--backing-store "$SHM/$s.img")
  fi
  [[ $s == rbio && -n $BSOPTS_RBIO ]] && lun_args+=(--bsopts "$BSOPTS_RBIO")
  tgtadm_ --op new --mode logicalunit --tid "$tid" --lun 1 "${lun_args[@]}" \
    || die "tgtd refused a LUN with bstype $s"
  tgtadm_ --op bind --mode target --tid "$tid" -I ALL
  URL[$s]=iscsi://127.0.0.1:$PPORT/$IQN_BASE:$s/1
  TID[$s]=$tid
  # iscsi-perf counts in blocks, so ask the LUN for its block size.
  bl=$(iscsi-readcapacity16 -i "$INITIATOR" "${URL[$s]}" | awk -F: '/LOGICAL BLOCK LENGTH/ {print $2+0}')
  [[ $bl =~ ^[0-9]+$ && $bl -gt 0 ]] || die "cannot read the block size of ${URL[$s]}"
  BLOCKSIZE[$s]=$bl
done
rm -f "$WORK/chunk"

# ---------------------------------------------------------------- measuring
CLK_TCK=$(getconf CLK_TCK)
# utime+stime of the whole process (all threads, live or exited), in ticks.
tgtd_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$TGTD_PID/stat"; }

# measure OP BYTES DEPTH STORE SECONDS: sets M_IOPS, M_IOS, M_CPU (tgtd CPU
# microseconds per I/O). It runs in the main shell, not in a subshell, so a
# signal's cleanup only runs once the client has finished and logged out
# (deleting a target under a live session keeps tgtd from exiting).
measure() {
  local op=$1 bytes=$2 depth=$3 s=$4 secs=$5 out iops ios t0 t1 cpu
  local limit=$(( secs + 60 ))   # a hung session must not hang the run
  t0=$(tgtd_ticks)
  if [[ $op == read ]]; then
    local blocks=$(( bytes / BLOCKSIZE[$s] ))
    out=$(timeout --foreground "$limit" iscsi-perf -i "$INITIATOR" -m "$depth" -b "$blocks" \
            -t "$secs" "${URL[$s]}" 2>&1 | tr '\r' '\n') \
      || die "iscsi-perf failed on $s: $(tail -n 3 <<< "$out")"
    # The last "iops average N (M MB/s)" is the summary over the whole run.
    iops=$(awk '/iops average/ { for (i = 1; i < NF; i++) if ($i == "average") v = $(i + 1) } END { print v }' <<< "$out")
    [[ $iops =~ ^[0-9]+$ ]] || die "cannot parse iscsi-perf output for $s: $(tail -n 3 <<< "$out")"
    # iscsi-perf does not print its I/O count; its average is over exactly
    # `secs` seconds (plus at most `depth` drained requests: negligible).
    ios=$(( iops * secs ))
  else
    out=$(timeout --foreground "$limit" "$RWPERF" -w -i "$INITIATOR" -m "$depth" -s "$bytes" \
            -t "$secs" "${URL[$s]}" 2>&1) \
      || die "iscsi-rwperf failed on $s: $(tail -n 3 <<< "$out")"
    read -r ios iops < <(awk '/^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } print r["ios"], r["iops"] }' <<< "$out")
    [[ ${ios:-} =~ ^[0-9]+$ && ${iops:-} =~ ^[0-9]+$ ]] || die "cannot parse iscsi-rwperf output for $s: $out"
  fi
  t1=$(tgtd_ticks)
  if (( ios > 0 )); then
    cpu=$(awk -v d=$(( t1 - t0 )) -v hz="$CLK_TCK" -v n="$ios" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')
  else
    cpu=nan
  fi
  M_IOPS=$iops M_IOS=$ios M_CPU=$cpu
}

# Workloads: OP:BYTES:DEPTH. Reads first, then writes, so every store's
# reads see the same (prefilled) content.
WORKLOADS=(read:4096:1 read:4096:32 read:65536:32 read:1048576:32
           write:4096:1 write:4096:32 write:65536:32 write:1048576:32)
if [[ -n $WORKLOADS_OPT ]]; then
  read -r -a WORKLOADS <<< "$WORKLOADS_OPT"
  for wl in "${WORKLOADS[@]}"; do
    [[ $wl =~ ^(read|write):[0-9]+:[0-9]+$ ]] || die "--workloads: '$wl' is not OP:BYTES:DEPTH (OP read or write)"
    IFS=: read -r _ bytes depth <<< "$wl"
    (( bytes >= 512 && bytes % 512 == 0 && depth >= 1 )) || die "--workloads: '$wl' needs BYTES a multiple of 512 and DEPTH >= 1"
  done
fi
wl_label() {
  local op bytes depth unit
  IFS=: read -r op bytes depth <<< "$1"
  if (( bytes >= 1048576 )); then unit="$(( bytes / 1048576 )) MiB"; else unit="$(( bytes / 1024 )) KiB"; fi
  echo "$unit $op, $depth in flight"
}

NPROC=$(nproc)
HEADER="Backing stores compared: ${STORE_LIST[*]} | ${SECONDS_PER} s per measurement, ${ROUNDS} round(s) | LUN files ${SIZE_MB} MiB on $(stat -f -c %T "$SHM"), prefilled with data | one stock tgtd $(dpkg-query -W -f '${Version}' tgt 2>/dev/null || echo '?'), pid $TGTD_PID | nproc $NPROC, load at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$HEADER"
echo "WARNING: client (iscsi-perf / iscsi-rwperf) and target (tgtd) share the same $NPROC core(s) over loopback; absolute numbers are CPU-bound and noisy, compare ratios within this run."
[[ -n $BSOPTS_RBIO ]] && echo "rbio --bsopts: $BSOPTS_RBIO"

NS=${#STORE_LIST[@]}
total=$(( ROUNDS * ${#WORKLOADS[@]} * NS ))
est=$(( total * (SECONDS_PER + 1) + NS * (STRACE_SECONDS + 3) ))
note "$total measurements + $NS strace passes, about $(( est / 60 )) min $(( est % 60 )) s"

declare -A R_IOPS R_CPU   # key "wl|store" -> space-separated values over rounds
n=0
for (( r = 0; r < ROUNDS; r++ )); do
  for (( w = 0; w < ${#WORKLOADS[@]}; w++ )); do
    wl=${WORKLOADS[w]}
    IFS=: read -r op bytes depth <<< "$wl"
    # The store order changes per workload and round so no store is always
    # first (first after a switch of workload) or last, and each of two
    # stores goes before the other as often as after (the ratios are taken
    # per round): rows of a balanced Latin square (offsets 0, +1, -1, +2,
    # ... from a start that moves by one; a plain rotation of four put
    # null before rbio in three rows of four), every other cycle reversed.
    for (( k = 0; k < NS; k++ )); do
      o=$(( r + w )) d=$(( k % 2 ? (k + 1) / 2 : -(k / 2) ))
      (( (o / NS) % 2 )) && d=$(( -d ))
      s=${STORE_LIST[((o + d) % NS + NS) % NS]}
      measure "$op" "$bytes" "$depth" "$s" "$SECONDS_PER"
      iops=$M_IOPS cpu=$M_CPU
      R_IOPS[$wl|$s]+="$iops "
      R_CPU[$wl|$s]+="$cpu "
      n=$(( n + 1 ))
      note "[$n/$total] $(wl_label "$wl") on $s: $iops IOPS, $(awk -v i="$iops" -v b="$bytes" 'BEGIN { printf "%.1f", i * b / 1048576 }') MiB/s, tgtd ${cpu} us CPU/IO"
    done
  done
done

# ---------------------------------------------------------------- syscalls
# strace -f -p attaches to every thread of tgtd (rdwr's worker pool
# included). It slows tgtd a lot, so this is a separate pass after the timed
# runs and only counts are used from it, never times.
declare -A SC_TOTAL SC_TOP
for s in "${STORE_LIST[@]}"; do
  sc=$WORK/strace-$s.txt
  strace -c -f -p "$TGTD_PID" -o "$sc" 2>"$WORK/strace-$s.err" &
  STRACE_PID=$!
  strace_attached "$TGTD_PID" || die "strace did not attach to every thread of tgtd ($(cat "$WORK/strace-$s.err"))"
  measure read 4096 32 "$s" "$STRACE_SECONDS"
  ios=$M_IOS
  kill -INT "$STRACE_PID" 2>/dev/null || true
  wait "$STRACE_PID" 2>/dev/null || true
  STRACE_PID=""
  # Rows are "% time, seconds, usecs/call, calls, [errors], name"; the
  # total line's layout varies, so sum the rows instead of parsing it.
  calls=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { c += $4 } END { print c + 0 }' "$sc")
  if (( calls == 0 || ios == 0 )); then
    note "strace pass on $s gave no usable summary (see $(cat "$WORK/strace-$s.err" 2>/dev/null))"
    SC_TOTAL[$s]=nan; SC_TOP[$s]=""; continue
  fi
  SC_TOTAL[$s]=$(awk -v c="$calls" -v n="$ios" 'BEGIN { printf "%.1f", c / n }')
  SC_TOP[$s]=$(awk '$1 ~ /^[0-9.]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ { print $4, $NF }' "$sc" \
    | sort -k1,1nr | head -n 5 \
    | awk -v n="$ios" '{ printf "%s%s %.2f", (NR > 1 ? ", " : ""), $2, $1 / n }')
  note "strace on $s: ${SC_TOTAL[$s]} syscalls per 4 KiB read at 32 in flight (${ios} I/Os)"
done

# rbio's own counters over the whole run (commands, I/Os after coalescing,
# io_uring_enter calls, inline vs eventfd completions): removing its LU makes
# the module log them.
RBIO_COUNTERS=""
if has_store rbio; then
  tgtadm_ --op delete --mode logicalunit --tid "${TID[rbio]}" --lun 1 >/dev/null 2>&1 || true
  RBIO_COUNTERS=$(grep -o 'rbio: tid:[0-9]* lun:1: removed; .*' "$STATE/tgtd.log" | tail -1 | sed 's/.*removed; //')
fi

# ---------------------------------------------------------------- table
median() { tr ' ' '\n' | awk 'NF && $1 != "nan"' | sort -g | awk '{ v[NR] = $1 } END { if (!NR) { print "nan"; exit } if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" -v p="${3:-2}" 'BEGIN { if (a == "nan" || b == "nan" || b + 0 == 0) print "-"; else printf "%.*f", p, a / b }'; }
# round_ratios A B: the per-round IOPS ratios of store A to store B in one
# workload, in round order. The stores of one round run back to back, so a
# drift of the machine between rounds cancels in each ratio; a ratio of the
# two medians would let it in.
round_ratios() {
  paste -d' ' <(tr ' ' '\n' <<< "$1" | awk NF) <(tr ' ' '\n' <<< "$2" | awk NF) \
    | awk '$1 != "nan" && $2 != "nan" && $2 + 0 > 0 { printf "%s ", $1 / $2 }'
}
# goal_of A B F: "MET >=Fx B (median [lowest-highest])" over the rounds' ratios
# (MET if their median is at least F, compared unrounded).
goal_of() {
  local rs; rs=$(round_ratios "${R_IOPS[$wl|$1]}" "${R_IOPS[$wl|$2]}")
  awk -v f="$3" -v b="$2" -v m="$(median <<< "$rs")" -v r="$rs" 'BEGIN {
    n = split(r, v, " "); lo = hi = v[1]
    for (i = 2; i <= n; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] }
    if (m == "nan" || !n) { printf "MISSED >=%sx %s (no rounds)", f, b; exit }
    printf "%s >=%sx %s (%.3fx [%.2f-%.2f])", (m >= f ? "MET" : "MISSED"), f, b, m, lo, hi }'
}

TABLE=$WORK/table.md
{
  agg=" (median of $ROUNDS rounds)"; (( ROUNDS > 1 )) || agg=""
  echo "IOPS and tgtd CPU per I/O$agg; MiB/s = IOPS x request size / 2^20; 'vs rdwr' is the IOPS ratio to rdwr in the same workload."
  echo "Goals (rbio rows): 4 KiB at 1 in flight: rbio >= 1.5x rdwr and >= 0.9x null; every 32-in-flight workload: rbio >= aio;"
  echo "each judged on the median of the per-round IOPS ratios ([lowest-highest round])."
  echo
  printf '| %-25s | %-6s | %8s | %9s | %7s | %12s | %-28s |\n' workload store IOPS MiB/s "vs rdwr" "tgtd us/IO" goal
  echo "|---------------------------|--------|---------:|----------:|--------:|-------------:|------------------------------|"
  for wl in "${WORKLOADS[@]}"; do
    IFS=: read -r op bytes depth <<< "$wl"
    declare -A MED=()
    for s in "${STORE_LIST[@]}"; do MED[$s]=$(median <<< "${R_IOPS[$wl|$s]}"); done
    for s in "${STORE_LIST[@]}"; do
      iops=${MED[$s]}
      mibs=$(awk -v i="$iops" -v b="$bytes" 'BEGIN { printf "%.1f", i * b / 1048576 }')
      vs=-; has_store rdwr && vs=$(ratio "$iops" "${MED[rdwr]}")
      cpu=$(median <<< "${R_CPU[$wl|$s]}"); [[ $cpu == nan ]] || cpu=$(printf '%.1f' "$cpu")
      goal=""
      if [[ $s == rbio ]]; then
        if (( bytes == 4096 && depth == 1 )); then
          has_store rdwr && goal=$(goal_of rbio rdwr 1.5)
          has_store null && goal+="${goal:+; }$(goal_of rbio null 0.9)"
        elif (( depth == 32 )) && has_store aio; then
          goal=$(goal_of rbio aio 1)
        fi
      fi
      printf '| %-25s | %-6s | %8.0f | %9s | %7s | %12s | %-28s |\n' \
        "$(wl_label "$wl")" "$s" "$iops" "$mibs" "$vs" "$cpu" "$goal"
    done
    unset MED
  done
  echo
  echo "System calls on the target per 4 KiB read at 32 in flight (separate strace -c -f pass of ${STRACE_SECONDS} s per store; top 5 by count):"
  echo
  printf '| %-6s | %12s | %-70s |\n' store "syscalls/IO" "top system calls per I/O"
  echo "|--------|-------------:|------------------------------------------------------------------------|"
  for s in "${STORE_LIST[@]}"; do
    printf '| %-6s | %12s | %-70s |\n' "$s" "${SC_TOTAL[$s]}" "${SC_TOP[$s]}"
  done
  if [[ -n $RBIO_COUNTERS ]]; then
    echo
    echo "rbio engine counters over the whole run: $RBIO_COUNTERS"
  fi
} > "$TABLE"

echo
cat "$TABLE"
ELAPSED=$(( $(date +%s) - T_START ))
echo
echo "Run took $(( ELAPSED / 60 )) min $(( ELAPSED % 60 )) s; load at end $(cut -d' ' -f1-3 /proc/loadavg)."

if [[ -n $OUT ]]; then
  {
    echo "# Backing-store comparison ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "$HEADER" | sed 's/ | /\n- /g; s/^/- /'
    echo "- WARNING: client and target share the same $NPROC core(s) over loopback; compare ratios within this run."
    echo "- Reads: iscsi-perf (libiscsi $(dpkg-query -W -f '${Version}' libiscsi-bin 2>/dev/null || echo '?')); writes: bench/iscsi-rwperf.c (libiscsi WRITE(16)); sequential LBAs."
    [[ -n $BSOPTS_RBIO ]] && echo "- rbio --bsopts: \`$BSOPTS_RBIO\`"
    echo "- Command: \`bench/bs-compare.sh${ORIG_ARGS[*]+$(printf ' %q' "${ORIG_ARGS[@]}")}\`; run took $(( ELAPSED / 60 )) min $(( ELAPSED % 60 )) s"
    echo
    cat "$TABLE"
  } > "$OUT"
  note "table written to $OUT"
fi
