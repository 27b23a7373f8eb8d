#!/usr/bin/env bash
# A write the LU acknowledged from the page cache (write cache on) and the
# disk then failed to write back must reach the host as an error: the
# kernel reports such an error once per open file, to that file's next
# sync -- here the next FUA writes, which the target merges into one
# RWF_DSYNC write. Retried command by command, that write would succeed,
# every FUA write would be GOOD and so would every later SYNCHRONIZE CACHE:
# data lost without any host being told. faulty_disk --cached stands for
# the disk: its writeback cache holds writes until they are written back,
# and writing blocks 1000-1007 (one page) fails then. The same for plain
# writes to an LU opened O_SYNC (bsoflags sync), each of which syncs.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 75
source "$(dirname "$0")/../lib/faulty-disk.sh"

check "the disk is mounted" faulty_disk_mount --bad-writes 1000:8 --cached
tgtd_start >/dev/null
new_target 1 disk
check "LUN 1 on the cached faulty disk (I/O through io_uring)" new_lun 1 1 "$MNT/disk" rbio inline_io=off
check "LUN 2 on the same disk (inline I/O)" new_lun 1 2 "$MNT/disk" rbio inline_io=on

probe() { local lun=$1; shift; "$PROBE" "$(url disk "$lun")" "$@"; }
# SYNCHRONIZE CACHE(10), whole LU
# shellcheck disable=SC2034  # read by the eval'd check below
SYNC_CACHE=35000000000000000000

# "LBA RESULT" lines of fua-writes: every one GOOD or WRITE ERROR, and at
# least one WRITE ERROR.
reports_loss() {
  local out=$1 lba result bad=0
  while read -r lba result; do
    case $result in
      GOOD) ;;
      "CHECK key=3 asc=0c00") bad=$((bad + 1)) ;;
      *) echo "  LBA $lba: $result" >&2; return 1 ;;
    esac
  done < "$out"
  echo "  $bad of $(wc -l < "$out") FUA writes reported the write error"
  [[ $(wc -l < "$out") == 32 ]] && ((bad > 0))
}

for lun in 1 2; do
  check "LUN $lun: a write to block 1000 is acknowledged from the cache" probe "$lun" write 1000 8 "$lun"
  # Written back through another open file, whose own report this is; the
  # LU's file still has the error to hear.
  check "LUN $lun: writing block 1000 back fails (EIO)" eval '! sync "$MNT/disk"'
  probe "$lun" fua-writes 3000 32 > "$WORK/fua-$lun.out"
  check "LUN $lun: the next FUA writes report it (03, 0C/00), none other fails" \
    reports_loss "$WORK/fua-$lun.out"
  check "LUN $lun: the failure is logged" log_has "lun:$lun: write of 512 bytes at offset 1536000 failed: Input/output error"
  probe "$lun" fua-writes 3000 32 > "$WORK/again-$lun.out"
  check "LUN $lun: reported once, the error is gone: the same FUA writes are GOOD" \
    eval '[[ $(grep -c " GOOD$" "$WORK/again-$lun.out") == 32 ]]'
  check "LUN $lun: and so is SYNCHRONIZE CACHE" eval '[[ $(probe '"$lun"' cdb $SYNC_CACHE) == GOOD ]]'
done
# The same error reaching a file opened O_SYNC (bsoflags sync), where each
# write syncs: the merged plain writes that hear it fail as one, as FUA
# ones do. Opened now, it has heard of none of the errors above.
check "LUN 3 on the same disk, opened O_SYNC (I/O through io_uring)" \
  tadm --op new --mode logicalunit --tid 1 --lun 3 -b "$MNT/disk" --bstype rbio --bsoflags sync --bsopts inline_io=off
check "LUN 1: a write to block 1000 is acknowledged from the cache" probe 1 write 1000 8 1
check "writing block 1000 back fails (EIO)" eval '! sync "$MNT/disk"'
probe 3 writes 3000 32 > "$WORK/sync-3.out"
check "LUN 3: its next writes (merged, each synced) report it (03, 0C/00), none other fails" \
  reports_loss "$WORK/sync-3.out"
check "LUN 3: the failure is logged" log_has "lun:3: write of 512 bytes at offset"
tgtd_stop
check "the faulty disk failed the write-backs it was asked to" \
  faulty_disk_unmount "injected 0 read errors, [1-9][0-9]* write errors"
finish
