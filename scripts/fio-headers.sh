#!/usr/bin/env bash
# Fetches the C headers of exactly the installed fio version from Debian's
# source package into .cache/fio-src/<version>/ (ignored by git; never
# committed), for the fio external engine (initiator/fio/). fio's headers
# include config-host.h, which fio's ./configure writes: it is run on the
# fetched source with the options Debian's build uses that change no header
# (--disable-native). The engine's ABI is checked at build time against
# FIO_IOOPS_VERSION of these headers and at load time by fio itself.
#
# Usage: scripts/fio-headers.sh     (needs deb-src entries: scripts/setup.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
source "$ROOT/scripts/lib/debian-source.sh"
log() { printf 'fio-headers: %s\n' "$*"; }
die() { printf 'fio-headers: error: %s\n' "$*" >&2; exit 1; }

fio_version=$(installed_version fio) || die "fio is not installed"
dest=$(version_dir "$CACHE/fio-src" "$fio_version")
if cache_complete "$dest"; then
  log "fio $fio_version headers present in $dest"
  exit 0
fi

log "fetching Debian source of fio $fio_version"
mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/fio-XXXXXX")
trap 'rm -rf "$work"' EXIT
unpack_debian_source fio "$fio_version" "$work" || die "cannot fetch the source of fio $fio_version"
src="$work/src"
(cd "$src" && ./configure --disable-native) > "$work/configure.log" 2>&1 \
  || { tail -20 "$work/configure.log" >&2; die "fio's ./configure failed"; }
[[ -f $src/fio.h && -f $src/ioengines.h && -f $src/config-host.h ]] || die "fio $fio_version source has no fio.h/ioengines.h/config-host.h"
mkdir -p "$dest"
# Only headers (with their folders: fio.h includes "os/os.h", "lib/...").
(cd "$src" && find . -name '*.h' -not -path './debian/*' -print0 | tar --null -T - -cf -) | (cd "$dest" && tar -xf -)
mark_complete "$dest" "$fio_version"
log "fio $fio_version headers in $dest"
