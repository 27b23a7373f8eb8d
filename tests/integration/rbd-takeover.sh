#!/usr/bin/env bash
# rbd_lock=takeover: a write that reaches a gateway after hosts have
# written newer data through another gateway must not land, and a hung
# owner of the image's lock must not hold writes up until its watch expires.
#
# Two tgtd+rbio gateways on one image, a single-node cluster
# (scripts/ceph-dev.sh, memstore, Ceph's default 30 s watch timeout):
#  A. the control, librbd's cooperative lock (the default):
#     1. gateway 1 writes pattern 1 and so owns the lock;
#     2. a host session to gateway 1 logs in; its write comes late, after
#        4 s of silence (as one held in a cut link, or in a stalled loop,
#        does);
#     3. the host writes pattern 2 through gateway 2 (its retry on the
#        other path): gateway 1 hands the lock over on request;
#     4. the late write of pattern 3 reaches gateway 1, which asks for the
#        lock back and gets it: the write lands over pattern 2. This is the
#        lost write the cooperative lock allows; the test requires it, so
#        it is known to detect one.
#     5. the same with rbd_quiet_s=3 on the cooperative lock (off unless
#        set there): gateway 1 ends the late write's session instead, and
#        the image keeps pattern 2.
#  B. the same with rbd_lock=takeover on both gateways: gateway 2 breaks
#     gateway 1's lock, which blocklists gateway 1's client, so the late
#     write fails with NOT READY, target port unavailable (02/04/0C), and
#     the image keeps pattern 2.
#  C. gateway 1 restarted (a new client); gateway 2 owns the lock and hangs
#     (SIGSTOP): a write through gateway 1 takes the lock over at once
#     (with the cooperative lock, librbd would wait for gateway 2's watch
#     on the image to expire, 30 s, before breaking the lock).
#     Gateway 2 then resumes fenced while its new client cannot reach the
#     cluster (no ceph.conf): it tries again, 1 s, 2 s, ... later, and
#     serves again once it can, without a restart.
#  D. a late write at a gateway that does not own the lock: gateway 2
#     owns it; a host session to gateway 1 goes silent (as one whose link
#     was cut does) while the host writes newer data through gateway 2;
#     then its write reaches gateway 1.
#     1. the control, rbd_quiet_s=0: gateway 1 takes the lock over for it
#        and it lands over the newer data (the lost write);
#     2. rbd_quiet_s=3: gateway 1 ends that session instead, the image
#        keeps the newer data, and a new session writes at once.
#  E. an image without the exclusive-lock feature: rbd_lock=takeover is
#     refused when the LU is created, with the reason.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 105   # gateways on control ports 5806-5807, portals 13806-13807
source "$(dirname "$0")/../lib/gateways.sh"
source "$(dirname "$0")/../lib/rbd-gateways.sh"
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
CEPH_DEV="$RBIO_SOURCE_DIR/scripts/ceph-dev.sh"
CEPH_DIR="$WORK/ceph"
CONF="$CEPH_DIR/ceph.conf"
CEPH_PORT=$((16960 + TEST_PORT_SHIFT))
WATCH_TIMEOUT=30   # Ceph's default, which scripts/ceph-dev.sh keeps
[[ -x $PROBE ]] || { echo "no $PROBE: build first" >&2; exit 2; }
gateways_init 1M

stopped="" late=""
takeover_cleanup() {
  local rc=$?
  [[ -z $stopped ]] || kill -CONT "$stopped" 2>/dev/null || :
  [[ ! -e $CONF.away ]] || mv "$CONF.away" "$CONF"
  [[ -z $late ]] || end_started "$late"
  gateways_stop "$rc" || rc=1
  bash "$CEPH_DEV" stop --dir "$CEPH_DIR" > /dev/null 2>&1 || :
  tgt_test_cleanup "$rc"
}
trap takeover_cleanup EXIT

bash "$CEPH_DEV" start --dir "$CEPH_DIR" --port "$CEPH_PORT"
rbd_ create --size 16M lun
set_groups "1 active/optimized" "2 active/non-optimized"

