#!/usr/bin/env bash
# Several gateways, one LU (issue 14): unmodified hosts — the kernel's
# open-iscsi initiator and multipath-tools' dm-multipath — see ONE device
# through three tgtd+rbio gateways that export the same backing file,
# inside a qemu guest (the host kernel has no SCSI, iSCSI or device-mapper
# multipath):
#  1. identity: the gateways export the same target IQN and the same LU
#     (same file, --bstype rbio) with the same scsi_id/scsi_sn, set once;
#     the host logs in through every portal, every disk has the same WWID
#     (udev's scsi_id) and unit serial number (VPD 0x80), and multipath
#     builds exactly one map over all three;
#  2. ALUA: each gateway is its own target port group (RBIO_PORT_GROUP),
#     their states come from one file every gateway reads
#     (RBIO_ALUA_GROUPS): INQUIRY reports TPGS, VPD 0x83 names the group and
#     a relative target port, REPORT TARGET PORT GROUPS lists every group,
#     its state and port; multipath (group_by_prio, prio alua) puts gateway
#     1 (active/optimized) in a path group of its own, above gateways 2 and
#     3 (active/non-optimized), and sends I/O to gateway 1 only;
#  3. failover: a fio crc32c verify job runs on the map while gateway 1,
#     carrying its I/O, is SIGKILLed in the middle of its writes: I/O
#     moves to gateways 2 and 3, fio ends with exit 0 and no verify error;
#     the failover time (kill to I/O completing again, from fio's per-I/O
#     completion log) is printed;
#  4. failback: the killed gateway restarts (same portal, same LU
#     settings), its path becomes active again and carries verified I/O;
#  5. an ALUA state change: the groups file makes gateway 2
#     active/optimized, and I/O moves to it alone, no read failing;
#  6. aggregate IOPS through the map with three, two and one gateways
#     active/optimized (the others standby), printed (not asserted: under
#     emulation the gateways share the guest's two CPUs); a standby gateway
#     refuses a READ sent to it (NOT READY, 04/0B);
#  7. planned maintenance: with verified writes running, gateway 1's group
#     goes standby, I/O moves to gateway 2, gateway 1's tgtd stops cleanly
#     and starts again, its group comes back and I/O with it; fio ends with
#     no error, and no completion waited as long as for the kill in 3.
#
# Host settings for fast failures: iSCSI replacement_timeout 5 s, NOP-Out
# every 2 s (2 s timeout), one login attempt; multipathd checks paths every
# second or two (tur) and fails back at once.
#
# Run on the host, it starts itself in a guest through scripts/vm/run.sh
# (ctest does that explicitly: test vm.multipath). With --bench ROUNDS SECS
# it also measures one gateway against two for bench/multipath-compare.sh
# (see the end).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest.sh" 600 "$@"

source "$HERE/lib.sh"
# Prerequisites (scripts/vm/prepare.sh installs them): a missing one skips.
for tool in multipath multipathd dmsetup sg_inq sg_vpd sg_rtpg sg_raw fio iscsiadm iscsid udevadm; do
  command -v "$tool" > /dev/null || skip_test "no $tool (multipath-tools, sg3-utils, fio, open-iscsi, udev)"
done
for f in /lib/systemd/systemd-udevd /lib/udev/scsi_id; do
  [[ -x $f ]] || skip_test "no $f (systemd, udev)"
done

TARGET=vm-mpath
# The LU's identity, set on every gateway (tgtadm --params scsi_id=,scsi_sn=).
# tgt builds VPD 0x83 from scsi_id: a T10 vendor designator (its text) and
# an NAA 6 designator (IEEE registered extended) that takes scsi_id's
# characters as hex digits, right-adjusted in 128 bits — any other
# character counts as 0, so an id that is not hex collapses (tgt's default,
# "IET     " + tid + lun, gives every tid 1 LUN 1 of every tgt the same
# WWID). Hosts (udev's scsi_id, multipath) prefer the NAA designator: the
# id is hex, at most 31 digits, unique per LU.
LU_ID=0b10da7a2026110000000001 LU_SN=RBIOMP0001
GWS=(1 2 3)                               # the gateways (and their port groups)
GROUPS_FILE="$WORK/alua-groups"           # every gateway's view of the groups' states
LU_BACKING="$WORK/mpath.img"
REPLACEMENT_TIMEOUT=5
FAILOVER_BOUND=30                         # seconds from the kill to I/O flowing again
truncate -s 256M "$LU_BACKING"
source "$HERE/lib-multipath.sh"

