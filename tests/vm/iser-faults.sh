#!/usr/bin/env bash
# Faults on iSER connections served by rbio's iSER transport inside stock
# tgtd, on soft-RoCE (rdma_rxe on a veth pair) in a qemu guest. What the
# target must guarantee each time: the broken connection ends (a log line,
# its queue pair and its registrations gone), tgtd stays up
# and serves the next session, and the data reads back.
#
#  1. The rbio initiator killed with SIGKILL with 32 commands in flight
#     (64 KiB reads and writes), and again during 1 MiB writes (the target's
#     RDMA READs of the dead process's memory): the kernel tears the
#     process's QP down, the target's work requests fail or a disconnect
#     arrives; then a new session writes and verifies data.
#  2. The link under soft-RoCE goes down (`ip link set DEV down`) under two
#     kernel iSER sessions, one running a fio verify job, one idle, and
#     comes back up. The idle one's target side gets no work completion and
#     no disconnect from a peer that vanished this way, and tgt's core sends
#     no NOP-In on iSER: the transport probes a connection that has been
#     quiet for 5 s (one zero-length RDMA WRITE), and that probe's failure
#     ends it. The same probe ends a third connection, established but
#     with nothing carried yet (no login: a peer gone before its first PDU,
#     e.g. a reconnect caught by the fault), which it used to skip. Checked
#     while the link is still down: no tgtd queue pair or slot pool is left.
#     Then a new session (through a second soft-RoCE device: see below why
#     not the first) reads back what was written before and verifies new
#     data. The busy session is also the kernel initiator's own session
#     torn down hard in the middle of I/O: its connection fails with I/O in
#     flight and no logout.
#  1b. An initiator that stops answering (SIGSTOP) while its adapter still
#     acknowledges RDMA traffic: with the target's nop_interval and
#     nop_count set, its NOP-In pings go unanswered and end the connection
#     (a session that answers them is not touched).
# Malformed iSER messages and a logout with I/O in flight are in
# vm.iser-kernel-initiator.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/iser-guest.sh" 780 "$@"
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
[[ -x $RBIO ]] || { echo "no $RBIO: build first" >&2; exit 2; }
IQN=iqn.2026-11.io.rbio:faults
ME=iqn.2026-11.io.rbio:faults-initiator
# A connection's send slots, and the receive heads of the shared receive
# queue of a device that has connections (sizes as in
# vm.iser-kernel-initiator; see
# endpoint_config() in tgt-backend/transport/iser_c_api.cpp). Pooled data
# buffers stay registered and are not counted.
conn_mrs() { tgtd_mrs_of "4364288|77824"; }
ended() { grep -c "rbio: iser: .*connection ended" "$STATE/tgtd.log" || true; }
stat_of() { sed -n "s/^$1=//p" "$STATE/rbio.stats" 2>/dev/null; }
qps_are() { count_is "$1" tgtd_qps; }
mrs_are() { count_is "$1" conn_mrs; }
# What is left, for a check on a connection's end that failed: every queue
# pair and CM id with its state and owner, the connections tgtd's sessions
# still hold (a connection that never logged in is in none), and tgtd's log
# since LOG_FROM (a line number).
LOG_FROM=1
show_state() {
  local tid
  echo "--- rdma res show qp ---"; rdma res show qp
  echo "--- rdma res show cm_id ---"; rdma res show cm_id
  for tid in 1 2; do
    echo "--- tgtd's connections, target $tid ---"; iser_adm --op show --mode conn --tid "$tid"
  done
  echo "--- tgtd's log from line $LOG_FROM ---"; tail -n +"$LOG_FROM" "$STATE/tgtd.log" | tail -40
}
# check_or_show DESCRIPTION COMMAND...: check, with show_state when it fails
# (called left of ||, so that one command of it failing does not end the test).
check_or_show() {
  local before=$checks_failed
  check "$@"
  (( checks_failed == before )) || { show_state || echo "(show_state: exit $?)"; } 2>&1 | sed 's/^/  /'
}

BACKING="$WORK/disk.img"
truncate -s 256M "$BACKING"
start_tgtd_rbio_iser
must "a --lld iser target bound to -I ALL, with an rbio LUN" iser_target 1 "$IQN" "$BACKING"

