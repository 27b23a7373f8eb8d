#!/bin/sh
# PID 1 of the rbio test guest (busybox sh, packed into the initramfs by
# scripts/vm/prepare.sh). It turns the host's root file system, shared
# read-only over 9p, into a writable root (tmpfs overlay), chroots into it
# and runs the command that scripts/vm/run.sh wrote into the second,
# writable 9p share ("out"). The command's stdout, stderr and exit code go
# to files in that share; run.sh reads them there, never from the console.
# Whatever happens, the guest powers off (qemu runs with -no-reboot, and
# the kernel with panic=-1, so a panic ends qemu too).
export PATH=/bin:/sbin

fail() {
  echo "vm-init: error: $*" >&2
  # Tell run.sh why no exit code is coming, if the share is up.
  [ -w /out ] && echo "$*" >> /out/init-error
  sync
  poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

# virtio, 9p and overlay, in the dependency order prepare.sh recorded.
for m in $(cat /modules/order); do
  insmod "/modules/$m" || fail "insmod $m failed"
done

cache=
for w in $(cat /proc/cmdline); do
  case $w in rbiovm_cache=*) cache=${w#rbiovm_cache=} ;; esac
done
[ -n "$cache" ] || fail "no rbiovm_cache= on the kernel command line"

# A larger msize than the default 8 KiB makes reading the host's binaries
# and libraries over 9p several times faster.
opts=trans=virtio,version=9p2000.L,msize=524288
mount -t 9p -o "$opts" out /out || fail "cannot mount the out share"
mount -t 9p -o "$opts",ro hostroot /lower || fail "cannot mount the host root"
: > /out/booted

# Writable root: the host's files below, guest changes in guest memory.
mount -t tmpfs -o mode=755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
  || fail "cannot mount the overlay root"

R=/newroot
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 shm $R/dev/shm
# udev would make these; bash's <(...) and `tee /dev/stderr` need them.
ln -sfn /proc/self/fd $R/dev/fd
ln -sfn /proc/self/fd/0 $R/dev/stdin
ln -sfn /proc/self/fd/1 $R/dev/stdout
ln -sfn /proc/self/fd/2 $R/dev/stderr
# A fresh /run: the host's pid files and sockets would otherwise show
# through the overlay. /tmp stays the host's (writes land in the overlay's
# tmpfs): a checkout and its build may live there, as CI's clone may.
mount -t tmpfs -o mode=755 run $R/run
mkdir -p $R/run/lock $R/run/vm-out
mount --bind /out $R/run/vm-out
# The guest kernel's modules (extracted by prepare.sh, visible through the
# host root) replace whatever the host has in /lib/modules.
mkdir -p $R/lib/modules
mount --bind "/lower$cache/kernel/lib/modules" $R/lib/modules \
  || fail "cannot bind the kernel modules from $cache/kernel/lib/modules"

# Module autoloading: the kernel runs its helper in this (the initramfs's)
# root, which has no modprobe; the forwarder runs the host's modprobe in
# the chroot, which sees the bound modules.
echo /sbin/modprobe-forward > /proc/sys/kernel/modprobe

# The host's open-iscsi records would make iscsid log in to targets that do
# not exist here: start every guest with none (whiteouts in the overlay).
rm -rf $R/etc/iscsi/nodes $R/etc/iscsi/send_targets
mkdir -p $R/etc/iscsi/nodes $R/etc/iscsi/send_targets

ip link set lo up
hostname rbio-vm

# Run the command (run.sh wrote /out/cmd); the output files exist already
# (run.sh created them to follow them), so append.
chroot $R /bin/bash /run/vm-out/cmd >> /out/stdout 2>> /out/stderr < /dev/null
rc=$?
# Write-then-rename: run.sh never sees a half-written exit code.
echo $rc > /out/exit-code.new && mv /out/exit-code.new /out/exit-code
sync
poweroff -f
