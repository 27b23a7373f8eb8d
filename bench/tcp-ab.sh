#!/usr/bin/env bash
# tcp-ab.sh: tgtd's CPU per 4 KiB I/O with rbio's TCP transport under two
# settings files, A and B, and with tgt's stock transport, side by side in
# one run: the timed half of an A/B for a transport change that a setting
# switches (the counted half is bench/tcp-instructions.sh --config).
#
#   bench/tcp-ab.sh --a FILE --b FILE [--client perf|rbio] [--rounds R]
#       [--seconds S] [--depth N] [--bstype LIST] [--b-build DIR] [--no-stock]
#       [--control-port N] [--portal-port P]
#
#   --a, --b FILE    the rbio transport's settings of tgtd A and tgtd B
#                    (docs/tcp-transport.md), e.g. /dev/null (the defaults)
#                    against a file with `write_in_place = off`
#   --client         perf: build/bench/iscsi-rwperf (libiscsi, one PDU per
#                    call; default); rbio: `rbio bench`, rbio's initiator,
#                    which batches its PDUs
#   --rounds R       interleaved rounds, medians reported (default 3)
#   --seconds S      seconds per measurement (default 4)
#   --depth N        commands in flight (default 32; 1-128)
#   --bstype LIST    backing stores (default null,rbio: rbio on a tmpfs file)
#   --b-build DIR    tgtd B loads DIR/modules/bs_rbio.so instead of this
#                    tree's build: an A/B of two builds of the code (e.g. a
#                    change that no setting switches; --a and --b then both
#                    /dev/null)
#   --no-stock       leave out tgt's stock transport (A and B only)
#   --control-port N tgtds (stock, A, B) on N, N+1, N+2 (default 5815);
#   --portal-port P  portals P, P+1, P+2 on 127.0.0.1 (default 13815);
#                    with --no-stock A and B take N and N+1, P and P+1
#
# Points: 4 KiB reads and writes at --depth in flight per backing store. Each
# round runs every point against stock, A and B back to back (order
# rotated), so other load on the shared machine hits them alike. Per point:
# IOPS and tgtd CPU µs per I/O (utime + stime of tgtd from /proc/PID/stat
# over the run, login included), medians, and B/A of the CPU per I/O: of
# the medians, its lowest and highest over the rounds, and the rounds in
# which A cost less (a change is seen only where it beats the rounds' own
# scatter); for A and B also the transport's receive, send and
# receive-moderation calls per I/O (the counts tgtd logs when the client's
# connection ends; they exclude epoll_wait and io_uring). The load average
# is printed with the results: timed figures depend on it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
BENCH_NAME=tcp-ab
source "$HERE/lib.sh"

A="" B="" CLIENT=perf ROUNDS=3 SECS=4 DEPTH=32 BSTYPES=null,rbio CTL=5815 PORT=13815 B_BUILD="" STOCK=1
while (( $# )); do
  case $1 in
    --a) A=${2:-}; shift 2 ;;
    --b) B=${2:-}; shift 2 ;;
    --client) CLIENT=${2:-}; shift 2 ;;
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) SECS=${2:-}; shift 2 ;;
    --depth) DEPTH=${2:-}; shift 2 ;;
    --bstype) BSTYPES=${2:-}; shift 2 ;;
    --b-build) B_BUILD=${2:-}; [[ -f $B_BUILD/modules/bs_rbio.so ]] || die "--b-build: no $B_BUILD/modules/bs_rbio.so"; shift 2 ;;
    --no-stock) STOCK=0; shift ;;
    --control-port) CTL=${2:-}; shift 2 ;;
    --portal-port) PORT=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'tcp-ab: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
