#!/usr/bin/env bash
# rbio's userspace initiator (`rbio bench`) against libiscsi's `iscsi-perf`,
# same target, same run: 4 KiB random reads at 1 and 32 in flight, 1 MiB
# sequential reads at 8. Prints IOPS and MB/s, the medians of R rounds in
# which the two clients alternate (rbio first in odd rounds, iscsi-perf in
# even ones: the machine is noisy, and whoever runs second may find it
# warmer or busier), and the initiator's system calls per I/O from one
# extra `strace -c -f` pass per client and point (rbio also reports its
# own count, which excludes the login).
#
#   bench/initiator-compare.sh [--time S] [--rounds R] [--transport on|off]
#
#   --time S        seconds per measurement (default 5)
#   --rounds R      alternating rounds per point (default 3)
#   --transport     off serves the LUN through tgt's own TCP transport
#
# One sandboxed stock tgtd loads bs_rbio.so (control port 5930, portal
# 127.0.0.1:13930) and serves an rbio LUN on a 1 GiB sparse tmpfs file.
# Client and target share the machine's cores over loopback: compare the
# two clients within one run, not absolute numbers across machines.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${RBIO_BUILD_DIR:-$SRC/build}
RBIO="$BUILD/initiator/rbio"
SECS=5
ROUNDS=3
TRANSPORT=on
while (( $# )); do
  case $1 in
    --time) SECS=${2:-}; shift 2 ;;
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --transport) TRANSPORT=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $SECS =~ ^[1-9][0-9]{0,3}$ ]] || { echo "--time takes whole seconds, 1-9999 (got '$SECS')" >&2; exit 2; }
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "--rounds takes 1-99 (got '$ROUNDS')" >&2; exit 2; }
[[ $TRANSPORT == on || $TRANSPORT == off ]] || { echo "--transport takes on or off (got '$TRANSPORT')" >&2; exit 2; }
[[ -x $RBIO && -f $BUILD/modules/bs_rbio.so ]] || { echo "build first (cmake --build build)" >&2; exit 2; }
for c in iscsi-perf strace tgtadm; do command -v $c >/dev/null || { echo "needs $c" >&2; exit 2; }; done

CTL=5930 PORT=13930
IQN=iqn.2026-11.io.rbio:initiator-compare
INITIATOR=iqn.2026-11.io.rbio:compare-client
WORK=$(mktemp -d /dev/shm/rbio-icmp-XXXXXX)
STATE=$WORK/tgtd
cleanup() { "$SRC/scripts/tgtd-sandbox.sh" stop "$STATE" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
env_t=(); [[ $TRANSPORT == off ]] && env_t=(RBIO_TRANSPORT=off)
env "${env_t[@]}" "$SRC/scripts/tgtd-sandbox.sh" start "$STATE" --modules "$BUILD/modules" \
  --control-port $CTL --portal 127.0.0.1:$PORT >/dev/null
tadm() { tgtadm -C $CTL --lld iscsi "$@"; }
tadm --op new --mode target --tid 1 -T $IQN
truncate -s 1G "$WORK/lun.img"
tadm --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/lun.img" --bstype rbio
tadm --op bind --mode target --tid 1 -I ALL
URL=iscsi://127.0.0.1:$PORT/$IQN/1
BLOCK=512

# rbio_run BS DEPTH RW [strace-file]: prints "ios iops mbs own_syscalls_per_io"
rbio_run() {
  local pre=(); [[ -n ${4:-} ]] && pre=(strace -f -c -o "$4")
  "${pre[@]}" "$RBIO" bench -T $IQN -p 127.0.0.1:$PORT --lun 1 --bs "$1" --iodepth "$2" --rw "$3" \
    --time "$SECS" --initiator-name $INITIATOR 2>/dev/null |
    awk '/ios=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } }
         /syscalls_per_io=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } }
         END { print r["ios"], r["iops"], r["MB/s"], r["syscalls_per_io"] }'
}
# perf_run BYTES DEPTH RANDOM [strace-file]: prints "ios iops mbs"
perf_run() {
  local pre=(); [[ -n ${4:-} ]] && pre=(strace -f -c -o "$4")
  local r=(); [[ $3 == 1 ]] && r=(-r)
  "${pre[@]}" iscsi-perf -i $INITIATOR -m "$2" -b $(( $1 / BLOCK )) -t "$SECS" "${r[@]}" $URL 2>&1 |
    tr '\r' '\n' | awk -v secs="$SECS" -v bytes="$1" '
      /iops average/ { for (i = 1; i < NF; i++) if ($i == "average") v = $(i + 1) }
      END { printf "%d %d %.1f\n", v * secs, v, v * bytes / 1e6 }'
}
calls() { awk '$NF == "total" { print $4 }' "$1"; }

