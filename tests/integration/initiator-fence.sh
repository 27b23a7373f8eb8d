#!/usr/bin/env bash
# A gateway cut off from the host but alive must not apply an old write
# over a newer one (docs/several-gateways.md, "Consistency"). Two
# tgtd+bs_rbio.so gateways of one LU (1 active/optimized, 2
# active/non-optimized); gateway 1's LU is a faulty_disk file over the LU
# file (O_DIRECT; I/O through io_uring, so tgtd goes on while a write
# waits), whose writes to block 16 wait until released (a hung NFS
# server); gateway 2's LU is the LU file itself. multipath_fence_check stops
# gateway 1 (SIGSTOP), so its path fails on pings, with a write W1 in its
# socket (block 8) or held in its store (block 16), and writes W2 once W1
# is done:
#  - controls, --fence none: W1 is re-sent through gateway 2 at once, and
#    gateway 1's copy lands over W2 once it continues (or once its store
#    lets the write go);
#  - lu-reset (the default): W1 is held until gateway 1 answers a LOGICAL
#    UNIT RESET after a new login, which it does only once its store has
#    let its copy go; the LU keeps W2;
#  - lu-reset with gateway 1 stopped past the timeout: the session gives up
#    and never reports W1 done.
# Then gateway 1's portal is cut while gateway 1 runs (a relay to it,
# stopped), and gateway 1 also listens on a second portal:
#  - with that portal among the session's paths, the held write is fenced
#    through it and completes well before the timeout;
#  - without it (the control), the session gives up unfenced.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
in_private_mount_namespace "$0" "$@"
tgt_test_init 100
CHECK="$RBIO_BUILD_DIR/tests/integration/multipath_fence_check"
FAULTY="$RBIO_BUILD_DIR/tests/integration/faulty_disk"
[[ -x $CHECK && -x $FAULTY ]] || { echo "build multipath_fence_check and faulty_disk first" >&2; exit 2; }
[[ -c /dev/fuse ]] || skip_test "no /dev/fuse"
command -v fusermount3 >/dev/null || skip_test "no fusermount3 (package fuse3)"

source "$(dirname "$0")/../lib/gateways.sh"
gateways_init 16M
MNT="$WORK/faulty"
gw1="" fuse_pid="" relay_pid=""
fence_cleanup() {
  local rc=$?
  set +e
  if [[ -n $relay_pid ]]; then
    kill -CONT "$relay_pid" 2>/dev/null
    kill -TERM "$relay_pid" 2>/dev/null
    wait "$relay_pid" 2>/dev/null
  fi
  # A check ended on the way may leave gateway 1 stopped, or a write held.
  [[ -n $gw1 ]] && kill -CONT "$gw1" 2>/dev/null
  # Every held write goes, and none is held from here (USR2).
  [[ -n $fuse_pid ]] && kill -USR2 "$fuse_pid" 2>/dev/null
  [[ -n ${bounce_a:-} ]] && end_started "$bounce_a"
  [[ -n ${bounce_b:-} ]] && end_started "$bounce_b"
  [[ -n ${FSD:-} ]] && "$RBIO" logout --state-dir "$FSD" >/dev/null 2>&1
  [[ -n ${FUSE_MNT:-} ]] && mountpoint -q "$FUSE_MNT" && umount -l "$FUSE_MNT"
  gateways_stop "$rc" || rc=1
  # The gateways' namespaces held copies of the mount: it goes last.
  if [[ -n $fuse_pid ]] && ! { fusermount3 -u "$MNT" &&
       wait_for 20 eval '! kill -0 "$fuse_pid" 2>/dev/null' && wait "$fuse_pid"; }; then
    echo "FAIL: the faulty disk at $MNT did not unmount cleanly"
    kill -KILL "$fuse_pid" 2>/dev/null
    rc=1
  fi
  tgt_test_cleanup "$rc"
}
trap fence_cleanup EXIT