[[ -r $A && -r $B ]] || die "--a and --b take readable settings files"
A=$(realpath "$A") B=$(realpath "$B")
[[ $CLIENT == perf || $CLIENT == rbio ]] || die "--client: perf or rbio"
for n in "$ROUNDS" "$SECS" "$CTL" "$PORT"; do
  [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die "--rounds, --seconds and the ports take positive integers"
done
[[ $DEPTH =~ ^[0-9]+$ && $DEPTH -ge 1 && $DEPTH -le 128 ]] || die "--depth: a number from 1 to 128"
IFS=, read -ra STORES <<< "$BSTYPES"
for s in "${STORES[@]}"; do [[ $s == null || $s == rbio ]] || die "--bstype: '$s' is not null or rbio"; done
[[ $(id -u) -eq 0 ]] || die "run as root (tgtd runs in a private mount namespace)"
BUILD=${RBIO_BUILD_DIR:-$ROOT/build}
MODULES="$BUILD/modules" PERF="$BUILD/bench/iscsi-rwperf" RBIO="$BUILD/initiator/rbio"
[[ -f $MODULES/bs_rbio.so && -x $PERF ]] || die "no build in $BUILD"
[[ $CLIENT == perf || -x $RBIO ]] || die "no $RBIO: cmake --build build --target rbio"
SANDBOX="$ROOT/scripts/tgtd-sandbox.sh"
IQN=iqn.2026-11.io.rbio:tcp-ab INITIATOR=iqn.2026-11.io.rbio:tcp-ab-client
CONFIGS=(A B)
(( STOCK )) && CONFIGS=(stock A B)
declare -A CPORT PPORT PID STATE
i=0
for c in "${CONFIGS[@]}"; do
  CPORT[$c]=$(( CTL + i )) PPORT[$c]=$(( PORT + i ))
  port_busy "${PPORT[$c]}" && die "port ${PPORT[$c]} is in use"
  i=$(( i + 1 ))
done

WORK=$(mktemp -d /dev/shm/rbio-tcp-ab-XXXXXX)
cleanup() {
  local c
  for c in "${CONFIGS[@]}"; do
    [[ -n ${STATE[$c]:-} ]] && "$SANDBOX" stop "${STATE[$c]}" > /dev/null 2>&1
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# B's module from another build: a copy (inside the sandbox a link into
# /usr/lib/tgt/backing-store would point back at the folder itself).
MODULES_B=$MODULES
if [[ -n $B_BUILD ]]; then
  MODULES_B="$WORK/mods-b"
  mkdir -p "$MODULES_B"
  cp "$B_BUILD/modules/bs_rbio.so" "$MODULES_B/"
fi

for c in "${CONFIGS[@]}"; do
  case $c in
    stock) envset=(RBIO_TRANSPORT=off RBIO_CONFIG=/dev/null) ;;
    A) envset=(RBIO_TRANSPORT=on RBIO_CONFIG="$A") ;;
    B) envset=(RBIO_TRANSPORT=on RBIO_CONFIG="$B") ;;
  esac
  STATE[$c]="$WORK/tgtd-$c"
  mods=$MODULES
  [[ $c == B ]] && mods=$MODULES_B
  env "${envset[@]}" RBIO_STATS_FILE=none "$SANDBOX" start "${STATE[$c]}" --modules "$mods" \
    --control-port "${CPORT[$c]}" --portal "127.0.0.1:${PPORT[$c]}" > /dev/null || die "$c: tgtd did not start"
  PID[$c]=$(cat "${STATE[$c]}/tgtd.pid")
  tgtadm -C "${CPORT[$c]}" --lld iscsi --op new --mode target --tid 1 -T "$IQN" &&
    tgtadm -C "${CPORT[$c]}" --lld iscsi --op bind --mode target --tid 1 -I ALL || die "$c: cannot set up the target"
  lun=1
  for s in "${STORES[@]}"; do
    truncate -s 256M "$WORK/$c-$s.img"
    # Written once, so reads of the rbio store copy real pages, not holes.
    [[ $s == rbio ]] && dd if=/dev/zero of="$WORK/$c-$s.img" bs=1M count=256 conv=notrunc status=none
    tgtadm -C "${CPORT[$c]}" --lld iscsi --op new --mode logicalunit --tid 1 --lun $lun \
      -b "$WORK/$c-$s.img" --bstype "$s" || die "$c: cannot add a bs $s LU"
    lun=$(( lun + 1 ))
  done
done

