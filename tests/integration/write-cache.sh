#!/usr/bin/env bash
# What the store asks the disk to make durable, per command and per the
# LU's write cache (WCE in the caching mode page, which hosts change with
# MODE SELECT and admins with tgt-admin's write-cache): with the cache on,
# only FUA writes and SYNCHRONIZE CACHE sync; with it off, every command
# that changes the medium does before its status -- writes, WRITE SAME with
# and without a data-out buffer, and the holes of UNMAP and WRITE SAME with
# UNMAP. faulty_disk --cached --log-syncs is the disk: a file with a page
# cache that logs each sync the kernel asks of it.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 76
source "$(dirname "$0")/../lib/faulty-disk.sh"

check "the disk is mounted" faulty_disk_mount --cached --log-syncs
tgtd_start >/dev/null
new_target 1 disk
check "LUN 1 on the disk (I/O through io_uring)" new_lun 1 1 "$MNT/disk" rbio inline_io=off
check "LUN 2 on the disk (inline I/O)" new_lun 1 2 "$MNT/disk" rbio inline_io=on

probe() { local lun=$1; shift; "$PROBE" "$(url disk "$lun")" "$@"; }
syncs() { awk '$0 == "faulty_disk: fsync" { n++ } END { print n + 0 }' "$WORK/faulty.log"; }
zeros() { printf '0%.0s' $(seq 1 $(($1 * 2))); }
BLOCK_OF_ZEROS=$(zeros 512)
# UNMAP's parameter list: lengths 22 and 16, one descriptor: 8 blocks at LBA 320.
UNMAP_LIST=001600100000000000000000000001400000000800000000

# one_command LUN NAME: one command of each kind; prints the target's answer.
one_command() {
  local lun=$1
  case $2 in
    write) probe "$lun" write 100 1 7 >/dev/null && echo GOOD ;;
    fua-write) probe "$lun" fua-writes 200 1 | sed 's/^200 //' ;;
    sync-cache) probe "$lun" cdb 35000000000000000000 ;;
    write-same) probe "$lun" cdb-out 41000000012c00000100 "$BLOCK_OF_ZEROS" ;;          # 1 block at LBA 300
    write-same-no-data) probe "$lun" cdb 41000000012c00000100 ;;                      # no data-out: zeros
    write-same-unmap) probe "$lun" cdb-out 41080000013000000800 "$BLOCK_OF_ZEROS" ;;  # 8 blocks at LBA 304
    unmap) probe "$lun" cdb-out 42000000000000001800 "$UNMAP_LIST" ;;
  esac
}

# expect_syncs LUN NAME none|some: the command is GOOD and made the disk
# sync (some) or not (none).
expect_syncs() {
  local lun=$1 name=$2 want=$3 before after got
  before=$(syncs)
  got=$(one_command "$lun" "$name")
  after=$(syncs)
  echo "  LUN $lun $name: $got, $((after - before)) syncs"
  [[ $got == GOOD ]] || return 1
  if [[ $want == none ]]; then ((after == before)); else ((after > before)); fi
}

ALL="write fua-write sync-cache write-same write-same-no-data write-same-unmap unmap"
for lun in 1 2; do
  for name in $ALL; do
    case $name in
      fua-write | sync-cache) want=some ;;
      *) want=none ;;
    esac
    check "LUN $lun, write cache on: $name syncs $want" expect_syncs "$lun" "$name" "$want"
  done
done

# WCE=0, as tgt-admin's "write-cache off" sets it.
for lun in 1 2; do
  check "LUN $lun: the write cache turned off (WCE=0)" \
    tadm --op update --mode logicalunit --tid 1 --lun "$lun" \
    --params mode_page=8:0:18:0x10:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0
  for name in $ALL; do
    check "LUN $lun, write cache off: $name syncs" expect_syncs "$lun" "$name" some
  done
done

# WRITE SAME to the end of an 8 GiB LU (NUMBER OF LOGICAL BLOCKS 0): tgt
# hands the store 2^24 blocks' bytes in 32 bits, wrapped to 0 -- it used to
# answer GOOD having unmapped nothing. A sparse file beside the disk.
truncate -s 8G "$WORK/big.img"
check "LUN 3: an 8 GiB LU" new_lun 1 3 "$WORK/big.img" rbio
LAST=$(((8 << 30) / 512 - 1))
check "a pattern in its last block" probe 3 write "$LAST" 1 5
check "WRITE SAME(16) with UNMAP, LBA 0, NUMBER 0 (to the end): GOOD" \
  eval '[[ $(probe 3 cdb-out 93080000000000000000000000000000 "$BLOCK_OF_ZEROS") == GOOD ]]'
check "... and the last block reads as zeros" \
  eval '[[ $(probe 3 cdb "880000000000$(printf %08x "$LAST")0000000100" 512 --hex) == "GOOD $BLOCK_OF_ZEROS" ]]'
# tgt's UNMAP leaves the answer of a failure on every UNMAP it hands the
# store (sense, and the whole parameter list as residual); a GOOD answer
# must carry neither.
check "UNMAP: GOOD, no residual (the whole parameter list was used)" \
  eval '[[ $(probe 3 cdb-out 42000000000000001800 "$UNMAP_LIST" --resid) == "GOOD underflow=0" ]]'
tgtd_stop
check "the disk unmounts" faulty_disk_unmount "injected 0 read errors, 0 write errors"
finish
