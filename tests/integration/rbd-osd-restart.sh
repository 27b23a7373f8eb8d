#!/usr/bin/env bash
# An OSD that stops under load, then comes back, under an rbio LU on an RBD
# image (scripts/ceph-dev.sh with a bluestore OSD, so the data survives the
# restart). A writer writes block after block, each naming its LBA, and logs
# every block the target acknowledged. While the OSD is down no write may be
# acknowledged (nothing can be stored); once it is back the writer goes on
# without an error; at the end every acknowledged block reads back, through
# the LU and from the image itself (rbd export). While the OSD is down, a
# new LU on another image is refused within its rbd_timeout, and tgtd
# answers tgtadm meanwhile: opening an image must not hold tgtd's event loop
# for as long as the OSD is gone. A cluster that cannot start fails the
# test with ceph-dev's reason.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 91
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
CEPH_DEV="$RBIO_SOURCE_DIR/scripts/ceph-dev.sh"
CEPH_DIR="$WORK/ceph"
CONF="$CEPH_DIR/ceph.conf"
CEPH_PORT=$((16850 + TEST_PORT_SHIFT))
IQN=iqn.2026-11.io.rbio:rbd-osd
[[ -x $PROBE ]] || { echo "no $PROBE: build first" >&2; exit 2; }
# How long the OSD stays down, and the writer's command timeout: the stall
# (down time plus the OSD's restart, over 10 s on a loaded machine) must
# not turn into a host-side error.
DOWN_S=5
export SCSI_PROBE_TIMEOUT=90

writer=""
osd_cleanup() {
  local rc=$?
  # Best effort: the writer may have ended already (set -e must not stop
  # the trap before tgtd and the cluster are stopped).
  if [[ -n $writer ]]; then kill "$writer" 2>/dev/null || :; fi
  "$SANDBOX" stop "$STATE" >/dev/null 2>&1 || rc=1
  bash "$CEPH_DEV" stop --dir "$CEPH_DIR" >/dev/null 2>&1 || :
  tgt_test_cleanup "$rc"
}
trap osd_cleanup EXIT

bash "$CEPH_DEV" start --dir "$CEPH_DIR" --port "$CEPH_PORT" --store bluestore --size 2048
timeout 60 rbd -c "$CONF" create --size 64M lun
timeout 60 rbd -c "$CONF" create --size 64M lun2
tgtd_start >/dev/null
tadm --op new --mode target --tid 1 -T "$IQN"
tadm --op bind --mode target --tid 1 -I ALL
new_lun 1 1 rbd:rbd/lun rbio "rbd_conf=$CONF"
U="iscsi://127.0.0.1:$PORT/$IQN/1"

ACKED="$WORK/acked"
: > "$ACKED"
acked() { wc -l < "$ACKED"; }
"$PROBE" "$U" write-log 0 100000 "$ACKED" > "$WORK/writer.out" 2>&1 &
writer=$!

check "the writer is writing" wait_for 30 eval '(( $(acked) >= 200 ))'
bash "$CEPH_DEV" osd-stop --dir "$CEPH_DIR"
before=$(acked)
# (Bounded: a tgtd whose loop waits for the OSD would not answer at all.)
open_refused() {
  if timeout 60 tgtadm -C "$CTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 2 -b rbd:rbd/lun2 \
    --bstype rbio --bsopts "rbd_conf=$CONF:rbd_timeout=3" 2>/dev/null; then
    echo "tgtadm accepted LUN 2"
    return 1
  fi
  log_has "lun:2: rbd rbd/lun2: opening the image: no OSD answered within 3 s"
}
t0=$SECONDS
check "a new LU is refused while the OSD is down, named" open_refused
check "... within its rbd_timeout ($((SECONDS - t0)) s)" eval '(( SECONDS - t0 < 20 ))'
check "... and tgtd answers tgtadm" timeout 10 tgtadm -C "$CTL" --lld iscsi --op show --mode target
# The interval itself is what is checked: nothing acknowledged during it.
sleep "$DOWN_S"
during=$(acked)
check "no write is acknowledged while the OSD is down ($before then $during)" eval '(( during == before ))'
check "the writer is waiting, not failed" kill -0 "$writer"
bash "$CEPH_DEV" osd-start --dir "$CEPH_DIR"
check "writes go on once the OSD is back" wait_for 60 eval '(( $(acked) >= during + 200 ))'
kill "$writer"
wait "$writer" 2>/dev/null || :
writer=""
check "the writer saw no error" eval '! grep -q "write of LBA" "$WORK/writer.out"'
echo "acknowledged blocks: $(acked)"
check "every acknowledged block reads back through the LU" timeout 120 "$PROBE" "$U" verify-log "$ACKED"

# The image itself: each acknowledged block holds its LBA (seed 1).
timeout 60 rbd -c "$CONF" export lun "$WORK/lun.export" >/dev/null 2>&1
in_image() {
  python3 - "$WORK/lun.export" "$ACKED" <<'EOF'
import sys
img = open(sys.argv[1], "rb").read()
bad = 0
for line in open(sys.argv[2]):
    lba = int(line)
    want = (b"%08x%07x\0" % (lba, 1)) * 32
    if img[lba * 512:(lba + 1) * 512] != want:
        bad += 1
        if bad <= 5:
            print("LBA %d is not in the image" % lba)
sys.exit(1 if bad else 0)
EOF
}
check "every acknowledged block is in the image (rbd export)" in_image
tadm --op delete --mode logicalunit --tid 1 --lun 1
check "no command ended in error" log_has "rbio: tid:1 lun:1: removed;.* errors=0$"
finish