# --- 1. the rbio initiator killed in the middle of I/O -----------------------
BENCH_PID=""
VM_CLEANUP_HOOKS+=('[[ -n $BENCH_PID ]] && kill -9 "$BENCH_PID" 2>/dev/null')
# kill_mid_io NAME ARGS...: a long rbio bench over iSER, SIGKILLed once its
# commands flow (tgtd's counters grow), then the target's side of it checked.
kill_mid_io() {
  local name=$1; shift
  local ended_before pdus0 pdus1 i
  ended_before=$(ended)
  "$RBIO" bench --transport iser -T "$IQN" -p "$RXE_ADDR" --lun 1 --initiator-name "$ME" \
    --time 120 --timeout 60 "$@" > "$WORK/$name.out" 2>&1 &
  BENCH_PID=$!
  check "$name: the session is up (one tgtd queue pair)" wait_for 30 qps_are 1
  # The statistics file is rewritten every second with the live
  # connections' counters: PDUs still coming in means commands in flight.
  pdus0=$(stat_of pdus_in); pdus0=${pdus0:-0}
  for (( i = 0; i < 10; i++ )); do
    sleep 1
    pdus1=$(stat_of pdus_in); pdus1=${pdus1:-0}
    (( pdus1 > pdus0 + 16 )) && break
  done
  check "$name: commands are flowing when it is killed (pdus_in $pdus0 -> $pdus1)" \
    eval '(( pdus1 > pdus0 + 16 )) && kill -0 "$BENCH_PID"'
  kill -9 "$BENCH_PID"
  wait "$BENCH_PID" 2>/dev/null || true
  BENCH_PID=""
  check "$name: tgtd logs the connection's end" \
    wait_for 30 eval '(( $(ended) > ended_before ))'
  grep "rbio: iser: " "$STATE/tgtd.log" | tail -n +2 | tail -2 | sed 's/^/  /'
  check "$name: its queue pair is gone" wait_for 15 qps_are 0
  check "$name: its slot-pool registrations are gone" mrs_are 0
  check "$name: tgtd is alive" tgtd_alive
}
kill_mid_io kill-rw64k --rw rw --bs 64k --iodepth 32 --size 64M
kill_mid_io kill-write1m --rw write --bs 1M --iodepth 8 --size 128M

# bench NAME ARGS...: a verified rbio bench run over iSER.
bench() {
  local name=$1; shift
  timeout 300 "$RBIO" bench --transport iser -T "$IQN" -p "$RXE_ADDR" --lun 1 --initiator-name "$ME" \
    --time 3 --timeout 60 --verify "$@" > "$WORK/$name.out" 2>&1 || { cat "$WORK/$name.out"; return 1; }
  grep -q "RDMAExtensions=Yes" "$WORK/$name.out" &&
  grep -q "verify: [1-9][0-9]* blocks read back and matched" "$WORK/$name.out" ||
    { cat "$WORK/$name.out"; return 1; }
}
check "a new session: 4 KiB random writes, 32 in flight, read back and verified" \
  bench after-kill-4k --rw randwrite --bs 4k --iodepth 32 --size 16M
check "a new session: 1 MiB writes, 8 in flight, read back and verified" \
  bench after-kill-1m --rw write --bs 1M --iodepth 8 --size 32M
check "no tgtd queue pair is left" wait_for 15 qps_are 0

# --- 1b. an initiator that stops answering: NOP-In pings ---------------------
# A stopped process's adapter still acknowledges RDMA traffic, so neither a
# failed work request nor the transport's probe ends its connection; the
# target's NOP-In pings (nop_interval, nop_count) do.
iser_adm --op update --mode target --tid 1 --name nop_interval --value 1
iser_adm --op update --mode target --tid 1 --name nop_count --value 2
check "pings: a session that answers them runs its 3 s of verified writes" \
  bench pings-answered --rw randwrite --bs 4k --iodepth 8 --size 16M
check "pings: the rbio initiator answered the target's NOP-In pings" \
  grep -q "pings_answered=[1-9]" "$WORK/pings-answered.out"
check "pings: no connection was closed for unanswered pings" \
  eval '! grep -q "NOP-In pings" "$STATE/tgtd.log"'
"$RBIO" bench --transport iser -T "$IQN" -p "$RXE_ADDR" --lun 1 --initiator-name "$ME" \
  --time 120 --timeout 60 --rw randread --bs 4k --iodepth 4 --size 16M > "$WORK/stopped.out" 2>&1 &
