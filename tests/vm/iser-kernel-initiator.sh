#!/usr/bin/env bash
# The kernel's iSER initiator (open-iscsi iface `iser`, ib_iser) against
# stock tgtd with rbio's iSER transport, over soft-RoCE (rdma_rxe on a veth
# pair) in a qemu guest. Covers: the takeover of tgt's iSER listeners; a
# `--lld iser` target bound to `-I ALL` only (stock tgt 1.0.85 refuses every
# iSER login there); initiator-name ACLs; discovery, login, mkfs and files
# that survive logout/login, fio crc32c verify jobs (4 KiB random: small
# writes, carried as immediate data; 1 MiB sequential: immediate data, then
# RDMA READs of several bursts); a write's first burst by RDMA READ, not
# copied unsolicited Data-Out, on a target set to InitialR2T=No (and with
# write_in_place = off, the Data-Outs back); malformed iSER
# messages, before and after a login (CmdSN outside the window or
# duplicated, AHS on a NOP-Out: each closes its connection with a log
# line, tgtd keeps serving; the window's edge is served); the initiator logging out in the middle of I/O; no queue pair
# left behind; and the off switch (RBIO_ISER=off leaves tgt's own iSER).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/iser-guest.sh" 780 "$@"
CHECK="$RBIO_BUILD_DIR/tests/vm/iser_engine_check"
IQN=iqn.2026-11.io.rbio:iser IQN_ACL=iqn.2026-11.io.rbio:iser-acl IQN_OTHER=iqn.2026-11.io.rbio:iser-other
MY_IQN=$(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi)
[[ -n $MY_IQN ]] || { echo "no InitiatorName in /etc/iscsi/initiatorname.iscsi" >&2; exit 2; }
# The SCSI scan after a login can take more than lib.sh's 30 s when the
# host is busy (TCG): wait up to twice that.
wait_lun() { wait_disk_of "$@" || wait_disk_of "$@"; }
# A connection registers its 512 send slots of 8524 bytes (iSER header,
# BHS, 256 B of AHS, 8 KiB of data; see endpoint_config() in
# tgt-backend/transport/iser_c_api.cpp); the device's shared receive queue
# (iser_srq_depth, 1024 receives) registers their 76-byte heads (iSER
# header and BHS) while it has connections. Data buffers, among them those
# the receives' AHS and data land in, stay registered in tgtd's pool and
# are not counted.
conn_mrs() { tgtd_mrs_of 4364288; }
srq_mrs() { tgtd_mrs_of 77824; }

BACKING="$WORK/disk.img" BACKING2="$WORK/disk2.img"
truncate -s 256M "$BACKING"
truncate -s 64M "$BACKING2"
start_tgtd_rbio_iser
must "a --lld iser target bound to -I ALL only, with an rbio LUN" iser_target 1 "$IQN" "$BACKING"
must "a target bound to this initiator's name only" eval '
  tadm --op new --mode target --tid 2 -T "$IQN_ACL" &&
  tadm --op bind --mode target --tid 2 -Q "$MY_IQN" &&
  tadm --op new --mode logicalunit --tid 2 --lun 1 -b "$BACKING2" --bstype rbio'
must "a --lld iser target bound to another initiator's name" eval '
  iser_adm --op new --mode target --tid 3 -T "$IQN_OTHER" &&
  iser_adm --op bind --mode target --tid 3 -Q iqn.2026-11.io.rbio:someone-else'

# --- malformed iSER messages ------------------------------------------------
# Five of each: a first message can complete on the target's QP before its
# CM has the initiator's RTU (about half the connections here), and the
# close must reach the initiator then too.
for c in hello opcode length truncated; do
  for i in 1 2 3 4 5; do
    check "malformed message ($c, $i): the target disconnects" "$CHECK" --addr "$RXE_ADDR" --port 3260 --hostile "$c"
  done
done
check "each malformed message was logged as a closed connection" \
  test "$(grep -c 'rbio: iser: .*closing connection' "$STATE/tgtd.log")" -ge 20
