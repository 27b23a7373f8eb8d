#!/usr/bin/env bash
# The README's first command, scripts/demo.sh, on the tree under test: it must
# run to the end and show what it promises (an rbio LU verified, measured,
# the transport's counters, the LU's counters at removal, a clean stop).
# Only its setup and build are left out (--no-build): scripts/test.sh has done
# both. It uses the demo's own ports (control 5690, portal 13690).
source "$(dirname "$0")/../lib/tgt-test.sh"

[[ -f $MODULES/bs_rbio.so ]] || { echo "no $MODULES/bs_rbio.so: build first" >&2; exit 2; }
OUT=$(mktemp /dev/shm/rbio-demo-test-XXXXXX)
trap 'rm -f "$OUT"' EXIT

run_demo() { RBIO_BUILD_DIR="$RBIO_BUILD_DIR" bash "$RBIO_SOURCE_DIR/scripts/demo.sh" "$@" >"$OUT" 2>&1; }
check "scripts/demo.sh --no-build runs to the end" run_demo --no-build --seconds 1 --size 64M
cat "$OUT"
check "it says it finished" grep -qx "demo finished" "$OUT"
check "tgtd lists the rbio backing store" grep -qE '^ *rbio( |$)' "$OUT"
check "rbio's transport serves the demo's portal" \
  grep -q "rbio: tcp: portal 127.0.0.1:13690 served by rbio's transport" "$OUT"
check "the LU is an rbio LU" grep -q "Backing store type: rbio" "$OUT"
check "the data written was read back and matched" grep -qE '^[1-9][0-9]* bytes compared, 0 failures$' "$OUT"
check "iscsi-perf measured at 1 and at 32 in flight" \
  test "$(grep -cE '^ ?(1|32) in flight: iops average [1-9][0-9]* ' "$OUT")" -eq 2
check "the transport's counters are shown, after every connection ended" \
  grep -qE '^connections_open=0 connections_total=[1-9][0-9]* pdus_in=[1-9].* pdus_per_send=[0-9.]+$' "$OUT"
check "the removed LU logged its counters" grep -qE '^rbio: tid:1 lun:1: removed; commands=[1-9]' "$OUT"

# What the user passes is checked before anything is set up.
bad_option() {
  local rc=0
  bash "$RBIO_SOURCE_DIR/scripts/demo.sh" "$@" >"$OUT" 2>&1 || rc=$?
  cat "$OUT"
  (( rc == 2 )) && [[ $(wc -l <"$OUT") -eq 1 ]]
}
check "an unknown option is one line and exit 2" bad_option --frobnicate
check "a bad --seconds is one line and exit 2" bad_option --seconds soon
finish