BENCH_PID=$!
check "pings: the session is up (one tgtd queue pair)" wait_for 30 qps_are 1
kill -STOP "$BENCH_PID"
check "pings: tgtd ends the stopped initiator's connection for 2 unanswered pings" \
  wait_for 30 grep -q "no reply to 2 NOP-In pings" "$STATE/tgtd.log"
grep "rbio: iser: .*NOP-In" "$STATE/tgtd.log" | tail -1 | sed 's/^/  /'
check "pings: its queue pair is gone" wait_for 15 qps_are 0
check "pings: its slot-pool registrations are gone" mrs_are 0
kill -9 "$BENCH_PID"; wait "$BENCH_PID" 2>/dev/null || true
BENCH_PID=""
iser_adm --op update --mode target --tid 1 --name nop_interval --value 0
check "pings: tgtd is alive and serves a new verified session" \
  bench after-pings --rw randwrite --bs 4k --iodepth 8 --size 16M

# --- 2. the link under soft-RoCE goes down and up ---------------------------
echo "(part 1 took $SECONDS s)"
# Soft-RoCE in Debian's 6.1 kernel does not survive this on the device
# whose link went down: afterwards no RDMA CM connection on that device
# completes, whoever makes it (iscsid's reconnects, a new `rbio bench`,
# rping with no iSCSI and no tgtd at all: the test prints a note with
# rping's result). Likely cause, not pinned down further: the connections
# torn down while the link is down send CM messages (DREQ) that rxe cannot
# route, which fails its management queue pair (QP1). So the kernel
# initiator cannot log in again there, and what is checked is what the
# target owes: the dead connections end while the link is still down (the
# busy one by a failed work request, or when its outstanding work gets no
# completion for 15 s: rxe resends for ever a send whose acknowledgement
# was lost with the link; the idle and the silent one only by the probe),
# nothing is left registered, tgtd stays up, and a
# new session through a second soft-RoCE device on another veth pair reads
# back what was written before the link went down and verifies new data. A note says
# whether the old session came back, in case a later kernel recovers.
RXE2_ADDR=10.99.1.1
rxe2_up() {
  ip link add rbio-veth2 type veth peer name rbio-veth3 &&
  ip addr add "$RXE2_ADDR/24" dev rbio-veth2 &&
  ip link set rbio-veth2 up && ip link set rbio-veth3 up &&
  rdma link add rbio-rxe1 type rxe netdev rbio-veth2 &&
  wait_for 5 eval 'rdma link show rbio-rxe1/1 | grep -q "state ACTIVE"'
}
must "a second soft-RoCE device (rbio-rxe1, $RXE2_ADDR)" rxe2_up
BACKING2="$WORK/disk2.img"
truncate -s 64M "$BACKING2"
IQN2=iqn.2026-11.io.rbio:faults-idle
must "a second target, for a session that stays idle" iser_target 2 "$IQN2" "$BACKING2"
must "the kernel's iSER initiator loads" modprobe -a ib_iser sd_mod
start_iscsid
disc() {
  tgtd_qps > "$WORK/qps-before-discovery"
  iscsiadm -m discovery -t sendtargets -p "$1" -I iser > "$WORK/discovery" 2>&1 && return 0
  cat "$WORK/discovery"
  echo "$1" >> "$WORK/discovery-failed"
  return 1
}
# iscsiadm gives up on a discovery after 30 s. On a loaded host it has,
# now and then, never seen a response that tgtd had sent and the
# initiator's adapter had acknowledged (tgtd's pdus_in/pdus_out and its
# send completions said so: "Login response timeout", or "Discovery
# session ... timed out" and a crash in libc): what fails there is the
# initiator's tool, so it gets a second attempt.
must "iSER discovery" wait_for 70 disc "$PORTAL"
# A discovery ends its session, and tgtd its queue pair. An attempt that
# crashed can leave its kernel session (seen: "could not read session
# targetname" for it ever after) and so a queue pair with its send slots
# and the device's shared receive queue; the counts below are then on top
# of what it holds (it ends with the link, below): what was there before
# the attempt that worked, once that attempt's own queue pair is gone.
QP_BASE=0 MR_BASE=0
if [[ -s $WORK/discovery-failed ]]; then
  check "the discovery session's queue pair is gone" \
    wait_for 30 eval '(( $(tgtd_qps) <= $(cat "$WORK/qps-before-discovery") ))'
  QP_BASE=$(tgtd_qps) MR_BASE=$(conn_mrs)
  echo "note: a failed discovery attempt left $QP_BASE tgtd queue pair(s) and $MR_BASE registrations; counted from there"
