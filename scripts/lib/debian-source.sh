# shellcheck shell=bash
# Debian source packages of exactly the installed version of a package, for
# the headers rbio builds against (tgt's in scripts/setup.sh, fio's in
# scripts/fio-headers.sh). Sourced; needs deb-src entries (scripts/setup.sh
# writes them) and dpkg-dev. The caches live under .cache/ and are never
# committed.

# installed_version PACKAGE: its installed Debian version on stdout.
installed_version() {
  local v
  v=$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null) && [[ -n $v ]] && echo "$v"
}

# version_dir BASE VERSION: BASE/VERSION with the epoch's ":" made "_" (a
# colon upsets include-path lists).
version_dir() { echo "$1/${2//:/_}"; }

# cache_complete DIR: DIR was filled completely by an earlier run.
cache_complete() { [[ -f $1/.complete ]]; }

# mark_complete DIR VERSION: records the version and marks DIR complete.
mark_complete() { echo "$2" > "$1/VERSION" && touch "$1/.complete"; }

# unpack_debian_source PACKAGE VERSION WORKDIR: downloads Debian's source
# package PACKAGE=VERSION into WORKDIR and unpacks it into WORKDIR/src. On
# failure it prints why (apt's or dpkg-source's output) on stderr and
# returns 1.
unpack_debian_source() {
  local pkg=$1 version=$2 work=$3 dsc
  if ! (cd "$work" && apt-get source -q --download-only "$pkg=$version") > "$work/apt-source.log" 2>&1; then
    cat "$work/apt-source.log" >&2
    return 1
  fi
  dsc=$(ls "$work"/*.dsc 2>/dev/null | head -1)
  if [[ -z $dsc ]]; then
    echo "apt-get source $pkg=$version fetched nothing (deb-src enabled? apt-get update run?)" >&2
    return 1
  fi
  if ! dpkg-source -q -x "$dsc" "$work/src" > "$work/dpkg-source.log" 2>&1; then
    cat "$work/dpkg-source.log" >&2
    return 1
  fi
}