# --- the gateways and the host's sessions ------------------------------------------
groups active/optimized active/non-optimized active/non-optimized
for n in "${GWS[@]}"; do
  must "gateway $n (port group $n, portal 127.0.0.1:$((3259 + n))) exports the LU" start_gateway "$n"
done
mp_login

# --- 1. one identity ------------------------------------------------------------
inq() { echo "$(inq_field "$1" Vendor),$(inq_field "$1" Product)"; }
VENDOR_PRODUCT=$(inq "${SD[1]}")
echo "INQUIRY: $VENDOR_PRODUCT"
check "every path answers the same vendor and product" on_all inq "$VENDOR_PRODUCT"
WWID=$(wwid "${SD[1]}")
echo "WWID (scsi_id): $WWID"
sg_vpd -p di "${SD[1]}" | sed 's/^/  /'
check "every path has the same WWID (scsi_id, VPD 0x83)" eval '[[ -n $WWID ]] && on_all wwid "$WWID"'
naa=$(printf '%32s' "$LU_ID" | tr ' ' 0)
check "the WWID is the NAA 6 designator built from the scsi_id set ($LU_ID)" test "$WWID" = "36${naa:1}"
serial() { sg_vpd -p sn "$1" | sed -n 's/^ *Unit serial number: *//p'; }
check "every path's unit serial number (VPD 0x80) is the one set ($LU_SN)" on_all serial "$LU_SN"

# ALUA: INQUIRY's TPGS field (0: none, 1: implicit, 2: explicit, 3: both).
tpgs() { sg_inq --export "$1" | sed -n 's/^SCSI_TPGS=//p'; }
echo "INQUIRY TPGS: $(for n in "${GWS[@]}"; do printf '%s (gateway %s) ' "$(tpgs "${SD[n]}")" "$n"; done)"
has_tpgs() { local n; for n in "${GWS[@]}"; do [[ $(tpgs "${SD[n]}") =~ ^[1-3]$ ]] || return 1; done; }
must "every gateway reports ALUA in INQUIRY (TPGS not 0)" has_tpgs

# --- the host's multipath configuration ---------------------------------------------
mp_map

