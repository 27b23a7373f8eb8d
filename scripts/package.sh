#!/usr/bin/env bash
# Builds the Debian packages (rbio-tgt, rbio, rbio-fio; cmake/Packaging.cmake)
# as a packager would: a build folder of its own, no tests, warnings not
# errors (-DRBIO_WERROR=OFF: another compiler or newer headers must not fail
# the build), RelWithDebInfo code stripped by CPack. The packages are built
# for exactly the installed tgt and fio (their Depends say which).
#
# Usage: scripts/package.sh [--build DIR] [--out DIR]
#   --build DIR   build folder (default build-package/; reused when present)
#   --out DIR     where the .deb files go (default DIR/packages)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$ROOT/build-package" out=""
while (( $# )); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "package: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/packages}

mkdir -p "$build" "$out"
cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRBIO_WERROR=OFF -DRBIO_BUILD_TESTS=OFF \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
nice cmake --build "$build" -j"$(nproc)"
rm -f "$out"/*.deb
(cd "$build" && cpack -B "$out" > "$build/cpack.log" 2>&1) || { cat "$build/cpack.log" >&2; exit 1; }
for deb in "$out"/*.deb; do
  printf '%s\n  %s\n' "$deb" "$(dpkg-deb -f "$deb" Depends)"
done