# After a login (rbio's screening of requests, pdu_bounds.h, over iSER):
# the CmdSN window's edge is served; past it, a duplicate in it, and AHS
# on a NOP-Out each close the connection with their reason.
check "after login: a TEST UNIT READY at MaxCmdSN first, then the rest of the window, all GOOD" \
  "$CHECK" --addr "$RXE_ADDR" --port 3260 --target "$IQN" --hostile cmdsn-edge
for c in cmdsn-beyond cmdsn-twice ahs-nop; do
  check "after login ($c): the target disconnects" "$CHECK" --addr "$RXE_ADDR" --port 3260 --target "$IQN" --hostile "$c"
done
check "logged: a CmdSN beyond the window" grep -q 'rbio: iser: .*closing connection: CmdSN [0-9]*, beyond the window' "$STATE/tgtd.log"
check "logged: a CmdSN again" grep -q 'rbio: iser: .*closing connection: CmdSN [0-9]* again' "$STATE/tgtd.log"
check "logged: AHS on a NOP-Out" grep -q 'rbio: iser: .*closing connection: 4 bytes of AHS on a request of opcode 0x00' "$STATE/tgtd.log"
check "tgtd is alive after them" tgtd_alive
check "no tgtd queue pair is left" count_is 0 tgtd_qps

# --- the kernel iSER initiator ----------------------------------------------
must "the kernel's iSER initiator loads" modprobe -a ib_iser sd_mod
start_iscsid
# Its output is shown whatever the outcome: inside check, a failing
# command returns from the function at once (check's ERR trap), so a
# plain `iscsiadm ...; cat` showed nothing when discovery failed.
# Its messages (debug level 1, on stderr) are kept apart from the
# records the checks below read.
disc() {
  local rc=0
  iscsiadm -d 1 -m discovery -t sendtargets -p "$PORTAL" -I iser > "$WORK/discovery" 2> "$WORK/discovery.err" || rc=$?
  cat "$WORK/discovery"
  (( rc == 0 )) || cat "$WORK/discovery.err"
  return "$rc"
}
must "iSER sendtargets discovery" disc
check "discovery lists the -I ALL target" grep -q " $IQN\$" "$WORK/discovery"
check "discovery lists the target bound to this initiator" grep -q " $IQN_ACL\$" "$WORK/discovery"
check "discovery hides the target bound to another initiator" eval '! grep -q " $IQN_OTHER\$" "$WORK/discovery"'
for t in "$IQN" "$IQN_ACL"; do
  iadm "$t" -o update -n node.session.initial_login_retry_max -v 1
  iadm "$t" -o update -n node.conn[0].timeo.login_timeout -v 10
  iadm "$t" -o update -n node.session.timeo.replacement_timeout -v 20
done
must "login over iSER to the -I ALL target (stock tgt refuses it)" iadm "$IQN" --login
must "its LUN appears as a SCSI disk" wait_lun "$IQN" 1
check "the disk has the LUN's size (256 MiB)" test "$(blockdev --getsize64 "$DISK")" -eq $((256 << 20))
check "one tgtd queue pair for the session" count_is 1 tgtd_qps
check "the session's send slots are registered" count_is 1 conn_mrs
check "the device's shared receive queue is registered" count_is 1 srq_mrs

must "mkfs.ext4 on the disk" mkfs.ext4 -q -F "$DISK"
must "mount it" mount "$DISK" "$MNT"
write_files() {
  local i
  for i in 1 2 3; do head -c $((i << 20)) /dev/urandom > "$MNT/file$i"; done
  mkdir "$MNT/small"
  head -c 300000 /dev/urandom | split -b 9973 - "$MNT/small/"
  (cd "$MNT" && find . -type f | sort | xargs sha256sum) > "$WORK/sums"
  sync
}
check "write 6 MiB in 34 files and checksum them" write_files
check "unmount" umount "$MNT"
log_lines=$(wc -l < "$STATE/tgtd.log")
check "logout" iadm "$IQN" --logout
# The Logout Response is the last PDU: the disconnect waits for its send
# (and any before it) to complete rather than flush it. Only this logout's
# lines: earlier connections (the hostile ones, discovery) log theirs.
# The wait ends when the sends complete or when the initiator, having the
# response, disconnects first: either order is right.
since_logout() { tail -n +"$((log_lines + 1))" "$STATE/tgtd.log"; }
check "the disconnect waited for the Logout Response's send to complete" \
  wait_for 10 eval 'since_logout | grep -q "rbio: iser: .*closing after waiting for the last sends"'
