#!/usr/bin/env bash
# An LU of 512-byte blocks on a block device with 4096-byte logical sectors
# (a loop device with --sector-size 4096, as a 4Kn disk or an NVMe
# namespace formatted 4K): the kernel discards and zeroes whole device
# sectors only (fallocate fails with EINVAL otherwise), so
# - UNMAP frees the sectors its ranges cover whole and leaves the partly
#   covered ones mapped with their data (SBC lets an unmap operation leave
#   an LBA unchanged): GOOD, where it used to fail with MEDIUM ERROR and
#   hosts' fstrim with it;
# - WRITE SAME with UNMAP of a partly covered sector writes its zeros.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 78
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
[[ -x $PROBE ]] || { echo "no $PROBE: build first" >&2; exit 2; }
command -v losetup >/dev/null || skip_test "no losetup"

LOOP=""
loop_cleanup() {
  local rc=$?
  # tgtd first: it holds the device open.
  "$SANDBOX" stop "$STATE" >/dev/null 2>&1 || rc=1
  if [[ -n $LOOP ]]; then losetup -d "$LOOP" || rc=1; fi
  tgt_test_cleanup "$rc"
}
trap loop_cleanup EXIT

truncate -s 16M "$WORK/disk.img"
LOOP=$(losetup --find --show --sector-size 4096 "$WORK/disk.img") ||
  skip_test "losetup --sector-size 4096 failed (no loop devices here?)"
check "the loop device has 4096-byte logical sectors" \
  eval '[[ $(blockdev --getss "$LOOP") == 4096 ]]'

probe() { "$PROBE" "$(url disk 1)" "$@"; }
# unmap LBA BLOCKS: UNMAP of one range (parameter list lengths 22 and 16).
unmap() { probe cdb-out 42000000000000001800 "$(printf '0016001000000000%016x%08x00000000' "$1" "$2")"; }
# write_same_unmap LBA BLOCKS: WRITE SAME(10) with UNMAP, a block of zeros.
write_same_unmap() {
  probe cdb-out "$(printf '4108%08x00%04x00' "$1" "$2")" "$(printf '0%.0s' $(seq 1 1024))"
}
zeros() { [[ $(probe cdb "$(printf '28000000%04x00000100' "$1")" 512 --hex) == "GOOD $(printf '0%.0s' $(seq 1 1024))" ]]; }

tgtd_start >/dev/null
new_target 1 disk
check "an LU of 512-byte blocks on it" new_lun 1 1 "$LOOP" rbio
check "a pattern in LBAs 0-31 (device sectors 0-3)" probe write 0 32 7
check "UNMAP of LBAs 1-2, inside device sector 0: GOOD" eval '[[ $(unmap 1 2) == GOOD ]]'
check "... they keep their data" probe verify 0 8 7
check "UNMAP of LBAs 7-24 (sector 1 and 2 whole, 0 and 3 in part): GOOD" eval '[[ $(unmap 7 18) == GOOD ]]'
check "... sectors 1 and 2 read as zeros" eval 'zeros 8 && zeros 15 && zeros 16 && zeros 23'
check "... LBA 7 and LBA 24, in the partly covered sectors, keep their data" \
  eval 'probe verify 7 1 7 && probe verify 24 8 7'
out=$(write_same_unmap 25 2) || :
check "WRITE SAME with UNMAP of LBAs 25-26, inside sector 3: GOOD ($out)" test "$out" == GOOD
check "... and they read as zeros" eval 'zeros 25 && zeros 26'
check "... the rest of sector 3 keeps its data" eval 'probe verify 24 1 7 && probe verify 27 5 7'
tadm --op delete --mode logicalunit --tid 1 --lun 1
check "no command ended in error (the LU's counters at its removal)" \
  log_has "rbio: tid:1 lun:1: removed;.* errors=0$"
finish
