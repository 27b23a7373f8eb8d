#!/usr/bin/env bash
# One gateway against two on one box: the same LU (a fallocated tmpfs file)
# served by two sandboxed tgtds with bs_rbio.so, both ALUA active/optimized,
# so a multipath host can use both event loops -- rbio's way of using more
# than one core. Side by side in one run, rounds alternating the order:
#
#   host  rbio initiator (`rbio bench`): -p gateway1 against -p gateway1
#         -p gateway2 (MultipathSession, round robin over the
#         active/optimized paths); 4 KiB random reads and writes at 32 in
#         flight, 1 MiB sequential reads and writes at 8; IOPS, MB/s and
#         each gateway's CPU per I/O (utime+stime of its tgtd over the
#         point, divided by the I/Os it served); then the failover time:
#         gateway 1 SIGKILLed under 4 KiB writes, the gap the initiator saw.
#   guest the kernel initiator with dm-multipath (a qemu guest, 6-15 min;
#         --host-only skips it): the same comparison through /dev/mapper
#         with fio, and the failover time (tests/vm/multipath.sh --bench:
#         the test's own setup and checks, then the measurements).
#
#   bench/multipath-compare.sh [--rounds N] [--time S] [--out DIR] [--host-only]
#
# Medians over the rounds, [lowest-highest] beside them. The two cores are
# shared by the initiator and both gateways: two gateways can at best win
# what the initiator leaves of the second core; read the CPU per I/O
# columns for what each gateway costs.
set -euo pipefail
BENCH_NAME=multipath-compare
source "$(dirname "$0")/lib.sh"
BUILD=${RBIO_BUILD_DIR:-$ROOT/build}
RBIO="$BUILD/initiator/rbio"
ROUNDS=3 SECS=8 OUT="" KERNEL=1
while (( $# )); do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --time) SECS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --host-only) KERNEL=0; shift ;;
    -h|--help) usage ;;
    *) usage 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $SECS =~ ^[1-9][0-9]*$ ]] || die "--rounds and --time take positive numbers"
[[ -x $RBIO && -f $BUILD/modules/bs_rbio.so ]] || die "build first (cmake --build build)"
# `rbio --help` exits 2 (usage); its text says whether bench takes several -p.
grep -qF -- "-p HOST[:PORT] [-p HOST[:PORT]...]" <<<"$("$RBIO" --help 2>&1 || :)" \
  || die "this rbio cannot bench several portals (build the current tree)"

IQN=iqn.2026-11.io.rbio:multipath-compare
CTL=(0 5940 5941) PORT=(0 13940 13941)
WORK=$(mktemp -d /dev/shm/rbio-mpcmp-XXXXXX)
cleanup() {
  local g
  for g in 1 2; do "$SANDBOX" stop "$WORK/gw$g" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
for g in 1 2; do port_busy "${PORT[$g]}" && die "port ${PORT[$g]} is in use"; done
fallocate -l 1G "$WORK/lu.img"
printf '1 active/optimized\n2 active/optimized\n' > "$WORK/groups"

gw_start() {
  local g=$1
  RBIO_PORT_GROUP=$g RBIO_ALUA_GROUPS="$WORK/groups" "$SANDBOX" start "$WORK/gw$g" \
    --modules "$BUILD/modules" --control-port "${CTL[$g]}" --portal "127.0.0.1:${PORT[$g]}" >/dev/null
  local a=(tgtadm -C "${CTL[$g]}" --lld iscsi)
  "${a[@]}" --op new --mode target --tid 1 -T "$IQN"
  "${a[@]}" --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/lu.img" --bstype rbio
  "${a[@]}" --op update --mode logicalunit --tid 1 --lun 1 --params scsi_id=600140512345678,scsi_sn=RBIOMPCMP
  "${a[@]}" --op bind --mode target --tid 1 -I ALL
}
gw_pid() { cat "$WORK/gw$1/tgtd.pid"; }
# CPU ticks (utime + stime) of gateway G's tgtd.
gw_ticks() { awk '{ print $14 + $15 }' "/proc/$(gw_pid "$1")/stat"; }
HZ=$(getconf CLK_TCK)
gw_start 1
gw_start 2

# point CONFIG RW BS DEPTH: one bench run; prints
# "iops mbs cpu_us_per_io_gw1 cpu_us_per_io_gw2 ios_gw1 ios_gw2".
point() {
  local config=$1 rw=$2 bs=$3 depth=$4 portals=(-p "127.0.0.1:${PORT[1]}") t1 t2 out
  [[ $config == two ]] && portals+=(-p "127.0.0.1:${PORT[2]}")
  t1=$(gw_ticks 1) t2=$(gw_ticks 2)
  out=$("$RBIO" bench -T "$IQN" "${portals[@]}" --lun 1 --bs "$bs" --iodepth "$depth" --rw "$rw" \
        --time "$SECS" 2>/dev/null) || die "rbio bench ($config, $rw $bs x$depth) failed"
  t1=$(( $(gw_ticks 1) - t1 )) t2=$(( $(gw_ticks 2) - t2 ))
  awk -v t1="$t1" -v t2="$t2" -v hz="$HZ" -v p1="127.0.0.1:${PORT[1]}" -v p2="127.0.0.1:${PORT[2]}" '
    /ios=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } }
    /^  path / { for (i = 1; i <= NF; i++) if ($i ~ /^completed=/) { split($i, kv, "="); c[$2] = kv[2] } }
    END {
      n1 = (p1 in c) ? c[p1] : r["ios"]; n2 = (p2 in c) ? c[p2] : 0
      printf "%.0f %.1f %s %s %d %d\n", r["iops"], r["MB/s"],
        n1 ? sprintf("%.2f", t1 * 1e6 / hz / n1) : "-", n2 ? sprintf("%.2f", t2 * 1e6 / hz / n2) : "-", n1, n2
    }' <<<"$out"
}

