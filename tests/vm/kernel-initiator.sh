#!/usr/bin/env bash
# The real Linux iSCSI initiator (open-iscsi + the kernel's iscsi_tcp and
# sd) against the stock tgtd serving an rbio LUN, inside a qemu guest
# (the host kernel has no SCSI or iSCSI). Covers what a host does with a
# disk: discovery, login, mkfs and a file system whose files survive a
# logout/login, block-level verify jobs (fio, direct I/O), discard (the
# LUN is thin provisioned: blkdiscard must punch the backing file and read
# back zeros), logout.
#
# Run on the host, it starts itself in a guest through scripts/vm/run.sh
# (ctest does that explicitly: test vm.kernel-initiator). Inside the guest
# it runs as root with the host's files and the guest's own loopback, so
# tgtd uses the standard port 3260.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest.sh" 780 "$@"

source "$HERE/lib.sh"
IQN=iqn.2026-11.io.rbio:vm

# LUN 1: a sparse file on the guest's tmpfs, with rbio's defaults (it does
# the I/O inline on memory file systems). LUN 2: the same with inline I/O
# off, so its I/O goes through io_uring.
BACKING="$WORK/disk.img" BACKING2="$WORK/disk2.img"
truncate -s 256M "$BACKING"
truncate -s 64M "$BACKING2"
must "tgtd starts with the build's module" tgtd_start
must "a target with two rbio LUNs is exported on $PORTAL" \
  eval 'new_target 1 vm && new_lun 1 1 "$BACKING" rbio && new_lun 1 2 "$BACKING2" rbio inline_io=off'

start_initiator
must "sendtargets discovery finds the target" discover "$IQN"
# A failed login would otherwise be retried for about two minutes, and I/O
# on a lost session queued for as long.
set_node "$IQN" node.session.initial_login_retry_max=2 node.conn[0].timeo.login_timeout=10 \
  node.session.timeo.replacement_timeout=20
must "login succeeds" login "$IQN"
must "the LUN appears as a SCSI disk" wait_disk 1
echo "LUN 1 is $DISK ($(cat "/sys/block/${DISK#/dev/}/size") sectors)"
check "the disk has the LUN's size (256 MiB)" \
  test "$(blockdev --getsize64 "$DISK")" -eq $((256 << 20))

# --- a file system that survives logout/login -------------------------------
must "mkfs.ext4 on the disk" mkfs.ext4 -q -F "$DISK"
must "mount it" mount "$DISK" "$MNT"
write_files() {
  local i
  for i in 1 2 3 4; do head -c $((i << 20)) /dev/urandom > "$MNT/file$i"; done
  # Small files of an odd size, made by one process: under emulation every
  # exec costs a good fraction of a second.
  mkdir "$MNT/small"
  head -c 500000 /dev/urandom | split -b 9973 - "$MNT/small/"
  (cd "$MNT" && find . -type f | sort | xargs sha256sum) > "$WORK/sums"
  sync
}
check "write 10 MiB in 55 files and checksum them" write_files
check "unmount" umount "$MNT"
check "logout" logout "$IQN"
check "the disk goes away with the session" wait_no_disk "$DISK"
check "no session is left" no_session
must "login again" login "$IQN"
must "the LUN appears again" wait_disk 1
check "e2fsck finds the file system clean" e2fsck -f -n "$DISK"
must "mount it again" mount "$DISK" "$MNT"
check "every file reads back with the same checksum" \
  eval '(cd "$MNT" && sha256sum --quiet -c "$WORK/sums")'
check "unmount again" umount "$MNT"

# --- block level: fio writes, then reads back and verifies --------------------
check "fio 4 KiB random writes, 32 in flight, crc32c verified" \
  fio_job rand4k "$DISK" --rw=randwrite --bs=4k --iodepth=32 --size=32M --runtime=20
check "fio 1 MiB sequential writes, 8 in flight, crc32c verified" \
  fio_job seq1m "$DISK" --rw=write --bs=1M --iodepth=8 --size=64M --offset=64M
DISK1=$DISK
check "LUN 2 (inline_io=off) appears as a second disk" wait_disk 2
if [[ $DISK != "$DISK1" ]]; then
  check "fio 4 KiB random writes on LUN 2 (through io_uring), crc32c verified" \
    fio_job rand4k-uring "$DISK" --rw=randwrite --bs=4k --iodepth=32 --size=16M --runtime=20
  check "fio 1 MiB sequential writes on LUN 2, crc32c verified" \
    fio_job seq1m-uring "$DISK" --rw=write --bs=1M --iodepth=8 --size=32M
fi
DISK=$DISK1

# --- discard on a thin-provisioned LUN ---------------------------------------
sd=${DISK#/dev/}
gran=$(cat "/sys/block/$sd/queue/discard_granularity")
dmax=$(cat "/sys/block/$sd/queue/discard_max_bytes")
echo "discard: granularity $gran, max $dmax, mode $(cat "/sys/block/$sd"/device/scsi_disk/*/provisioning_mode)"
lsblk -D "$DISK"
check "lsblk -D shows discard support" \
  eval '[[ $(lsblk -D -n -b -o DISC-MAX "$DISK" | tr -d " ") -gt 0 ]]'
OFF=$((160 << 20)) LEN=$((16 << 20))
region() { dd if="$DISK" iflag=direct bs=1M skip=$((OFF >> 20)) count=$((LEN >> 20)) status=none; }
check "write 16 MiB of random data at 160 MiB" \
  dd if=/dev/urandom of="$DISK" oflag=direct bs=1M seek=$((OFF >> 20)) count=$((LEN >> 20)) status=none
check "the region is not zero before the discard" eval '! cmp -s <(region) <(head -c "$LEN" /dev/zero)'
before=$(stat -c %b "$BACKING")
check "blkdiscard the region" blkdiscard -o "$OFF" -l "$LEN" "$DISK"
check "the discarded region reads back as zeros" cmp <(region) <(head -c "$LEN" /dev/zero)
after=$(stat -c %b "$BACKING")
echo "backing file: $((before / 2048)) MiB allocated before the discard, $((after / 2048)) MiB after"
check "the discard punched the backing file (at least 15 MiB freed)" \
  test $(( (before - after) / 2048 )) -ge 15

# --- end ----------------------------------------------------------------------
check "final logout" logout "$IQN"
check "no session is left at the end" no_session
kill "$ISCSID_PID" 2>/dev/null || true; wait "$ISCSID_PID" 2>/dev/null || true; ISCSID_PID=""
tgtd_stop
# counters LUN PATTERN: its removal line was logged and matches PATTERN.
# (It echoes rather than tee /dev/stderr: run.sh's output files are opened
# for appending, and reopening /dev/stderr by name would truncate them.)
counters() {
  local line
  line=$(grep "rbio: tid:1 lun:$1: removed" "$STATE/tgtd.log") || return 1
  echo "$line"
  # shellcheck disable=SC2053  # $2 is a glob pattern on purpose
  [[ $line == *" errors=0"* && $line == $2 ]]
}
check "LUN 1's counters: no I/O errors, its I/O done inline (tmpfs)" counters 1 '* inline_ios=[1-9]*'
check "LUN 2's counters: no I/O errors, every I/O through io_uring" counters 2 '* inline_ios=0 *'
finish
