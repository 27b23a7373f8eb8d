# shellcheck shell=bash
# shellcheck disable=SC2034  # sets variables the scripts that source it read
# Helpers for the tests of the userspace initiator (`rbio`); source it after
# tgt-test.sh and tgt_test_init.

RBIO="$RBIO_BUILD_DIR/initiator/rbio"

# rc_is CODE COMMAND...: the command exits with CODE (output in $WORK/out).
rc_is() {
  local want=$1; shift
  local rc=0
  "$@" >"$WORK/out" 2>&1 || rc=$?
  (( rc == want )) || { echo "  exit $rc, wanted $want:"; tail -5 "$WORK/out"; return 1; }
}
out_has() { grep -q -- "$1" "$WORK/out"; }

# wait_for_io FILE: until `rbio bench` has printed its first progress line
# there (I/O is flowing); fails after 10 s.
wait_for_io() {
  local i
  for (( i = 0; i < 100; i++ )); do grep -q 'MB/s (last second)' "$1" && return 0; sleep 0.1; done
  return 1
}

# kill_tgtd STATE_DIR: SIGKILL the tgtd started from STATE_DIR and wait until
# the sandbox's watcher (its parent) has reaped it and recorded its status,
# so it can be started again from there. Waiting only for the process to go
# was not enough: a watcher slow to write tgtd.status (a loaded host) wrote
# it after the next start had cleared it, and that start took the 137 for
# the new tgtd's and failed ("exited during start-up with status 137").
kill_tgtd() {
  local pid i; pid=$(cat "$1/tgtd.pid")
  kill -KILL "$pid"
  for (( i = 0; i < 100; i++ )); do
    [[ -f $1/tgtd.status ]] && break
    sleep 0.1
  done
  rm -f "$1/tgtd.pid"
}

# in_private_mount_namespace "$0" "$@": re-runs the calling script in a
# private mount namespace once (mounts it makes then vanish with it).
in_private_mount_namespace() {
  [[ -n ${RBIO_TEST_PRIVATE_NS:-} ]] && return 0
  exec env RBIO_TEST_PRIVATE_NS=1 unshare -m --propagation private bash "$@"
}

# private_etc_iscsi [INITIATOR_NAME]: a copy of /etc/iscsi without node
# records (and with INITIATOR_NAME, if given) bind-mounted over it; only in
# a private mount namespace.
private_etc_iscsi() {
  mkdir -p "$WORK/etc-iscsi"
  cp -a /etc/iscsi/. "$WORK/etc-iscsi/"
  rm -rf "$WORK/etc-iscsi/nodes" "$WORK/etc-iscsi/send_targets"
  [[ -n ${1:-} ]] && echo "InitiatorName=$1" > "$WORK/etc-iscsi/initiatorname.iscsi"
  mount --bind "$WORK/etc-iscsi" /etc/iscsi
}

# on_both_transports SETUP RUN: starts tgtd with rbio's transport, calls
# SETUP (targets and LUs) and `RUN "rbio transport"`, then restarts it with
# tgt's stock transport (RBIO_TRANSPORT=off) and does the same with "stock
# transport"; checks which transport serves the portal each time.
on_both_transports() {
  local setup=$1 run=$2
  tgtd_start >/dev/null
  "$setup"
  check "rbio's transport serves the portal" log_has "portal 127.0.0.1:$PORT served by rbio's transport"
  "$run" "rbio transport"

  tgtd_stop
  : > "$STATE/tgtd.log"
  RBIO_TRANSPORT=off tgtd_start >/dev/null
  "$setup"
  check "tgt's stock transport serves the portal" \
    bash -c "! grep -q 'portal 127.0.0.1:$PORT served by rbio' '$STATE/tgtd.log'"
  "$run" "stock transport"
}
