#!/usr/bin/env bash
# Two gateways on one Ceph RBD image (issue 15): a single-node Ceph cluster
# on the host (scripts/ceph-dev.sh, memstore), an image with RBD's default
# features (exclusive-lock among them), and in a qemu guest two tgtd+rbio
# gateways exporting it (-b rbd:POOL/IMAGE) in two ALUA target port groups
# (gateway 1 active/optimized, gateway 2 active/non-optimized), seen by the
# kernel's open-iscsi and dm-multipath (lib-multipath.sh, as vm.multipath):
#  1. one map over both gateways; each gateway's log names the Ceph client
#     it is (client.N at ADDR);
#  2. a write through the map: gateway 1, which carried it, holds the
#     image's exclusive lock (rbd lock ls);
#  3. failover: a fio crc32c verify job runs on the map while gateway 1 is
#     SIGKILLed with writes in flight: I/O moves to gateway 2, fio ends with
#     no error and no verify failure, the failover time is printed; gateway
#     2 now holds the lock. librbd on gateway 2 asks the owner for the lock,
#     gets no answer, and breaks it once the dead client's watch on the
#     image header has expired (the OSDs' osd_client_watch_timeout), after
#     blocklisting that client: a gateway that only looked dead cannot
#     write stale data after the new owner's;
#  4. failback: gateway 1 restarts (a new client), its path is active again,
#     verified writes go through it, and it holds the lock: gateway 2 handed
#     it over when asked (cooperative transfer, no blocklisting);
#  5. back on the host, after the guest: what the guest read through the
#     map over the region fio wrote is what `rbd export` reads from the
#     image; the killed gateway's client is blocklisted (ceph osd blocklist
#     ls), gateway 2's is not; no lock and no watcher is left once the
#     gateways stopped.
#
# With RBIO_RBD_LOCK=takeover (ctest: vm.rbd-multipath-takeover) both
# gateways' LUs have rbd_lock=takeover (docs/ceph-rbd.md): in step 3
# gateway 2 breaks the dead owner's lock at once (its log says so), so
# failover takes open-iscsi's replacement_timeout, not the watch timeout;
# in step 4 gateway 1 takes the lock over from gateway 2 the same way, and
# on the host both gateway 2's client and the killed one are blocklisted.
#
# Run on the host (ctest: vm.rbd-multipath): it starts the cluster, creates
# the image, runs itself in a guest with a network to the host
# (scripts/vm/run.sh --net, tests/vm/lib-net.sh) and checks the image
# afterwards. For measurements (docs/ceph-rbd.md):
#   RBIO_RBD_EXCLUSIVE_LOCK=off    the image without exclusive-lock (and the
#                                  features that need it): the lock checks are
#                                  not run, and the test ends as skipped
#   RBIO_CEPH_WATCH_TIMEOUT=S      the OSD's osd_client_watch_timeout
#                                  (scripts/ceph-dev.sh --watch-timeout)
#
#   tests/vm/rbd-multipath.sh [--out DIR] [--bench]
#
# --bench then measures 4 KiB random writes and reads through the map with
# one gateway active/optimized and with both ("POINT" lines).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE=rbd/vm-rbd-mpath
IMAGE_MIB=128
# fio's jobs write 4 KiB blocks: the failover job WRITES of them from 0,
# the failback job AFTER_MIB right after; the data check covers both.
WRITES=2048 WRITE_RATE=200 AFTER_MIB=4
REGION_MIB=$(( WRITES * 4 / 1024 + AFTER_MIB ))
CEPH_PORT=16900   # the monitor's (v1; v2 on the next port)

