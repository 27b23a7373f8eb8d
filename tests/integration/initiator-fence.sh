#!/usr/bin/env bash
# A gateway cut off from the host but alive must not apply an old write
# over a newer one (docs/several-gateways.md, "Consistency"). Two
# tgtd+bs_rbio.so gateways of one LU (1 active/optimized, 2
# active/non-optimized); multipath_fence_check stops gateway 1 (SIGSTOP)
# with a write in its socket, so its path fails, and writes again once that
# write is done:
#  - control, --fence none: the write is re-sent through gateway 2 at once,
#    and gateway 1, once continued, applies its copy over the newer write;
#  - lu-reset (the default): the write is held until gateway 1 answers a
#    LOGICAL UNIT RESET after a new login, and the newer write stays;
#  - lu-reset with gateway 1 stopped past the timeout: the session gives up
#    and never reports the held write done.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
in_private_mount_namespace "$0" "$@"
tgt_test_init 100
CHECK="$RBIO_BUILD_DIR/tests/integration/multipath_fence_check"
[[ -x $CHECK ]] || { echo "build multipath_fence_check first" >&2; exit 2; }

source "$(dirname "$0")/../lib/gateways.sh"
gateways_init 16M
gw1=""
fence_cleanup() {
  local rc=$?
  set +e
  # The check continues gateway 1 whatever ends it; this is for a check
  # killed on the way.
  [[ -n $gw1 ]] && kill -CONT "$gw1" 2>/dev/null
  gateways_stop "$rc" || rc=1
  tgt_test_cleanup "$rc"
}
trap fence_cleanup EXIT

must_start "two gateways: 1 active/optimized, 2 active/non-optimized" \
  eval 'set_groups "1 active/optimized" "2 active/non-optimized" &&
        gw_start 1 && gw_export 1 && gw_start 2 && gw_export 2'
gw1=$(gw_pid 1)
fence_check() { "$CHECK" "$1" "$(gw_portal 1)" "$(gw_portal 2)" "$GW_TARGET" 1 "$gw1"; }

check "control (--fence none): gateway 1's stale copy of a moved write lands over the newer write" \
  rc_is 1 fence_check none
cat "$WORK/out"
check "... as the check says" out_has "holds W1: gateway A's stale copy landed over W2"

check "lu-reset: the write is held until gateway 1 is fenced, and the newer write stays" \
  rc_is 0 fence_check lu-reset
cat "$WORK/out"

check "lu-reset with gateway 1 stopped past the timeout: the session gives up, the write not done" \
  rc_is 0 fence_check timeout
cat "$WORK/out"
finish
