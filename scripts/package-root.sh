#!/usr/bin/env bash
# Prepares the clean Debian root that tests/package/ installs rbio's packages
# into: `debootstrap --variant=minbase --include=systemd` of the host's own
# release (the packages are built for its tgt and fio) from the host's
# Debian mirror (the URIs of /etc/apt/sources.list*), with that mirror and
# its security suite in the root's sources, and a policy-rc.d that keeps
# packages' maintainer scripts from starting daemons in it (the usual for a
# chroot). systemd is there as on a server: its unit files and
# systemd-analyze (no systemd runs in the root).
#
# Cached in .cache/package-root/ (like the VM guest's kernel in .cache/vm/):
#   root/       the clean root, never changed by a test (they mount it as the
#               lower layer of an overlay); its package lists are refreshed
#               here when older than 12 hours, so that apt finds what the
#               mirror has now
#   archives/   apt's downloaded .deb files, shared by every run (apt
#               still resolves every dependency; this only saves downloads)
#   stamp       release, mirror and a hash of this script: a change rebuilds
#   lock        prepare takes it exclusively, a test shared
# A current cache costs well under a second; a missing one a few minutes.
#
# Usage: scripts/package-root.sh [--force] [--quiet]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache/package-root"
LISTS_MAX_AGE=$((12 * 3600))

force=0 quiet=0
for a in "$@"; do
  case $a in
    --force) force=1 ;;
    --quiet) quiet=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "package-root: unknown option $a" >&2; exit 2 ;;
  esac
done
log() { (( quiet )) || printf 'package-root: %s\n' "$*" >&2; }
die() { printf 'package-root: error: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (debootstrap, chroot)"
command -v debootstrap >/dev/null || die "no debootstrap: run scripts/setup.sh"

# shellcheck source=/dev/null
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $codename ]] || die "no VERSION_CODENAME in /etc/os-release"

# mirror_for SUITE: the URI the host's apt sources use for SUITE (deb822
# .sources files or one-line sources.list entries), first found.
mirror_for() {
  local suite=$1 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    # deb822 stanzas are separated by blank lines.
    awk -v s="$suite" '
      BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^Types:/) types = $i
          if ($i ~ /^URIs:/) uris = $i
          if ($i ~ /^Suites:/) suites = $i
        }
        if (types ~ /[ \t]deb([ \t]|$)/ && (" " suites " ") ~ ("[ \t]" s "[ \t]")) {
          sub(/^URIs:[ \t]*/, "", uris); split(uris, u, /[ \t]+/); print u[1]; exit
        }
      }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++
                        if ($(i + 1) == s) { print $i; exit } }' "$f"
  done
}
mirror=$(mirror_for "$codename" | head -1)
[[ -n $mirror ]] || die "no Debian mirror for $codename in /etc/apt/sources.list*"
security=$(mirror_for "$codename-security" | head -1)

mkdir -p "$CACHE/archives/partial"
exec 8> "$CACHE/lock"
flock 8

stamp_want="codename=$codename mirror=$mirror security=${security:-none} script=$(sha256sum "$0" | cut -c1-16)"
rootfs="$CACHE/root"

# chroot_run ROOT COMMAND...: COMMAND in ROOT with /proc, /dev and the
# host's resolv.conf, in a private mount namespace (nothing stays mounted).
chroot_run() {
  local r=$1; shift
  unshare --mount --propagation private --pid --fork -- bash -c '
    set -e
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount --bind /dev "$r/dev"
    mount --bind "$(realpath /etc/resolv.conf)" "$r/etc/resolv.conf"
    exec chroot "$r" "$@"' chroot-run "$r" "$@"
}

lists_age() {
  local f=$rootfs/var/lib/apt/lists
  echo $(( $(date +%s) - $(stat -c %Y "$f" 2>/dev/null || echo 0) ))
}

if (( ! force )) && [[ -f $CACHE/stamp && $(cat "$CACHE/stamp") == "$stamp_want" && -d $rootfs ]]; then
  if (( $(lists_age) > LISTS_MAX_AGE )); then
    log "refreshing the root's package lists (apt-get update)"
    chroot_run "$rootfs" apt-get update -q > "$CACHE/update.log" 2>&1 \
      || { cat "$CACHE/update.log" >&2; die "apt-get update in $rootfs failed"; }
    touch "$rootfs/var/lib/apt/lists"
  fi
  log "cache current ($stamp_want)"
  exit 0
fi

t0=$(date +%s)
rm -f "$CACHE/stamp"
new="$CACHE/root.new"
rm -rf "$new" "$rootfs"
log "debootstrap --variant=minbase --include=systemd $codename from $mirror"
debootstrap --variant=minbase --include=systemd "$codename" "$new" "$mirror" > "$CACHE/debootstrap.log" 2>&1 \
  || { tail -30 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }

# The root's apt sources: the host's mirror and security suite, as deb822.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
{
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: %s\n' \
    "$mirror" "$codename" "$codename" "$keyring"
  if [[ -n $security ]]; then
    printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: %s\n' \
      "$security" "$codename" "$keyring"
  fi
} > "$new/etc/apt/sources.list.d/debian.sources"
rm -f "$new/etc/apt/sources.list"
# No daemon starts from a maintainer script in this root (invoke-rc.d and
# deb-systemd-invoke ask policy-rc.d; 101: action forbidden).
printf '#!/bin/sh\nexit 101\n' > "$new/usr/sbin/policy-rc.d"
chmod 755 "$new/usr/sbin/policy-rc.d"
log "apt-get update in the root"
chroot_run "$new" apt-get update -q > "$CACHE/update.log" 2>&1 \
  || { cat "$CACHE/update.log" >&2; die "apt-get update in the new root failed"; }
chroot_run "$new" apt-get clean
mv "$new" "$rootfs"
echo "$stamp_want" > "$CACHE/stamp"
log "ready: $rootfs ($(du -sh "$rootfs" | cut -f1)) in $(( $(date +%s) - t0 )) s"
