# shellcheck shell=bash
# shellcheck disable=SC2034  # sets variables the scripts that source it read
# Several gateways, one LU, seen by the guest's kernel initiator through
# dm-multipath: what vm.multipath (a backing file) and vm.rbd-multipath (a
# Ceph RBD image) share. Sourced in the guest after lib.sh; the test sets
# first:
#   TARGET             the target's name, the same on every gateway (its IQN
#                      is iqn.2026-11.io.rbio:TARGET)
#   LU_ID, LU_SN       the LU's identity (tgtadm --params scsi_id=,scsi_sn=)
#   GWS                the gateways' numbers, which are also their port groups
#   GROUPS_FILE        every gateway's view of the groups' states
#   LU_BACKING         the LU's backing store (-b), served with --bstype rbio
#   LU_BSOPTS          its --bsopts, if any
#   REPLACEMENT_TIMEOUT  iSCSI replacement_timeout (s) of the host's sessions
#
# Gateway N runs tgtd in the guest with control port 5700+N and portal
# 127.0.0.1:3259+N, in target port group N.

IQN=iqn.2026-11.io.rbio:$TARGET

now_ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# gw N: gateway N's state folder, control port (5700+N) and portal
# (127.0.0.1:3259+N) become the current ones for tgtd_start, tadm, ...
gw() { tgt_gateway "gw$1" $((5700 + $1)) $((3259 + $1)); PORTAL=127.0.0.1:$PORT; }

# groups STATE...: rewrite the groups file, one state per gateway's group,
# in the order of GWS (a rename: no gateway reads it half-written).
groups() {
  local i=0 n states=("$@")
  for n in "${GWS[@]}"; do echo "$n ${states[i++]}"; done > "$GROUPS_FILE.new" && mv "$GROUPS_FILE.new" "$GROUPS_FILE"
}

# start_gateway N: gateway N's tgtd, in target port group N, with the LU;
# tgtd's State stays offline until the LU has its identity, so no host
# sees it without (rbio's transport queues connections meanwhile).
start_gateway() {
  gw "$1"
  rm -f "$STATE/tgtd.pid" "$STATE/rbio.stats"
  RBIO_PORT_GROUP=$1 RBIO_ALUA_GROUPS=$GROUPS_FILE tgtd_start &&
  tgtadm -C "$CTL" --op update --mode sys --name State -v offline &&
  new_target 1 "$TARGET" && new_lun 1 1 "$LU_BACKING" rbio "${LU_BSOPTS:-}" &&
  tadm --op update --mode logicalunit --tid 1 --lun 1 --params "scsi_id=$LU_ID,scsi_sn=$LU_SN" &&
  tgtadm -C "$CTL" --op update --mode sys --name State -v ready
}