check "... within the time limit" eval '! since_logout | grep -q "closing with sends not completed"'
check "no tgtd queue pair is left after logout" count_is 0 tgtd_qps
check "no connection's registration is left after logout" count_is 0 conn_mrs
check "the shared receive queue went with the last connection" count_is 0 srq_mrs
must "login again" iadm "$IQN" --login
must "the LUN appears again" wait_lun "$IQN" 1
check "e2fsck finds the file system clean" e2fsck -f -n "$DISK"
must "mount it again" mount "$DISK" "$MNT"
check "every file reads back with the same checksum" eval '(cd "$MNT" && sha256sum --quiet -c "$WORK/sums")'
check "unmount again" umount "$MNT"
# The process totals in the statistics file, rewritten (a new file renamed
# over the old) once a second: wait for the next rewrite, so the figure
# includes everything that finished before the call.
stats_rewritten() { [[ $(stat -c %i "$STATE/rbio.stats" 2>/dev/null) != "$1" ]]; }
stat_of() {
  local ino; ino=$(stat -c %i "$STATE/rbio.stats")
  wait_for 10 stats_rewritten "$ino" && sed -n "s/^$1=//p" "$STATE/rbio.stats" | tail -1
}
reads_before=$(stat_of rdma_reads)
check "fio 4 KiB random writes, 32 in flight, crc32c verified" \
  fio_job rand4k "$DISK" --rw=randwrite --bs=4k --iodepth=32 --size=32M --runtime=20
reads_after=$(stat_of rdma_reads)
echo "  RDMA READs during the 4 KiB writes: $reads_before -> $reads_after"
check "4 KiB writes come as immediate data: no RDMA READ (tgt's own iSER: one per write)" \
  test -n "$reads_before" -a "$reads_before" = "$reads_after"
check "the session negotiated ImmediateData=Yes" \
  eval 'iscsiadm -m session -P 2 | grep -q "ImmediateData: Yes"'
check "fio 1 MiB sequential writes, 8 in flight (RDMA READs), crc32c verified" \
  fio_job seq1m "$DISK" --rw=write --bs=1M --iodepth=8 --size=64M --offset=64M

# --- the initiator leaves in the middle of I/O ----------------------------------
fio --name=cut --filename="$DISK" --direct=1 --ioengine=libaio --rw=randrw --bs=64k \
  --iodepth=16 --size=64M --time_based --runtime=60 > "$WORK/fio-cut.log" 2>&1 &
FIO_PID=$!
VM_CLEANUP_HOOKS+=('kill "$FIO_PID" 2>/dev/null')
# I/Os in flight on the disk (reads + writes the block layer has issued).
in_flight() { local r w; read -r r w < "/sys/block/$(basename "$(readlink -f "$DISK")")/inflight"; echo $((r + w)); }
check "fio has I/Os in flight" wait_for 30 eval '(( $(in_flight) > 0 ))'
check "logout while $(in_flight) I/Os are in flight" iadm "$IQN" --logout
# Its disk went away under it: fio must end, with an error, not hang.
fio_ended() { ! kill -0 "$FIO_PID" 2>/dev/null; }
check "fio ends once its session is gone" wait_for 60 fio_ended
check "... with an error (its I/Os failed, none was reported done)" eval '! wait "$FIO_PID"'
grep -m1 'err=' "$WORK/fio-cut.log" | sed 's/^ */  /' || :
check "tgtd is alive after it" tgtd_alive
check "no tgtd queue pair is left" count_is 0 tgtd_qps
check "no connection's registration is left behind" eval 'count_is 0 conn_mrs && count_is 0 srq_mrs'
must "login once more" iadm "$IQN" --login
must "the LUN appears once more" wait_lun "$IQN" 1
check "fio 4 KiB random reads and writes, 32 in flight, crc32c verified" \
  fio_job mix4k "$DISK" --rw=randrw --bs=4k --iodepth=32 --size=16M --offset=192M