# ------------------------------------------------------------------------------------
# On the host: the cluster and the image, the guest, then the image's checks.
# ------------------------------------------------------------------------------------
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  ROOT="$(cd "$HERE/../.." && pwd)"
  source "$ROOT/tests/lib/tgt-test.sh"   # check, finish (no tgtd on the host)
  out="" guest_args=()
  while (( $# )); do
    case $1 in
      --out) out=$2; shift 2 ;;
      --bench) guest_args=(--bench); shift ;;
      *) echo "usage: $0 [--out DIR] [--bench]" >&2; exit 2 ;;
    esac
  done
  tmp_out=""
  if [[ -z $out ]]; then out=$(mktemp -d /tmp/rbio-vm-rbd.XXXXXX); tmp_out=$out; fi
  mkdir -p "$out"
  out=$(realpath "$out")
  rm -f "$out"/{region,lock-moves}
  CEPH_DIR="$out/ceph"
  CONF="$CEPH_DIR/ceph.conf"
  ceph_() { timeout 30 ceph -c "$CONF" "$@"; }
  rbd_() { timeout 60 rbd -c "$CONF" "$@"; }
  host_cleanup() {
    local rc=$?
    bash "$ROOT/scripts/ceph-dev.sh" stop --dir "$CEPH_DIR" > /dev/null ||
      { echo "FAIL: the Ceph cluster did not stop cleanly"; (( rc != 0 )) || rc=1; }
    [[ -z $tmp_out ]] || rm -rf "$tmp_out"
    exit "$rc"
  }
  trap host_cleanup EXIT

  start=(start --dir "$CEPH_DIR" --port "$CEPH_PORT")
  [[ -n ${RBIO_CEPH_WATCH_TIMEOUT:-} ]] && start+=(--watch-timeout "$RBIO_CEPH_WATCH_TIMEOUT")
  # A cluster that cannot start fails the test with ceph-dev's reason.
  nice bash "$ROOT/scripts/ceph-dev.sh" "${start[@]}"
  features=()
  [[ ${RBIO_RBD_EXCLUSIVE_LOCK:-on} == off ]] && features=(--image-feature layering)
  rbd_ create --size "${IMAGE_MIB}M" "${features[@]}" "$IMAGE"
  echo "lock: ${RBIO_RBD_LOCK:-cooperative}"
  echo "image $IMAGE: $(rbd_ info "$IMAGE" | sed -n 's/^\s*features: //p')"
  echo "osd_client_watch_timeout: $(ceph_ daemon osd.0 config get osd_client_watch_timeout |
                                    sed -n 's/.*: "\(.*\)".*/\1/p') s"

  # The guest reaches the monitor (both ports) and the OSD, which binds in
  # Ceph's default range (ms_bind_port_min/max).
  guest_rc=0
  RBIO_CEPH_CONF=$CONF RBIO_RBD_IMAGE=$IMAGE RBIO_CEPH_PORTS="$CEPH_PORT-$((CEPH_PORT + 1)) 6800-7300" \
    "$ROOT/scripts/vm/run.sh" --net --timeout 600 --out "$out" "$HERE/rbd-multipath.sh" "${guest_args[@]}" ||
    guest_rc=$?
  (( guest_rc == 0 || guest_rc == 77 )) || exit "$guest_rc"
  # Skipped before it wrote anything (a missing tool): nothing to check here.
  [[ -f $out/region || $guest_rc == 0 ]] || exit "$guest_rc"

  echo "--- on the host: the image ---"
  # shellcheck disable=SC2034  # sum and image_sum: read by the eval'd check below
  if read -r sum len < "$out/region"; then
    rbd_ export --no-progress "$IMAGE" "$out/image" > /dev/null
    image_sum=$(head -c "$len" "$out/image" | sha256sum | cut -d' ' -f1)
    rm -f "$out/image"
  fi
  check "the image holds what the guest read through the gateways ($REGION_MIB MiB written by fio: rbd export)" \
    eval '[[ -n ${sum:-} && ${image_sum:-} == "$sum" ]]'
  # Fail when the cluster does not answer: a negated probe would pass then.
  blocklist() { ceph_ osd blocklist ls 2> /dev/null | awk '{ print $1 }'; }
  blocklisted() { local l; l=$(blocklist) && grep -qxF "$1" <<< "$l"; }
  not_blocklisted() { local l; l=$(blocklist) && ! grep -qxF "$1" <<< "$l"; }
  if [[ ${RBIO_RBD_EXCLUSIVE_LOCK:-on} == off ]]; then
    skip_part "the fencing checks (the image has no exclusive lock)"
  else
    ceph_ osd blocklist ls 2> /dev/null | sed 's/^/  blocklist: /'
    fenced="" released=""
    if [[ -f $out/lock-moves ]]; then
      fenced=$(sed -n 's/^fenced //p' "$out/lock-moves") released=$(sed -n 's/^released //p' "$out/lock-moves")
    fi
    check "the killed gateway's client ($fenced) is blocklisted: it can write no more" \
      eval '[[ -n $fenced ]] && blocklisted "$fenced"'
    if [[ ${RBIO_RBD_LOCK:-cooperative} == takeover ]]; then
      check "the gateway whose lock was taken over at failback ($released) is blocklisted" \
        eval '[[ -n $released ]] && blocklisted "$released"'
    else
      check "the gateway that handed the lock over ($released) is not blocklisted" \
        eval '[[ -n $released ]] && not_blocklisted "$released"'
    fi
  fi
  check "no exclusive lock is left: the gateways released it when they stopped" \
    eval '[[ $(rbd_ lock ls --format json "$IMAGE") == "[]" ]]'
  check "no watcher is left" eval '[[ $(rbd_ status --format json "$IMAGE") == "{\"watchers\":[]}" ]]'
  rc=0; finish || rc=$?
  (( rc != 0 )) || rc=$guest_rc
  exit "$rc"