# measure CONFIG LUN RW: M_IOS, M_TICKS (tgtd's CPU ticks over the run)
measure() {
  local c=$1 lun=$2 rw=$3 out="$WORK/out" t0
  proc_ticks "${PID[$c]}" || die "the $c tgtd is gone"
  t0=$TICKS
  if [[ $CLIENT == perf ]]; then
    local args=(-m "$DEPTH" -s 4096 -i "$INITIATOR" -t "$SECS")
    [[ $rw == write ]] && args+=(-w)
    "$PERF" "${args[@]}" "iscsi://127.0.0.1:${PPORT[$c]}/$IQN/$lun" > "$out" 2>&1 || { tail -3 "$out" >&2; die "$c: iscsi-rwperf failed"; }
    M_IOS=$(sed -n 's/^RESULT .* ios=\([0-9]*\) .*/\1/p' "$out")
  else
    "$RBIO" bench -T "$IQN" -p "127.0.0.1:${PPORT[$c]}" --lun "$lun" --bs 4096 --iodepth "$DEPTH" \
      --rw "rand$rw" --time "$SECS" --initiator-name "$INITIATOR" > "$out" 2>&1 || { tail -3 "$out" >&2; die "$c: rbio bench failed"; }
    M_IOS=$(sed -n 's/.*ios=\([0-9]*\) .*/\1/p' "$out" | tail -1)
  fi
  [[ $M_IOS =~ ^[0-9]+$ && $M_IOS -gt 0 ]] || { cat "$out" >&2; die "$c: cannot parse the client's I/O count"; }
  proc_ticks "${PID[$c]}" || die "the $c tgtd is gone"
  M_TICKS=$(( TICKS - t0 ))
  M_SYS=-
  [[ $c == stock ]] && return 0
  # the connection's own counts, logged once it has ended
  local line="" try
  for (( try = 0; try < 50; try++ )); do
    line=$(grep 'connection ended;' "${STATE[$c]}/tgtd.log" | tail -1)
    [[ $line != "${LAST_END[$c]:-}" && -n $line ]] && break
    sleep 0.1
  done
  [[ $line != "${LAST_END[$c]:-}" && -n $line ]] || die "$c: tgtd logged no end of the client's connection"
  LAST_END[$c]=$line
  M_SYS=$(awk -v n="$M_IOS" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
    END { printf "%.2f", (v["recv_calls"] + v["send_calls"] + v["rx_wait_calls"]) / n }' <<< "$line")
}
declare -A LAST_END

HZ=$(getconf CLK_TCK)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$WORK/raw"
for (( r = 0; r < ROUNDS; r++ )); do
  lun=1
  for s in "${STORES[@]}"; do
    for rw in read write; do
      k=$(( r % ${#CONFIGS[@]} ))
      order=("${CONFIGS[@]:k}" "${CONFIGS[@]:0:k}")
      for c in "${order[@]}"; do
        measure "$c" "$lun" "$rw"
        us=$(awk -v t="$M_TICKS" -v hz="$HZ" -v n="$M_IOS" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
        printf '%s %s %s %s %s %s %s\n' "$s" "$rw" "$c" "$r" "$(( M_IOS / SECS ))" "$us" "$M_SYS" >> "$WORK/raw"
        note "round $r: bs $s, 4 KiB $rw, $c: $(( M_IOS / SECS )) IOPS, tgtd $us µs/I/O, $M_SYS recv+send+moderation calls/I/O"
      done
    done
    lun=$(( lun + 1 ))
  done
done

echo "tgtd CPU per 4 KiB I/O at $DEPTH in flight; client: $CLIENT; ${SECS} s x ${ROUNDS} rounds, medians;"
echo "A = $A ($(grep -v '^\s*#' "$A" | tr '\n' ' ')), B = $B ($(grep -v '^\s*#' "$B" | tr '\n' ' '));"
if [[ -n $B_BUILD ]]; then echo "B's bs_rbio.so from $(realpath "$B_BUILD"), A's from $BUILD;"; fi
echo "$(nproc) cores, shared; load average at start $LOAD0, at end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| store | I/O | stock IOPS | stock µs/IO | A IOPS | A µs/IO | A calls/IO | B IOPS | B µs/IO | B calls/IO | B/A µs | B/A per round | A cheaper |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
awk '
  function median(k,   n, i, j, t, a) {
    n = split(vals[k], a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { key = $1 " " $2; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    vals[key "/" $3 "/iops"] = vals[key "/" $3 "/iops"] " " $5
    vals[key "/" $3 "/us"] = vals[key "/" $3 "/us"] " " $6
    vals[key "/" $3 "/sys"] = vals[key "/" $3 "/sys"] " " $7
    round_us[key "/" $3 "/" $4] = $6 }
  END {
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, " ")
      ua = median(k "/A/us"); ub = median(k "/B/us")
      si = (k "/stock/iops") in vals ? sprintf("%d", median(k "/stock/iops")) : "-"
      su = (k "/stock/us") in vals ? sprintf("%.2f", median(k "/stock/us")) : "-"
      # the spread of the per-round ratios: an effect is real only when it
      # outruns the scatter of the rounds
      lo = ""; hi = ""; wins = 0
      for (r = 0; r < rounds; r++) {
        ra = round_us[k "/A/" r]; rb = round_us[k "/B/" r]
        if (ra <= 0) continue
        q = rb / ra
        if (lo == "" || q < lo) lo = q
        if (hi == "" || q > hi) hi = q
        if (q > 1) wins++
      }
      printf "| %s | %s | %s | %s | %d | %.2f | %.2f | %d | %.2f | %.2f | %.2f | %.2f-%.2f | %d of %d |\n", p[1], p[2],
        si, su, median(k "/A/iops"), ua, median(k "/A/sys"),
        median(k "/B/iops"), ub, median(k "/B/sys"), (ua > 0 ? ub / ua : 0), lo, hi, wins, rounds
    }
  }' rounds="$ROUNDS" "$WORK/raw"
echo
echo "calls/IO: the transport's recv, sendmsg and receive-moderation calls (rx_wait_calls) per I/O"
echo "B/A per round: the lowest and highest of the rounds' own B/A µs; A cheaper: rounds in which B/A > 1"