# export_rbd G BSOPTS [IMAGE]: gateway G serving the image with the shared identity.
export_rbd() {
  gw_start "$1" RBIO_METRICS_FILE="$WORK/gw$1.prom" &&
    gw_adm "$1" --op new --mode target --tid 1 -T "$GW_TARGET" &&
    gw_adm "$1" --op bind --mode target --tid 1 -I ALL &&
    gw_adm "$1" --op new --mode logicalunit --tid 1 --lun 1 -b "rbd:rbd/${3:-lun}" --bstype rbio \
      --bsopts "rbd_conf=$CONF${2:+;$2}" &&
    gw_adm "$1" --op update --mode logicalunit --tid 1 --lun 1 --params "scsi_id=$SCSI_ID,scsi_sn=$SCSI_SN"
}
stop_gw() { "$SANDBOX" stop "$(gw_state "$1")"; }


# late_write_phase BSOPTS NAME [SILENCE_S]: steps 1-3 with both gateways
# on BSOPTS, the late session silent for SILENCE_S seconds.
late_write_phase() {
  for g in 1 2; do must_start "gateway $g exports the image ($2)" export_rbd "$g" "$1"; done
  A1=$(addr_of 1) A2=$(addr_of 2)
  echo "$2: gateway 1 is $A1, gateway 2 is $A2"
  check "$2: pattern 1 written through gateway 1" "$PROBE" "$(gw_url 1)" write 0 8 1
  check "$2: gateway 1 owns the lock" eval '[[ $(owner) == "$A1" ]]'
  must_start "$2: a host session to gateway 1 logs in" start_late 1 "$2"
  (( ${3:-0} == 0 )) || sleep "$3" # the stimulus, not a wait: the session's silence
  check "$2: pattern 2 written through gateway 2" "$PROBE" "$(gw_url 2)" write 0 8 2
  check "$2: gateway 2 owns the lock" eval '[[ $(owner) == "$A2" ]]'
}

# --- A. the control: the cooperative lock loses the late write ----------------------
late_write_phase "" cooperative 4
check "cooperative: the late write through gateway 1 is GOOD" finish_late cooperative
check "cooperative: it landed over gateway 2's newer data (the lost write)" \
  "$PROBE" "$(gw_url 2)" verify 0 8 3
check "cooperative: no gateway was blocklisted" eval 'not_blocklisted "$A1" && not_blocklisted "$A2"'
check "cooperative: gateway 1's metrics say it is not fenced" wait_for 10 metric 1 rbio_lu_rbd_fenced 0
check "cooperative: ... and count no session ended for a silence (rbd_quiet_s is off there by default)" \
  metric 1 rbio_lu_rbd_quiet_sessions_ended_total 0
for g in 1 2; do check "cooperative: gateway $g shuts down cleanly" stop_gw "$g"; done

# 5. rbd_quiet_s set on the cooperative lock ends the late write's session.
late_write_phase "rbd_quiet_s=3" cooperative-quiet 4
check "cooperative-quiet: the late write through gateway 1 does not land (its session was ended)" \
  late_refused cooperative-quiet
check "cooperative-quiet: gateway 1's log says why" \
  gw_log_has 1 "heard nothing from its host for [0-9]* s (rbd_quiet_s=3): ending its session"
check "cooperative-quiet: ... and its metrics count it (rbio_lu_rbd_quiet_sessions_ended_total 1)" \
  wait_for 10 metric 1 rbio_lu_rbd_quiet_sessions_ended_total 1
check "cooperative-quiet: the image keeps gateway 2's pattern 2" "$PROBE" "$(gw_url 2)" verify 0 8 2
check "cooperative-quiet: no gateway was blocklisted" eval 'not_blocklisted "$A1" && not_blocklisted "$A2"'
check "cooperative-quiet: a new session to gateway 1 writes (gateway 2 hands the lock over)" \
  "$PROBE" "$(gw_url 1)" write 0 8 4
check "cooperative-quiet: ... gateway 1 owns the lock" eval '[[ $(owner) == "$A1" ]]'
for g in 1 2; do check "cooperative-quiet: gateway $g shuts down cleanly" stop_gw "$g"; done

# --- B. rbd_lock=takeover refuses it ----------------------------------------------------
late_write_phase "rbd_lock=takeover" takeover
check "takeover: gateway 1's client is blocklisted" blocklisted "$A1"
check "takeover: gateway 2's log says it took the lock over from gateway 1" \
  gw_log_has 2 "took the exclusive lock over from $A1 (blocklisted)"