# --- 2. ALUA: groups, states, path groups -------------------------------------------
# rtpg SD: one line per target port group from REPORT TARGET PORT GROUPS:
# "GROUP STATE PORT..." (numbers in decimal, "non optimized" as
# "non-optimized", as in the groups file).
rtpg() {
  local line id="" st="" ports=()
  sg_rtpg -d "$1" > "$WORK/rtpg.out" || return 1
  while IFS= read -r line; do
    if [[ $line =~ target\ port\ group\ id\ :\ *0x([0-9a-fA-F]+) ]]; then
      [[ -z $id ]] || echo "$id $st${ports[*]:+ ${ports[*]}}"
      id=$((16#${BASH_REMATCH[1]})) st="" ports=()
    elif [[ $line == *"asymmetric access state :"* ]]; then
      st=${line#*\(} st=${st%%)*} st=${st// /-}
    elif [[ $line =~ ^\ *0x([0-9a-fA-F]+)\ *$ ]]; then
      ports+=($((16#${BASH_REMATCH[1]})))
    fi
  done < "$WORK/rtpg.out"
  [[ -z $id ]] || echo "$id $st${ports[*]:+ ${ports[*]}}"
}
# vpd83 SD WHAT: a designator of VPD 0x83 in decimal, WHAT "Target port
# group" or "Relative target port".
vpd83() {
  local v
  v=$(sg_vpd -p di "$1" | sed -n "s/^ *$2: *0x\([0-9a-fA-F]*\).*/\1/p" | head -1)
  [[ -n $v ]] && echo $((16#$v))
}
access_state() { cat "/sys/block/${1#/dev/}/device/access_state"; }
# states_are STATE1 STATE2 STATE3: REPORT TARGET PORT GROUPS, through
# every path, gives each group that state and its gateway's relative
# target port; the kernel's ALUA handler has the same on each path.
RTP=()
rtpg_is() {
  local want="" n
  for n in "${GWS[@]}"; do want+="${want:+;}$n ${!n} ${RTP[n]}"; done
  for n in "${GWS[@]}"; do [[ $(rtpg "${SD[n]}" | paste -sd';' -) == "$want" ]] || return 1; done
}
kernel_sees() { local n; for n in "${GWS[@]}"; do [[ $(access_state "${SD[n]}") == "${!n}" ]] || return 1; done; }
for n in "${GWS[@]}"; do
  RTP[n]=$(vpd83 "${SD[n]}" "Relative target port")
  echo "VPD 0x83 through gateway $n: target port group $(vpd83 "${SD[n]}" "Target port group"), relative target port ${RTP[n]}"
done
own_group() { local n; for n in "${GWS[@]}"; do [[ $(vpd83 "${SD[n]}" "Target port group") == "$n" ]] || return 1; done; }
check "VPD 0x83 names each gateway's own target port group" own_group
check "VPD 0x83 gives each gateway its own relative target port" \
  eval '[[ $(printf "%s\n" "${RTP[@]}" | grep -c .) -eq 3 && $(printf "%s\n" "${RTP[@]}" | sort -u | wc -l) -eq 3 ]]'
echo "sg_rtpg ${SD[1]} (group state ports):"; rtpg "${SD[1]}" | sed 's/^/  /'
check "REPORT TARGET PORT GROUPS, through every path, lists every group, its state and port" \
  rtpg_is active/optimized active/non-optimized active/non-optimized
check "the kernel's ALUA handler sees the same states" \
  kernel_sees active/optimized active/non-optimized active/non-optimized
check "multipath: gateway 1's path group, active, above gateways 2 and 3's" wait_for 10 pgs_are "1" "2 3"
echo "  path groups (prio status): $(pgs)"

# --- 3. failover: the gateway carrying I/O is killed during verified writes ----------
ACTIVE=1
mp_failover_start 8192 1000   # 8192 writes at 1000/s: the kill, about 2 s in, lands in the write phase
mp_kill_active
mp_failover_end "$FAILOVER_BOUND" 2 3

# --- 4. the killed gateway comes back -----------------------------------------------
must "gateway 1 restarts (same portal, same LU settings)" start_gateway 1
t_up=$(now_ms)
check "gateway 1's path is active again in multipath -ll within 60 s" wait_for 60 path_active "${SD[1]}"
echo "path ${SD[1]} active again $(since "$t_up") s after gateway 1 was ready"
path_line "${SD[1]}" | sed 's/^/  /'
check "its path group is the active one again (failback)" wait_for 10 pgs_are "1" "2 3"
snap
check "fio verify through the map after the restart" \
  fio_job after-restart "/dev/mapper/$MAP" --rw=randwrite --bs=4k --iodepth=16 --size=16M --offset=64M
delta; echo "  $(io_split)"
check "gateway 1's path carried it" only_on 1

# --- 5. ALUA: gateway 2 becomes active/optimized -------------------------------------
# Reads run for a fixed time while the groups file changes: the move
# (gateways see the file, raise UNIT ATTENTION 2A/06; multipathd's alua
# prio sees new priorities and switches path groups) must fail none.
fio --name=switch --filename="/dev/mapper/$MAP" --direct=1 --ioengine=libaio --rw=randread \
  --bs=4k --iodepth=8 --size=64M --time_based --runtime=25 --output="$WORK/fio-switch.log" \
  > /dev/null 2> "$WORK/fio-switch.err" &
FIO_PID=$!
must "reads run on gateway 1's path" wait_for 20 carried_by 0.5 1
groups active/non-optimized active/optimized active/non-optimized
t_sw=$(now_ms)
check "I/O moves to gateway 2, and only there, within 20 s" wait_for 20 carried_by 0.5 2
echo "I/O moved to gateway 2 $(since "$t_sw") s after the groups file changed; in 0.5 s: $(io_split)"
check "REPORT TARGET PORT GROUPS, through every path, shows the new states" \
  rtpg_is active/non-optimized active/optimized active/non-optimized
check "the kernel's ALUA handler sees the new states" \
  kernel_sees active/non-optimized active/optimized active/non-optimized
check "multipath: gateway 2's path group is the active one, above gateways 1 and 3's" pgs_are "2" "1 3"
check "the reads end within 40 s" wait_for 40 fio_done
FIO_RC=0
# shellcheck disable=SC2034  # read by the eval'd check below
wait "$FIO_PID" || FIO_RC=$?
FIO_PID=""
check "the reads saw no error across the move (exit code 0, err= 0)" \
  eval '(( FIO_RC == 0 )) && grep -q "err= 0" "$WORK/fio-switch.log"'

# --- 6. aggregate IOPS: three, two, one gateways -------------------------------------
# 4 KiB random reads, 32 in flight, 6 s, through the map, with 3, 2 and 1
# gateways active/optimized (one round-robin path group) and the others
# standby (a lower path group each priority; no I/O).
iops() {
  fio --name=iops --filename="/dev/mapper/$MAP" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
    --iodepth=32 --size=128M --time_based --runtime=6 --output-format=terse --terse-version=3 \
    | cut -d';' -f8
}
IOPS=()
# measure K STATES... PATH-GROUPS...: set the states, wait for the path
# groups, measure; only the K active/optimized gateways may carry the reads.
measure() {
  local k=$1 pgs; shift
  groups "${@:1:3}"
  pgs=$(printf '(%s) ' "${@:4}")
  check "gateways $4 active/optimized: multipath path groups ${pgs% }, the first active" \
    wait_for 30 pgs_are "${@:4}"
  snap; IOPS[k]=$(iops); delta
  echo "  gateways $4: ${IOPS[k]} IOPS; $(io_split)"
  # shellcheck disable=SC2086  # the group's gateways, word-split on purpose
  check "the reads went to gateways $4 only" only_on $4
}
measure 3 active/optimized active/optimized active/optimized "1 2 3"
measure 2 active/optimized active/optimized standby "1 2" "3"
measure 1 active/optimized standby standby "1" "2 3"
echo "IOPS (4 KiB random reads, 32 in flight, 6 s, through the map): three gateways ${IOPS[3]}," \
     "two ${IOPS[2]}, one ${IOPS[1]}"
check "all three measurements ran" \
  eval '[[ ${IOPS[1]} =~ ^[1-9][0-9]*$ && ${IOPS[2]} =~ ^[1-9][0-9]*$ && ${IOPS[3]} =~ ^[1-9][0-9]*$ ]]'
check "REPORT TARGET PORT GROUPS shows gateways 2 and 3 standby" rtpg_is active/optimized standby standby
# A READ(10) of 8 blocks sent straight to gateway 3 (SG_IO passes by the
# kernel's ALUA handler, which would refuse it itself).
standby_refuses() {
  local rc=0
  sg_raw -r 4096 "${SD[3]}" 28 00 00 00 00 00 00 00 08 00 > "$WORK/sg_raw.out" 2>&1 || rc=$?
  grep -iE 'sense key|standby' "$WORK/sg_raw.out" | sed 's/^ */  /'
  (( rc != 0 )) && grep -q "target port in standby state" "$WORK/sg_raw.out"
}
check "a standby gateway refuses a READ: NOT READY, target port in standby state (04/0B)" standby_refuses

# --- 7. planned maintenance: drain gateway 1, restart it, bring it back ---------------
# docs/several-gateways.md's procedure for restarting a gateway (e.g. for an
# upgrade of rbio-tgt), with verified writes running throughout: its group
# goes standby and the hosts move on the UNIT ATTENTION; tgtd stops with
# nothing in flight and starts again; the group comes back. Unlike the kill
# in 3, no I/O waits for a path to fail: the longest pause between two
# completions stays under a third of the kill's.
KILL_STALL=${STALL:-}
groups active/optimized active/non-optimized active/non-optimized
must "gateway 1 alone active/optimized again" wait_for 30 pgs_are "1" "2 3"
ACTIVE=1
mp_failover_start 16384 400   # about 40 s of writes: the whole procedure runs inside them
t_drain=$(now_ms)
groups standby active/optimized active/non-optimized
check "drained: I/O moves to gateway 2, and only there, within 20 s" wait_for 20 carried_by 0.5 2
echo "I/O on gateway 2 $(since "$t_drain") s after gateway 1 went standby"
check "gateway 1's path has no write in flight" test "$(writes_inflight "${SD[1]}")" -eq 0
gw 1
check "gateway 1's tgtd stops cleanly" tgtd_stop
must "gateway 1 starts again (same portal, same LU settings)" start_gateway 1
check "gateway 1's path is up again (standby: active ghost running) within 60 s" wait_for 60 path_up "${SD[1]}"
path_line "${SD[1]}" | sed 's/^/  /'
groups active/optimized active/non-optimized active/non-optimized
check "I/O moves back to gateway 1, and only there, within 20 s" wait_for 20 carried_by 0.5 1
echo "maintenance done $(since "$t_drain") s after the drain began"
check "it all happened in fio's write phase" test $(( $(writes "$DM") - W_BASE )) -lt 16384
mp_fio_end
MAINT_STALL=""
if read -r _ MAINT_STALL < <(failover_ms "$t_drain"); then
  echo "MAINTENANCE_STALL: longest pause between two completions $MAINT_STALL ms (the kill in 3: ${KILL_STALL:-?} ms)"
fi
check "no I/O waited for a failover (longest pause under a third of the kill's)" \
  eval '[[ $MAINT_STALL =~ ^[0-9]+$ && $KILL_STALL =~ ^[0-9]+$ ]] && (( MAINT_STALL * 3 < KILL_STALL ))'

# --- bench/multipath-compare.sh --kernel: one gateway against two ----------------------
# With --bench ROUNDS SECS the test goes on to measure, through the map,
# 4 KiB random reads and writes at 32 in flight and 1 MiB sequential reads
# and writes at 8, with gateway 1 alone active/optimized and with gateways 1
# and 2 (the others standby), rounds alternating the order; per point IOPS,
# MB/s and each gateway's tgtd CPU per I/O it served. Medians are the
# bench's to take: it prints one "POINT" line per measurement.
if [[ ${1:-} == --bench ]]; then
  BENCH_ROUNDS=${2:-3} BENCH_SECS=${3:-8}
  ticks_of() { gw "$1"; local f; read -ra f < "/proc/$(tgtd_pid)/stat"; echo $(( f[13] + f[14] )); }
  HZ=$(getconf CLK_TCK)
  bench_point() {
    local config=$1 rw=$2 bs=$3 depth=$4 t1 t2 out iops bw
    t1=$(ticks_of 1) t2=$(ticks_of 2); snap
    out=$(fio --name=bench --filename="/dev/mapper/$MAP" --direct=1 --ioengine=libaio --rw="$rw" --bs="$bs" \
          --iodepth="$depth" --size=192M --time_based --runtime="$BENCH_SECS" --output-format=terse \
          --terse-version=3) || return 1
    delta; t1=$(( $(ticks_of 1) - t1 )) t2=$(( $(ticks_of 2) - t2 ))
    # terse v3: field 8/7 read IOPS/KB/s, 49/48 write IOPS/KB/s
    iops=$(awk -F';' '{ print $8 + $49 }' <<<"$out") bw=$(awk -F';' '{ printf "%.1f", ($7 + $48) / 1024 }' <<<"$out")
    echo "POINT $config $rw $bs $depth $iops $bw" \
      "$(awk -v t="$t1" -v n="${DELTA[1]}" -v hz="$HZ" 'BEGIN { if (n) printf "%.1f", t * 1e6 / hz / n; else print "-" }')" \
      "$(awk -v t="$t2" -v n="${DELTA[2]}" -v hz="$HZ" 'BEGIN { if (n) printf "%.1f", t * 1e6 / hz / n; else print "-" }')" \
      "${DELTA[1]} ${DELTA[2]}"
  }
  for (( r = 1; r <= BENCH_ROUNDS; r++ )); do
    order=(one two); (( r % 2 == 0 )) && order=(two one)
    for w in "randread 4k 32" "randwrite 4k 32" "read 1M 8" "write 1M 8"; do
      read -r rw bs depth <<<"$w"
      for config in "${order[@]}"; do
        if [[ $config == one ]]; then
          groups active/optimized standby standby; must "bench: gateway 1 alone" wait_for 30 pgs_are "1" "2 3"
        else
          groups active/optimized active/optimized standby; must "bench: gateways 1 and 2" wait_for 30 pgs_are "1 2" "3"
        fi
        check "bench: $config, $rw $bs x$depth" bench_point "$config" "$rw" "$bs" "$depth"
      done
    done
  done
  echo "FAILOVER_MS ${FAILOVER:-}"
fi

# --- end -------------------------------------------------------------------------------
mp_end
finish
