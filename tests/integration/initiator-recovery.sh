#!/usr/bin/env bash
# Session recovery of the userspace initiator (RFC 7143 §6.3.5, session
# reinstatement at ErrorRecoveryLevel 0) against a real tgtd:
#  - tgtd SIGKILLed during `rbio bench --verify` random writes and started
#    again on the same backing file: the session reinstates itself, and every
#    block is read back and compared with the last write the target
#    acknowledged (bench records the generation of each acknowledged write;
#    a write reported done but never executed reads back different: tgtd is
#    stopped before the kill, so the writes sent meanwhile never execute);
#    through rbio's transport and tgt's stock one (RBIO_TRANSPORT=off);
#  - tgtd SIGSTOPped past the command timeout, then SIGCONTinued: commands
#    time out and are aborted (ABORT TASK), which tgtd answers after SIGCONT;
#    with a shorter abort timeout the unanswered ABORT TASK reinstates the
#    session; both runs complete verified;
#  - LOGICAL UNIT RESET through the library (initiator_tmf_check);
#  - tgtd killed for good: commands fail after the replacement timeout with
#    exit 10 and a message naming it, not before and not hanging;
#  - NOP-Out pings on an idle session are answered (no reinstatement); an
#    unanswered one reinstates; `rbio login`'s session process reinstates
#    its session after a tgtd restart, and `rbio logout` waits for it (with
#    a progress line) while tgtd is down.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
tgt_test_init 21
IQN=iqn.2026-11.io.rbio:recovery-test
P="127.0.0.1:$PORT"
truncate -s 64M "$WORK/lun.img"

setup() {
  tadm --op new --mode target --tid 1 -T "$IQN"
  tadm --op bind --mode target --tid 1 -I ALL
  new_lun 1 1 "$WORK/lun.img" rbio
}
# start: tgtd with the target and its LU. Offline while they are set up: a
# reconnect that lands between the target and its LU would log in to a
# target without LUN 1 and see its writes fail (ILLEGAL REQUEST 25h).
sys_state() { tgtadm -C "$CTL" --op update --mode sys --name State -v "$1"; }
start() { tgtd_start >/dev/null && sys_state offline && setup && sys_state ready; }
tgtd_kill() { kill_tgtd "$STATE"; }

# bench_bg OUT ARGS...: rbio bench --verify in the background (pid in $BENCH).
bench_bg() {
  local out=$1; shift
  timeout 180 "$RBIO" --log-level info bench -T "$IQN" -p "$P" --lun 1 --verify --size 16M "$@" \
    >"$out" 2>&1 &
  BENCH=$!
}
# bench_wait: waits for it; its exit status in $rc.
bench_wait() { rc=0; wait "$BENCH" || rc=$?; }
# logged TEXT FILE: FILE has TEXT (polled with wait_for).
logged() { grep -q -- "$1" "$2"; }
# unread_at_tgtd: requests wait unread in tgtd's connection (Recv-Q > 0).
unread_at_tgtd() {
  ss -tnH state established "sport = :$PORT" | awk '$1 > 0 { found = 1 } END { exit !found }'
}
# field OUT NAME: the number after NAME= in bench's report.
field() { sed -n "s/.*[ ]$2=\([0-9]*\).*/\1/p" "$1" | tail -1; }

killed_during_writes() {
  local label=$1 out="$WORK/kill-$1.out"
  echo "== $label: tgtd SIGKILLed during verified writes, then restarted"
  # A short run over the whole LU: few writes follow the reinstatement, so a
  # lost write is not overwritten by chance before the read-back.
  bench_bg "$out" --rw randwrite --bs 4k --iodepth 16 --time 3 --size 64M --noop-out-interval 1 \
    --noop-out-timeout 2
  check "writes are flowing before the kill" wait_for_io "$out"
  # Stopped first, so the writes sent meanwhile sit unread in its socket
  # and die with it: they must be re-sent, or verify finds old data.
  kill -STOP "$(tgtd_pid)"
  check "writes sent to the stopped tgtd wait unread in its socket" wait_for 10 unread_at_tgtd
  tgtd_kill
  check "the initiator tries to reconnect while tgtd is down" wait_for 10 logged 'reconnect attempt' "$out"
  start
  bench_wait
  check "bench completes after the restart (exit $rc)" test "$rc" = 0
  check "the session was reinstated" test "$(field "$out" reinstatements)" -ge 1
  check "commands without status were re-sent" test "$(field "$out" commands_retried)" -ge 1
  check "every acknowledged write reads back (verify)" grep -q 'blocks read back and matched' "$out"
  check "the reconnect attempts were logged" grep -q 'reconnect attempt' "$out"
  check "... and the reinstatement" grep -q 'reinstated after' "$out"
  (( rc == 0 )) || tail -15 "$out"
  sed -n '/recovery:/p' "$out"
}

