#!/usr/bin/env bash
# rbio's TCP transport accepts connections only while tgtd can serve a
# login (State ready and at least one target). Before that, as while
# tgt.service sets a starting tgtd up (State offline, targets and LUNs,
# State ready), new connections wait in the listen queue instead of being
# accepted and closed at once, as stock tgt does: a close at that moment
# can send the kernel initiator into a rebind loop (open-iscsi #387; see
# tests/vm/kernel-initiator-failures.sh, which restarts tgtd under a
# reconnecting kernel initiator).
#
# rbio (control port 5750, portal 13750): a libiscsi login (iscsi-inq) and
# a raw connection made while tgtd has no target, and then while its State
# is offline with the target configured, are neither refused nor closed;
# the listen queue holds them; once the State is ready the waiting login
# completes on its original connection. A connection whose peer gave up
# (closed) while it waited is dropped unread: its bytes never reach tgt's
# core. Taking the State offline again, or removing the last target, makes
# new logins wait again; tgtd's open fd count is back at its start value at
# the end.
#
# Stock (RBIO_TRANSPORT=off, 5751/13751): the same login made while tgtd
# has no target fails at once. That is the behaviour the rbio run must not
# show, and it shows the probe can tell a closed connection from a waiting
# one.
source "$(dirname "$0")/../lib/tgt-test.sh"
HOSTILE="$RBIO_BUILD_DIR/tests/integration/iscsi_hostile"
[[ -x $HOSTILE && -x $RW_CHECK ]] || { echo "no $HOSTILE or $RW_CHECK: build first" >&2; exit 2; }
export RBIO_STATS_FILE=none

WAIT_S=2      # how long a connection must stay waiting to count as not refused
DONE_S=15     # bound for a waiting login to complete once tgtd is ready (about
              # 0.1 s idle; over 5 s once under ASan on a machine at load 10+)

sys_state() { tgtadm -C "$CTL" --op update --mode sys --name State -v "$1"; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }

# inq_start NAME: a libiscsi login + INQUIRY in the background, timed.
declare -A INQ_PID INQ_T0
inq_start() {
  INQ_T0[$1]=$(now_ms)
  timeout 60 iscsi-inq "$(url ready 1)" > "$WORK/inq-$1.out" 2>&1 &
  INQ_PID[$1]=$!
}
# inq_end NAME SECONDS: waits up to SECONDS for that login to end (ends it,
# by PID, if it has not); its exit code goes to INQ_RC (-1: it had to be
# ended) and a line with the time taken is printed.
INQ_RC=0
inq_end() {
  local i
  for (( i = 0; i < $2 * 10; i++ )); do
    kill -0 "${INQ_PID[$1]}" 2>/dev/null || break
    sleep 0.1
  done
  INQ_RC=0
  if kill -0 "${INQ_PID[$1]}" 2>/dev/null; then
    kill "${INQ_PID[$1]}"; wait "${INQ_PID[$1]}" || true; INQ_RC=-1
    echo "  iscsi-inq still waiting after $2 s"
  else
    wait "${INQ_PID[$1]}" || INQ_RC=$?
    echo "  iscsi-inq exit code $INQ_RC, $(( $(now_ms) - INQ_T0[$1] )) ms after it started: $(head -1 "$WORK/inq-$1.out")"
  fi
}
# inq_waiting NAME: after WAIT_S seconds the login has neither failed nor
# completed (tgtd is not ready, so it must not have been answered).
inq_waiting() {
  local i
  for (( i = 0; i < WAIT_S * 10; i++ )); do
    kill -0 "${INQ_PID[$1]}" 2>/dev/null || { inq_end "$1" 0; return 1; }
    sleep 0.1
  done
}
# inq_done NAME SECONDS: the login completes with the LU's INQUIRY data
# within SECONDS.
inq_done() {
  inq_end "$1" "$2"
  (( INQ_RC == 0 )) && grep -q '^Vendor:IET' "$WORK/inq-$1.out"
}
# inq_fails_fast NAME: the login fails within WAIT_S seconds.
inq_fails_fast() {
  inq_end "$1" "$WAIT_S"
  (( INQ_RC > 0 ))
}
# Connections waiting in the portal's accept queue (Recv-Q of the listener).
queued() { ss -ltnH "sport = :$PORT" | awk '{ print $2 }'; }
queue_holds() {
  local n
  n=$(queued)
  echo "  listen queue of 127.0.0.1:$PORT: ${n:-?} connection(s)"
  (( ${n:-0} >= $1 ))
}
# A raw connection left idle for WAIT_S seconds: the target must leave it open.
idle_stays_open() {
  "$HOSTILE" idle --port "$PORT" --hold-ms $(( WAIT_S * 1000 )) --max-hold-ms $(( WAIT_S * 1000 )) \
    > "$WORK/idle.out" 2>&1 || { cat "$WORK/idle.out"; return 1; }
  sed -n 's/^idle: after/  after/p' "$WORK/idle.out"
  grep -q 'still open' "$WORK/idle.out"
}
fds() { ls "/proc/$(tgtd_pid)/fd" 2>/dev/null | wc -l; }
fds_back() {
  local i
  for (( i = 0; i < 50; i++ )); do
    (( $(fds) == BASE_FDS )) && return 0
    sleep 0.1
  done
  echo "  tgtd has $(fds) open fds, $BASE_FDS at the start"
  return 1
}

