# shellcheck shell=bash
# A FUSE file for a test's LUs that fails given blocks with EIO
# (tests/integration/faulty_disk.cpp). Source after tgt-test.sh, then
#   faulty_disk_mount ARGS...   mounts $MNT/disk over a 16 MiB file in $WORK,
#                               ARGS as faulty_disk takes them (--bad ...)
# before tgtd starts: tgtd's private mount namespace is a copy. At exit
# tgtd is stopped first (its namespace holds a copy of the mount), then
# the file system unmounted; a crash or an unclean exit of tgtd fails the
# test. faulty_disk_unmount ends it early and checks that errors were
# injected (its log: $WORK/faulty.log).
FAULTY="$RBIO_BUILD_DIR/tests/integration/faulty_disk"
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
[[ -x $PROBE && -x $FAULTY ]] || { echo "no $PROBE or $FAULTY: build first" >&2; exit 2; }
[[ -c /dev/fuse ]] || skip_test "no /dev/fuse"
command -v fusermount3 >/dev/null || skip_test "no fusermount3 (package fuse3)"

MNT="$WORK/faulty"
fuse_pid=""
faulty_disk_cleanup() {
  local rc=$?
  "$SANDBOX" stop "$STATE" || rc=1
  # Still set: the test ended before faulty_disk_unmount.
  if [[ -n $fuse_pid ]] && mountpoint -q "$MNT"; then
    # A mount left behind, or a faulty_disk that does not end cleanly once
    # unmounted, fails the test (a skip or a failure stays what it was).
    if ! { fusermount3 -u "$MNT" && wait "$fuse_pid"; }; then
      echo "FAIL: the faulty disk at $MNT did not unmount cleanly"
      (( rc != 0 )) || rc=1
      if kill -0 "$fuse_pid" 2>/dev/null; then kill "$fuse_pid"; fi
    fi
  elif [[ -n $fuse_pid ]]; then
    # It never mounted; its log says why (e.g. no writeback cache: a skip).
    wait "$fuse_pid" 2>/dev/null || echo "  faulty_disk, which never mounted, exited with status $?"
  fi
  tgt_test_cleanup "$rc"
}
trap faulty_disk_cleanup EXIT

faulty_disk_mount() {
  mkdir -p "$MNT"
  truncate -s 16M "$WORK/backing.img"
  "$FAULTY" "$WORK/backing.img" "$MNT" "$@" 2> "$WORK/faulty.log" &
  fuse_pid=$!
  wait_for 10 test -f "$MNT/disk" && return 0
  # --cached needs the kernel's FUSE writeback cache.
  grep -q "no writeback cache" "$WORK/faulty.log" && skip_test "this kernel's FUSE has no writeback cache"
  return 1
}

# faulty_disk_unmount PATTERN: unmounts (stop tgtd first) and greps
# faulty_disk's closing count for PATTERN.
faulty_disk_unmount() {
  fusermount3 -u "$MNT" && wait "$fuse_pid" && fuse_pid="" && grep -q "$1" "$WORK/faulty.log"
}