# median of a space-separated list of numbers ("-" if it is empty)
median() {
  tr ' ' '\n' | awk 'NF' | sort -g |
    awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# range of a space-separated list: "lowest-highest"
range() { tr ' ' '\n' | awk 'NF' | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo "-" hi }'; }

printf '%-28s %-10s %10s %10s %16s %14s %12s\n' workload client IOPS MB/s "IOPS range" syscalls/IO "(own count)"
for point in "4096 1 randread 1" "4096 32 randread 1" "1048576 8 read 0"; do
  read -r bs depth rw rnd <<< "$point"
  name="$((bs / 1024)) KiB $rw, $depth in flight"
  [[ $bs -ge 1048576 ]] && name="$((bs / 1048576)) MiB $rw, $depth in flight"
  declare -A IOPS=([rbio]="" [perf]="") MBS=([rbio]="" [perf]="")
  own=""
  for (( r = 1; r <= ROUNDS; r++ )); do
    order=(rbio perf); (( r % 2 )) || order=(perf rbio)
    for c in "${order[@]}"; do
      if [[ $c == rbio ]]; then read -r _ iops mbs o < <(rbio_run "$bs" "$depth" "$rw"); own+="$o "
      else read -r _ iops mbs < <(perf_run "$bs" "$depth" "$rnd"); fi
      [[ $iops =~ ^[0-9]+$ && $iops -gt 0 ]] || { echo "$name, round $r: $c measured nothing" >&2; exit 1; }
      IOPS[$c]+="$iops " MBS[$c]+="$mbs "
      echo "initiator-compare: [$name] round $r/$ROUNDS: $c $iops IOPS" >&2
    done
  done
  read -r ios_s _ _ _ < <(rbio_run "$bs" "$depth" "$rw" "$WORK/strace-rbio")
  sc=$(awk -v c="$(calls "$WORK/strace-rbio")" -v n="$ios_s" 'BEGIN { printf "%.2f", n ? c / n : 0 }')
  printf '%-28s %-10s %10s %10s %16s %14s %12s\n' "$name" rbio "$(median <<< "${IOPS[rbio]}")" \
    "$(median <<< "${MBS[rbio]}")" "$(range <<< "${IOPS[rbio]}")" "$sc" "$(median <<< "$own")"
  read -r ios_s _ _ < <(perf_run "$bs" "$depth" "$rnd" "$WORK/strace-perf")
  sc=$(awk -v c="$(calls "$WORK/strace-perf")" -v n="$ios_s" 'BEGIN { printf "%.2f", n ? c / n : 0 }')
  printf '%-28s %-10s %10s %10s %16s %14s %12s\n' "" iscsi-perf "$(median <<< "${IOPS[perf]}")" \
    "$(median <<< "${MBS[perf]}")" "$(range <<< "${IOPS[perf]}")" "$sc" "-"
  unset IOPS MBS
done
echo "(transport=$TRANSPORT; medians of $ROUNDS alternating rounds of $SECS s per point; strace passes are separate runs; $(nproc) cores shared by client and tgtd)"