start
killed_during_writes rbio
tgtd_stop
RBIO_TRANSPORT=off tgtd_start >/dev/null
setup
check "tgt's stock transport serves the portal" \
  bash -c "! grep -q 'portal 127.0.0.1:$PORT served by rbio' '$STATE/tgtd.log'"
killed_during_writes stock
tgtd_stop
start

echo "== a slow target: tgtd SIGSTOPped past the command timeout, ABORT TASK answered"
out="$WORK/abort.out"
bench_bg "$out" --rw randwrite --bs 4k --iodepth 16 --time 8 --timeout 2 --noop-out-interval 0
check "writes are flowing before the stop" wait_for_io "$out"
kill -STOP "$(tgtd_pid)"
check "a command timed out at the stopped tgtd and ABORT TASK went out" \
  wait_for 20 logged 'got no status within 2000 ms; aborting it' "$out"
kill -CONT "$(tgtd_pid)"
bench_wait
check "bench completes after SIGCONT (exit $rc)" test "$rc" = 0
check "timed-out commands were aborted (ABORT TASK)" test "$(field "$out" tasks_aborted)" -ge 1
check "... and tgtd answered: no reinstatement" test "$(field "$out" reinstatements)" = 0
check "every acknowledged write reads back (verify)" grep -q 'blocks read back and matched' "$out"
(( rc == 0 )) || tail -15 "$out"

echo "== a hung target: ABORT TASK unanswered, the session is reinstated"
out="$WORK/stop.out"
bench_bg "$out" --rw randwrite --bs 4k --iodepth 16 --time 8 --timeout 2 --abort-timeout 1 \
  --login-timeout 1 --noop-out-interval 0
check "writes are flowing before the stop" wait_for_io "$out"
kill -STOP "$(tgtd_pid)"
check "the stopped tgtd left ABORT TASK unanswered: reinstating" \
  wait_for 30 logged 'ABORT TASK (LUN 1) got no answer in time; reinstating' "$out"
kill -CONT "$(tgtd_pid)"
bench_wait
check "bench completes after SIGCONT (exit $rc)" test "$rc" = 0
check "a command timeout led to ABORT TASK" grep -q 'got no status within 2000 ms; aborting it' "$out"
check "... whose timeout led to a reinstatement" \
  grep -q 'ABORT TASK (LUN 1) got no answer in time; reinstating' "$out"
check "the session was reinstated" test "$(field "$out" reinstatements)" -ge 1
check "every acknowledged write reads back (verify)" grep -q 'blocks read back and matched' "$out"
(( rc == 0 )) || tail -15 "$out"

echo "== LOGICAL UNIT RESET through the library"
check "LU reset completes and the next command sees the reset (UNIT ATTENTION 29h)" \
  bash -c "'$RBIO_BUILD_DIR/tests/integration/initiator_tmf_check' '$P' '$IQN' 1 >'$WORK/tmf.out' 2>&1"
cat "$WORK/tmf.out"

echo "== NOP-Out pings"
# An idle session (rbio login without --mount holds it in a background
# process) pings every second and the target answers.
ST="$WORK/state"
check "login with 1 s pings" "$RBIO" login -T "$IQN" -p "$P" --state-dir "$ST" \
  --noop-out-interval 1 --noop-out-timeout 2
# session_shows NAME MIN: `rbio session` succeeds and counts NAME >= MIN.
session_shows() {
  "$RBIO" session -T "$IQN" --state-dir "$ST" >"$WORK/session.out" 2>&1 &&
  (( $(field "$WORK/session.out" "$1") >= $2 ))
}
check "the idle session sent pings (2 within 10 s)" wait_for 10 session_shows pings 2
# An unanswered ping ends the connection after --noop-out-timeout (1 s) and
# the session is reinstated: none means every ping was answered.
check "... all answered: no reinstatement" test "$(field "$WORK/session.out" reinstatements)" = 0
check "logout" "$RBIO" logout -T "$IQN" --state-dir "$ST"

echo "== the session process of rbio login across a tgtd restart"
check "login" "$RBIO" login -T "$IQN" -p "$P" --state-dir "$ST" --noop-out-interval 1 --noop-out-timeout 1
tgtd_kill
check "the idle session noticed tgtd gone (its log: reinstating it)" \
  wait_for 10 logged 'reinstating it' "$(ls "$ST"/*.log)"