mkdir -p "$MNT"
"$FAULTY" "$LU_FILE" "$MNT" --hold-writes 16 2> "$WORK/faulty.log" &
fuse_pid=$!
must_start "the faulty disk over the LU file is mounted" wait_for 10 test -f "$MNT/disk"
# gateway_on G FILE [TGTADM ARGS]: gw_export with the LU on FILE.
gateway_on() {
  local g=$1 file=$2; shift 2
  gw_adm "$g" --op new --mode target --tid 1 -T "$GW_TARGET" &&
    gw_adm "$g" --op bind --mode target --tid 1 -I ALL &&
    gw_adm "$g" --op new --mode logicalunit --tid 1 --lun 1 -b "$file" --bstype rbio "$@" &&
    gw_adm "$g" --op update --mode logicalunit --tid 1 --lun 1 --params "scsi_id=$SCSI_ID,scsi_sn=$SCSI_SN"
}
# states_are S1 S2: the groups file, and both gateways acting on it.
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
states_are() {
  local want g
  want=$(printf 'group 1 %s ports 1\ngroup 2 %s ports 2' "$1" "$2")
  for g in 1 2; do [[ $("$PROBE" "$(gw_url "$g")" rtpg 2>/dev/null) == "$want" ]] || return 1; done
}
ao_ano() { set_groups "1 active/optimized" "2 active/non-optimized" && wait_for 10 states_are active/optimized active/non-optimized; }

must_start "two gateways: 1 on the faulty disk (O_DIRECT), 2 on the file under it" \
  eval 'set_groups "1 active/optimized" "2 active/non-optimized" &&
        gw_start 1 && gateway_on 1 "$MNT/disk" --bsoflags direct --bsopts inline_io=off && gw_start 2 && gateway_on 2 "$LU_FILE" &&
        wait_for 10 states_are active/optimized active/non-optimized'
gw1=$(gw_pid 1)
fence_check() {
  "$CHECK" "$1" "$(gw_portal 1)" "$(gw_portal 2)" "$GW_TARGET" 1 "$gw1" "$fuse_pid" "$WORK/faulty.log" "$GROUPS_FILE"
}

# --- W1 in gateway 1's socket ------------------------------------------------------
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

# --- W1 held in gateway 1's store ----------------------------------------------------
check "states back to 1 active/optimized, 2 active/non-optimized" ao_ano
check "control (--fence none): gateway 1's store applies its copy over the newer write" \
  rc_is 1 fence_check store-none
cat "$WORK/out"
check "... as the check says" out_has "holds W1: gateway A's stale copy landed over W2"
check "states back to 1 active/optimized, 2 active/non-optimized" ao_ano
check "lu-reset: the write stays held until gateway 1's store let its copy go; the newer write stays" \
  rc_is 0 fence_check store-lu-reset
cat "$WORK/out"

# --- gateway 1's portal cut while it runs --------------------------------------------
# The relay at PORT+4 stands for the link to gateway 1's portal; gateway 1's
# second portal (PORT+3) for its link through another fabric.
RELAY_PORT=$((PORT + 4)) A2_PORTAL=127.0.0.1:$((PORT + 3))
check "states back to 1 active/optimized, 2 active/non-optimized" ao_ano
must_start "gateway 1 listens on a second portal, $A2_PORTAL" \
  gw_adm 1 --op new --mode portal --param "portal=$A2_PORTAL"
# A fresh relay per check, so that its connection 1 is that check's
# session through it.
relay_stop() {
  [[ -n $relay_pid ]] || return 0
  kill -CONT "$relay_pid" && kill -TERM "$relay_pid" && { wait "$relay_pid" || :; } && relay_pid=""
}
relay_start() {
  relay_stop && rm -f "$WORK/relay.ready" "$WORK/relay.log" || return 1
  python3 "$(dirname "$0")/tcp_relay.py" "$RELAY_PORT" "$(gw_portal 1)" "$WORK/relay.ready" 2> "$WORK/relay.log" &
  relay_pid=$!
  wait_for 10 test -f "$WORK/relay.ready"
}
portal_check() {
  "$CHECK" "$1" "127.0.0.1:$RELAY_PORT" "$(gw_portal 2)" "$GW_TARGET" 1 "$relay_pid" "$A2_PORTAL" "$WORK/relay.log"
}
must_start "a relay to gateway 1's portal at 127.0.0.1:$RELAY_PORT" relay_start
check "control (no other path to gateway 1): with its portal cut the session gives up unfenced" \
  rc_is 0 portal_check other-portal-absent
cat "$WORK/out"
must_start "a fresh relay" relay_start
check "with gateway 1's second portal among the paths: the held write is fenced through it and completes" \
  rc_is 0 portal_check other-portal
cat "$WORK/out"
check "... as the check says" out_has "through another portal: 1"
check "... and the write held for the cut portal never landed there: the block holds the newer write" \
  out_has "holds W2, the newest write"

