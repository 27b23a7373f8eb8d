#!/usr/bin/env bash
# Sets up (Debian packages, tgt headers), builds, and runs every test
# through ctest. Tests start their own tgtd instances in private mount
# namespaces; nothing is installed system-wide.
#
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L unit
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RBIO_BUILD_DIR:-$ROOT/build}"

bash "$ROOT/scripts/setup.sh"
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DRBIO_BUILD_TESTS=ON > "$BUILD/configure.log" 2>&1 \
  || { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
# Integration tests each run their own tgtd: two at a time fit two cores.
ctest --output-on-failure -j2 "$@"