else
  check "the discovery session's queue pair is gone" wait_for 30 qps_are 0
fi
# The shared receive queue comes with a device's first queue pair.
# shellcheck disable=SC2034  # read by the eval'd checks below
SRQ_NEW=$(( QP_BASE == 0 ? 1 : 0 ))
# Fast detection and short timeouts; the idle session sends no NOP-Out, so
# neither end has anything in flight when the link goes.
for t in "$IQN" "$IQN2"; do
  iadm "$t" -o update -n node.session.initial_login_retry_max -v 1
  iadm "$t" -o update -n node.conn[0].timeo.login_timeout -v 5
  iadm "$t" -o update -n node.session.timeo.replacement_timeout -v 30
done
iadm "$IQN" -o update -n node.conn[0].timeo.noop_out_interval -v 2
iadm "$IQN" -o update -n node.conn[0].timeo.noop_out_timeout -v 2
iadm "$IQN2" -o update -n node.conn[0].timeo.noop_out_interval -v 0
iadm "$IQN2" -o update -n node.conn[0].timeo.noop_out_timeout -v 0
must "login over iSER (the busy session)" iadm "$IQN" --login
must "its LUN appears" wait_disk_of "$IQN" 1
DISK_A=$DISK
must "login over iSER (the idle session)" iadm "$IQN2" --login
must "its LUN appears" wait_disk_of "$IQN2" 1
DISK_B=$DISK
check "two tgtd queue pairs, two send-slot pools and one shared receive queue" \
  eval 'qps_are $(( QP_BASE + 2 )) && mrs_are $(( MR_BASE + 2 + SRQ_NEW ))'
# A connection that is established and has carried nothing: no login, so
# no session, and no response that could fail when the link goes.
"$RBIO_BUILD_DIR/tests/vm/iser_engine_check" --addr "$RXE_ADDR" --port 3260 --hold 600 > "$WORK/silent.out" 2>&1 &
SILENT_PID=$!
VM_CLEANUP_HOOKS+=('kill "$SILENT_PID" 2>/dev/null')
check "a silent connection (established, no login): a third tgtd queue pair" \
  wait_for 30 eval 'grep -q "^connected" "$WORK/silent.out" && qps_are $(( QP_BASE + 3 )) && mrs_are $(( MR_BASE + 3 + SRQ_NEW ))'
head -c $((8 << 20)) /dev/urandom > "$WORK/pattern"
must "write an 8 MiB pattern at 200 MiB before the link goes down" \
  dd if="$WORK/pattern" of="$DISK_A" oflag=direct bs=1M seek=200 status=none
# Rate-limited (4,096 writes take 8 s or more), so it is still writing when
# the link goes down however fast the guest is: unlimited, it once finished
# its 16 MiB within the 3 s this test used to sleep.
disk_writes() { local f; read -ra f < "/sys/block/${DISK_A#/dev/}/stat"; echo "${f[4]}"; }
# shellcheck disable=SC2034  # read by the eval'd check below
writes_before=$(disk_writes)
fio --name=flap --filename="$DISK_A" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
  --iodepth=16 --size=16M --rate_iops=500 --verify=crc32c --verify_fatal=1 > "$WORK/fio-flap.log" 2>&1 &