fi

# ------------------------------------------------------------------------------------
# In the guest.
# ------------------------------------------------------------------------------------
source "$HERE/guest.sh" 600 "$@"
source "$HERE/lib.sh"
for tool in multipath multipathd dmsetup sg_inq fio iscsiadm iscsid udevadm rbd nft ip; do
  command -v "$tool" > /dev/null ||
    skip_test "no $tool (multipath-tools, sg3-utils, fio, open-iscsi, udev, ceph-common, nftables, iproute2)"
done
for f in /lib/systemd/systemd-udevd /lib/udev/scsi_id; do
  [[ -x $f ]] || skip_test "no $f (systemd, udev)"
done
[[ -n ${RBIO_CEPH_CONF:-} && -n ${RBIO_RBD_IMAGE:-} && -n ${RBIO_CEPH_PORTS:-} ]] ||
  { echo "run it on the host (it starts the cluster): tests/vm/rbd-multipath.sh" >&2; exit 2; }
LOCK=${RBIO_RBD_EXCLUSIVE_LOCK:-on}
TAKEOVER=0
case ${RBIO_RBD_LOCK:-cooperative} in
  cooperative) ;;
  takeover) TAKEOVER=1 ;;
  *) echo "RBIO_RBD_LOCK=$RBIO_RBD_LOCK: expected cooperative or takeover" >&2; exit 2 ;;
esac
t_start=$SECONDS
phase() { echo "[$(( SECONDS - t_start )) s] $*"; }

phase "network"
source "$HERE/lib-net.sh"
read -ra CEPH_PORTS <<<"$RBIO_CEPH_PORTS"
must "the guest reaches the Ceph cluster on the host (127.0.0.1:${CEPH_PORTS[*]} forwarded)" \
  eval 'host_ports_up "${CEPH_PORTS[@]}" && host_port_open "${CEPH_PORTS[0]%-*}"'

TARGET=vm-rbd-mpath
LU_ID=0b10da7a2026120000000015 LU_SN=RBIORBD001
GWS=(1 2)
GROUPS_FILE="$WORK/alua-groups"
LU_BACKING="rbd:$RBIO_RBD_IMAGE" LU_BSOPTS="rbd_conf=$RBIO_CEPH_CONF"
(( TAKEOVER )) && LU_BSOPTS+=":rbd_lock=takeover"
REPLACEMENT_TIMEOUT=5
# From the kill to I/O flowing on gateway 2: replacement_timeout, then
# librbd's wait for the dead owner's watch to expire (30 s by default; none
# with rbd_lock=takeover).
FAILOVER_BOUND=60 FIO_BOUND=180
source "$HERE/lib-multipath.sh"

