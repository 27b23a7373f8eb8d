#!/usr/bin/env bash
# Errors from the disk under an LU: a FUSE file (faulty_disk) whose blocks
# 1000-1007 and 2048 fail with EIO stands for a disk with bad sectors. The
# host must get MEDIUM ERROR / WRITE ERROR (03, 0C/00) for writes and
# MEDIUM ERROR / UNRECOVERED READ ERROR (03, 11/00) for reads of exactly
# those blocks, also when the target merged them with good neighbours into
# one I/O, and the LU must keep serving every other block -- through
# io_uring (LUN 1) and inline I/O (LUN 2).
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 70
source "$(dirname "$0")/../lib/faulty-disk.sh"

check "the faulty disk is mounted" faulty_disk_mount --bad 1000:8 --bad 2048:1
tgtd_start >/dev/null
new_target 1 disk
check "LUN 1 on the faulty disk (I/O through io_uring)" new_lun 1 1 "$MNT/disk" rbio inline_io=off
check "LUN 2 on the same disk (inline I/O)" new_lun 1 2 "$MNT/disk" rbio inline_io=on

probe() { local lun=$1; shift; "$PROBE" "$(url disk "$lun")" "$@"; }
# shellcheck disable=SC2034  # read by the eval'd check below
READ_1000=880000000000000003e8000000010000   # READ(16), LBA 1000, 1 block
# shellcheck disable=SC2034  # read by the eval'd check below
READ_2048=88000000000000000800000000010000   # READ(16), LBA 2048, 1 block
# shellcheck disable=SC2034  # read by the eval'd check below
VERIFY_996_8=8f0000000000000003e4000000080000  # VERIFY(16), BYTCHK=0, LBA 996, 8 blocks
# shellcheck disable=SC2034  # read by the eval'd check below
VERIFY_980_8=8f0000000000000003d4000000080000  # VERIFY(16), BYTCHK=0, LBA 980, 8 blocks
for lun in 1 2; do
  check "LUN $lun: a read of bad block 1000 is MEDIUM ERROR, UNRECOVERED READ ERROR (03, 11/00)" \
    eval '[[ $(probe '"$lun"' cdb $READ_1000 512) == "CHECK key=3 asc=1100" ]]'
  check "LUN $lun: a read of bad block 2048 too" \
    eval '[[ $(probe '"$lun"' cdb $READ_2048 512) == "CHECK key=3 asc=1100" ]]'
  # The data buffer holds nothing of this read, and may hold what it last
  # carried for another initiator: none of it is sent, and the response
  # says so (a residual of all 512 bytes).
  check "LUN $lun: ... and sends no data with the CHECK CONDITION (underflow of 512)" \
    eval '[[ $(probe '"$lun"' cdb $READ_1000 512 --resid) == "CHECK key=3 asc=1100 underflow=512" ]]'
  # VERIFY with BYTCHK=0 checks the medium alone: it must read it.
  check "LUN $lun: VERIFY(16) of blocks 996-1003 (BYTCHK=0) is MEDIUM ERROR (03, 11/00)" \
    eval '[[ $(probe '"$lun"' cdb $VERIFY_996_8) == "CHECK key=3 asc=1100" ]]'
  check "LUN $lun: ... and GOOD off the bad blocks" \
    eval '[[ $(probe '"$lun"' cdb $VERIFY_980_8) == GOOD ]]'
  check "LUN $lun: a write to bad block 1003 is MEDIUM ERROR, WRITE ERROR (03, 0C/00)" \
    eval '[[ $(probe '"$lun"' write 1003 1 5 2>&1) == *"write of LBA 1003: CHECK key=3 asc=0c00" ]]'
  check "LUN $lun: the blocks around them are written and read back" \
    eval 'probe '"$lun"' write 990 10 '"$lun"' && probe '"$lun"' verify 990 10 '"$lun"' &&
          probe '"$lun"' write 1008 40 '"$lun"' && probe '"$lun"' verify 1008 40 '"$lun"' &&
          probe '"$lun"' write 2049 8 '"$lun"' && probe '"$lun"' verify 2049 8 '"$lun"
done

# 32 one-block commands at once, the middle 8 on bad blocks: the target
# merges adjacent ones into one readv/writev, and the one EIO it gets back
# must fail only those 8.
expect_only_bad() {
  local out=$1 bad=$2 lba result
  while read -r lba result; do
    if (( lba >= 1000 && lba <= 1007 )); then
      [[ $result == "CHECK key=3 asc=$bad" ]] || { echo "  LBA $lba: $result" >&2; return 1; }
    else
      [[ $result == GOOD ]] || { echo "  LBA $lba: $result" >&2; return 1; }
    fi
  done < "$out"
  [[ $(wc -l < "$out") == 32 ]]
}
probe 1 reads 984 32 > "$WORK/reads.out"
check "32 reads at once over blocks 984-1015: exactly the 8 bad ones fail (11/00)" \
  expect_only_bad "$WORK/reads.out" 1100
probe 1 writes 984 32 > "$WORK/writes.out"
check "32 writes at once over the same blocks: exactly the 8 bad ones fail (0C/00)" \
  expect_only_bad "$WORK/writes.out" 0c00
check "each failure is logged with its offset" log_has "read of 512 bytes at offset 512000 failed: Input/output error"
check "the LU still serves a full read/write pass off the bad blocks" \
  eval 'probe 1 write 3000 256 9 && probe 1 verify 3000 256 9'
tadm --op delete --mode logicalunit --tid 1 --lun 1
merged=$(sed -n 's/.*rbio: tid:1 lun:1: removed;.* merged=\([0-9]*\).*/\1/p' "$STATE/tgtd.log")
check "the target did merge commands (merged=$merged), so the per-command retry was exercised" \
  test "${merged:-0}" -gt 0
# tgtd's mount namespace holds a copy of the FUSE mount: stop it first.
tgtd_stop
check "the faulty disk injected the errors it was asked to" \
  faulty_disk_unmount "injected [1-9][0-9]* read errors, [1-9][0-9]* write errors"
finish
