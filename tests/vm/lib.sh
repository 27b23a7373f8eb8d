# shellcheck shell=bash
# shellcheck disable=SC2034  # sets variables the scripts that source it read
# Guest-side helpers for the kernel-initiator tests (sourced inside the
# qemu guest): tgtd through tests/lib/tgt-test.sh on the guest's own port
# 3260, open-iscsi node records, the sd disk of a LUN, fio verify jobs, and
# a cleanup that logs out and shows iscsid's and the kernel's logs on failure.
# Besides the tests, bench/kernel-anchors.sh sources it.
source "$(dirname "${BASH_SOURCE[0]}")/../lib/tgt-test.sh"
tgt_test_init 0
PORT=3260                  # the guest's own network stack: nothing else listens
PORTAL=127.0.0.1:$PORT
MNT="$WORK/mnt"
mkdir -p "$MNT"

# Commands (eval'd) a script adds to run at exit, in order, before the
# logout and before tgtd stops (e.g. ending a background fio by its PID).
VM_CLEANUP_HOOKS=()
vm_cleanup() {
  local rc=$? h
  if (( rc != 0 )); then
    echo "--- iscsid log (last 20 lines) ---"; tail -20 "$WORK/iscsid.log" 2>/dev/null || true
    echo "--- kernel log (last 30 lines) ---"; dmesg | tail -30 || true
  fi
  for h in "${VM_CLEANUP_HOOKS[@]}"; do eval "$h" || true; done
  umount "$MNT" 2>/dev/null || true
  iscsiadm -m node --logoutall=all >/dev/null 2>&1 || true
  if [[ -n ${ISCSID_PID:-} ]]; then kill "$ISCSID_PID" 2>/dev/null || true; fi
  # The status passed as an argument: `(exit "$rc")` to set $? would end
  # this EXIT trap at once under set -e when rc != 0, before tgtd's log
  # is shown and it is stopped.
  tgt_test_cleanup "$rc"
}
trap vm_cleanup EXIT

# must DESCRIPTION COMMAND...: a check the rest of the test depends on.
must() {
  local before=$checks_failed
  check "$@"
  if (( checks_failed != before )); then
    echo "stopping: the remaining checks depend on this one"
    finish || exit $?
  fi
}

# The sd disk of LUN $1 of our (only) session, once its /dev node exists.
DISK=""
wait_disk() {
  local lun=$1 i d
  for (( i = 0; i < 300; i++ )); do
    for d in /sys/class/scsi_disk/*:*:*:"$lun"/device/block/*; do
      [[ -e $d && -b /dev/${d##*/} ]] && { DISK=/dev/${d##*/}; return 0; }
    done
    sleep 0.1
  done
  return 1
}
# The sysfs folder of the session with target IQN $1 (several may be open).
session_of() {
  local s
  for s in /sys/class/iscsi_session/session*; do
    [[ -r $s/targetname && $(< "$s/targetname") == "$1" ]] && { echo "$s"; return 0; }
  done
  return 1
}
# wait_disk_of IQN LUN: like wait_disk, for LUN of the session with target IQN.
wait_disk_of() {
  local iqn=$1 lun=$2 i s d
  for (( i = 0; i < 300; i++ )); do
    if s=$(session_of "$iqn"); then
      for d in "$s"/device/target*/*:*:*:"$lun"/block/*; do
        [[ -e $d && -b /dev/${d##*/} ]] && { DISK=/dev/${d##*/}; return 0; }
      done
    fi
    sleep 0.1
  done
  return 1
}
wait_no_disk() {
  local i
  for (( i = 0; i < 100; i++ )); do
    [[ -b $1 ]] || return 0
    sleep 0.1
  done
  return 1
}
no_session() {
  # iscsiadm exits 21 (ISCSI_ERR_NO_OBJS_FOUND) when there is no session.
  local rc=0
  iscsiadm -m session >/dev/null 2>&1 || rc=$?
  (( rc == 21 ))
}

# nodeadm IQN ARGS...: iscsiadm on the node record of target IQN.
nodeadm() { local iqn=$1; shift; iscsiadm -m node -T "$iqn" -p "$PORTAL" "$@"; }
login() { nodeadm "$1" --login; }
logout() { nodeadm "$1" --logout; }
# set_node IQN NAME=VALUE...: update the node record (after discovery, which
# would otherwise reset it).
set_node() {
  local iqn=$1 kv; shift
  for kv in "$@"; do nodeadm "$iqn" -o update -n "${kv%%=*}" -v "${kv#*=}" || return 1; done
}
# Fast failures: one login attempt, a short login timeout, and I/O on a lost
# session not queued for long.
FAST=(node.session.initial_login_retry_max=1 node.conn[0].timeo.login_timeout=5
      node.session.timeo.replacement_timeout=20)

# discover IQN: sendtargets discovery lists IQN (and creates its node record).
discover() {
  local i
  for (( i = 0; i < 50; i++ )); do
    iscsiadm -m discovery -t sendtargets -p "$PORTAL" 2>/dev/null | tee "$WORK/discovery" \
      | grep -q " $1\$" && return 0
    sleep 0.2
  done
  cat "$WORK/discovery"; return 1
}

# fio_job NAME DEVICE ARGS...: one verify job; prints its summary lines.
fio_job() {
  local name=$1 dev=$2; shift 2
  local log="$WORK/fio-$name.log"
  if ! fio --name="$name" --filename="$dev" --direct=1 --ioengine=libaio \
       --verify=crc32c --verify_fatal=1 "$@" --output="$log"; then
    cat "$log"; return 1
  fi
  grep -E '^ *(write|read):' "$log" | sed "s/^ */  $name: /"
  grep -q 'err= 0' "$log"
}

# start_initiator: the kernel's iSCSI/TCP transport, the SCSI disk driver
# (loaded by udev on a real system; the guest runs none) and iscsid.
start_initiator() {
  must "the kernel's iSCSI/TCP transport loads" modprobe iscsi_tcp
  must "the SCSI disk driver loads" modprobe sd_mod
  start_iscsid
}

# start_iscsid: iscsid in its own session (it signals its whole process
# group when it stops, which would otherwise include the test script), and
# once it listens for iscsiadm. An iscsiadm run before that does not find
# it, tries to start one itself ("Running in chroot, ignoring command
# 'start'") and races the starting daemon for the kernel's events: one iSER
# discovery that did so never saw the target's answer, which had gone out
# and been acknowledged, timed out after 30 s and crashed (vm.iser-faults).
start_iscsid() {
  setsid iscsid -f > "$WORK/iscsid.log" 2>&1 &
  ISCSID_PID=$!
  must "iscsid listens" wait_for 15 grep -q "@ISCSIADM_ABSTRACT_NAMESPACE" /proc/net/unix
}