rbd_() { timeout 60 rbd -c "$RBIO_CEPH_CONF" "$@"; }
# kernel_log_since UPTIME: the kernel's messages since then (seconds since boot).
kernel_log_since() { dmesg | awk -v t="$1" '{ s = $0; sub(/^\[ */, "", s); if (s + 0 >= t) print }'; }
# owner_is ADDR: the exclusive lock's owner (rbd lock ls) is the client at ADDR.
owner_is() {
  local owner
  owner=$(rbd_ lock ls --format json "$RBIO_RBD_IMAGE" | sed -n 's/.*"address":"\([^"]*\)".*/\1/p')
  echo "  lock owner: ${owner:-none}"
  [[ $owner == "$1" ]]
}
# client_of N: CLIENT[N] and ADDR[N], gateway N's Ceph client as its log says.
CLIENT=() ADDR=()
client_of() {
  local line
  gw "$1"
  line=$(sed -n 's/.*opened rbd image .*) as \(client\.[0-9]*\) at \([^ ]*\).*/\1 \2/p' "$STATE/tgtd.log" | tail -1)
  [[ -n $line ]] && read -r "CLIENT[$1]" "ADDR[$1]" <<<"$line"
}

# --- the gateways and the host's sessions ------------------------------------------
phase "gateways"
groups active/optimized active/non-optimized
for n in "${GWS[@]}"; do
  must "gateway $n (port group $n) exports $LU_BACKING" start_gateway "$n"
  must "gateway $n's log names its Ceph client" client_of "$n"
  echo "gateway $n is ${CLIENT[n]} at ${ADDR[n]}"
done
check "the gateways are two clients" test "${ADDR[1]}" != "${ADDR[2]}"
phase "login"
mp_login
phase "multipath"
mp_map
check "multipath: gateway 1's path group, active, above gateway 2's" wait_for 10 pgs_are "1" "2"
echo "  path groups (prio status): $(pgs)"

# --- the lock follows the writes -------------------------------------------------------
phase "lock"
# Reads (the kernel's partition scan, udev's probes) take no lock; the
# first write does, in the gateway that carries it.
if [[ $LOCK == on ]]; then
  snap
  must "a 4 KiB write through the map" dd if=/dev/urandom of="/dev/mapper/$MAP" bs=4k count=1 oflag=direct status=none
  delta
  check "gateway 1 carried it" only_on 1
  check "gateway 1 holds the image's exclusive lock" owner_is "${ADDR[1]}"
else
  skip_part "the lock checks (the image has no exclusive lock)"
fi

# --- failover: gateway 1 is killed during verified writes -------------------------------
phase "failover"
ACTIVE=1
mp_failover_start "$WRITES" "$WRITE_RATE"
FENCED=${ADDR[1]}
mp_kill_active
read -r up_kill _ < /proc/uptime
mp_failover_end "$FAILOVER_BOUND" 2
echo "  the kernel since the kill:"; kernel_log_since "$up_kill" | grep -Ev 'connection[0-9:]+ error|session recovery' | tail -12 | sed 's/^/    /'
# The dead path's requests fail on sd (and are retried by dm-multipath);
# none may fail on the map itself.
# The kill's own messages (dm-multipath failing the path) must be among
# them, or the filter saw nothing and "no error" would mean nothing.
no_map_errors() {
  local log
  log=$(kernel_log_since "$up_kill") || { echo "  dmesg failed"; return 1; }
  grep -q "multipath: .*Failing path" <<< "$log" || { echo "  no kernel message of the kill since it"; return 1; }
  ! grep -qE "I/O error,? .*dev ${DM}[ ,]|Buffer I/O error on dev ${DM}[ ,]" <<< "$log"
}
check "the kernel logged no I/O error on the map ($DM)" no_map_errors
gw 2; echo "  gateway 2's log since the start:"; grep -v 'tgtd: rbio: tcp:' "$STATE/tgtd.log" | tail -8 | sed 's/^/    /'
if [[ $LOCK == on ]]; then
  check "gateway 2 holds the lock now" owner_is "${ADDR[2]}"
  echo "fenced $FENCED" > "$VM_OUT/lock-moves"
  if (( TAKEOVER )); then
    gw 2
    check "gateway 2 broke the dead gateway's lock itself (rbd_lock=takeover), not after its watch expired" \
      grep -qF "took the exclusive lock over from $FENCED (blocklisted)" "$STATE/tgtd.log"
  fi