# --- a command that breaks every path: bounded by max_resends ------------------------
# Relays to both gateways that cut any connection sending a READ(16) of LBA
# 12345: that read fails each path it is sent on. It used to be moved from
# path to path for ever (a path failure did not count as a resend).
relay_stop
check "states back to 1 active/optimized, 2 active/non-optimized" ao_ano
READ_12345=88000000000000003039
python3 "$(dirname "$0")/tcp_relay.py" "$RELAY_PORT" "$(gw_portal 1)" "$WORK/bounce-a.ready" "$READ_12345" \
  2> "$WORK/bounce-a.log" &
bounce_a=$!
python3 "$(dirname "$0")/tcp_relay.py" "$PORT" "$(gw_portal 2)" "$WORK/bounce-b.ready" "$READ_12345" \
  2> "$WORK/bounce-b.log" &
bounce_b=$!
must_start "relays that cut a READ(16) of LBA 12345, to each gateway" \
  wait_for 10 eval 'test -f "$WORK/bounce-a.ready" && test -f "$WORK/bounce-b.ready"'
check "that read fails after 3 resends (4 path failures), and the next read is GOOD" \
  rc_is 0 "$CHECK" bounce "127.0.0.1:$RELAY_PORT" "127.0.0.1:$PORT" "$GW_TARGET" 1
cat "$WORK/out"
check "... both relays cut it" eval 'grep -q "cut" "$WORK/bounce-a.log" && grep -q "cut" "$WORK/bounce-b.log"'
end_started "$bounce_a"
end_started "$bounce_b"
bounce_a="" bounce_b=""

# --- the session process of rbio login --mount, after a fence that never came -------
# It used to log in again 5 s later through gateway 2 alone and serve
# writes, while gateway 1 might still apply the write given up on.
echo "== rbio login --mount: a failed fence stops the session for good"
relay_stop
check "states back to 1 active/optimized, 2 active/non-optimized" ao_ano
must_start "a fresh relay" relay_start
FSD="$WORK/state-fence"
FUSE_MNT="$WORK/fence-mnt"
mkdir -p "$FUSE_MNT"
check "rbio login --mount through the relay to gateway 1 and gateway 2 (exit 0)" \
  rc_is 0 "$RBIO" login -T "$GW_TARGET" -p "127.0.0.1:$RELAY_PORT" -p "$(gw_portal 2)" --mount "$FUSE_MNT" \
  --state-dir "$FSD" --replacement-timeout 4 --noop-out-interval 1 --noop-out-timeout 1 \
  --connect-timeout 2 --login-timeout 2 --log-level info
session_state() { "$RBIO" session --state-dir "$FSD" 2>&1; }
ao_path_usable() { session_state | grep -q "path 127.0.0.1:$RELAY_PORT port group 1 active/optimized:"; }
check "... its path through gateway 1 is active/optimized" wait_for 10 ao_path_usable
check "a write through the mount" \
  dd if=/dev/zero of="$FUSE_MNT/lun1" bs=4k seek=40 count=1 oflag=direct conv=notrunc status=none
kill -STOP "$relay_pid"
wrote=0
dd if=/dev/urandom of="$FUSE_MNT/lun1" bs=4k seek=40 count=1 oflag=direct conv=notrunc status=none || wrote=$?
kill -CONT "$relay_pid"
check "with gateway 1's portal cut, the write fails (EIO) once no fence came (dd exit $wrote)" test "$wrote" -ne 0
FLOG=$(ls "$FSD"/*.log)
check "the session process says it will not log in again by itself" \
  grep -q "not logging in again by itself" "$FLOG"
check "rbio session shows it failed, and why" \
  eval 'session_state | grep -q "state failed: .*not logging in again by itself"'
# Its reconnect interval is 5 s: twice that without a new session.
check "no new session in 10 s, though gateway 2 answers" eval '! wait_for 10 grep -q "session established again" "$FLOG"'
check "... and a write still fails" \
  eval '! dd if=/dev/zero of="$FUSE_MNT/lun1" bs=4k seek=41 count=1 oflag=direct conv=notrunc status=none'
logout_rc=0
"$RBIO" logout --state-dir "$FSD" > "$WORK/out" 2>&1 || logout_rc=$?
check "rbio logout ends it (exit $logout_rc), nothing left mounted" \
  eval '! grep -q " $FUSE_MNT " /proc/self/mountinfo && ! ls "$FSD"/*.state 2>/dev/null'
finish