FIO_PID=$!
VM_CLEANUP_HOOKS+=('kill "$FIO_PID" 2>/dev/null')
check "fio's writes reach the disk" wait_for 15 eval '(( $(disk_writes) >= writes_before + 200 ))'
check "fio is writing when the link goes down" kill -0 "$FIO_PID"
# shellcheck disable=SC2034  # read by the eval'd check below
ended_before=$(ended)
LOG_FROM=$(( $(wc -l < "$STATE/tgtd.log") + 1 ))
ip link set rbio-veth0 down
t_down=$SECONDS
check_or_show "while the link is down, the target ends all three dead connections" wait_for 30 qps_are 0
echo "  (after $((SECONDS - t_down)) s)"
check "... with a log line each" eval '(( $(ended) >= ended_before + 3 ))'
tail -n +"$LOG_FROM" "$STATE/tgtd.log" | sed -n '/rbio: iser: .*closing connection/s/^/  /p'
check "... and no slot-pool registration left" mrs_are 0
check "tgtd is alive" tgtd_alive
kill "$SILENT_PID"
wait "$SILENT_PID" 2>/dev/null || true
ip link set rbio-veth0 up
must "the link is back (rbio-rxe0 ACTIVE)" wait_for 10 eval 'rdma link show rbio-rxe0/1 | grep -q "state ACTIVE"'
# Notes only (see the comment above): does the old session come back, and
# does a plain RDMA CM connection (rping, no iSCSI, no tgtd) work on rxe0?
rping -s -a "$RXE_ADDR" -p 7471 > /dev/null 2>&1 &
RPING_PID=$!
VM_CLEANUP_HOOKS+=('kill "$RPING_PID" 2>/dev/null')
rping_rc=0
(sleep 0.5; exec timeout 10 rping -c -a "$RXE_ADDR" -p 7471 -C 1) > "$WORK/rping.log" 2>&1 &
RPING_C=$!
if wait_for 10 eval 'grep -q LOGGED_IN "$(session_of "$IQN")/state"'; then
  echo "note: the busy session logged in again on rbio-rxe0"
else
  echo "note: the busy session did not log in again on rbio-rxe0 within 10 s" \
       "(state $(cat "$(session_of "$IQN")/state" 2>/dev/null)); see the comment above"
fi
wait "$RPING_C" || rping_rc=$?
kill "$RPING_PID" 2>/dev/null || true
echo "note: rping on rbio-rxe0 after the link came back: exit $rping_rc" \
     "$( ((rping_rc == 0)) && echo '(works)' || echo '(fails; 124: timed out)')"
# The old sessions are not logged out: their teardown waits for the
# kernel's CM on rxe0 (over a minute on 6.1), which is not the target's
# business. iscsid is stopped at the end instead, and the guest is thrown
# away. Their disks' write cache is declared off (in the kernel only: no
# command goes out), or the power-off would wait over a minute for their
# SYNCHRONIZE CACHE to fail.
for d in "$DISK_A" "$DISK_B"; do
  echo "temporary write through" > /sys/block/"${d#/dev/}"/device/scsi_disk/*/cache_type || true
done

# A new session through the second device.
must "iSER discovery through rbio-rxe1" wait_for 20 disc "$RXE2_ADDR:3260"
iscsiadm -m node -T "$IQN" -p "$RXE2_ADDR:3260" -I iser -o update -n node.session.initial_login_retry_max -v 1
must "a new login to the same target through rbio-rxe1" \
  iscsiadm -m node -T "$IQN" -p "$RXE2_ADDR:3260" -I iser --login
# The disk of the logged-in session (the old one may still be on its way out).
new_disk() {
  local s d
  for s in /sys/class/iscsi_session/session*; do
    [[ $(< "$s/targetname") == "$IQN" && $(< "$s/state") == LOGGED_IN ]] || continue
    for d in "$s"/device/target*/*:*:*:1/block/*; do
      [[ -e $d && -b /dev/${d##*/} ]] && { DISK=/dev/${d##*/}; return 0; }
    done
  done
  return 1
}
must "its LUN appears" wait_for 60 new_disk
check "the pattern written before the link went down reads back" \
  cmp "$WORK/pattern" <(dd if="$DISK" iflag=direct bs=1M skip=200 count=8 status=none)
check "fio 4 KiB random writes, 16 in flight, crc32c verified" \
  fio_job after-flap "$DISK" --rw=randwrite --bs=4k --iodepth=16 --size=16M --offset=32M
check_or_show "one tgtd queue pair, its send slots and its device's receive queue" eval 'qps_are 1 && mrs_are 2'
check "logout of the new session" iscsiadm -m node -T "$IQN" -p "$RXE2_ADDR:3260" --logout
check_or_show "no tgtd queue pair is left" wait_for 15 qps_are 0
check "tgtd is alive" tgtd_alive
# Without iscsid the guest's cleanup does not try to log the old sessions
# out either (iscsiadm finds no daemon and returns at once).
kill "$ISCSID_PID" 2>/dev/null || true
ISCSID_PID=""
echo "(the guest script ran $SECONDS s)"
finish