fi

# --- failback: gateway 1 comes back --------------------------------------------------
phase "failback"
must "gateway 1 restarts (same portal, same LU settings)" start_gateway 1
t_up=$(now_ms)
must "its log names its new Ceph client" client_of 1
echo "gateway 1 is now ${CLIENT[1]} at ${ADDR[1]}"
check "gateway 1 is a new client" test "${ADDR[1]}" != "$FENCED"
check "gateway 1's path is active again within 60 s" wait_for 60 path_active "${SD[1]}"
echo "path ${SD[1]} active again $(since "$t_up") s after gateway 1 was ready"
check "its path group is the active one again (failback)" wait_for 10 pgs_are "1" "2"
snap
check "fio verify through the map after the restart" \
  fio_job after-restart "/dev/mapper/$MAP" --rw=randwrite --bs=4k --iodepth=16 --size="${AFTER_MIB}M" \
  --offset=$(( WRITES * 4 ))k
delta; echo "  $(io_split)"
check "gateway 1's path carried it" only_on 1
if [[ $LOCK == on ]]; then
  if (( TAKEOVER )); then
    check "gateway 1 holds the lock again: it took it over from gateway 2" owner_is "${ADDR[1]}"
    gw 1
    check "... as its log says" grep -qF "took the exclusive lock over from ${ADDR[2]} (blocklisted)" "$STATE/tgtd.log"
    # Gateway 2 learns of the fence, ends its sessions (the host logs in
    # again) and opens the image with a new client: its path comes back.
    gw 2
    check "gateway 2 knows it was fenced" wait_for 10 grep -qF "the cluster fenced this gateway" "$STATE/tgtd.log"
    check "... ends its sessions and opens the image again with a new client" \
      wait_for 30 grep -qF "opened again as client" "$STATE/tgtd.log"
    check "... and its path is up again, without a restart" wait_for 60 path_up "${SD[2]}"
    echo "  gateway 2's path: $(path_line "${SD[2]}")"
  else
    check "gateway 1 holds the lock again: gateway 2 handed it over" owner_is "${ADDR[1]}"
  fi
  echo "released ${ADDR[2]}" >> "$VM_OUT/lock-moves"
fi

# --- what the host checks in the image ------------------------------------------------
phase "region"
region_sum() { dd if="/dev/mapper/$MAP" iflag=direct bs=1M count="$REGION_MIB" status=none | sha256sum | cut -d' ' -f1; }
SUM=""
check "the $REGION_MIB MiB fio wrote read back through the map" eval 'SUM=$(region_sum) && [[ -n $SUM ]]'
echo "$SUM $(( REGION_MIB << 20 ))" > "$VM_OUT/region"

# --- --bench: one active/optimized gateway against two ---------------------------------
# 4 KiB random writes (then reads), 16 in flight, 10 s, through the map with
# gateway 1 alone active/optimized and with both (multipath's round-robin
# sends every other request to each): with the exclusive lock, a write that
# reaches the gateway not holding it waits for the lock to move.
if [[ ${1:-} == --bench ]]; then
  bench_point() {
    local rw=$1 out
    out=$(fio --name=bench --filename="/dev/mapper/$MAP" --direct=1 --ioengine=libaio --rw="$rw" --bs=4k \
          --iodepth=16 --size=32M --offset=64M --time_based --runtime=10 --output-format=terse \
          --terse-version=3) || return 1
    # terse v3: field 8 read IOPS, 49 write IOPS
    awk -F';' '{ print $8 + $49 }' <<<"$out"
  }
  for config in one both one both; do
    if [[ $config == one ]]; then
      groups active/optimized active/non-optimized; must "bench: gateway 1 alone" wait_for 30 pgs_are "1" "2"
    else
      groups active/optimized active/optimized; must "bench: gateways 1 and 2" wait_for 30 pgs_are "1 2"
    fi
    for rw in randwrite randread; do
      snap; iops=$(bench_point "$rw"); delta
      echo "POINT $config $rw $iops IOPS; $(io_split)"
    done
  done
fi

mp_end
echo "guest part: $(( SECONDS - t_start )) s"
finish
