#!/usr/bin/env bash
# What the target acknowledged as durable survives a power cut (issue 16,
# item 4), in the style of xfstests' generic/482, inside a qemu guest:
#
#  - under each LU's backing store sits a dm-log-writes device (data and
#    log on loop devices over tmpfs files). It passes I/O through and logs
#    every write in the order it became durable: a plain write only at the
#    next flush, a FUA write when it completes. The log replayed up to a
#    flush or FUA entry is what the disk could hold had the power gone
#    right after it (the worst case: every write not yet flushed lost);
#  - the device gets ext4 (made in the guest, straight on the device; mark
#    "mkfs"), tgtd serves it, and the kernel initiator (open-iscsi) mounts
#    it and runs an fsync-heavy workload: crash_workload writes files of
#    known content and fsyncs each (and its folder), appends records to a
#    log file with fdatasync, changes files it never syncs, and marks the
#    dm-log-writes log ("step:N") once a step's syncs have returned; beside
#    it a fio job writes a file at random with an fsync every 4 writes and
#    verifies it (crc32c); then marks "fio" (the file is copied aside
#    first) and "umount";
#  - the log is replayed (dm_log_replay, tests/vm/crash/) onto a zeroed image
#    up to each checkpoint: every mark after "mkfs" (each step's, "fio",
#    "umount": each is where the syncs just acknowledged must already be
#    durable), and flush/FUA entries, all of them or, when there are more,
#    as many as RBIO_CRASH_MAX_POINTS leaves beside the marks, spread evenly
#    over the log (first and last included). At each, a copy of the image
#    is mounted (ext4 replays its journal), every file synced before the
#    point (the steps whose marks precede it in the log) must read back
#    exactly (crash_workload check; once the "fio" mark precedes it, the fio
#    file against its copy), and
#    after unmounting e2fsck -fn must find the file system clean. Replaying
#    the whole log must give back the device byte for byte (nothing went
#    unrecorded). Two modes are replayed at a time (one per guest CPU).
#
# Modes, one LU each on one target, their workloads running at once: rbio
# through io_uring (its default on a block device), rbio with I/O inline in
# tgtd's loop, rbio with bsoflags direct (O_DIRECT) and sync (O_SYNC), rbio
# with the host's write cache off (wce0: the host sets its disk "write
# through", which sends MODE SELECT with WCE=0; it then sends no flush and
# no FUA, and every write must be durable on its own), stock tgt's rdwr
# (the control that must pass), and rbio with the test-only
# bsopts debug_unsafe_fua=1, which acknowledges FUA and SYNCHRONIZE CACHE
# without making anything durable: that run must fail the check (files
# fsynced before a mark missing after the replay), which shows the check
# can fail. It stops at its first failed checkpoint.
#
# RBIO_CRASH_MODES="uring direct" picks modes; RBIO_CRASH_STEPS (default 8)
# and RBIO_CRASH_MAX_POINTS (checkpoints per mode, default 14, the marks
# always among them) size the run; RBIO_CRASH_SEED fixes the seed (printed;
# random by default).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest.sh" 780 "$@"

source "$HERE/lib.sh"
for tool in dmsetup losetup mkfs.ext4 e2fsck fio iscsiadm iscsid cmp; do
  command -v "$tool" > /dev/null || skip_test "no $tool (scripts/vm/prepare.sh installs it)"
done
TOOLS="$RBIO_BUILD_DIR/tests/vm"
REPLAY="$TOOLS/dm_log_replay" WORKLOAD="$TOOLS/crash_workload"
for t in "$REPLAY" "$WORKLOAD"; do
  [[ -x $t ]] || { echo "no $t: build first" >&2; exit 2; }
done

