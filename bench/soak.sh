#!/usr/bin/env bash
# soak.sh: a long run of rbio under three initiators at once while the
# target is killed and its connections are cut, in a qemu guest (the
# kernel initiator needs one):
#
#   bench/soak.sh [--minutes N] [--kill-every S] [--cut-every S] [--out DIR]
#
#   --minutes N      how long the workloads run (default 30)
#   --kill-every S   SIGKILL tgtd and start it again with the same
#                    configuration every S seconds (default 300)
#   --cut-every S    close every connection from the target's side
#                    (tgtadm --op delete --mode conn) every S seconds
#                    (default 90)
#   --out DIR        keep the run's files in DIR: samples.csv (tgtd's RSS,
#                    fds and connections every 5 s), the workloads' logs,
#                    stdout, console.log
#
# One tgtd with bs_rbio.so and rbio's TCP transport serves one target with
# three 64 MiB LUs (io_uring store, thin provisioned, on the guest's
# tmpfs), one per initiator, each verifying what it wrote:
#   LU 1  the kernel's initiator (open-iscsi, iscsi_tcp, sd): a fio job of
#         4 KiB random writes over its first 48 MiB with crc32c
#         verification behind them (verify_backlog), then a verify pass;
#         and before each cut, on its last 16 MiB: random data, blkdiscard
#         (UNMAP) and blkdiscard -z (WRITE SAME or zeros written), each
#         read back;
#   LU 2  rbio's initiator: `rbio bench --rw randwrite --verify` (every
#         written block read back and compared at the end);
#   LU 3  libiscsi: soak_libiscsi, WRITE, WRITE SAME, UNMAP and READ at
#         random against a model of the LU, every read compared, and the
#         whole region at the end.
# Every initiator rides out the kills and cuts (the kernel queues I/O for
# replacement_timeout 120 s; rbio and soak_libiscsi log in again and send
# what had no answer). tgtd comes back as tgt.service brings it up: State
# offline while the target is set up, then ready.
#
# Checked at the end: each workload ends with exit status 0 (nothing lost:
# every acknowledged write reads back), rbio_lu_failed_commands_total is 0
# for each LU before each kill and at the end (the metrics file), tgtd
# shuts down cleanly, and per tgtd lifetime its fd count and RSS are flat:
# sampled each time all three sessions are logged in, no sample has more
# fds than the first such sample (+2), and the last RSS is within 10 % (at
# least 8 MiB) of the sample 30 s into the lifetime (no kill in the last
# 90 s, so the last lifetime has samples to judge). A progress line every
# 15 s. CI runs 3 minutes of it (vm.soak: --minutes 3 --kill-every 80
# --cut-every 25).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
die() { echo "soak: error: $*" >&2; exit 2; }
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

MINUTES=30 KILL_EVERY=300 CUT_EVERY=90 OUT=""
args=("$@")
while (( $# )); do
  case $1 in
    --minutes) MINUTES=${2:-}; shift 2 ;;
    --kill-every) KILL_EVERY=${2:-}; shift 2 ;;
    --cut-every) CUT_EVERY=${2:-}; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) printf 'soak: unknown option %s\n\n' "$1" >&2; usage 2 ;;
  esac
done
for v in MINUTES KILL_EVERY CUT_EVERY; do
  opt=${v,,}
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "--${opt//_/-} wants a positive whole number (got '${!v}')"
done
(( KILL_EVERY >= 30 && CUT_EVERY >= 10 )) \
  || die "--kill-every must be at least 30 s and --cut-every 10 s (the initiators need time to come back)"
RUN_S=$(( MINUTES * 60 ))
# The end checks want at least one cut, and a cut needs 15 s of the run
# left: refuse at once a run that cannot pass, rather than after it.
(( RUN_S > CUT_EVERY + 15 )) ||
  die "--minutes $MINUTES leaves no time for a cut every $CUT_EVERY s (one needs 15 s of the run left); raise --minutes or lower --cut-every (CI runs --minutes 3 --kill-every 80 --cut-every 25)"

# ------------------------------------------------------------ on the host
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  [[ $(id -u) -eq 0 ]] || die "run as root (it boots a qemu guest)"
  build=${RBIO_BUILD_DIR:-$ROOT/build}
  [[ -f $build/modules/bs_rbio.so && -x $build/bench/soak_libiscsi ]] \
    || die "no build: cmake -S . -B build && cmake --build build"
  run=(--timeout $(( RUN_S + 600 )))
  [[ -n $OUT ]] && run+=(--out "$OUT")
  echo "soak: $MINUTES min, tgtd killed every $KILL_EVERY s, connections cut every $CUT_EVERY s;" \
    "host load average $(cut -d' ' -f1-3 /proc/loadavg)"
  exec "$ROOT/scripts/vm/run.sh" "${run[@]}" "$HERE/soak.sh" "${args[@]}"