# Before any command reaches gateway 1: the lock's break ended its watch,
# and librbd's report of that is how it learns (hosts on a standby path
# send it only TEST UNIT READY and REPORT TARGET PORT GROUPS, which never
# reach the image).
check "takeover: gateway 1 learns it was fenced before a command reaches it (its log)" \
  wait_for 10 gw_log_has 1 "the cluster fenced this gateway"
check "takeover: ... ends the sessions that existed then and opens the image with a new client" \
  wait_for 30 gw_log_has 1 "opened again as client"
check "takeover: ... its metrics count the fence (rbio_lu_rbd_fences_total 1), fenced no more" \
  wait_for 10 eval 'metric 1 rbio_lu_rbd_fences_total 1 && metric 1 rbio_lu_rbd_fenced 0'
check "takeover: the late write through gateway 1's old session does not land (its session was ended)" \
  late_refused takeover
check "takeover: the image keeps gateway 2's data" "$PROBE" "$(gw_url 2)" verify 0 8 2
check "takeover: a new session to gateway 1 reads it (the new client)" "$PROBE" "$(gw_url 1)" verify 0 8 2
check "takeover: ... and its REPORT TARGET PORT GROUPS is as the groups file says again" \
  eval '[[ $(timeout 60 "$PROBE" "$(gw_url 1)" rtpg) == "$(printf "group 1 active/optimized ports 1\ngroup 2 active/non-optimized ports 2")" ]]'
check "takeover: gateway 2's metrics count 1 lock takeover, and it is not fenced" \
  wait_for 10 eval 'metric 2 rbio_lu_rbd_lock_takeovers_total 1 && metric 2 rbio_lu_rbd_fenced 0'

# --- C. a hung owner does not hold writes up ------------------------------------------
A1=$(addr_of 1)   # its new client, without a restart
stopped=$(gw_pid 2)
kill -STOP "$stopped"
t0=$SECONDS
check "with gateway 2 hung, pattern 4 written through gateway 1" "$PROBE" "$(gw_url 1)" write 0 8 4
took=$(( SECONDS - t0 ))
echo "  the write took $took s; gateway 2's watch expires $WATCH_TIMEOUT s after its last ping"
check "gateway 1 owns the lock" eval '[[ $(owner) == "$A1" ]]'
check "... taken over from gateway 2 by rbio, not by librbd once the watch expired" \
  gw_log_has 1 "took the exclusive lock over from $A2 (blocklisted)"
# The watch would expire 25-30 s after the stop (the last ping came up to
# 5 s before it); 10 s leaves room for a slow host and none for that wait.
check "... so the write did not wait for the watch to expire" eval '(( took < 10 ))'
check "gateway 2's client is blocklisted" blocklisted "$A2"
# Gateway 2 resumes fenced, and its new client cannot reach the cluster at
# first (its ceph.conf gone, as a gateway cut off from the monitors would
# fail too): it tries again by itself until it can.
mv "$CONF" "$CONF.away"
kill -CONT "$stopped"
stopped=""
# A client stopped while it was blocklisted learns of it at its next
# request (its watch's error comes only once librados talks to the cluster
# again): a read.
check "gateway 2 resumes; a read through its old client fails" eval '! "$PROBE" "$(gw_url 2)" verify 0 8 4'
check "... as the cluster fenced it (its log)" wait_for 20 gw_log_has 2 "the cluster fenced this gateway"
check "... its new client cannot open the image, and it tries again (its log)" \
  wait_for 20 gw_log_has 2 "opening it again with a new client (attempt 2): .*ceph.conf.*; trying again in 2 s"
mv "$CONF.away" "$CONF"
check "... and opens it once it can, without a restart" wait_for 20 gw_log_has 2 "opened again as client"
check "the image holds pattern 4, through gateway 1" "$PROBE" "$(gw_url 1)" verify 0 8 4
check "... and through gateway 2's new client" "$PROBE" "$(gw_url 2)" verify 0 8 4
for g in 1 2; do check "gateway $g shuts down cleanly" stop_gw "$g"; done
check "no lock is left" eval '[[ $(rbd_ lock ls --format json lun) == "[]" ]]'