STEPS=${RBIO_CRASH_STEPS:-8}
MAX_POINTS=${RBIO_CRASH_MAX_POINTS:-14}
SEED=${RBIO_CRASH_SEED:-$((RANDOM * 32768 + RANDOM))}
read -r -a MODES <<< "${RBIO_CRASH_MODES:-uring inline direct sync wce0 rdwr unsafe}"
[[ $STEPS =~ ^[1-9][0-9]*$ && $MAX_POINTS =~ ^[1-9][0-9]*$ && $SEED =~ ^[0-9]+$ ]] \
  || { echo "RBIO_CRASH_STEPS, RBIO_CRASH_MAX_POINTS and RBIO_CRASH_SEED take numbers" >&2; exit 2; }
echo "seed $SEED, $STEPS steps, at most $MAX_POINTS checkpoints per mode; modes: ${MODES[*]}"

# mode NAME: the LU settings of a mode, the host's write cache setting and
# whether the check must pass.
mode() {
  BSTYPE=rbio BSOPTS="" OFLAGS="" WCE=1 EXPECT=pass
  case $1 in
    uring) ;;
    wce0) WCE=0 ;;
    inline) BSOPTS=inline_io=on ;;
    direct) OFLAGS=direct ;;
    sync) OFLAGS=sync ;;
    rdwr) BSTYPE=rdwr ;;
    unsafe) BSOPTS=debug_unsafe_fua=1 EXPECT=fail ;;
    *) echo "unknown mode $1 (uring inline direct sync wce0 rdwr unsafe)" >&2; exit 2 ;;
  esac
}
for m in "${MODES[@]}"; do mode "$m"; done

IQN=iqn.2026-11.io.rbio:crash
DATA_MIB=64 LOG_MIB=512        # sparse on tmpfs: they cost what is written
FIO_ARGS=(--name=crash --filename=fio.dat --size=1M --bs=4k --rw=randwrite --ioengine=psync
          --fsync=4 --end_fsync=1 --verify=crc32c --verify_fatal=1)

now_ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# What we made, for the cleanup: workload jobs, dm devices, loop devices.
JOBS=() DMS=() LOOPS=()
crash_cleanup() {
  local x
  for x in "${JOBS[@]}"; do kill -TERM "$x" 2>/dev/null; wait "$x" 2>/dev/null; done
  umount "$WORK"/mnt-* "$WORK"/replay-mnt-* 2>/dev/null
  for x in "${DMS[@]}"; do dmsetup remove "$x" 2>/dev/null; done
  for x in "${LOOPS[@]}"; do losetup -d "$x" 2>/dev/null; done
}
VM_CLEANUP_HOOKS+=(crash_cleanup)

