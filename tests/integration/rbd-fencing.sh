#!/usr/bin/env bash
# A gateway that hangs while it holds an RBD image's exclusive lock, and
# wakes up after another gateway took the lock over (a "zombie"): the
# cluster has fenced it, and hosts must see it as a path to avoid, never
# as one that stores or returns stale data.
#
# Two tgtd+rbio gateways on one image (ALUA port groups 1 and 2, both
# active/optimized), a single-node cluster (scripts/ceph-dev.sh, memstore,
# osd_client_watch_timeout 10 s to keep the wait short):
#  1. writes through gateway 1: it holds the lock;
#  2. gateway 1 is stopped (SIGSTOP) and gateway 2 writes other data over
#     the same blocks: librbd on gateway 2 takes the lock once gateway 1's
#     watch has expired, blocklisting gateway 1's client first. The monitor
#     is stopped as long (as if it ran on gateway 1's node): the blocklist
#     waits for it, and the write with it, past gateway 2's rbd_timeout;
#  3. gateway 1 continues (SIGCONT): writes, reads and UNMAP sent to it fail
#     at once with NOT READY, target port in unavailable state (02/04/0C),
#     which multipath hosts answer by using another path (not MEDIUM ERROR,
#     and never a write that hangs), and from then on its REPORT TARGET PORT
#     GROUPS says so for the LU (and TEST UNIT READY fails), so they do
#     not take the path back;
#  4. gateway 2's data is what the image holds;
#  5. another client takes the lock and keeps it (rbd_lock_acquire):
#     gateway 2's writes fail with 02/04/0C too, its reads work, rbio's
#     multipath initiator on both gateways waits (it re-sends a command
#     refused that way a second later) rather than fail, and gateway 2
#     writes again once the lock is released;
#  6. the default, rbd_reopen=auto (steps 1-5 run gateway 1 with
#     rbd_reopen=manual, which keeps a fenced gateway out until its admin
#     acts): gateway 1, still refusing everything, has its LU deleted and
#     added again (the admin's way back) with the default. It takes the lock
#     back (gateway 2 hands it over), a host session to it logs in, and it
#     hangs again while gateway 2 writes newer data. Woken, gateway 1 ends
#     the LU's sessions and opens the image with a new client by itself; the
#     old session's write, sent then, does not land, and a new session reads
#     the newer data and writes again;
#  7. both gateways shut down cleanly, and no lock is left.
# A cluster that cannot start fails the test with ceph-dev's reason.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 84   # gateways on control ports 5785-5786, portals 13785-13786
source "$(dirname "$0")/../lib/gateways.sh"
source "$(dirname "$0")/../lib/rbd-gateways.sh"
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
CEPH_DEV="$RBIO_SOURCE_DIR/scripts/ceph-dev.sh"
CEPH_DIR="$WORK/ceph"
CONF="$CEPH_DIR/ceph.conf"
CEPH_PORT=$((16910 + TEST_PORT_SHIFT))
WATCH_TIMEOUT=10
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
for t in "$PROBE" "$RBIO"; do
  [[ -x $t ]] || { echo "no $t: build first" >&2; exit 2; }
done
gateways_init 1M

stopped="" holder="" mon="" mon_waker="" bench=""
fencing_cleanup() {
  local rc=$?
  [[ -z $stopped ]] || kill -CONT "$stopped" 2>/dev/null || :
  [[ -z $late ]] || end_started "$late"
  [[ -z $mon_waker ]] || end_started "$mon_waker"
  [[ -z $mon ]] || kill -CONT "$mon" 2>/dev/null || :
  [[ -z $holder ]] || end_started "$holder"
  [[ -z $bench ]] || end_started "$bench"
  gateways_stop "$rc" || rc=1
  bash "$CEPH_DEV" stop --dir "$CEPH_DIR" > /dev/null 2>&1 || :
  tgt_test_cleanup "$rc"
}
trap fencing_cleanup EXIT