head -c $((8 << 20)) /dev/urandom > "$WORK/pattern"

# --- task management: a LU RESET with commands on the direct path ------------
# Its task management function finds the tasks on the session's and
# connection's lists, where the direct path put them as tgt's reader
# would; the initiator retries what the reset aborted, and every block
# verifies. The reset leaves a unit attention, whose CHECK CONDITION (sense
# data: the core's writer) the kernel logs.
resets_seen() { dmesg | grep -c 'Power-on or device reset occurred' || :; }
resets_before=$(resets_seen)
fio --name=reset --filename="$DISK" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
  --iodepth=32 --size=64M --offset=128M --verify=crc32c --verify_fatal=1 \
  --output="$WORK/fio-reset.log" &
FIO_PID=$!
VM_CLEANUP_HOOKS+=('kill "$FIO_PID" 2>/dev/null')
check "fio has 4 or more I/Os in flight" wait_for 30 eval '(( $(in_flight) >= 4 ))'
check "LU RESET while $(in_flight) I/Os are in flight" sg_reset --device "$DISK"
check "fio's writes and crc32c verify complete after the reset" wait "$FIO_PID"
grep -E '^ *(write|read):' "$WORK/fio-reset.log" | sed 's/^ */  reset: /'
check "the initiator saw the reset's unit attention" test "$(resets_seen)" -gt "$resets_before"
check "tgtd is alive after the reset" tgtd_alive
check "write an 8 MiB pattern at 224 MiB (read back later under tgt's own iSER)" \
  dd if="$WORK/pattern" of="$DISK" oflag=direct bs=1M seek=224 status=none

# --- initiator-name ACLs --------------------------------------------------------
check "login to the target bound to this initiator's name" iadm "$IQN_ACL" --login
check "its LUN appears" wait_lun "$IQN_ACL" 1
check "two sessions, two queue pairs" count_is 2 tgtd_qps
check "the two sessions share one receive queue" eval 'count_is 1 srq_mrs && count_is 2 conn_mrs'
refused() {
  iscsiadm -m node -T "$IQN_OTHER" -p "$PORTAL" -I iser -o new >/dev/null &&
  iscsiadm -m node -T "$IQN_OTHER" -p "$PORTAL" -I iser -o update \
    -n node.session.initial_login_retry_max -v 1 &&
  ! iscsiadm -m node -T "$IQN_OTHER" -p "$PORTAL" -I iser --login && ! session_of "$IQN_OTHER"
}
check "login to the target bound to another initiator is refused" refused
check "logout of both sessions" iscsiadm -m node --logoutall=all
check "no session is left" no_session

# --- doorbell batching, with its control --------------------------------------
# 4 KiB random reads x 32 over a session of their own, whose connection's
# closing line then counts mostly them.
read_run() {  # read_run NAME: login, 8 s of reads x 32, logout; NAME.conn
  local before; before=$(ended_count)
  iadm "$IQN" --login && wait_lun "$IQN" 1 &&
  fio --name="$1" --filename="$DISK" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
    --iodepth=32 --size=64M --time_based --runtime=8 --output="$WORK/fio-$1.log" &&
  iadm "$IQN" --logout && conn_line "$1" "$before"
}
# count_of NAME COUNTER: a counter of NAME's connection's closing line.
count_of() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$WORK/$1.conn"; }
# The kernel initiator sends its commands in bursts: 17.83 work requests
# per post with batching, 1.00 with coalesce = off (one guest run,
# 2026-12-01, host load 6-7), but 7.84 in a clean-clone CI run
# (2026-12-02): the burst size follows the guest's timing under TCG. So
# the threshold is vm.iser-initiator's 4 (lib-rxe.sh), 4x the control's
# 1.00. Issue 6's goal of 8 is a figure for bench/iser-compare.sh's longer
# runs, not for a check on a loaded host.
MIN_WRS_PER_POST_KERNEL=4
check "4 KiB random reads x 32 over a session of their own" read_run batched
check "they were batched: at least $MIN_WRS_PER_POST_KERNEL work requests per post ($(wpp_of batched))" \
  wpp batched ">=" "$MIN_WRS_PER_POST_KERNEL"