# tgtd_fd_flags DEV: octal open flags of tgtd's descriptor of block device
# DEV (matched by device number: tgtd's mount namespace shows other paths).
tgtd_fd_flags() {
  local want fd
  want=$(stat -L -c %t:%T "$1")
  for fd in /proc/"$(tgtd_pid)"/fd/*; do
    [[ -b $fd && $(stat -L -c %t:%T "$fd") == "$want" ]] || continue
    awk '/^flags:/ {print $2}' "/proc/$(tgtd_pid)/fdinfo/${fd##*/}"
    return 0
  done
  return 1
}
O_DIRECT=8#40000 O_SYNC=8#4010000   # O_SYNC includes O_DSYNC (010000)
opened_with() { local f; f=$(tgtd_fd_flags "$1") && (( (8#$f & $2) == $2 )); }
opened_without() { local f; f=$(tgtd_fd_flags "$1") && (( (8#$f & $2) == 0 )); }

# make_device NAME: a fresh dm-log-writes device /dev/mapper/crash-NAME over
# data and log files $WORK/NAME.{data,log}.
make_device() {
  local name=$1 dl ll
  truncate -s ${DATA_MIB}M "$WORK/$name.data"
  truncate -s ${LOG_MIB}M "$WORK/$name.log"
  dl=$(losetup -f --show "$WORK/$name.data"); LOOPS+=("$dl")
  ll=$(losetup -f --show "$WORK/$name.log"); LOOPS+=("$ll")
  dmsetup create "crash-$name" --table "0 $(blockdev --getsz "$dl") log-writes $dl $ll"
  DMS+=("crash-$name")
  dmsetup mknodes "crash-$name"   # no udev in the guest
  [[ -b /dev/mapper/crash-$name ]]
}

# write_through DISK: the host turns the disk's write cache off: sd sends
# MODE SELECT with WCE=0 (tgt lets WCE change) and the block layer then
# sends neither flushes nor FUA writes.
write_through() {
  local sd=${1#/dev/}
  echo "write through" > "$(echo /sys/block/"$sd"/device/scsi_disk/*/cache_type)"
  [[ $(cat /sys/block/"$sd"/device/scsi_disk/*/cache_type) == "write through" &&
     $(< "/sys/block/$sd/queue/write_cache") == "write through" ]]
}

# host_workload NAME: on the host's mounted disk, the workload and fio at
# once, then the marks "fio" and "umount" (run in the background).
host_workload() {
  local name=$1 mnt="$WORK/mnt-$1" fio_pid rc=0 t0
  t0=$(now_ms)
  (cd "$mnt" && exec fio "${FIO_ARGS[@]}" --output="$WORK/$name.fio.log") &
  fio_pid=$!
  "$WORKLOAD" write "$mnt" --steps "$STEPS" --seed "$SEED" --dm "crash-$name" || rc=$?
  wait "$fio_pid" || { echo "fio failed:"; cat "$WORK/$name.fio.log"; return 1; }
  (( rc == 0 )) || return "$rc"
  grep -q 'err= 0' "$WORK/$name.fio.log"
  cp "$mnt/fio.dat" "$WORK/$name.fio.dat"
  "$WORKLOAD" mark "crash-$name" fio
  umount "$mnt"
  "$WORKLOAD" mark "crash-$name" umount
  echo "workload, fio (verified) and umount in $(since "$t0") s"
}

# candidates LIST: the flush, FUA and mark entries after the mark "mkfs"
# ("INDEX FLAGS [MARK]", from dm_log_replay list), but the end mark.
candidates() {
  awk '$1 == "end" || $3 == "dm-log-writes-end" { next }
       !started { if ($3 == "mkfs") started = 1; next }
       { print }' "$1"
}
# choose_points CANDIDATES: the checkpoints, in log order: every mark, and
# the flush/FUA entries MAX_POINTS leaves room for, spread evenly.
choose_points() {
  awk -v max="$MAX_POINTS" '
    # n evenly spread picks of a[1..len], first and last included
    function pick(a, len, n,   k) {
      if (n >= len) { for (k = 1; k <= len; k++) print a[k]; return }
      if (n == 1) { print a[len]; return }
      for (k = 0; k < n; k++) print a[1 + int(k * (len - 1) / (n - 1) + 0.5)]
    }
    $2 == "mark" { print; nm++; next }
    { d[++nd] = $0 }
    END { if (max > nm) pick(d, nd, max - nm) }' "$1" | sort -n -k1,1
}
# synced_before CANDIDATES IDX: "UPTO FIO" for a checkpoint at entry IDX:
# the last step whose mark precedes it in the log (-1: none), and 1 once
# the "fio" mark does -- from the whole log, whichever points were chosen.
synced_before() {
  awk -v i="$2" '$1 + 0 > i + 0 { exit }
    $3 ~ /^step:/ { u = substr($3, 6) }
    $3 == "fio" { f = 1 }
    END { print (u == "" ? -1 : u), f + 0 }' "$1"
}

# check_point NAME IDX UPTO FIO: replays NAME's log from NEXT_ENTRY up to
# entry IDX and checks a copy of the image; POINT_ERR says what failed.
check_point() {
  local name=$1 idx=$2 upto=$3 fio=$4 out chk="$WORK/$1.check" mnt="$WORK/replay-mnt-$1"
  local same=()
  (( ! fio )) || same=(--same "fio.dat=$WORK/$name.fio.dat")
  POINT_ERR=""
  if ! out=$("$REPLAY" replay "$WORK/$name.log" "$WORK/$name.replay" --from "$NEXT_ENTRY" --to "$idx" \
               --copy "$chk" 2>&1); then
    POINT_ERR="replay: $out"; return 1
  fi
  NEXT_ENTRY=$((idx + 1))
  # ext4 replays its journal onto the copy (read-write: a read-only loop
  # device would refuse the recovery).
  if ! out=$(mount -o loop "$chk" "$mnt" 2>&1); then
    POINT_ERR="mount: $out"; return 1
  fi
  if ! out=$("$WORKLOAD" check "$mnt" --upto "$upto" --seed "$SEED" "${same[@]}" 2>&1); then
    POINT_ERR="files: $out"
  fi
  if ! umount "$mnt"; then POINT_ERR+=" (and umount failed)"; return 1; fi
  [[ -z $POINT_ERR ]] || return 1
  if ! out=$(e2fsck -fn "$chk" 2>&1); then
    POINT_ERR="e2fsck: $(grep -v '^Pass \|^e2fsck 1' <<<"$out" | head -5 | tr '\n' ' ')"
    return 1
  fi
}

# replay_mode NAME EXPECT: checks NAME's checkpoints (run as a job: what
# it prints goes to $WORK/NAME.replay.out) and writes POINTS_CHECKED,
# POINTS_FAILED, FIRST_FAILURE and FULL_REPLAY (1: the whole log gives back
# the device) to $WORK/NAME.result, for the checks.
replay_mode() {
  local name=$1 expect=$2 idx flags mark upto fio t0 entries marks
  mkdir -p "$WORK/replay-mnt-$name"
  "$REPLAY" list "$WORK/$name.log" > "$WORK/$name.list"
  entries=$(awk '$1 == "end" {print $2}' "$WORK/$name.list")
  candidates "$WORK/$name.list" > "$WORK/$name.candidates"
  choose_points "$WORK/$name.candidates" > "$WORK/$name.points"
  echo "  $name: log of $entries entries ($(tail -1 "$WORK/$name.list" | cut -d' ' -f3-));" \
       "$(wc -l < "$WORK/$name.points") checkpoints of the $(wc -l < "$WORK/$name.candidates")" \
       "flush/FUA/mark entries after mkfs ($(grep -c ' mark ' "$WORK/$name.points") marks)"
  rm -f "$WORK/$name.replay"; truncate -s ${DATA_MIB}M "$WORK/$name.replay"
  NEXT_ENTRY=0 POINTS_CHECKED=0 POINTS_FAILED=0 FIRST_FAILURE="" FULL_REPLAY=0 MARKS_CHECKED=""
  marks=$(awk '$2 == "mark" { printf "%s%s", sep, $3; sep = " " }' "$WORK/$name.candidates")
  t0=$(now_ms)
  while read -r idx flags mark; do
    read -r upto fio < <(synced_before "$WORK/$name.candidates" "$idx")
    [[ -z $mark ]] || MARKS_CHECKED+="${MARKS_CHECKED:+ }$mark"
    POINTS_CHECKED=$((POINTS_CHECKED + 1))
    check_point "$name" "$idx" "$upto" "$fio" && continue
    POINTS_FAILED=$((POINTS_FAILED + 1))
    echo "  $name: entry $idx ($flags${mark:+ $mark}, files up to step $upto): $POINT_ERR"
    [[ -n $FIRST_FAILURE ]] || FIRST_FAILURE="entry $idx ($flags${mark:+ $mark}): $POINT_ERR"
    [[ $expect == pass && $POINT_ERR != replay:* ]] || break
  done < "$WORK/$name.points"
  echo "  $name: $POINTS_CHECKED checkpoints checked in $(since "$t0") s, $POINTS_FAILED failed"
  # The rest of the log, then the image must be the device.
  if (( NEXT_ENTRY >= entries )) ||
       "$REPLAY" replay "$WORK/$name.log" "$WORK/$name.replay" --from "$NEXT_ENTRY" --to $((entries - 1)); then
    if cmp "$WORK/$name.replay" "$WORK/$name.data"; then FULL_REPLAY=1; fi
  fi
  MARKS_ALL=$marks
  declare -p POINTS_CHECKED POINTS_FAILED FIRST_FAILURE FULL_REPLAY MARKS_CHECKED MARKS_ALL > "$WORK/$name.result"
}

# --- the LUs: one per mode, each on its own dm-log-writes device --------------
t0=$(now_ms)
must "dm-log-writes loads (CONFIG_DM_LOG_WRITES)" modprobe dm-log-writes
must "the loop driver loads" modprobe loop
must "tgtd starts with the build's module" tgtd_start
must "a target for the crash tests is exported on $PORTAL" new_target 1 crash
lun=0
declare -A LUN
for m in "${MODES[@]}"; do
  mode "$m"; lun=$((lun + 1)); LUN[$m]=$lun; dev=/dev/mapper/crash-$m
  echo "--- $m: LU $lun, $BSTYPE${BSOPTS:+ bsopts $BSOPTS}${OFLAGS:+ bsoflags $OFLAGS} ---"
  must "$m: a dm-log-writes device over loop devices" make_device "$m"
  must "$m: ext4 made on the device, then the mark mkfs" \
    eval 'mkfs.ext4 -q -F -b 4096 "$dev" && "$WORKLOAD" mark "crash-$m" mkfs'
  args=(--op new --mode logicalunit --tid 1 --lun "$lun" -b "$dev" --bstype "$BSTYPE")
  [[ -z $BSOPTS ]] || args+=(--bsopts "$BSOPTS")
  [[ -z $OFLAGS ]] || args+=(--bsoflags "$OFLAGS")
  must "$m: tgtd serves the device as LU $lun" tadm "${args[@]}"
  case $m in
    uring|unsafe) check "$m: rbio sends every I/O through io_uring (a block device is no tmpfs file)" \
                    log_has "opened $dev .*all I/O through io_uring" ;;
    inline) check "$m: rbio does small I/O inline" log_has "opened $dev .*small I/O inline" ;;
    direct) check "$m: tgtd opened the device O_DIRECT" opened_with "$dev" $O_DIRECT ;;
    sync) check "$m: tgtd opened the device O_SYNC" opened_with "$dev" $O_SYNC ;;
  esac
  [[ $OFLAGS == direct ]] || check "$m: ... and not O_DIRECT (page cache between tgtd and the device)" \
    opened_without "$dev" $O_DIRECT
  [[ $m != unsafe ]] || check "$m: tgtd's log warns that the LU is unsafe" \
    log_has "debug_unsafe_fua=on: FUA writes and SYNCHRONIZE CACHE are acknowledged without"
done

echo "devices, file systems and LUs ready in $(since "$t0") s"

# --- the host: every disk mounted, every workload at once ----------------------
t0=$(now_ms)
start_initiator
must "sendtargets discovery finds the target" discover "$IQN"
set_node "$IQN" node.session.initial_login_retry_max=2 node.conn[0].timeo.login_timeout=10 \
  node.session.timeo.replacement_timeout=20
must "login succeeds" login "$IQN"
declare -A DISK_OF
for m in "${MODES[@]}"; do
  mode "$m"
  mkdir -p "$WORK/mnt-$m"
  must "$m: LU ${LUN[$m]} appears as a disk" eval 'wait_disk ${LUN[$m]} && DISK_OF[$m]=$DISK'
  (( WCE )) || must "$m: the host turns the disk's write cache off (WCE=0 on the LU)" write_through "$DISK"
  must "$m: the host mounts it" mount "$DISK" "$WORK/mnt-$m"
done
echo "logged in, disks mounted in $(since "$t0") s"
t0=$(now_ms)
declare -A JOB_OF
for m in "${MODES[@]}"; do
  host_workload "$m" > "$WORK/$m.workload.log" 2>&1 &
  JOB_OF[$m]=$!; JOBS+=($!)
done
for m in "${MODES[@]}"; do
  rc=0; wait "${JOB_OF[$m]}" || rc=$?
  sed "s/^/  $m: /" "$WORK/$m.workload.log"
  check "$m: the host's files fsynced, fio verified, file system unmounted" test "$rc" -eq 0
done
JOBS=()
echo "all workloads done in $(since "$t0") s"
check "logout" logout "$IQN"
for m in "${MODES[@]}"; do
  check "$m: its disk goes away with the session" wait_no_disk "${DISK_OF[$m]}"
done

# --- each device's log, replayed ----------------------------------------------
t0=$(now_ms)
for m in "${MODES[@]}"; do
  mode "$m"
  check "$m: LU ${LUN[$m]} removed" tadm --op delete --mode logicalunit --tid 1 --lun "${LUN[$m]}"
  [[ $BSTYPE != rbio ]] || check "$m: rbio's counters show no I/O error" \
    log_has "rbio: tid:1 lun:${LUN[$m]}: removed; .* errors=0$"
  check "$m: dm-log-writes logged everything (its log never filled)" \
    eval 'st=$(dmsetup status "crash-$m") && [[ -n $st && $st != *logging_disabled* ]]'
  must "$m: its dm device removed (the log ends with the end mark)" dmsetup remove "crash-$m"
  DMS=("${DMS[@]/crash-$m}")
done

echo "LUs and devices removed in $(since "$t0") s"

# replay_checks NAME: the checks on NAME's replay, once its job has ended.
replay_checks() {
  local m=$1
  echo "--- $m: replay ---"
  cat "$WORK/$m.replay.out"
  mode "$m"
  # check records a failure and returns 0: the result file decides.
  check "$m: the replay ran to its end" test -s "$WORK/$m.result"
  [[ -s $WORK/$m.result ]] || return 0
  # shellcheck source=/dev/null  # written by replay_mode (declare -p)
  source "$WORK/$m.result"
  check "$m: replaying the whole log gives back the device byte for byte" test "$FULL_REPLAY" = 1
  if [[ $EXPECT == pass ]]; then
    check "$m: all $POINTS_CHECKED checkpoints: files fsynced before them intact, e2fsck clean" \
      test "$POINTS_FAILED" -eq 0
    check "$m: every step's mark, fio's and umount's among them ($MARKS_CHECKED)" \
      eval '[[ $MARKS_CHECKED == "$MARKS_ALL" && $MARKS_ALL == *"step:$((STEPS - 1)) fio umount" ]]'
  else
    check "$m: the check catches the unsafe store (files fsynced before a checkpoint missing)" \
      eval '(( POINTS_FAILED > 0 )) && [[ $FIRST_FAILURE == *"files: "* ]]'
  fi
  rm -f "$WORK/$m".{data,log,replay,check}
}
# Two lanes, one per guest CPU, each replaying every other mode in turn
# (a failing command ends its lane: the rest of its modes have no result).
# replay_lane FIRST: modes FIRST, FIRST+2, ...
replay_lane() {
  local i m
  for (( i = $1; i < ${#MODES[@]}; i += 2 )); do
    m=${MODES[$i]}
    mode "$m"
    replay_mode "$m" "$EXPECT" > "$WORK/$m.replay.out" 2>&1
  done
}
t0=$(now_ms)
replay_lane 0 & lane0=$!
replay_lane 1 & lane1=$!
JOBS+=("$lane0" "$lane1")
check "replay lane 1 (modes 1, 3, ...) ended without an error" wait "$lane0"
check "replay lane 2 (modes 2, 4, ...) ended without an error" wait "$lane1"
JOBS=()
for m in "${MODES[@]}"; do replay_checks "$m"; done
echo "all replays and checks done in $(since "$t0") s"

check "no session is left" no_session
finish
