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
# A selection (-L, -R, ...) that matches no test is an error, not a pass.
# A missing prerequisite makes a test exit 77 (SKIP_RETURN_CODE): ctest
# counts it as skipped, not failed, so the run then fails on every skip that
# tests/allowed-skips.txt does not list, naming it.
rm -f "$BUILD/ctest-junit.xml"
rc=0
ctest --output-on-failure -j2 --no-tests=error --output-junit "$BUILD/ctest-junit.xml" "$@" || rc=$?
if [[ -f $BUILD/ctest-junit.xml ]]; then
  python3 "$ROOT/scripts/check-skips.py" "$BUILD/ctest-junit.xml" "$ROOT/tests/allowed-skips.txt" \
    || { (( rc != 0 )) || rc=1; }
else
  echo "test.sh: ctest wrote no results ($BUILD/ctest-junit.xml); cannot check skips" >&2
  (( rc != 0 )) || rc=1
fi
exit "$rc"