bash "$CEPH_DEV" start --dir "$CEPH_DIR" --port "$CEPH_PORT" --watch-timeout "$WATCH_TIMEOUT"
rbd_ create --size 16M lun
set_groups "1 active/optimized" "2 active/optimized"
# Gateway 2 waits for monitors at most 2 s (rbd_timeout) while it opens
# the image; that must not bound its later waits for them (step 2).
RBD_TIMEOUT=2
# add_lu G BSOPTS: gateway G's LU on the image, with the shared identity.
add_lu() {
  gw_adm "$1" --op new --mode logicalunit --tid 1 --lun 1 -b rbd:rbd/lun --bstype rbio --bsopts "$2" &&
    gw_adm "$1" --op update --mode logicalunit --tid 1 --lun 1 --params "scsi_id=$SCSI_ID,scsi_sn=$SCSI_SN"
}
# export G: gateway G serving the image. Gateway 1 stays fenced until the
# test re-adds its LU (rbd_reopen=manual), until step 6.
export_rbd() {
  local g=$1 opts="rbd_conf=$CONF"
  (( g == 1 )) && opts+=";rbd_reopen=manual"
  (( g == 2 )) && opts+=";rbd_timeout=$RBD_TIMEOUT"
  gw_start "$g" RBIO_METRICS_FILE="$WORK/gw$g.prom" &&
    gw_adm "$g" --op new --mode target --tid 1 -T "$GW_TARGET" &&
    gw_adm "$g" --op bind --mode target --tid 1 -I ALL &&
    add_lu "$g" "$opts"
}

for g in 1 2; do must_start "gateway $g exports the image" export_rbd "$g"; done
A1=$(addr_of 1) A2=$(addr_of 2)
echo "gateway 1: $A1; gateway 2: $A2"
check "the gateways' logs name two clients" eval '[[ -n $A1 && -n $A2 && $A1 != "$A2" ]]'

# --- 0. COMPARE AND WRITE through either gateway (VMware's ATS) ----------------------
# The OSD compares and writes, so it holds across gateways: a CAW through
# gateway 1 that still expects what gateway 2's CAW replaced miscompares.
# caw G CMP_BYTE DATA_BYTE: one block at LBA 100, each half of one byte.
caw() {
  timeout 60 "$PROBE" "$(gw_url "$1")" cdb-out "$(printf '8900%016x000000%02x0000' 100 1)" \
    "$(printf "$2%.0s" $(seq 1 512))$(printf "$3%.0s" $(seq 1 512))"
}
check "COMPARE AND WRITE through gateway 2: GOOD" eval '[[ $(caw 2 00 ab) == GOOD ]]'
check "the same through gateway 1: MISCOMPARE" eval '[[ $(caw 1 00 cd) == "CHECK key=e asc=1d00" ]]'
check "through gateway 1 expecting gateway 2's data: GOOD" eval '[[ $(caw 1 ab cd) == GOOD ]]'

# --- 1. gateway 1 writes and holds the lock --------------------------------------
check "64 blocks written through gateway 1" "$PROBE" "$(gw_url 1)" write 0 64 1
check "gateway 1 holds the lock" eval '[[ $(owner) == "$A1" ]]'

# --- 2. gateway 1 hangs; gateway 2 takes over ---------------------------------------
stopped=$(gw_pid 1)
kill -STOP "$stopped"
# The monitor is down from now until well after gateway 1's watch has
# expired (after 10-15 s: the OSD checks every 5 s) and gateway 2 has
# asked it to blocklist gateway 1: long enough for that request to outlast
# rbd_timeout. This is the fault's length, not a wait for a condition.
MON_DOWN=$(( WATCH_TIMEOUT + 5 + 2 * RBD_TIMEOUT + 1 ))
mon=$(cat "$CEPH_DIR/run/mon.a.pid")
kill -STOP "$mon"
( sleep "$MON_DOWN"; kill -CONT "$mon" ) &
mon_waker=$!
t0=$SECONDS
check "64 other blocks written through gateway 2 over the same LBAs, waiting for the monitor" \
  env SCSI_PROBE_TIMEOUT=90 "$PROBE" "$(gw_url 2)" write 0 64 2
echo "gateway 2's write waited $(( SECONDS - t0 )) s for the lock (watch timeout $WATCH_TIMEOUT s, monitor down $MON_DOWN s)"
wait "$mon_waker"
mon_waker=""
check "gateway 2 holds the lock" eval '[[ $(owner) == "$A2" ]]'
check "gateway 1's client is blocklisted" blocklisted "$A1"

# --- 3. gateway 1 wakes up, fenced ---------------------------------------------------
kill -CONT "$stopped"
stopped=""
# sense_all EXPECTED OUT: every line of OUT ("LBA RESULT") has RESULT EXPECTED.
sense_all() { [[ -n $2 ]] && ! grep -v " $1\$" <<<"$2"; }
unavailable="CHECK key=2 asc=040c"
t0=$SECONDS
# (scsi_probe exits 1 when a command fails: its output is what is checked.)
out=$(timeout 60 "$PROBE" "$(gw_url 1)" writes 0 8) || :
echo "$out" | sed 's/^/  write through gateway 1: /'
# The first write meets librbd's ESHUTDOWN in the store; from then on the
# LU is fenced there and the ALUA check refuses the rest before the store.
check "writes through the fenced gateway 1 fail at once: NOT READY, target port unavailable" \
  eval 'sense_all "$unavailable" "$out" && (( SECONDS - t0 < 10 ))'
