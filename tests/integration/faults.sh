#!/usr/bin/env bash
# Bad configuration and I/O faults: tgtadm gets an error and tgtd's log says
# why; failed I/O returns CHECK CONDITION with the right sense; tgtd never
# crashes or hangs.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 2

tgtd_start
new_target 1 faults
truncate -s 64M "$WORK/ok.img"

# output_has PATTERN TEXT: like grep -q, but shows the text when it fails.
output_has() { grep -q -- "$1" <<<"$2" || { tail -8 <<<"$2"; return 1; }; }
# lun_absent TID LUN: target TID lists no LUN LUN.
lun_absent() {
  tgtadm -C "$CTL" --lld iscsi --op show --mode target > "$WORK/show"
  ! awk -v t="Target $1:" '/^Target / {in_t = index($0, t) == 1} in_t' "$WORK/show" | grep -q "LUN: $2\$"
}
refused() { ! new_lun 1 "$@" 2>/dev/null; }

check "unknown --bsopts key is refused" refused 1 "$WORK/ok.img" rbio "queue_depth=64;bogus=1"
check "... and the log names the key" log_has "unknown key 'bogus'"
check "malformed --bsopts value is refused" refused 1 "$WORK/ok.img" rbio "queue_depth=many"
check "... and the log says what is expected" log_has "queue_depth=many: expected a whole number"
check "missing backing file is refused" refused 1 "$WORK/missing.img" rbio
check "... and the log names the file and the reason" log_has "open $WORK/missing.img: No such file or directory"
mkdir "$WORK/adir"
check "a directory is refused" refused 1 "$WORK/adir" rbio
check "... and the log says it is a directory" log_has "$WORK/adir is a directory"
check "no LU was left behind by the refusals" lun_absent 1 1

# A file that shrank under the LU: reads past the new end fail with MEDIUM
# ERROR / UNRECOVERED READ ERROR, reads before it still work.
truncate -s 64M "$WORK/shrink.img"
new_lun 1 1 "$WORK/shrink.img" rbio
truncate -s 1M "$WORK/shrink.img"
# The client exits 1 when commands failed (2 would be its own error).
rc=0; out=$("$RW_CHECK" "$(url faults)" --scan 2>&1) || rc=$?
check "the scan of a shrunk file ends with failed commands (exit $rc, wanted 1)" test "$rc" -eq 1
check "reading a shrunk file reports MEDIUM ERROR, unrecovered read error" \
  output_has "sense key 0x03 ASC/ASCQ 0x1100" "$out"
check "... only for the blocks past the end" grep -q "scan: 64 commands, 63 failed" <<<"$out"
check "... and the log says which read failed" log_has "read of 1048576 bytes at offset"
check "tgtd still serves after read errors" tgtd_alive

# A thin file on a full file system: writes fail as a space-allocation
# failure (DATA PROTECT, 27/07). The small tmpfs is mounted only inside
# tgtd's private mount namespace.
mkdir -p "$WORK/small"
nsenter -t "$(tgtd_pid)" -m sh -c "mount -t tmpfs -o size=4M rbio-test '$WORK/small' && truncate -s 32M '$WORK/small/thin.img'"
new_lun 1 2 "$WORK/small/thin.img" rbio
rc=0; out=$("$RW_CHECK" "$(url faults 2)" --fill 2>&1) || rc=$?
check "filling a thin LU past the space ends with failed commands (exit $rc, wanted 1)" test "$rc" -eq 1
check "filling a thin LU past the space reports a space-allocation failure" \
  output_has "sense key 0x07 ASC/ASCQ 0x2707" "$out"
check "... and the log says ENOSPC" log_has "No space left on device"
check "tgtd still serves after write errors" tgtd_alive

# Removing an LU while I/O is in flight: tgt refuses while commands are
# active ("this logical unit is still active"); once they drain the removal
# succeeds; nothing hangs. The client reads the whole (sparse, 1 GiB) LU in
# 1 MiB commands, 128 in flight (tgt's MaxQueueCmd), and is stopped (SIGSTOP)
# once it has I/O in flight: tgtd's responses then cannot all leave (128 MiB
# is more than the sockets hold: tcp_rmem's maximum is 32 MiB here; at 32 in
# flight they sometimes did all leave), and a command is active until its
# response has left, so they stay active while the client is stopped.
# Without the stop tgtd finishes a batch within one event-loop pass, and a
# removal attempt races with the client's next batch (it won at once in a
# trial: refused 0 times, then 977 of the 1024 reads failed).
truncate -s 1G "$WORK/busy.img"
new_target 2 busy
new_lun 2 1 "$WORK/busy.img" rbio
: > "$WORK/busy.out"
"$RW_CHECK" "$(url busy)" --scan --inflight 128 > "$WORK/busy.out" 2>&1 &
client=$!
check "the client has I/O in flight" wait_for 20 grep -q "scan: I/O in flight" "$WORK/busy.out"
stopped_mid_scan() { kill -STOP "$client" && ! grep -q "commands," "$WORK/busy.out"; }
check "... and is stopped before its scan ended" stopped_mid_scan
refusals=0 other=""
for ((i = 0; i < 5; i++)); do
  if out=$(tadm --op delete --mode logicalunit --tid 2 --lun 1 2>&1); then other="removed"; break; fi
  if grep -q "this logical unit is still active" <<<"$out"; then
    refusals=$((refusals + 1))
  else
    other=$out; break
  fi
done
check "removing the LU with the client's commands active is refused, 5 times of 5 (${other:-no other answer})" \
  test "$refusals" -eq 5
kill -CONT "$client"
rc=0; wait "$client" || rc=$?
check "the client then ended normally (exit $rc, wanted 0)" test "$rc" -eq 0
check "... with every read good" grep -q "scan: 1024 commands, 0 failed" "$WORK/busy.out"
check "once its commands drained, the LU could be removed" \
  tadm --op delete --mode logicalunit --tid 2 --lun 1
check "... and is gone" lun_absent 2 1
check "tgtd still serves after removing a busy LU" tgtd_alive
check "the removed LU logged its counters" log_has "rbio: tid:2 lun:1: removed"
finish