# --- D. a late write at a gateway that does not own the lock ---------------------------
# quiet_phase BSOPTS NAME: both gateways on rbd_lock=takeover;BSOPTS;
# gateway 2 owns the lock, a host session to gateway 1 is silent for
# longer than the rbd_quiet_s=3 of step 2 while newer data is written
# through gateway 2; then finish_late NAME sends its write.
quiet_phase() {
  for g in 1 2; do must_start "gateway $g exports the image ($2)" export_rbd "$g" "rbd_lock=takeover;$1"; done
  A1=$(addr_of 1) A2=$(addr_of 2)
  check "$2: pattern 5 written through gateway 2" "$PROBE" "$(gw_url 2)" write 0 8 5
  check "$2: gateway 2 owns the lock" eval '[[ $(owner) == "$A2" ]]'
  must_start "$2: a host session to gateway 1 logs in" start_late 1 "$2"
  sleep 4   # the stimulus, not a wait: the session's silence
  check "$2: newer data (pattern 6) written through gateway 2" "$PROBE" "$(gw_url 2)" write 0 8 6
}
quiet_phase "rbd_quiet_s=0" quiet-off
check "quiet-off: the late write through gateway 1 is GOOD" finish_late quiet-off
check "quiet-off: it took the lock over and landed over the newer data (the lost write)" \
  "$PROBE" "$(gw_url 1)" verify 0 8 3
check "quiet-off: gateway 1's metrics count no session ended for a silence" \
  wait_for 10 metric 1 rbio_lu_rbd_quiet_sessions_ended_total 0
for g in 1 2; do check "quiet-off: gateway $g shuts down cleanly" stop_gw "$g"; done

quiet_phase "rbd_quiet_s=3" quiet
check "quiet: the late write through gateway 1 does not land (its session was ended)" \
  late_refused quiet
check "quiet: gateway 1's log says why" \
  gw_log_has 1 "heard nothing from its host for [0-9]* s (rbd_quiet_s=3): ending its session"
check "quiet: ... and its metrics count it (rbio_lu_rbd_quiet_sessions_ended_total 1)" \
  wait_for 10 metric 1 rbio_lu_rbd_quiet_sessions_ended_total 1
check "quiet: the image keeps the newer data" "$PROBE" "$(gw_url 2)" verify 0 8 6
check "quiet: gateway 2 still owns the lock, and was not blocklisted" \
  eval '[[ $(owner) == "$A2" ]] && not_blocklisted "$A2"'
check "quiet: a new session to gateway 1 writes at once (it takes the lock over)" \
  "$PROBE" "$(gw_url 1)" write 0 8 7
check "quiet: ... and reads it back" "$PROBE" "$(gw_url 1)" verify 0 8 7
check "quiet: gateway 1 owns the lock" eval '[[ $(owner) == "$A1" ]]'
# The gateway that owns the lock: a write after a silence must not land
# there either (its host may have written elsewhere since, and this
# gateway taken the lock back for another session).
must_start "quiet: a host session to gateway 1, the owner, logs in" start_late 1 quiet-owner
sleep 4   # the stimulus, not a wait: the session's silence
check "quiet: its write after the silence does not land either" \
  late_refused quiet-owner
check "quiet: ... the image keeps pattern 7" "$PROBE" "$(gw_url 1)" verify 0 8 7
# A live host reads a response after the silence before it writes.
must_start "quiet: a host session to gateway 1 logs in, and will read a response first" \
  start_late 1 quiet-live --tur-first
sleep 4   # the stimulus, not a wait: the session's silence
check "quiet: after the silence, its TEST UNIT READY answered, its write lands" finish_late quiet-live
check "quiet: ... the image holds it" "$PROBE" "$(gw_url 1)" verify 0 8 3
check "quiet: gateway 1's metrics count 2 sessions ended for a silence" \
  wait_for 10 metric 1 rbio_lu_rbd_quiet_sessions_ended_total 2
for g in 1 2; do check "quiet: gateway $g shuts down cleanly" stop_gw "$g"; done

# --- E. an image without the lock -------------------------------------------------------
rbd_ create --size 16M --image-feature layering plain
must_start "gateway 1 starts" gw_start 1
gw_adm 1 --op new --mode target --tid 1 -T "$GW_TARGET"
out=$(gw_adm 1 --op new --mode logicalunit --tid 1 --lun 1 -b rbd:rbd/plain --bstype rbio \
  --bsopts "rbd_conf=$CONF;rbd_lock=takeover" 2>&1) && out="created: $out"
echo "  tgtadm: $out"
check "rbd_lock=takeover on an image without exclusive-lock is refused" eval '[[ $out != created* ]]'
check "... and tgtd's log says why" gw_log_has 1 "rbd_lock=takeover needs the image's exclusive-lock feature"
finish