start
check "... and was reinstated once tgtd was back" wait_for 10 session_shows reinstatements 1
check "its log has the failure and the reinstatement" \
  bash -c "grep -q 'reinstating it' '$ST'/*.log && grep -q 'reinstated after' '$ST'/*.log"
check "logout after the reinstatement" "$RBIO" logout -T "$IQN" --state-dir "$ST"

echo "== rbio logout while tgtd is down: it waits as long as the session does"
# The session answers a logout once its last commands (SYNCHRONIZE CACHE,
# the Logout) have run, and those wait for tgtd up to the replacement
# timeout (120 s here): logout must wait while the session process lives,
# saying so, where it used to give up after a fixed 120 s.
check "login" "$RBIO" login -T "$IQN" -p "$P" --state-dir "$ST" --noop-out-interval 1 --noop-out-timeout 1
log=$(ls "$ST"/*.log)
# logged_anew TEXT: TEXT in the session log past its first $lines lines.
logged_anew() { tail -n "+$((lines + 1))" "$log" | grep -q -- "$1"; }
lines=$(wc -l <"$log")
tgtd_kill
check "the session noticed tgtd gone" wait_for 10 logged_anew 'reinstating it'
timeout 100 "$RBIO" logout -T "$IQN" --state-dir "$ST" >"$WORK/logout.out" 2>&1 &
LOGOUT=$!
check "logout says every 5 s that it is still waiting, and why" \
  wait_for 15 logged 'still logging out after 5 s: the session process [0-9]* first finishes' "$WORK/logout.out"
start
lrc=0; wait "$LOGOUT" || lrc=$?
check "logout succeeds once tgtd is back (exit $lrc)" test "$lrc" = 0
check "... and says so" grep -q "logged out of $IQN" "$WORK/logout.out"
check "the session logged out through the reinstated connection" logged_anew 'reinstated after'
(( lrc == 0 )) || cat "$WORK/logout.out"

out="$WORK/ping.out"
bench_bg "$out" --rw randwrite --bs 4k --iodepth 16 --time 8 --timeout 60 --login-timeout 1 \
  --noop-out-interval 1 --noop-out-timeout 1
check "writes are flowing before the stop" wait_for_io "$out"
kill -STOP "$(tgtd_pid)"
check "the ping to the stopped tgtd went unanswered: reinstating" \
  wait_for 20 logged 'NOP-Out ping unanswered for 1000 ms; reinstating' "$out"
kill -CONT "$(tgtd_pid)"
bench_wait
check "an unanswered ping (commands still within their 60 s) led to a reinstatement" \
  grep -q 'NOP-Out ping unanswered for 1000 ms; reinstating' "$out"
check "bench completes after SIGCONT (exit $rc), verified" grep -q 'blocks read back and matched' "$out"
(( rc == 0 )) || tail -15 "$out"

echo "== tgtd gone for good: the replacement timeout"
out="$WORK/gone.out"
bench_bg "$out" --rw randwrite --bs 4k --iodepth 8 --time 30 --replacement-timeout 3 \
  --noop-out-interval 1 --noop-out-timeout 1 --connect-timeout 1 --login-timeout 1
check "writes are flowing before the kill" wait_for_io "$out"
# Milliseconds, from just before the kill: the timeout starts when the
# initiator sees the connection go, which is after it. (Whole seconds from
# after tgtd_kill, which waits for tgtd to be gone, read 2 s once under load.)
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $(( 10#$t / 1000 )); }
t0=$(now_ms)
tgtd_kill
bench_wait
elapsed=$(( $(now_ms) - t0 ))
check "bench ends with exit 10 (connection lost), got $rc" test "$rc" = 10
check "... after the 3 s replacement timeout, not much later (${elapsed} ms)" \
  test "$elapsed" -ge 3000 -a "$elapsed" -le 8000
check "the error names the replacement timeout" grep -q 'not reinstated within the replacement timeout of 3000 ms' "$out"
check "reconnect attempts were made" grep -q 'reconnect attempt 2' "$out"

echo "== recovery off: the first failure ends the session"
start
out="$WORK/off.out"
bench_bg "$out" --rw randwrite --bs 4k --iodepth 8 --time 30 --replacement-timeout 0
check "writes are flowing before the kill" wait_for_io "$out"
tgtd_kill
bench_wait
check "bench ends with exit 10 at once, got $rc" test "$rc" = 10
check "no reconnect attempt" bash -c "! grep -q 'reconnect attempt' '$out'"

finish