WORKLOADS=("randread 4096 32" "randwrite 4096 32" "read 1048576 8" "write 1048576 8")
RAW="$WORK/raw.tsv"
printf 'round\tconfig\trw\tbs\tdepth\tiops\tmbs\tcpu_us_gw1\tcpu_us_gw2\tios_gw1\tios_gw2\n' > "$RAW"
note "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for (( r = 1; r <= ROUNDS; r++ )); do
  order=(one two); (( r % 2 == 0 )) && order=(two one)
  for w in "${WORKLOADS[@]}"; do
    read -r rw bs depth <<<"$w"
    for config in "${order[@]}"; do
      note "round $r/$ROUNDS: $config gateway(s), $rw bs=$bs x$depth"
      printf '%d\t%s\t%s\t%s\t%s\t%s\n' "$r" "$config" "$rw" "$bs" "$depth" \
        "$(point "$config" "$rw" "$bs" "$depth" | tr ' ' '\t')" >> "$RAW"
    done
  done
done

# Failover: both gateways, 4 KiB random writes x16; gateway 1 SIGKILLed 2 s
# in; the initiator reports the gap it saw. Gateway 1 restarts between rounds.
FAILOVER="$WORK/failover.tsv"
: > "$FAILOVER"
for (( r = 1; r <= ROUNDS; r++ )); do
  note "round $r/$ROUNDS: failover (gateway 1 killed under writes)"
  "$RBIO" bench -T "$IQN" -p "127.0.0.1:${PORT[1]}" -p "127.0.0.1:${PORT[2]}" --lun 1 --bs 4096 \
    --iodepth 16 --rw randwrite --time 5 > "$WORK/failover.out" 2>/dev/null &
  bench_pid=$!
  sleep 2   # a fixed point in the run to kill at; not a condition
  killed=$(gw_pid 1)
  kill -KILL "$killed"
  wait "$bench_pid" || die "rbio bench failed across the failover (see $WORK/failover.out)"
  awk '/multipath:/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } }
       END { print r["last_failover_ms"], r["longest_io_gap_ms"], r["commands_moved"] }' \
    "$WORK/failover.out" >> "$FAILOVER"
  # The kill was ours: once it is gone, forget its PID (the sandbox's stop
  # would rightly report a tgtd ended by a signal).
  for (( i = 0; i < 100; i++ )); do kill -0 "$killed" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$killed" 2>/dev/null && die "the killed gateway 1 (pid $killed) is still there"
  rm -f "$WORK/gw1/tgtd.pid"
  gw_start 1
