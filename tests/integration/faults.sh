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
lun_absent() { ! tgtadm -C "$CTL" --lld iscsi --op show --mode target | grep -q "LUN: $1\$"; }
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
check "no LU was left behind by the refusals" lun_absent 1

# A file that shrank under the LU: reads past the new end fail with MEDIUM
# ERROR / UNRECOVERED READ ERROR, reads before it still work.
truncate -s 64M "$WORK/shrink.img"
new_lun 1 1 "$WORK/shrink.img" rbio
truncate -s 1M "$WORK/shrink.img"
out=$("$RW_CHECK" "$(url faults)" --scan 2>&1 || true)
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
out=$("$RW_CHECK" "$(url faults 2)" --fill 2>&1 || true)
check "filling a thin LU past the space reports a space-allocation failure" \
  output_has "sense key 0x07 ASC/ASCQ 0x2707" "$out"
check "... and the log says ENOSPC" log_has "No space left on device"
check "tgtd still serves after write errors" tgtd_alive

# Removing an LU while I/O is in flight: tgt refuses while commands are
# active; once they drain the removal succeeds; nothing hangs.
truncate -s 64M "$WORK/busy.img"
new_target 2 busy
new_lun 2 1 "$WORK/busy.img" rbio
"$RW_CHECK" "$(url busy)" --inflight 32 --rounds 50 > "$WORK/busy.out" 2>&1 &
client=$!
sleep 1
removed=0
for ((i = 0; i < 200; i++)); do
  if tgtadm -C "$CTL" --lld iscsi --op delete --mode logicalunit --tid 2 --lun 1 2>/dev/null; then removed=1; break; fi
  sleep 0.05
done
check "the LU could be removed while a client was writing to it" test $removed = 1
wait $client || true
check "the client ended (no hang) after its LU went away" true
check "tgtd still serves after removing a busy LU" tgtd_alive
check "the removed LU logged its counters" log_has "rbio: tid:2 lun:1: removed"
finish
