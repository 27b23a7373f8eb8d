#!/usr/bin/env bash
# Login redirects (RFC 7143 §11.13.5, status class 1 with TargetAddress)
# between two real tgtds: A (portals 127.0.0.1 and 127.0.0.3) redirects the
# target to B (127.0.0.2), which serves the LU. tgt redirects only initiators
# whose own address differs from the redirect address, hence the extra
# loopback addresses (every 127/8 address is on lo).
#  - a temporary redirect is followed: verified writes land on B;
#  - B killed and restarted mid-run: recovery goes back to A, is redirected
#    again and the run completes verified;
#  - a permanent redirect is followed and reported as such;
#  - a redirect loop (B sends the initiator back to A) ends after a bounded
#    number of hops with exit 4.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
tgt_test_init 23
IQN=iqn.2026-11.io.rbio:redirect-test
A="127.0.0.1:$PORT"
B_CTL=$((CTL + 20))     # 5743
B_PORT=$((PORT + 20))   # 13743
B="127.0.0.2:$B_PORT"
B_STATE="$WORK/tgtd-b"

redirect_cleanup() {
  local rc=$?
  set +e  # tgtd A must be stopped whatever B's stop says, but it counts
  if ! "$SANDBOX" stop "$B_STATE"; then
    echo "FAIL: tgtd B did not shut down cleanly (see above)"
    (( rc != 0 )) || rc=1
  fi
  tgt_test_cleanup "$rc"
}
trap redirect_cleanup EXIT

# b_start: tgtd B with the target and its LU, set up while B is offline, so
# a reconnect cannot log in to the target before its LU exists.
b_start() {
  "$SANDBOX" start "$B_STATE" --modules "$MODULES" --control-port "$B_CTL" --portal "$B" >/dev/null
  tgtadm -C "$B_CTL" --op update --mode sys --name State -v offline
  badm --op new --mode target --tid 1 -T "$IQN"
  badm --op bind --mode target --tid 1 -I ALL
  badm --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/lun.img" --bstype rbio
  tgtadm -C "$B_CTL" --op update --mode sys --name State -v ready
}
badm() { tgtadm -C "$B_CTL" --lld iscsi "$@"; }
# redirect ADM TARGET_ADDRESS TARGET_PORT REASON
redirect() {
  local adm=$1
  "$adm" --op update --mode target --tid 1 --name RedirectAddress --value "$2"
  "$adm" --op update --mode target --tid 1 --name RedirectPort --value "$3"
  "$adm" --op update --mode target --tid 1 --name RedirectReason --value "$4"
}
bench() { "$RBIO" --log-level info bench -T "$IQN" -p "$A" --lun 1 --verify --rw randwrite --bs 4k "$@"; }

truncate -s 32M "$WORK/lun.img"
tgtd_start --portal "127.0.0.3:$PORT" >/dev/null
tadm --op new --mode target --tid 1 -T "$IQN"
tadm --op bind --mode target --tid 1 -I ALL
b_start

echo "== a temporary redirect"
redirect tadm 127.0.0.2 "$B_PORT" Temporary
check "bench at A completes (exit 0)" rc_is 0 bench --time 1
check "A redirected temporarily to B" out_has "redirected temporarily to $B"
check "the session ran on B" out_has "logged in to $IQN at $B"

echo "== recovery after a temporary redirect: back to A, redirected again"
bench --time 4 --noop-out-interval 1 --noop-out-timeout 1 >"$WORK/recover.out" 2>&1 &
BENCH=$!
check "writes are flowing" wait_for_io "$WORK/recover.out"
# B stopped first, so writes sent meanwhile wait unread in its socket and
# die with it (they must be re-sent); then killed, and started again once
# the initiator is trying to reconnect.
unread_at_b() {
  ss -tnH state established "sport = :$B_PORT" | awk '$1 > 0 { found = 1 } END { exit !found }'
}
kill -STOP "$(cat "$B_STATE/tgtd.pid")"
check "writes sent to the stopped B wait unread in its socket" wait_for 10 unread_at_b
kill_tgtd "$B_STATE"
check "the initiator tries to reconnect while B is down" \
  wait_for 10 grep -q 'reconnect attempt' "$WORK/recover.out"
b_start
rc=0; wait "$BENCH" || rc=$?
check "bench completes after B's restart (exit $rc)" test "$rc" = 0
check "the session was reinstated" grep -q "reinstatements=[1-9]" "$WORK/recover.out"
check "... through A's redirect again" \
  bash -c "[[ \$(grep -c 'redirected temporarily to $B' '$WORK/recover.out') -ge 2 ]]"
check "every acknowledged write reads back (verify)" grep -q 'blocks read back and matched' "$WORK/recover.out"

echo "== a permanent redirect"
redirect tadm 127.0.0.2 "$B_PORT" Permanent
check "bench at A completes (exit 0)" rc_is 0 bench --time 1
check "A redirected permanently to B" out_has "redirected permanently to $B"

echo "== a redirect loop"
redirect badm 127.0.0.3 "$PORT" Temporary
check "A -> B -> A -> ... ends with exit 4" rc_is 4 bench --time 1
check "... naming the hops" out_has "more than 4 redirects"
check "tgtd A is alive" tgtd_alive

finish