# direct_commands: every READ of the run, and the SCSI scan's commands,
# skip tgt's byte-stream reader and writer; the PDUs that do not are the
# login's, the logout's and NOP-Outs: 43,506 of 43,512 PDUs received in one
# guest run (2026-12-03); 0 with direct_commands = off (the control below).
MIN_DIRECT_PER_PDU_IN=0.9
direct_per_pdu_in() {
  awk -v d="$(count_of "$1" direct_commands)" -v i="$(count_of "$1" pdus_in)" -v op="$2" -v t="$3" \
    'BEGIN { if (d == "" || i == "" || i == 0) exit 1; r = d / i; exit !(op == "<" ? r < t : r >= t) }'
}
direct_ratio() { awk -v d="$(count_of "$1" direct_commands)" -v i="$(count_of "$1" pdus_in)" 'BEGIN { if (i > 0) printf "%.2f", d / i }'; }
check "the reads took the direct path: at least $MIN_DIRECT_PER_PDU_IN direct commands per PDU in ($(direct_ratio batched))" \
  direct_per_pdu_in batched ">=" "$MIN_DIRECT_PER_PDU_IN"

# --- a write's first burst: one RDMA READ, not copied Data-Out SENDs ----------
# With InitialR2T=No on the target (tgt offers Yes unless told), open-iscsi
# (which offers No) gets No: a 64 KiB write then brings 8 KiB of immediate
# data and 56 KiB in seven unsolicited Data-Out SENDs, each copied from its
# receive buffer into the task's. rbio's transport offers InitialR2T=Yes on
# iSER, so the 56 KiB come by one RDMA READ into the task's buffer. 64 KiB
# random writes x 8 over a session of their own (the file system is no
# longer needed), the session's negotiated InitialR2T kept in NAME.r2t.
initial_r2t_no() { iser_adm --op update --mode target --tid 1 --name InitialR2T --value No; }
write_run() {  # write_run NAME: login, 5 s of 64 KiB writes x 8, logout; NAME.conn
  local before; before=$(ended_count)
  iadm "$IQN" --login && wait_lun "$IQN" 1 &&
  iscsiadm -m session -P 2 | sed -n 's/^[[:space:]]*InitialR2T: *//p' > "$WORK/$1.r2t" &&
  fio --name="$1" --filename="$DISK" --direct=1 --ioengine=libaio --rw=randwrite --bs=64k \
    --iodepth=8 --size=64M --time_based --runtime=5 --output="$WORK/fio-$1.log" &&
  iadm "$IQN" --logout && conn_line "$1" "$before"
}
# PDUs received per PDU sent, against a threshold: near 1 when a write is
# one command PDU, near 8 when seven Data-Outs follow it.
pdus_in_per_out() {
  awk -v i="$(count_of "$1" pdus_in)" -v o="$(count_of "$1" pdus_out)" -v op="$2" -v t="$3" \
    'BEGIN { if (i == "" || o == "" || o == 0) exit 1; r = i / o; exit !(op == "<" ? r < t : r >= t) }'
}
ratio_of() { awk -v i="$(count_of "$1" pdus_in)" -v o="$(count_of "$1" pdus_out)" 'BEGIN { if (o > 0) printf "%.2f", i / o }'; }
MAX_PDUS_IN_PER_OUT=3
must "the target set to InitialR2T=No" initial_r2t_no
check "64 KiB random writes x 8 over a session of their own" write_run firstburst
check "the session negotiated InitialR2T=Yes ($(cat "$WORK/firstburst.r2t"))" \
  test "$(cat "$WORK/firstburst.r2t")" = Yes
check "no unsolicited Data-Out: below $MAX_PDUS_IN_PER_OUT PDUs in per PDU out ($(ratio_of firstburst))" \
  pdus_in_per_out firstburst "<" "$MAX_PDUS_IN_PER_OUT"
