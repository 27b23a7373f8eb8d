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
log() { printf 'fio-headers: %s\n' "$*"; }
die() { printf 'fio-headers: error: %s\n' "$*" >&2; exit 1; }

fio_version=$(dpkg-query -W -f='${Version}' fio 2>/dev/null) || die "fio is not installed"
[[ -n $fio_version ]] || die "fio is not installed"
dest="$CACHE/fio-src/${fio_version//:/_}"
if [[ -f $dest/.complete ]]; then
  log "fio $fio_version headers present in $dest"
  exit 0
fi

log "fetching Debian source of fio $fio_version"
mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/fio-XXXXXX")
trap 'rm -rf "$work"' EXIT
(
  cd "$work"
  apt-get source -q --download-only "fio=$fio_version" > apt-source.log 2>&1 \
    || { cat apt-source.log >&2; exit 1; }
  dsc=$(ls ./*.dsc 2>/dev/null | head -1)
  [[ -n $dsc ]] || { echo "fio-headers: error: apt-get source fio=$fio_version fetched nothing (deb-src enabled? apt-get update run?)" >&2; exit 1; }
  dpkg-source -q -x "$dsc" src > dpkg-source.log 2>&1 || { cat dpkg-source.log >&2; exit 1; }
  cd src
  ./configure --disable-native > ../configure.log 2>&1 || { tail -20 ../configure.log >&2; exit 1; }
)
src="$work/src"
[[ -f $src/fio.h && -f $src/ioengines.h && -f $src/config-host.h ]] || die "fio $fio_version source has no fio.h/ioengines.h/config-host.h"
mkdir -p "$dest"
# Only headers (with their folders: fio.h includes "os/os.h", "lib/...").
(cd "$src" && find . -name '*.h' -not -path './debian/*' -print0 | tar --null -T - -cf -) | (cd "$dest" && tar -xf -)
echo "$fio_version" > "$dest/VERSION"
touch "$dest/.complete"
log "fio $fio_version headers in $dest"