done
note "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# median of the numbers on stdin, with [lowest-highest]
summary() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) { print "-"; exit }
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "%g [%g-%g]", m, v[1], v[NR] }'; }
col() { awk -F'\t' -v c="$1" -v rw="$2" -v k="$3" -v bs="$4" 'NR > 1 && $2 == c && $3 == rw && $4 == bs && $k != "-" { print $k }' "$RAW"; }
ratio() { awk -F'\t' -v rw="$1" -v bs="$2" -v k="$3" 'NR > 1 && $3 == rw && $4 == bs { v[$1, $2] = $k; R[$1] = 1 }
  END { for (r in R) if (v[r, "one"] > 0) printf "%.3f\n", v[r, "two"] / v[r, "one"] }' "$RAW"; }

{
  echo "## One gateway vs two, rbio initiator on the host ($ROUNDS rounds of $SECS s; $(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "| workload | one: IOPS | two: IOPS | two/one | one: MB/s | two: MB/s | CPU µs/IO one (gw1) | two: gw1 | two: gw2 |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
  for w in "${WORKLOADS[@]}"; do
    read -r rw bs depth <<<"$w"
    printf '| %s %s x%s | %s | %s | **%s** | %s | %s | %s | %s | %s |\n' "$rw" "$bs" "$depth" \
      "$(col one "$rw" 6 "$bs" | summary)" "$(col two "$rw" 6 "$bs" | summary)" \
      "$(ratio "$rw" "$bs" 6 | summary)" \
      "$(col one "$rw" 7 "$bs" | summary)" "$(col two "$rw" 7 "$bs" | summary)" \
      "$(col one "$rw" 8 "$bs" | summary)" "$(col two "$rw" 8 "$bs" | summary)" "$(col two "$rw" 9 "$bs" | summary)"
  done
  echo
  echo "Failover (gateway 1 SIGKILLed under 4 KiB random writes x16, rbio initiator):"
  echo "time to the first moved command done $(awk '{ print $1 }' "$FAILOVER" | summary) ms;" \
       "longest gap between completions $(awk '{ print $2 }' "$FAILOVER" | summary) ms;" \
       "commands moved $(awk '{ print $3 }' "$FAILOVER" | summary)."
} | tee "$WORK/results.md"
if [[ -n $OUT ]]; then
  mkdir -p "$OUT"
  cp "$RAW" "$WORK/results.md" "$FAILOVER" "$OUT/"
fi

if (( KERNEL )); then
  # The guest half: tests/vm/multipath.sh (three gateways, dm-multipath with
  # the alua prioritizer; its failover measurement) in bench mode.
  note "the kernel initiator in a qemu guest (about $(( 4 + ROUNDS * 8 * (SECS + 4) / 60 )) min)"
  rc=0
  "$ROOT/scripts/vm/run.sh" --timeout $(( 900 + ROUNDS * 8 * (SECS + 30) )) --out "$WORK/guest" \
    "$ROOT/tests/vm/multipath.sh" --bench "$ROUNDS" "$SECS" > /dev/null 2>&1 || rc=$?
  (( rc == 0 )) || die "the guest half failed with exit $rc (see $WORK/guest/stdout; kept with --out)"
  G="$WORK/guest/stdout"
  # POINT config rw bs depth iops mbs cpu_gw1 cpu_gw2 ios_gw1 ios_gw2
  kcol() { awk -v c="$1" -v rw="$2" -v k="$3" '$1 == "POINT" && $2 == c && $3 == rw && $k != "-" { print $k }' "$G"; }
  kratio() { awk -v rw="$1" '$1 == "POINT" && $3 == rw { v[$2, ++n[$2]] = $6 }
    END { for (i = 1; i <= n["one"] && i <= n["two"]; i++) if (v["one", i] > 0) printf "%.3f\n", v["two", i] / v["one", i] }' "$G"; }
  {
    echo
    echo "## One gateway vs two, Linux initiator + dm-multipath in a qemu guest ($ROUNDS rounds of $SECS s, fio through /dev/mapper)"
    echo
    echo "| workload | one: IOPS | two: IOPS | two/one | one: MB/s | two: MB/s | CPU µs/IO one (gw1) | two: gw1 | two: gw2 |"
    echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
    for w in "randread 4k 32" "randwrite 4k 32" "read 1M 8" "write 1M 8"; do
      read -r rw bs depth <<<"$w"
      printf '| %s %s x%s | %s | %s | **%s** | %s | %s | %s | %s | %s |\n' "$rw" "$bs" "$depth" \
        "$(kcol one "$rw" 6 | summary)" "$(kcol two "$rw" 6 | summary)" "$(kratio "$rw" | summary)" \
        "$(kcol one "$rw" 7 | summary)" "$(kcol two "$rw" 7 | summary)" \
        "$(kcol one "$rw" 8 | summary)" "$(kcol two "$rw" 8 | summary)" "$(kcol two "$rw" 9 | summary)"
    done
    echo
    echo "Failover (the active/optimized gateway SIGKILLed under fio verify writes, open-iscsi" \
         "replacement_timeout 5 s): $(awk '$1 == "FAILOVER_MS" { print $2 }' "$G") ms from the kill to I/O completing again."
  } | tee -a "$WORK/results.md"
  if [[ -n $OUT ]]; then cp "$WORK/results.md" "$OUT/"; cp "$G" "$OUT/guest-stdout.txt"; fi
fi