check "the first bursts came by RDMA READ ($(count_of firstburst rdma_reads))" \
  test "$(count_of firstburst rdma_reads)" -gt 0
# A 64 KiB write fits a receive's 64 KiB block (iser_receive_kib): its 8 KiB
# of immediate data stay where they landed and the RDMA READ fills the rest
# of the same block. With 16 KiB blocks (the control below) every such
# write is refused its block and has its immediate data copied.
lends() { echo "lent=$(count_of "$1" lent) lend_refused=$(count_of "$1" lend_refused)"; }
check "the writes ran from the blocks their immediate data came in ($(lends firstburst))" \
  test "$(count_of firstburst lent)" -gt 0 -a "$(count_of firstburst lend_refused)" = 0
check "tgtadm still shows the admin's InitialR2T=No" \
  bash -c "tgtadm -C $CTL --lld iser --op show --mode target --tid 1 | grep -qx 'InitialR2T=No'"

# The controls: coalesce = off must fall below the batching threshold,
# direct_commands = off below the direct path's, write_in_place = off
# (the admin's InitialR2T=No kept) must bring the Data-Outs back, and
# iser_receive_kib = 16 the copies of immediate data, or the checks above
# could not fail.
tgtd_stop
printf 'coalesce = off\nwrite_in_place = off\ndirect_commands = off\niser_receive_kib = 16\n' > "$WORK/rbio-off.conf"
: > "$STATE/tgtd.log"
RBIO_CONFIG="$WORK/rbio-off.conf" start_tgtd_rbio_iser
must "the -I ALL target again" iser_target 1 "$IQN" "$BACKING"
check "coalesce = off: the same reads" read_run unbatched
check "coalesce = off: below $MIN_WRS_PER_POST_KERNEL work requests per post ($(wpp_of unbatched))" \
  wpp unbatched "<" "$MIN_WRS_PER_POST_KERNEL"
check "direct_commands = off: below $MIN_DIRECT_PER_PDU_IN direct commands per PDU in ($(direct_ratio unbatched))" \
  direct_per_pdu_in unbatched "<" "$MIN_DIRECT_PER_PDU_IN"
must "the target set to InitialR2T=No again" initial_r2t_no
check "write_in_place = off: the same writes" write_run unsolicited
check "write_in_place = off: the session keeps InitialR2T=No ($(cat "$WORK/unsolicited.r2t"))" \
  test "$(cat "$WORK/unsolicited.r2t")" = No
check "write_in_place = off: at least $MAX_PDUS_IN_PER_OUT PDUs in per PDU out ($(ratio_of unsolicited))" \
  pdus_in_per_out unsolicited ">=" "$MAX_PDUS_IN_PER_OUT"
check "iser_receive_kib = 16: the writes' immediate data copied ($(lends unsolicited))" \
  test "$(count_of unsolicited lend_refused)" -gt 0

# --- the off switch: tgt's own iSER (which needs -Q for iSER logins) ---------
tgtd_stop
tgtd_start_iser_off() { RBIO_ISER=off tgtd_start -- --iser pool_sz_mb=128; }
must "tgtd starts with RBIO_ISER=off" tgtd_start_iser_off
check "the log says iSER stays with tgt's driver" log_has "rbio: iser: transport off"
must "the same target under tgt's own iSER, bound to -I ALL and this initiator" eval '
  iser_adm --op new --mode target --tid 1 -T "$IQN" &&
  iser_adm --op bind --mode target --tid 1 -I ALL &&
  iser_adm --op bind --mode target --tid 1 -Q "$MY_IQN" &&
  iser_adm --op new --mode logicalunit --tid 1 --lun 1 -b "$BACKING" --bstype rbio'
check "login under tgt's own iSER" iadm "$IQN" --login
check "its LUN appears" wait_lun "$IQN" 1
check "the pattern written through rbio's transport reads back" \
  cmp "$WORK/pattern" <(dd if="$DISK" iflag=direct bs=1M skip=224 count=8 status=none)
check "final logout" iscsiadm -m node --logoutall=all
finish
