#!/usr/bin/env bash
# Prepares everything scripts/vm/run.sh needs to boot a nested qemu guest
# that runs Debian's kernel on the host's own root file system:
#
#   - Debian packages: qemu (TCG; KVM does not work on these machines),
#     busybox-static/cpio/kmod (to build the initramfs), and what the VM
#     tests run inside the guest (open-iscsi, e2fsprogs, fio, tgt);
#   - the kernel package that linux-image-amd64 depends on, downloaded with
#     `apt-get download` (never installed: the host kernel is not Debian's)
#     and extracted into .cache/vm/kernel/, with depmod run on it;
#   - a busybox initramfs (.cache/vm/initrd.gz) holding scripts/vm/guest-init.sh
#     as /init and the few modules needed to reach the host's files (virtio,
#     9p, overlay).
#
# Idempotent: a stamp (.cache/vm/stamp) records the kernel version and a
# hash of every input of the initramfs; when both match, the run only checks
# the packages (dpkg-query) and exits in well under a second.
#
# Usage: scripts/vm/prepare.sh [--force] [--quiet]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$ROOT/.cache/vm"

PACKAGES=(
  qemu-system-x86              # the emulator (TCG)
  busybox-static cpio kmod     # initramfs: a static shell; cpio archive; modprobe/depmod
  open-iscsi                   # the kernel initiator's userspace (iscsid, iscsiadm)
  e2fsprogs util-linux         # mkfs.ext4/e2fsck; lsblk, blkdiscard, unshare
  fio                          # block-level verify jobs inside the guest
  sg3-utils                    # sg_raw: raw SCSI commands to a disk (vm.kernel-initiator-failures);
                               # sg_inq/sg_vpd/sg_rtpg (vm.multipath)
  multipath-tools              # multipath/multipathd over several gateways (vm.multipath)
  nftables                     # the guest's way to a Ceph cluster on the host (vm.rbd-multipath)
  dmsetup                      # dm-log-writes devices under the LUs (vm.crash-durability)
  tgt                          # the target the tests load bs_rbio.so into
)

# Modules the initramfs loads before it can see the host's files. Their
# dependencies are resolved with modprobe --show-depends, so only the
# leaves are named here.
EARLY_MODULES=(virtio_pci 9pnet_virtio 9p overlay)

force=0 quiet=0
for a in "$@"; do
  case $a in
    --force) force=1 ;;
    --quiet) quiet=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "prepare: unknown option $a" >&2; exit 2 ;;
  esac
done