fi

# ------------------------------------------------------------ in the guest
source "$ROOT/tests/vm/lib.sh"
IQN=iqn.2026-11.io.rbio:soak
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
SOAK_LIBISCSI="$RBIO_BUILD_DIR/bench/soak_libiscsi"
METRICS="$WORK/metrics/rbio.prom"
SAMPLES="$WORK/samples.csv"
FIO_PID="" RBIO_PID="" LIBISCSI_PID=""
VM_CLEANUP_HOOKS+=('for p in $FIO_PID $RBIO_PID $LIBISCSI_PID; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done'
                   '[[ -z ${VM_OUT:-} ]] || cp "$WORK"/*.csv "$WORK"/*.log "$VM_OUT"/ 2>/dev/null')

for n in 1 2 3; do truncate -s 64M "$WORK/lu$n.img"; done
sys_state() { tadm --op update --mode sys --name State -v "$1"; }
# As tgt.service sets tgtd up: no host logs in to a half-made target.
export_target() {
  sys_state offline && new_target 1 soak &&
  new_lun 1 1 "$WORK/lu1.img" rbio && new_lun 1 2 "$WORK/lu2.img" rbio && new_lun 1 3 "$WORK/lu3.img" rbio &&
  sys_state ready
}
start_tgtd() { RBIO_METRICS_FILE=$METRICS tgtd_start > /dev/null && export_target; }

