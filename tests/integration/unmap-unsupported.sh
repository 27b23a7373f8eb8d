#!/usr/bin/env bash
# An LU on a file system that cannot punch holes (faulty_disk --no-punch,
# as NFSv3 or a FUSE file system without fallocate): UNMAP answers GOOD and
# leaves the blocks mapped with their data (SBC lets an unmap operation
# leave an LBA unchanged), logged once per LU, so hosts' fstrim and mkfs go
# on; WRITE SAME with UNMAP writes its zeros instead.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 77
source "$(dirname "$0")/../lib/faulty-disk.sh"

# UNMAP's parameter list: lengths 22 and 16, one descriptor: 8 blocks at LBA 320.
UNMAP_LIST=001600100000000000000000000001400000000800000000
BLOCK_OF_ZEROS=$(printf '0%.0s' $(seq 1 1024))
probe() { "$PROBE" "$(url disk 1)" "$@"; }
unmap() { probe cdb-out 42000000000000001800 "$UNMAP_LIST"; }                 # LBA 320, 8 blocks
write_same_unmap() { probe cdb-out 41080000014000000800 "$BLOCK_OF_ZEROS"; }  # the same, zeros
read_320() { probe cdb 28000000014000000100 512 --hex; }                      # LBA 320, 1 block
told() { grep -c "UNMAP: the backing file cannot punch holes" "$STATE/tgtd.log"; }

check "the disk is mounted, refusing to punch holes" faulty_disk_mount --no-punch
tgtd_start >/dev/null
new_target 1 disk
check "an LU on the disk" new_lun 1 1 "$MNT/disk" rbio
check "a pattern at LBA 320" probe write 320 8 7
check "UNMAP of it: GOOD" eval '[[ $(unmap) == GOOD ]]'
check "... the blocks keep their data" probe verify 320 8 7
check "... said once in tgtd's log" eval '[[ $(told) == 1 ]]'
check "a second UNMAP: GOOD" eval '[[ $(unmap) == GOOD ]]'
check "... not said again" eval '[[ $(told) == 1 ]]'
check "WRITE SAME with UNMAP of them: GOOD" \
  eval '[[ $(write_same_unmap) == GOOD ]]'
check "... and they read as zeros" \
  eval '[[ $(read_320) == "GOOD $BLOCK_OF_ZEROS" ]]'
tgtd_stop
check "the disk unmounts" faulty_disk_unmount "injected 0 read errors, 0 write errors"
finish
