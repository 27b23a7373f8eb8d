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
# is taken in. A READ or WRITE answered GOOD with a residual (part of the
# data never moved) is an I/O error, in `rbio bench` and through the FUSE
# mount (where a read would return the unread part as zeros). No tgtd: the
# fake target is the peer.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
in_private_mount_namespace "$0" "$@"
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
MNT="$WORK/mnt" SD="$WORK/state"
hostile_cleanup() {
  local rc=$?
  set +e  # tgt_test_cleanup takes the status from $?
  [[ -d $SD ]] && "$RBIO" logout --state-dir "$SD" >/dev/null 2>&1
  mountpoint -q "$MNT" && umount -l "$MNT"
  [[ -n $FAKE_PID ]] && kill "$FAKE_PID" 2>/dev/null
  tgt_test_cleanup "$rc"
}
trap hostile_cleanup EXIT

# fake_start SCENARIO: the fake target, listening.
fake_start() {
  rm -f "$WORK/ready"
  python3 "$FAKE" "$PORT" "$1" "$WORK/ready" &
  FAKE_PID=$!
  wait_for 5 test -f "$WORK/ready" >/dev/null
}
# fake_stop: ends the fake target (our SIGTERM: status 143; anything else is shown).
fake_stop() {
  local st=0
  kill "$FAKE_PID" 2>/dev/null
  wait "$FAKE_PID" 2>/dev/null || st=$?
  (( st == 0 || st == 143 )) || echo "note: the fake target ended with status $st"
  FAKE_PID=
}

# scenario NAME WANT_RC MESSAGE [bench options; a later --rw wins]
scenario() {
  local name=$1 want=$2 msg=$3 out=$1 rc=0 t0=$SECONDS; shift 3
  [[ " $* " == *" --rw randwrite "* ]] && out=$name-write
  fake_start "$name"
  timeout 60 "${VG[@]}" "$RBIO" --log-level info bench -T "$IQN" -p "$P" --lun 0 --time 1 --rw randread \
    --noop-out-interval 0 "$@" >"$WORK/$out.out" 2>&1 || rc=$?
  fake_stop
  name=$out
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

echo "== GOOD with a residual: part of the data never moved"
scenario short-transfer 7 "GOOD, but with a residual of 2048 of 4096 bytes (underflow)"
scenario short-transfer 7 "GOOD, but with a residual of 4096 of 4096 bytes (underflow)" --rw randwrite
if [[ -c /dev/fuse ]]; then
  mkdir -p "$MNT"
  fake_start short-transfer
  check "short-transfer: login --mount" \
    timeout 60 "$RBIO" login -T "$IQN" -p "$P" --mount "$MNT" --state-dir "$SD"
  check "short-transfer: a 4 KiB read through the mount fails (EIO), not half data and half zeros" \
    eval '! dd if="$MNT/lun0" of="$WORK/read.out" bs=4096 count=1 iflag=direct 2>"$WORK/dd.err" &&
      grep -q "Input/output error" "$WORK/dd.err"'
  check "short-transfer: a 4 KiB write through the mount fails (EIO), none of it was taken" \
    eval '! head -c 4096 /dev/zero | dd of="$MNT/lun0" bs=4096 count=1 oflag=direct conv=notrunc 2>"$WORK/dd.err" &&
      grep -q "Input/output error" "$WORK/dd.err"'
  check "short-transfer: logout" timeout 60 "$RBIO" logout --state-dir "$SD"
  fake_stop
else
  skip_part "no /dev/fuse: the FUSE checks of short-transfer did not run"
fi

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
# Long enough that bench sends more commands while the reset is answered:
# those the reset never covered must not be sent again (the target answers
# them; a second copy would be a command run twice).
scenario abort-unsupported 0 "answered: task management function not supported; resetting LUN 0" \
  --timeout 1 --time 4
check "abort-unsupported, 4 s: only the commands the reset covered were sent again" \
  grep -q "tasks_aborted=1 lun_resets=1" "$WORK/abort-unsupported.out"

finish