log() { (( quiet )) || printf 'vm-prepare: %s\n' "$*" >&2; }
die() { printf 'vm-prepare: error: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (apt-get, depmod on the cache)"

t0=$(date +%s.%N)
mkdir -p "$CACHE"
# One preparation at a time (ctest may start the fixture while a developer
# runs the script by hand); the lock lives in the cache folder itself.
exec 8> "$CACHE/prepare.lock"
flock 8

# --- packages --------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
apt_updated=0
if (( ${#missing[@]} )); then
  # Only refresh the package lists when something has to be installed:
  # an up-to-date machine then makes no network request at all.
  log "apt-get update"
  apt-get update -q >/dev/null || die "apt-get update failed"
  apt_updated=1
  log "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
fi

# --- which kernel ------------------------------------------------------------
# The metapackage names the current kernel ABI; follow it so the guest runs
# what a freshly installed Debian 12 would run.
kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null \
    | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1
}
# apt-cache takes about a second to load its cache, most of a cached run:
# remember its answer for as long as the package lists are unchanged (apt-get
# update replaces files in /var/lib/apt/lists, which changes its mtime).
lists_key=$(stat -c %Y /var/lib/apt/lists 2>/dev/null || echo none)
kpkg=
if [[ -f $CACHE/kernel-pkg ]] && read -r key cached < "$CACHE/kernel-pkg" && [[ $key == "$lists_key" ]]; then
  kpkg=$cached
else
  kpkg=$(kernel_pkg)
fi
if [[ -z $kpkg ]] && (( ! apt_updated )); then
  log "apt-get update (no package lists know linux-image-amd64)"
  apt-get update -q >/dev/null || die "apt-get update failed"
  apt_updated=1
  kpkg=$(kernel_pkg)
fi
[[ -n $kpkg ]] || die "cannot tell which kernel linux-image-amd64 depends on"
echo "$(stat -c %Y /var/lib/apt/lists) $kpkg" > "$CACHE/kernel-pkg"
kver=${kpkg#linux-image-}

# --- is the cache current? ---------------------------------------------------
# Everything that goes into the initramfs: this script, the guest's init,
# busybox's version, and the kernel version (its modules are copied in).
stamp_for() {
  local h
  h=$( {
    cat "$HERE/prepare.sh" "$HERE/guest-init.sh"
    dpkg-query -W -f='${Version}' busybox-static
    echo "$1"
  } | sha256sum | cut -c1-16)
  echo "kver=$1 inputs=$h"
}
stamp_want=$(stamp_for "$kver")
if (( ! force )) && [[ -f $CACHE/stamp && $(cat "$CACHE/stamp") == "$stamp_want" \
      && -f $CACHE/initrd.gz && -f $CACHE/kernel/boot/vmlinuz-$kver ]]; then
  log "cache current ($stamp_want)"
  exit 0
fi
rm -f "$CACHE/stamp"

# --- kernel ------------------------------------------------------------------
KDIR="$CACHE/kernel"
if [[ ! -f $KDIR/.complete-$kver ]]; then
  log "downloading $kpkg"
  dl=$(mktemp -d "$CACHE/dl.XXXXXX")
  trap 'rm -rf "$dl"' EXIT
  # apt-get download runs as _apt when it can; it cannot write to a folder
  # under /work, so it falls back to root and says so: silence that notice.
  if ! (cd "$dl" && apt-get download -q "$kpkg" >download.log 2>&1); then
    if (( ! apt_updated )); then
      # The lists may name a version the mirror has dropped: refresh, retry.
      log "apt-get update (download failed: stale package lists?)"
      apt-get update -q >/dev/null || die "apt-get update failed"
      kpkg=$(kernel_pkg); kver=${kpkg#linux-image-}
      [[ -n $kpkg ]] || die "cannot tell which kernel linux-image-amd64 depends on"
      stamp_want=$(stamp_for "$kver")
      (cd "$dl" && apt-get download -q "$kpkg" >download.log 2>&1) \
        || { cat "$dl/download.log" >&2; die "apt-get download $kpkg failed"; }
    else
      cat "$dl/download.log" >&2; die "apt-get download $kpkg failed"
    fi
  fi
  log "extracting $kpkg into $KDIR"
  rm -rf "$KDIR"
  mkdir -p "$KDIR"
  dpkg-deb -x "$dl"/"$kpkg"_*.deb "$KDIR"
  rm -rf "$dl"; trap - EXIT
  [[ -f $KDIR/boot/vmlinuz-$kver && -d $KDIR/lib/modules/$kver ]] \
    || die "$kpkg has no boot/vmlinuz-$kver or lib/modules/$kver"
  # The package ships no modules.dep (its postinst runs depmod); make one
  # so modprobe works inside the guest with the cache bound on /lib/modules.
  depmod -b "$KDIR" "$kver"
  touch "$KDIR/.complete-$kver"
fi

# --- initramfs -----------------------------------------------------------------
log "building the initramfs"
stage=$(mktemp -d "$CACHE/initramfs.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,sbin,proc,sys,dev,newroot,lower,rw,out,modules}
cp /bin/busybox "$stage/bin/busybox"
# Applet links made now rather than at boot, so /bin/sh exists for the
# kernel's module helper (the modprobe forwarder below) at any moment.
for applet in $("$stage/bin/busybox" --list); do
  [[ $applet == busybox ]] || ln -sf busybox "$stage/bin/$applet"
done
# The forwarder: the kernel runs its module helper in the initramfs's root
# (the test runs chrooted), where there is no real modprobe. Forward the
# request to the host's modprobe inside the chroot, which sees the guest
# kernel's modules bound on /lib/modules. guest-init.sh points
# /proc/sys/kernel/modprobe at it.
cat > "$stage/sbin/modprobe-forward" <<'FWD'
#!/bin/sh
exec /bin/chroot /newroot /sbin/modprobe "$@"
FWD
chmod 755 "$stage/sbin/modprobe-forward"
cp "$HERE/guest-init.sh" "$stage/init"
chmod 755 "$stage/init"
# Early modules in dependency order; "builtin" lines need nothing.
n=0
: > "$stage/modules/order"
while read -r kind path _; do
  [[ $kind == insmod ]] || continue
  name=$(basename "$path")
  grep -qx "$name" "$stage/modules/order" && continue
  case $name in
    *.ko) cp "$path" "$stage/modules/$name" ;;
    # busybox insmod reads plain ELF only; decompress if Debian ever ships xz.
    *.ko.xz) xz -dc "$path" > "$stage/modules/${name%.xz}"; name=${name%.xz} ;;
    *) die "unexpected module file $path" ;;
  esac
  echo "$name" >> "$stage/modules/order"
  n=$((n + 1))
done < <(modprobe -d "$KDIR" -S "$kver" --show-depends -a "${EARLY_MODULES[@]}")
(( n > 0 )) || die "modprobe --show-depends found no early modules"
echo "$kver" > "$stage/kver"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) \
  | gzip -1 > "$CACHE/initrd.gz.new"
mv "$CACHE/initrd.gz.new" "$CACHE/initrd.gz"
rm -rf "$stage"; trap - EXIT
ln -sfn "kernel/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
echo "$kver" > "$CACHE/kver"
echo "$stamp_want" > "$CACHE/stamp"
log "ready: kernel $kver, $n early modules, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
