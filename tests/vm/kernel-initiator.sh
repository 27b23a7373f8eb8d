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
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  exec "$HERE/../../scripts/vm/run.sh" --timeout 780 "$HERE/kernel-initiator.sh" "$@"
fi

source "$HERE/../lib/tgt-test.sh"
tgt_test_init 0
PORT=3260                  # the guest's own network stack: nothing else listens
PORTAL=127.0.0.1:$PORT
IQN=iqn.2026-11.io.rbio:vm
MNT="$WORK/mnt"
mkdir -p "$MNT"

vm_cleanup() {
  local rc=$?
  if (( rc != 0 )); then
    echo "--- iscsid log (last 20 lines) ---"; tail -20 "$WORK/iscsid.log" 2>/dev/null || true
    echo "--- kernel log (last 30 lines) ---"; dmesg | tail -30 || true
  fi
  # The guest is powered off afterwards anyway; unwinding in order still
  # lets tgtd remove the LU cleanly (and log its counters).
  umount "$MNT" 2>/dev/null || true
  iscsiadm -m node --logoutall=all >/dev/null 2>&1 || true
  if [[ -n ${ISCSID_PID:-} ]]; then kill "$ISCSID_PID" 2>/dev/null || true; fi
  (exit "$rc")
  tgt_test_cleanup
}
trap vm_cleanup EXIT

# must DESCRIPTION COMMAND...: a check the rest of the test depends on.
must() {
  local before=$checks_failed
  check "$@"
  if (( checks_failed != before )); then
    echo "stopping: the remaining checks depend on this one"
    finish || exit 1
  fi
}

# The sd disk of LUN $1 of our (only) session, once its /dev node exists.
DISK=""
wait_disk() {
  local lun=$1 i d
  for (( i = 0; i < 300; i++ )); do
    for d in /sys/class/scsi_disk/*:*:*:"$lun"/device/block/*; do
      [[ -e $d && -b /dev/${d##*/} ]] && { DISK=/dev/${d##*/}; return 0; }
    done
    sleep 0.1
  done
  return 1
}
wait_no_disk() {
  local i
  for (( i = 0; i < 100; i++ )); do
    [[ -b $1 ]] || return 0
    sleep 0.1
  done
  return 1
}

login() {
  iscsiadm -m node -T "$IQN" -p "$PORTAL" --login
}
logout() {
  iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout
}
no_session() {
  # iscsiadm exits 21 (ISCSI_ERR_NO_OBJS_FOUND) when there is no session.
  local rc=0
  iscsiadm -m session >/dev/null 2>&1 || rc=$?
  (( rc == 21 ))
}

# fio_job NAME DEVICE ARGS...: one verify job; prints its summary lines.
fio_job() {
  local name=$1 dev=$2; shift 2
  local log="$WORK/fio-$name.log"
  if ! fio --name="$name" --filename="$dev" --direct=1 --ioengine=libaio \
       --verify=crc32c --verify_fatal=1 "$@" --output="$log"; then
    cat "$log"; return 1
  fi
  grep -E '^ *(write|read):' "$log" | sed "s/^ */  $name: /"
  grep -q 'err= 0' "$log"
}

# LUN 1: a sparse file on the guest's tmpfs, with rbio's defaults (it does
# the I/O inline on memory file systems). LUN 2: the same with inline I/O
# off, so its I/O goes through io_uring.
BACKING="$WORK/disk.img" BACKING2="$WORK/disk2.img"
truncate -s 256M "$BACKING"
truncate -s 64M "$BACKING2"
must "tgtd starts with the build's module" tgtd_start
must "a target with two rbio LUNs is exported on $PORTAL" \
  eval 'new_target 1 vm && new_lun 1 1 "$BACKING" rbio && new_lun 1 2 "$BACKING2" rbio inline_io=off'

must "the kernel's iSCSI/TCP transport loads (module autoloading in the guest)" \
  modprobe iscsi_tcp
# The SCSI disk driver is loaded by udev on a real system (the scan only
# sends a uevent); the guest runs no udev, so load it before logging in.
must "the SCSI disk driver loads" modprobe sd_mod
# Its own session: iscsid signals its whole process group when it stops,
# which would otherwise include this script.
setsid iscsid -f > "$WORK/iscsid.log" 2>&1 &
ISCSID_PID=$!

discover() {
  local i
  # iscsid needs a moment before it accepts iscsiadm's requests.
  for (( i = 0; i < 50; i++ )); do
    iscsiadm -m discovery -t sendtargets -p "$PORTAL" 2>/dev/null | tee "$WORK/discovery" \
      | grep -q " $IQN\$" && return 0
    sleep 0.2
  done
  cat "$WORK/discovery"; return 1
}
must "sendtargets discovery finds the target" discover
# A failed login would otherwise be retried for about two minutes, and I/O
# on a lost session queued for as long.
for kv in node.session.initial_login_retry_max=2 node.conn[0].timeo.login_timeout=10 \
          node.session.timeo.replacement_timeout=20; do
  iscsiadm -m node -T "$IQN" -p "$PORTAL" -o update -n "${kv%%=*}" -v "${kv#*=}"
done
must "login succeeds" login
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
check "logout" logout
check "the disk goes away with the session" wait_no_disk "$DISK"
check "no session is left" no_session
must "login again" login
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
check "final logout" logout
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