# disk_of_port PORT: DISK = the sd disk of LUN 1 of the session through that port.
disk_of_port() {
  local s c d
  for s in /sys/class/iscsi_session/session*; do
    for c in "$s"/device/connection*/iscsi_connection/connection*; do
      [[ -r $c/persistent_port && $(< "$c/persistent_port") == "$1" ]] || continue
      for d in "$s"/device/target*/*:*:*:1/block/*; do
        [[ -e $d && -b /dev/${d##*/} ]] && { DISK=/dev/${d##*/}; return 0; }
      done
    done
  done
  return 1
}

# mp_login: the kernel's initiator, udevd (multipath reads paths'
# identities from its database) and a session through every gateway, with
# fast-failure settings; SD[N] is then gateway N's path (sd disk).
SD=()
mp_login() {
  local n
  start_initiator
  must "the SCSI generic driver, device-mapper multipath, round-robin and the ALUA handler load" \
    modprobe -a sg dm_mod dm_multipath dm_round_robin scsi_dh_alua
  # systemd's tools refuse to run in a chroot unless told to.
  export SYSTEMD_IGNORE_CHROOT=1
  /lib/systemd/systemd-udevd > "$WORK/udevd.log" 2>&1 &
  UDEVD_PID=$!
  VM_CLEANUP_HOOKS+=('kill "$UDEVD_PID" 2>/dev/null; wait "$UDEVD_PID" 2>/dev/null')
  must "udevd runs" wait_for 10 test -S /run/udev/control

  local settings=(node.session.initial_login_retry_max=1 node.conn[0].timeo.login_timeout=5
                  "node.session.timeo.replacement_timeout=$REPLACEMENT_TIMEOUT"
                  node.conn[0].timeo.noop_out_interval=2 node.conn[0].timeo.noop_out_timeout=2)
  for n in "${GWS[@]}"; do
    gw "$n"
    must "discovery through gateway $n finds the target at its portal" \
      eval 'discover "$IQN" && grep -q "^$PORTAL," "$WORK/discovery"'
    must "node settings for gateway $n (fast failure)" set_node "$IQN" "${settings[@]}"
    must "login through gateway $n" login "$IQN"
  done
  for n in "${GWS[@]}"; do
    must "gateway $n's LU appears as a disk" wait_for 30 disk_of_port $((3259 + n)); SD[n]=$DISK
    echo "gateway $n path: ${SD[n]}"
  done
  check "${#GWS[@]} different disks" test "$(printf '%s\n' "${SD[@]}" | sort -u | wc -l)" -eq "${#GWS[@]}"
  must "udev has processed them" udevadm settle --timeout=30
}
# on_all FUNCTION VALUE: FUNCTION gives VALUE on every path.
on_all() { local n; for n in "${GWS[@]}"; do [[ $("$1" "${SD[n]}") == "$2" ]] || return 1; done; }
inq_field() { sg_inq "$1" | sed -n "s/^ *$2 identification: *//p" | sed 's/ *$//'; }
wwid() { /lib/udev/scsi_id -g -u -d "$1"; }

# mp_map: the host's multipath configuration (group_by_prio, prio alua,
# fast path checks and failback) for the LU's vendor and product, the map
# built and multipathd running; MAP and DM name the map. Checks one map
# over every gateway's path, with the paths' WWID.
mp_map() {
  local vendor product
  vendor=$(inq_field "${SD[${GWS[0]}]}" Vendor) product=$(inq_field "${SD[${GWS[0]}]}" Product)
  rm -f /etc/multipath/bindings /etc/multipath/wwids   # the guest's overlay only
  mkdir -p /etc/multipath
  cat > /etc/multipath.conf <<CONF
defaults {
    user_friendly_names yes
    find_multipaths no
    polling_interval 1
    max_polling_interval 2
}
devices {
    device {
        vendor "$vendor"
        product "$product"
        path_grouping_policy group_by_prio
        prio alua
        hardware_handler "1 alua"
        path_selector "round-robin 0"
        rr_min_io_rq 1
        path_checker tur
        failback immediate
        no_path_retry 30
    }
}
CONF
  must "multipath -v2 builds the map" multipath -v2
  multipathd -d -s > "$WORK/multipathd.log" 2>&1 &
  MPD_PID=$!
  # At exit, before udevd stops: removing a map waits for udev to confirm
  # (libdevmapper's udev sync), forever without udevd (seen: a run that
  # failed after the kill hung in multipath -F until the guest's timeout).
  VM_CLEANUP_HOOKS=('(( rc == 0 )) || { echo "--- multipathd log (last 30 lines) ---"; tail -30 "$WORK/multipathd.log"; }'
                    'kill "$MPD_PID" 2>/dev/null; wait "$MPD_PID" 2>/dev/null'
                    'timeout 60 multipath -F >/dev/null 2>&1'
                    "${VM_CLEANUP_HOOKS[@]}")
  must "multipathd answers" wait_for 20 eval 'multipathd show daemon 2>/dev/null | grep -Eq "idle|running"'
  multipath -ll | sed 's/^/  /'

  check "exactly one multipath map" test "$(maps | wc -l)" -eq 1
  MAP=$(maps | head -1)
  DM=$(basename "$(readlink -f "/dev/mapper/$MAP")")
  echo "map $MAP is $DM"
  check "the map has ${#GWS[@]} paths: the gateways' disks" \
    test "$(slaves)" = "$(printf '%s\n' "${SD[@]#/dev/}" | sort | paste -sd' ' -)"
  local want
  want=$(wwid "${SD[${GWS[0]}]}")
  check "the map's WWID is the paths' WWID" \
    eval '[[ -n $want && $(multipathd show maps format "%n %w" | awk -v m="$MAP" "\$1 == m { print \$2 }") == "$want" ]]'
}
maps() { dmsetup ls --target multipath | awk '$1 != "No" { print $1 }'; }
slaves() { ls "/sys/block/$DM/slaves" | sort | paste -sd' ' -; }
# mp_end: multipathd stopped, the map removed, every session logged out.
mp_end() {
  kill "$MPD_PID"; wait "$MPD_PID" 2>/dev/null || true
  check "multipath -F removes the map" multipath -F
  iscsiadm -m node --logoutall=all > /dev/null
  check "no session is left" no_session
}

# Per-path counters: completed reads + writes (the block layer's; bash
# builtins only: under emulation every exec costs a good part of the
# sampling windows below).
ios() { local f; read -ra f < "/sys/block/${1#/dev/}/stat"; echo $(( f[0] + f[4] )); }
SNAP=() DELTA=()
snap() { local n; for n in "${GWS[@]}"; do SNAP[n]=$(ios "${SD[n]}"); done; }
delta() { local n; for n in "${GWS[@]}"; do DELTA[n]=$(( $(ios "${SD[n]}") - SNAP[n] )); done; }
io_split() {
  local n out=""
  for n in "${GWS[@]}"; do out+="${out:+, }gateway $n ${DELTA[n]}"; done
  echo "I/Os per path: $out"
}
# only_on N...: since snap, the paths of gateways N... completed I/O, the others none.
only_on() {
  local n want=" $* "
  for n in "${GWS[@]}"; do
    if [[ $want == *" $n "* ]]; then (( DELTA[n] > 0 )) || return 1
    else (( DELTA[n] == 0 )) || return 1; fi
  done
}
# carried_by SECONDS N...: in SECONDS, I/O completed on gateways N... only.
carried_by() { snap; sleep "$1"; delta; only_on "${@:2}"; }
# path_line SD: multipath's line for one path, e.g. "... sda 8:0 active ready running".
path_line() { multipath -ll "$MAP" | grep -E " ${1#/dev/} [0-9]+:[0-9]+ "; }
path_active() { path_line "$1" | grep -q 'active ready running'; }
# The path is listed, and dm-multipath has failed it ("failed faulty ...").
path_failed() { path_line "$1" | grep -q ' failed '; }
# A standby path is up but holds no I/O: dm-multipath shows it "active ghost running".
path_up() { path_line "$1" | grep -qE 'active (ready|ghost) running'; }
# pg_of SD: "PRIO STATUS" of the path group holding SD in multipath -ll
# (group_by_prio: paths of equal priority share one group).
pg_of() {
  multipath -ll "$MAP" | awk -v sd="${1#/dev/}" '
    /policy=/ { p = $0; sub(/.*prio=/, "", p); split(p, a, " "); st = $0; sub(/.*status=/, "", st); pg = a[1] " " st }
    $0 ~ (" " sd " [0-9]+:[0-9]+ ") { print pg }'
}
# pgs_are "N..." "N..." ...: multipath's path groups, the active one first,
# then by falling priority, each named by its gateways.
pgs_are() {
  local i n first p g
  for (( i = 1; i <= $#; i++ )); do
    read -ra g <<<"${!i}"
    first=$(pg_of "${SD[${g[0]}]}")
    [[ -n $first ]] || return 1
    (( i > 1 )) || [[ $first == *" active" ]] || return 1
    for n in "${g[@]}"; do [[ $(pg_of "${SD[n]}") == "$first" ]] || return 1; done
    if (( i > 1 )); then (( ${first%% *} < p )) || return 1; fi
    p=${first%% *}
  done
}
pgs() { local n; for n in "${GWS[@]}"; do printf 'gateway %s: %s; ' "$n" "$(pg_of "${SD[n]}")"; done; echo; }

# --- failover: the gateway carrying I/O is killed during verified writes ----------
# mp_failover_start WRITES RATE: a fio crc32c verify job on the map, 4 KiB
# random writes over WRITES blocks, every block once, at most RATE a second
# (so that the write phase lasts long enough for the kill to land in it),
# then a verify pass at full speed; every completion is logged with its
# time (ms since the epoch, from the system clock: fio's own clock may be
# the TSC, whose rate under emulation is not the wall clock's). Returns once
# fio writes and checks that only ACTIVE (the gateway about to be killed)
# carries them.
FIO_PID=""
mp_failover_start() {
  WRITES=$1
  local rate=$2
  VM_CLEANUP_HOOKS=('[[ -z $FIO_PID ]] || { kill -TERM "$FIO_PID"; wait "$FIO_PID"; } 2>/dev/null' "${VM_CLEANUP_HOOKS[@]}")
  W_BASE=$(writes "$DM")   # the map's writes before this job's
  fio --name=failover --filename="/dev/mapper/$MAP" --direct=1 --ioengine=libaio \
    --rw=randwrite --bs=4k --iodepth=16 --size=$((WRITES * 4))k --rate_iops=,"$rate" \
    --verify=crc32c --verify_fatal=1 \
    --write_lat_log="$WORK/failover" --log_avg_msec=0 --log_unix_epoch=1 --clocksource=clock_gettime \
    --output="$WORK/fio-failover.log" > /dev/null 2> "$WORK/fio-failover.err" &
  FIO_PID=$!
  must "fio writes through the map" wait_for 60 writing
  check "I/O goes to gateway $ACTIVE (active/optimized) only" carried_by 0.5 "$ACTIVE"
  echo "  in 0.5 s: $(io_split)"
}
writes() { local f; read -ra f < "/sys/block/${1#/dev/}/stat"; echo "${f[4]}"; }
writes_inflight() { local f; read -ra f < "/sys/block/${1#/dev/}/inflight"; echo "${f[1]}"; }
writing() { kill -0 "$FIO_PID" 2>/dev/null && (( $(writes "$DM") - W_BASE >= 300 )); }
fio_done() { ! kill -0 "$FIO_PID" 2>/dev/null; }

# mp_kill_active: SIGKILL gateway ACTIVE at a moment when it has writes (the
# rate limit leaves moments with none: the block layer's count is read
# right before). Sets KILLED (its tgtd's pid) and t_kill.
mp_kill_active() {
  gw "$ACTIVE"
  KILLED=$(tgtd_pid)
  must "gateway $ACTIVE is SIGKILLed while writes are in flight on its path" kill_in_flight
  t_kill=$(now_ms)
  W_KILL=$(( $(writes "$DM") - W_BASE ))
  echo "killed gateway $ACTIVE (tgtd pid $KILLED) after $W_KILL of $WRITES writes on the map," \
       "$W_INFLIGHT in flight on its path"
  check "the kill came in the write phase" test "$W_KILL" -lt "$WRITES"
}
kill_in_flight() {
  local i
  for (( i = 0; i < 300; i++ )); do
    W_INFLIGHT=$(writes_inflight "${SD[ACTIVE]}")
    if (( W_INFLIGHT > 0 )); then kill -KILL "$KILLED"; return 0; fi
    sleep 0.01
  done
  return 1
}

# mp_failover_end BOUND N...: I/O moves to gateways N... within BOUND
# seconds; fio ends (within FIO_BOUND s, default 120) with no error and no
# verify failure; FAILOVER (ms) is measured from fio's completion log: from
# the kill to the end of the longest pause between two completions that
# follows it (the in-flight I/O of the dead path fails after
# replacement_timeout, dm-multipath fails the path and retries on the next
# path group).
mp_failover_end() {
  local bound=$1; shift
  SURVIVORS=("$@")
  check "I/O moves to gateway(s) ${SURVIVORS[*]} within $bound s" wait_for "$bound" flowing
  echo "I/O seen on gateway(s) ${SURVIVORS[*]} (0.3 s samples) $(since "$t_kill") s after the kill; in 0.3 s: $(io_split)"
  mp_fio_end
  FAILOVER=""
  if read -r FAILOVER STALL < <(failover_ms "$t_kill"); then
    echo "FAILOVER: ${FAILOVER} ms from the kill to I/O completing again (longest stall ${STALL} ms;" \
         "replacement_timeout ${REPLACEMENT_TIMEOUT} s)"
  fi
  check "the failover time was measured from fio's completion log" test -n "$FAILOVER"
  check "multipath marks gateway $ACTIVE's path failed" wait_for 10 path_failed "${SD[ACTIVE]}"
}
flowing() { kill -0 "$FIO_PID" 2>/dev/null && carried_by 0.3 "${SURVIVORS[@]}"; }
# mp_fio_end: the job of mp_failover_start ends (within FIO_BOUND s,
# default 120) with exit code 0, no error and no verify failure.
mp_fio_end() {
  local fio_rc=0
  check "fio ends within ${FIO_BOUND:-120} s" wait_for "${FIO_BOUND:-120}" fio_done
  wait "$FIO_PID" || fio_rc=$?; FIO_PID=""
  grep -E '^ *(write|read):|err=' "$WORK/fio-failover.log" | sed 's/^ */  /'
  check "fio: exit code 0, no error, no verify failure" \
    eval '(( fio_rc == 0 )) && grep -q "err= 0" "$WORK/fio-failover.log" && ! grep -qi "verify" "$WORK/fio-failover.err"'
}
# failover_ms SINCE_MS: "END STALL" from the job's completion log: the
# longest pause between two completions after SINCE_MS (ms since the
# epoch), and when it ended, counted from SINCE_MS.
failover_ms() {
  sort -t, -n -k1,1 "$WORK"/failover_clat.1.log | awk -F, -v k="$1" '
    { t = $1 + 0 }
    t >= k && prev != "" && t - (prev > k ? prev : k) > gap { gap = t - (prev > k ? prev : k); end = t }
    { prev = t }
    END { if (end == "") exit 1; printf "%d %d\n", end - k, gap }'
}