out=$(timeout 60 "$PROBE" "$(gw_url 1)" reads 0 8) || :
echo "$out" | sed 's/^/  read through gateway 1: /'
check "reads through it fail the same way (a path error, not a medium error)" sense_all "$unavailable" "$out"
# UNMAP, 8 blocks at LBA 0 (librbd's discard)
out=$(timeout 60 "$PROBE" "$(gw_url 1)" cdb-out 42000000000000001800 001600100000000000000000000000000000000800000000) || :
echo "  UNMAP through gateway 1: $out"
check "so does UNMAP" test "$out" == "$unavailable"
check "its log says why" gw_log_has 1 "Cannot send after transport endpoint shutdown"
check "... and that it was fenced, and what to do" gw_log_has 1 "the cluster fenced this gateway"
# Hosts must not take the path back: dm-multipath's ALUA handler re-reads
# the states on 04/0C, and its path checker sends TEST UNIT READY.
check "gateway 1 reports its port unavailable for this LU (REPORT TARGET PORT GROUPS)" \
  eval '[[ $(timeout 60 "$PROBE" "$(gw_url 1)" rtpg) == "$(printf "group 1 unavailable ports 1\ngroup 2 active/optimized ports 2")" ]]'
check "... and TEST UNIT READY through it fails the same way" \
  eval '[[ $(timeout 60 "$PROBE" "$(gw_url 1)" cdb 000000000000) == "$unavailable" ]]'
check "gateway 2 still reports both groups as its file says" \
  eval '[[ $(timeout 60 "$PROBE" "$(gw_url 2)" rtpg) == "$(printf "group 1 active/optimized ports 1\ngroup 2 active/optimized ports 2")" ]]'

# --- 4. the image keeps gateway 2's data ------------------------------------------------
check "the blocks read back as gateway 2 wrote them" "$PROBE" "$(gw_url 2)" verify 0 64 2
check "gateway 2 still holds the lock" eval '[[ $(owner) == "$A2" ]]'

# --- 5. another client keeps the lock -------------------------------------------------
# A client that took the lock on purpose (rbd_lock_acquire, as rbd-nbd
# --exclusive or tcmu-runner do) declines to hand it over, and librbd fails
# gateway 2's writes with EROFS: the path cannot write, the data is fine.
HOLDER="$RBIO_SOURCE_DIR/tests/integration/rbd_lock_holder.py"
/usr/bin/python3 "$HOLDER" "$CONF" rbd lun "$WORK/held" 2> "$WORK/holder.err" &
holder=$!
check "another client takes the lock from gateway 2 and keeps it" wait_for 30 test -e "$WORK/held"
[[ ! -s $WORK/holder.err ]] || sed 's/^/  lock holder: /' "$WORK/holder.err"
out=$(timeout 60 "$PROBE" "$(gw_url 2)" writes 0 8) || :
echo "$out" | sed 's/^/  write through gateway 2: /'
check "writes through gateway 2 fail as a path that cannot write: NOT READY, target port unavailable" \
  sense_all "$unavailable" "$out"
check "its log says why" gw_log_has 2 "Read-only file system"
check "reads through gateway 2 still work (they need no lock)" "$PROBE" "$(gw_url 2)" verify 0 64 2
# rbio's multipath initiator on both gateways meanwhile: gateway 1 reports
# itself unavailable (fenced), gateway 2 refuses writes as unavailable but
# reports active/optimized. The initiator re-sends a command refused that
# way a second later, so writes wait for the lock instead of using up
# their resends at once and failing.
timeout 120 "$RBIO" --log-level info bench -T "$GW_TARGET" -p "$(gw_portal 1)" -p "$(gw_portal 2)" \
  --lun 1 --rw randwrite --bs 4k --iodepth 4 --size 1M --time 1 --verify > "$WORK/bench.out" 2>&1 &
bench=$!
check "rbio bench's writes wait, re-sent a second apart after gateway 2's refusals" \
  wait_for 30 grep -qs "refused a command as unavailable; such commands are re-sent a second apart" \
  "$WORK/bench.out"