# tgtd's connections: "sid cid" per line.
connections() { tadm --op show --mode conn --tid 1 | awk '/^Session:/ { s = $2 } /Connection:/ { print s, $2 }'; }
all_logged_in() { (( $(connections | wc -l) == 3 )); }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
fds() { local f=(/proc/"$1"/fd/*); echo "${#f[@]}"; }
failed_commands() {  # the sum over the LUs, from the metrics file
  awk '/^rbio_lu_failed_commands_total/ { n += $NF } END { print n + 0 }' "$METRICS"
}
metrics_ready() { [[ -f $METRICS ]] && grep -q '^rbio_lu_failed_commands_total' "$METRICS"; }

must "tgtd starts with the build's module and exports three LUs" start_tgtd
start_initiator
must "discovery finds the target" discover "$IQN"
must "node: I/O on a lost session waits up to 120 s" \
  set_node "$IQN" node.session.timeo.replacement_timeout=120 node.session.initial_login_retry_max=4 \
    node.conn[0].timeo.login_timeout=10
must "the kernel logs in" login "$IQN"
must "LUN 1 appears as a disk" wait_disk_of "$IQN" 1; D1=$DISK

# --- the three workloads -----------------------------------------------------
fio --name=kernel --filename="$D1" --direct=1 --ioengine=libaio --iodepth=8 --bs=4k --size=48M \
  --rw=randwrite --time_based --runtime="$RUN_S" --rate_iops=400 \
  --verify=crc32c --verify_fatal=1 --verify_backlog=256 \
  --output="$WORK/fio.log" > /dev/null 2> "$WORK/fio.err" &
FIO_PID=$!
"$RBIO" bench -T "$IQN" -p "$PORTAL" --lun 2 --bs 4k --iodepth 8 --rw randwrite --size 48M \
  --time "$RUN_S" --verify --replacement-timeout 120 --initiator-name iqn.2026-11.io.rbio:soak-rbio \
  > "$WORK/rbio.log" 2>&1 &
RBIO_PID=$!
"$SOAK_LIBISCSI" "$(url soak 3)" --seconds "$RUN_S" --blocks 12288 --retry-seconds 150 \
  --status "$WORK/libiscsi.status" > "$WORK/libiscsi.log" 2>&1 &
LIBISCSI_PID=$!
must "all three initiators are logged in" wait_for 60 all_logged_in

# --- kills, cuts and samples -------------------------------------------------
echo "seconds,pid,rss_kib,fds,connections" > "$SAMPLES"
START=$SECONDS next_kill=$KILL_EVERY next_cut=$CUT_EVERY next_sample=0 next_progress=15
kills=0 cuts=0 lifetime=1 life_start=0
declare -a first_fds=() base_rss=() last_rss=() max_fds=()
sample() {
  local t=$1 pid rss n c
  pid=$(tgtd_pid) && rss=$(rss_kib "$pid") && n=$(fds "$pid") || return 0
  c=$(connections | wc -l)
  echo "$t,$pid,$rss,$n,$c" >> "$SAMPLES"
  (( c == 3 )) || return 0   # steady: every initiator logged in
  [[ -n ${first_fds[$lifetime]:-} ]] || first_fds[$lifetime]=$n
  (( n > ${max_fds[$lifetime]:-0} )) && max_fds[$lifetime]=$n
  (( t - life_start >= 30 )) && [[ -z ${base_rss[$lifetime]:-} ]] && base_rss[$lifetime]=$rss
  last_rss[$lifetime]=$rss
}
workload_line() {
  local f r l
  f=$(awk '{ print $2 }' "/sys/block/${D1#/dev/}/inflight" 2>/dev/null)
  r=$(grep -ao '[0-9]* IOPS' "$WORK/rbio.log" | tail -1)
  l=$(cut -d' ' -f1,4,5 "$WORK/libiscsi.status" 2>/dev/null)
  echo "kernel: $(awk '{ print $5 }' "/sys/block/${D1#/dev/}/stat") writes done, ${f:-?} in flight | rbio: ${r:-starting} | libiscsi: ${l:-starting}"
}
cut_all() {
  local sid cid
  while read -r sid cid; do
    tadm --op delete --mode conn --tid 1 --sid "$sid" --cid "$cid" || return 1
  done < <(connections)
}
# The kernel's UNMAP and zeroing, on LU 1's last 16 MiB (fio stays below).
DISCARD_OFF=48 DISCARD_MIB=16 discards=0
region() { dd if="$D1" iflag=direct bs=1M skip=$DISCARD_OFF count=$DISCARD_MIB status=none; }
region_is_zero() { cmp -s <(region) <(head -c $(( DISCARD_MIB << 20 )) /dev/zero); }
fill_region() {
  dd if=/dev/urandom of="$D1" oflag=direct bs=1M seek=$DISCARD_OFF count=$DISCARD_MIB status=none && ! region_is_zero
}
kernel_discards() {
  fill_region && blkdiscard -o $(( DISCARD_OFF << 20 )) -l $(( DISCARD_MIB << 20 )) "$D1" && region_is_zero &&
  fill_region && blkdiscard -z -o $(( DISCARD_OFF << 20 )) -l $(( DISCARD_MIB << 20 )) "$D1" && region_is_zero
}

kill_and_restart() {
  local pid i
  pid=$(tgtd_pid)
  kill -KILL "$pid"
  for (( i = 0; i < 100; i++ )); do [[ -f $STATE/tgtd.status ]] && break; sleep 0.1; done
  rm -f "$STATE/tgtd.pid" "$METRICS"
  start_tgtd
}

while (( SECONDS - START < RUN_S )); do
  t=$(( SECONDS - START ))
  if (( t >= next_sample )); then sample "$t"; next_sample=$(( t + 5 )); fi
  if (( t >= next_progress )); then
    printf '[soak %02d:%02d/%02d:00] kills %d, cuts %d | tgtd pid %s: %s MiB, %s fds, %s connections | %s\n' \
      $(( t / 60 )) $(( t % 60 )) "$MINUTES" "$kills" "$cuts" "$(tgtd_pid)" \
      "$(( $(rss_kib "$(tgtd_pid)") / 1024 ))" "$(fds "$(tgtd_pid)")" "$(connections | wc -l)" "$(workload_line)"
    next_progress=$(( t + 15 ))
  fi
  # No kill in the last 90 s: the lifetime it starts would end before every
  # initiator is back, leaving nothing to judge its fds and RSS by.
  if (( t >= next_kill && RUN_S - t > 90 )); then
    check "lifetime $lifetime: every initiator logged in before the kill" wait_for 120 all_logged_in
    sample "$(( SECONDS - START ))"
    check "lifetime $lifetime: no failed command in rbio's metrics ($(failed_commands))" \
      eval 'metrics_ready && (( $(failed_commands) == 0 ))'
    must "tgtd killed (SIGKILL) and started again with the same target" kill_and_restart
    kills=$(( kills + 1 )) lifetime=$(( lifetime + 1 )) life_start=$(( SECONDS - START ))
    next_kill=$(( life_start + KILL_EVERY )) next_cut=$(( life_start + CUT_EVERY ))
    continue
  fi
  if (( t >= next_cut && RUN_S - t > 15 )); then
    check "every initiator logged in before cut $(( cuts + 1 ))" wait_for 120 all_logged_in
    sample "$(( SECONDS - START ))"
    check "kernel initiator: 16 MiB of data discarded (UNMAP) and zeroed (blkdiscard -z) read back as zeros" \
      kernel_discards
    discards=$(( discards + 1 ))
    check "cut $(( cuts + 1 )): every connection closed from the target's side" cut_all
    cuts=$(( cuts + 1 )) next_cut=$(( SECONDS - START + CUT_EVERY ))
    continue
  fi
  sleep 1
done
echo "soak: the workloads' time is up after $kills kills and $cuts cuts; waiting for their verification"

# --- the end -----------------------------------------------------------------
check "no failed command in rbio's metrics at the end ($(failed_commands))" \
  eval 'metrics_ready && (( $(failed_commands) == 0 ))'
done_pid() { ! kill -0 "$1" 2>/dev/null; }
rc_of() { local rc=0; wait "$1" || rc=$?; echo "$rc"; }
check "fio ends (its verify pass) within 300 s" wait_for 300 done_pid "$FIO_PID"
# shellcheck disable=SC2034 # read by the eval in the next check
fio_rc=$(rc_of "$FIO_PID"); FIO_PID=""
grep -E '^ *(write|read|trim):|err=' "$WORK/fio.log" | sed 's/^ */  /'
check "kernel initiator: fio exit 0, no error, no verify failure" \
  eval '(( fio_rc == 0 )) && grep -q "err= 0" "$WORK/fio.log" && ! grep -qi verify "$WORK/fio.err"'
check "kernel initiator: blkdiscard and blkdiscard -z checked ($discards times)" test "$discards" -ge 1
check "rbio bench ends (its verify pass) within 300 s" wait_for 300 done_pid "$RBIO_PID"
rbio_rc=$(rc_of "$RBIO_PID"); RBIO_PID=""
tail -4 "$WORK/rbio.log" | sed 's/^/  /'
check "rbio initiator: bench --verify (exit status $rbio_rc)" test "$rbio_rc" -eq 0
check "soak_libiscsi ends (its last read-back) within 300 s" wait_for 300 done_pid "$LIBISCSI_PID"
libiscsi_rc=$(rc_of "$LIBISCSI_PID"); LIBISCSI_PID=""
sed 's/^/  /' "$WORK/libiscsi.log"
check "libiscsi: every read matched the model (exit status $libiscsi_rc)" test "$libiscsi_rc" -eq 0
check "libiscsi: WRITE SAME and UNMAP were sent" \
  eval 'grep -qE "[1-9][0-9]* WRITE SAME, [1-9][0-9]* UNMAP" "$WORK/libiscsi.log"'
check "tgtd was killed $kills times and connections cut $cuts times" \
  test "$kills" -ge $(( RUN_S - KILL_EVERY > 90 ? 1 : 0 )) -a "$cuts" -ge 1

# Flat per lifetime (samples with all three sessions logged in).
for (( l = 1; l <= lifetime; l++ )); do
  echo "lifetime $l: fds first ${first_fds[$l]:-?} max ${max_fds[$l]:-?}; RSS at 30 s ${base_rss[$l]:-?} KiB, last ${last_rss[$l]:-?} KiB"
  check "lifetime $l: sampled with every initiator logged in" test -n "${first_fds[$l]:-}"
  check "lifetime $l: the fd count stays flat (max ${max_fds[$l]:-?} <= first ${first_fds[$l]:-?} + 2)" \
    eval '[[ -n ${first_fds[$l]:-} ]] && (( max_fds[$l] <= first_fds[$l] + 2 ))'
  if [[ -n ${base_rss[$l]:-} ]]; then
    check "lifetime $l: RSS stays flat (last ${last_rss[$l]} KiB within 10 %, at least 8 MiB, of ${base_rss[$l]} KiB)" \
      eval 'slack=$(( base_rss[$l] / 10 > 8192 ? base_rss[$l] / 10 : 8192 )); (( last_rss[$l] <= base_rss[$l] + slack ))'
    rss_judged=$(( ${rss_judged:-0} + 1 ))
  else
    # A lifetime cut short (the run's end, a kill) has no 30 s baseline.
    echo "  lifetime $l: under 30 s with every initiator logged in: its RSS is not judged"
  fi
done
check "the RSS of at least one lifetime was judged (${rss_judged:-0} of $lifetime)" test "${rss_judged:-0}" -ge 1
[[ -z ${VM_OUT:-} ]] || cp "$SAMPLES" "$WORK"/*.log "$VM_OUT"/
finish
