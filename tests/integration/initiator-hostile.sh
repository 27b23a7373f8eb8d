#!/usr/bin/env bash
# The userspace initiator against a hostile target (fake_target.py on
# loopback): after a proper login and TEST UNIT READY, the answer to READ
# CAPACITY(16) is malformed -- a reserved opcode, an unknown ITT, a
# DataSegmentLength beyond MaxRecvDataSegmentLength, Data-In beyond the
# command's buffer, a SenseLength beyond the data, a StatSN out of order.
# `rbio bench` must end with exit 9 (protocol error) naming the problem,
# promptly, with no valgrind error; a target that breaks the connection in
# the middle of every PDU makes the session give up after its retries
# (exit 10) instead of looping. And what a real target may do: a NOP-In
# right behind the final Login Response (tgt's iSER driver pings every 5 s)
# is taken in. No tgtd: the fake target is the peer.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
tgt_test_init 24
FAKE="$RBIO_SOURCE_DIR/tests/integration/fake_target.py"
IQN=iqn.2026-11.io.rbio:fake
P="127.0.0.1:$PORT"
# Under valgrind (exit 99 on a memory error or definite leak); without it
# the checks still run, but the test ends as skipped: half of it is missing.
VG=()
if command -v valgrind >/dev/null; then
  VG=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite)
else
  skip_part "valgrind not installed (scripts/setup.sh installs it): no memory checks of the initiator"
fi

FAKE_PID=
hostile_cleanup() {
  local rc=$?
  set +e  # tgt_test_cleanup takes the status from $?
  [[ -n $FAKE_PID ]] && kill "$FAKE_PID" 2>/dev/null
  tgt_test_cleanup "$rc"
}
trap hostile_cleanup EXIT

# scenario NAME WANT_RC MESSAGE [bench options]
scenario() {
  local name=$1 want=$2 msg=$3; shift 3
  rm -f "$WORK/ready"
  python3 "$FAKE" "$PORT" "$name" "$WORK/ready" &
  FAKE_PID=$!
  local fake=$FAKE_PID i rc=0 t0=$SECONDS
  for (( i = 0; i < 50; i++ )); do [[ -f $WORK/ready ]] && break; sleep 0.1; done
  timeout 60 "${VG[@]}" "$RBIO" --log-level info bench -T "$IQN" -p "$P" --lun 0 --time 1 --rw randread \
    --noop-out-interval 0 "$@" >"$WORK/$name.out" 2>&1 || rc=$?
  kill "$fake" 2>/dev/null; wait "$fake" 2>/dev/null || true
  FAKE_PID=
  check "$name: exit $want, got $rc (in $((SECONDS - t0)) s)" test "$rc" = "$want"
  check "$name: the error says '$msg'" grep -q -- "$msg" "$WORK/$name.out"
  (( rc == want )) || tail -5 "$WORK/$name.out"
}

scenario bad-opcode 9 "unknown opcode 0x3a from target"
scenario bad-itt 9 "ITT 0x0000dead, which names no command in flight"
scenario dsl-too-big 9 "data segment length 16777212 exceeds MaxRecvDataSegmentLength"
scenario data-in-beyond 9 "with 4096 bytes does not fit the command (32 bytes"
scenario sense-length 9 "SenseLength 200 beyond"
scenario bad-statsn 9 "SCSI Response with StatSN"
scenario truncated 10 "closed the connection in the middle of a PDU" --replacement-timeout 20
check "truncated: the command was given up after its retries, not after 20 s" \
  grep -q "failed 6 times" "$WORK/truncated.out"

echo "== not hostile: a NOP-In in the same segment as the final Login Response"
scenario nop-after-login 0 "ios="

echo "== task management: a command the target holds"
# Not hostile, but only a fake target holds one command on purpose.
scenario abort 0 "aborting it (ABORT TASK)" --timeout 1
check "abort: ABORT TASK answered, the command re-sent and done" \
  grep -q "tasks_aborted=1 lun_resets=0" "$WORK/abort.out"
check "abort: no reinstatement" grep -q "reinstatements=0" "$WORK/abort.out"
scenario abort-unsupported 0 "answered: task management function not supported; resetting LUN 0" --timeout 1
check "abort-unsupported: escalated to LOGICAL UNIT RESET, then done" \
  grep -q "tasks_aborted=1 lun_resets=1" "$WORK/abort-unsupported.out"
check "abort-unsupported: no reinstatement" grep -q "reinstatements=0" "$WORK/abort-unsupported.out"

finish