check "... and bench is still running then" kill -0 "$bench"
kill -TERM "$holder"
check "the other client releases the lock and exits" wait "$holder"
holder=""
brc=0; wait "$bench" || brc=$?
bench=""
check "bench completes once the lock is free, every write verified (exit $brc)" \
  eval '(( brc == 0 )) && grep -q "blocks read back and matched" "$WORK/bench.out"'
(( brc == 0 )) || tail -15 "$WORK/bench.out"
check "gateway 2 writes again once it is released" "$PROBE" "$(gw_url 2)" write 0 64 3
check "... and reads that back" "$PROBE" "$(gw_url 2)" verify 0 64 3

# --- 6. rbd_reopen=auto: the fenced gateway serves again by itself ---------------------
# Gateway 1 was fenced in step 3, seconds ago: with rbd_reopen=manual it
# has not opened the image again.
out=$(timeout 60 "$PROBE" "$(gw_url 1)" reads 0 8) || :
check "manual: gateway 1 still refuses reads as unavailable" sense_all "$unavailable" "$out"
check "manual: ... its log never says it opened the image again" eval '! gw_log_has 1 "opened again as client"'
check "manual: ... and its metrics say it is fenced" metric 1 rbio_lu_rbd_fenced 1
check "the fenced LU on gateway 1 is deleted" gw_adm 1 --op delete --mode logicalunit --tid 1 --lun 1
must_start "... and added again with the default, rbd_reopen=auto" add_lu 1 "rbd_conf=$CONF"
A1=$(addr_of 1)
echo "gateway 1 is now $A1"
check "auto: gateway 1 reads gateway 2's data through its new client" "$PROBE" "$(gw_url 1)" verify 0 64 3
check "auto: pattern 4 written through gateway 1" "$PROBE" "$(gw_url 1)" write 0 8 4
check "auto: gateway 1 owns the lock (gateway 2 handed it over)" eval '[[ $(owner) == "$A1" ]]'
# A session that logged in before the fault; its write of pattern 3 comes
# late (below).
must_start "auto: a host session to gateway 1 logs in" start_late 1 late
stopped=$(gw_pid 1)
kill -STOP "$stopped"
check "auto: with gateway 1 hung, pattern 5 written through gateway 2 once gateway 1's watch expired" \
  env SCSI_PROBE_TIMEOUT=90 "$PROBE" "$(gw_url 2)" write 0 8 5
check "auto: gateway 1's client is blocklisted" blocklisted "$A1"
kill -CONT "$stopped"
stopped=""
check "auto: gateway 1 learns it was fenced, and waits for a new client (its log)" \
  wait_for 30 gw_log_has 1 "Every request fails until a new client has opened the image"
check "auto: ... ends the sessions of the LU's target (its log)" \
  wait_for 30 gw_log_has 1 "ended the sessions of the LU's target that existed at the fence"
check "auto: ... opens the image with a new client, without its admin" \
  wait_for 30 gw_log_has 1 "opened again as client"
check "auto: ... its metrics count the fence (rbio_lu_rbd_fences_total 1), fenced no more" \
  wait_for 10 eval 'metric 1 rbio_lu_rbd_fences_total 1 && metric 1 rbio_lu_rbd_fenced 0'
# The late write comes once the new client serves: only the end of its
# session keeps it from landing over pattern 5.
check "auto: the late write through gateway 1's old session does not land" \
  late_refused late
check "auto: the image keeps gateway 2's pattern 5" "$PROBE" "$(gw_url 2)" verify 0 8 5
check "auto: a new session to gateway 1 reads it (the new client)" "$PROBE" "$(gw_url 1)" verify 0 8 5
check "auto: ... its REPORT TARGET PORT GROUPS is as the groups file says again" \
  eval '[[ $(timeout 60 "$PROBE" "$(gw_url 1)" rtpg) == "$(printf "group 1 active/optimized ports 1\ngroup 2 active/optimized ports 2")" ]]'
A1=$(addr_of 1)
check "auto: ... and it writes pattern 7" "$PROBE" "$(gw_url 1)" write 0 8 7
check "auto: gateway 1's new client $A1 owns the lock" eval '[[ -n $A1 && $(owner) == "$A1" ]]'
check "auto: gateway 2 reads pattern 7" "$PROBE" "$(gw_url 2)" verify 0 8 7

# --- 7. shutdown ------------------------------------------------------------------------
check "gateway 1 shuts down cleanly" "$SANDBOX" stop "$(gw_state 1)"
check "gateway 2 shuts down cleanly" "$SANDBOX" stop "$(gw_state 2)"
check "no lock is left" eval '[[ $(rbd_ lock ls --format json lun) == "[]" ]]'
finish