# --- rbio's transport --------------------------------------------------------------
tgt_test_init 50
truncate -s 16M "$WORK/lu.img"
check "tgtd starts with the module" tgtd_start
check "rbio's transport serves the portal" log_has "portal 127.0.0.1:$PORT served by rbio's transport"
BASE_FDS=$(fds)

echo "# tgtd without any target (as right after start-up)"
inq_start no-target
check "a login while tgtd has no target is not refused (waits ${WAIT_S} s)" inq_waiting no-target
check "a raw connection is not closed either" idle_stays_open
check "the login waits in the listen queue" queue_holds 1
check "tgtd says why it does not accept" log_has "tgtd is not ready (State ready, no target)"

echo "# State offline, target and LU configured (as tgt.service does it)"
must_state() { sys_state "$1" && echo "  State $1"; }
check "State offline, a target and an rbio LU" \
  eval 'must_state offline && new_target 1 ready && new_lun 1 1 "$WORK/lu.img" rbio'
inq_start offline
# A peer that gives up while it waits: it sends bytes and closes. A
# well-formed login would be worse (tgt might act on a stale login), but
# anything it sent would show in tgtd's log as a "closing connection" once
# the core read it; nothing must.
gave_up() { exec {g}<>"/dev/tcp/127.0.0.1/$PORT" && printf 'not an iSCSI PDU, never to be read' >&"$g" && exec {g}>&-; }
check "a connection that sends bytes and closes while waiting" gave_up
check "a login while the State is offline is not refused (waits ${WAIT_S} s)" inq_waiting offline
check "the first login is still waiting too" eval 'kill -0 "${INQ_PID[no-target]}"'
check "three connections wait in the listen queue" queue_holds 3

echo "# State ready"
t_ready=$(now_ms)
check "State ready" must_state ready
check "the login made without a target completes on its connection within ${DONE_S} s" inq_done no-target "$DONE_S"
check "the login made while offline completes within ${DONE_S} s" inq_done offline "$DONE_S"
echo "  both answered within $(( $(now_ms) - t_ready )) ms of State ready"
check "tgtd logs that it accepts again, and how many waited" \
  eval 'grep -Eq "accepting connections \([3-9] waited in the listen queue\)" "$STATE/tgtd.log"'
check "the connection whose peer gave up is dropped unread" \
  eval 'log_has "dropped: the peer closed it while it waited to be accepted" && ! log_has "closing connection"'
check "the listen queue is empty" eval '[[ $(queued) == 0 ]]'
check "data written and read back through a new connection" \
  timeout 60 "$RW_CHECK" "$(url ready 1)" --inflight 8 --rounds 1

echo "# State offline again while tgtd runs, then ready"
check "State offline" must_state offline
inq_start offline-again
check "a new login waits again (${WAIT_S} s)" inq_waiting offline-again
check "State ready" must_state ready
check "... and completes within ${DONE_S} s" inq_done offline-again "$DONE_S"

echo "# the last target removed"
check "LU and target removed" \
  eval 'tadm --op delete --mode logicalunit --tid 1 --lun 1 && tadm --op delete --mode target --tid 1'
inq_start removed
check "a login waits while there is no target (${WAIT_S} s)" inq_waiting removed
# As tgt.service adds them: with the State offline, so that the waiting login
# cannot be served between the target's creation and its LU's (it would see
# LUN 1 missing: LOGICAL UNIT NOT SUPPORTED).
check "a target and LU again (State offline, then ready)" \
  eval 'sys_state offline && new_target 1 ready && new_lun 1 1 "$WORK/lu.img" rbio && sys_state ready'
check "... and the login completes within ${DONE_S} s" inq_done removed "$DONE_S"
check "tgtd's open fd count is back at its start value" \
  eval 'tadm --op delete --mode logicalunit --tid 1 --lun 1 && tadm --op delete --mode target --tid 1 && fds_back'
check "tgtd is alive" tgtd_alive
tgtd_stop

# --- tgt's own transport, for comparison ---------------------------------------------
echo "# stock transport (RBIO_TRANSPORT=off)"
rm -rf "$STATE"
CTL=$((CTL + 1)) PORT=$((PORT + 1))   # 5751, 13751
check "tgtd starts with the transport off" eval 'RBIO_TRANSPORT=off tgtd_start'
inq_start stock
check "stock tgt refuses a login while it has no target at once (what rbio's transport must not do)" \
  inq_fails_fast stock
check "tgtd is alive" tgtd_alive
finish
