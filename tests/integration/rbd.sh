#!/usr/bin/env bash
# rbio LUs on Ceph RBD images, against a real single-node cluster
# (scripts/ceph-dev.sh, memstore OSD) and a real tgtd:
# - the LU's capacity is the image's; libiscsi writes and reads back at many
#   sizes with 32 commands in flight;
# - what a host writes is in the image (rbd export), and what is put in the
#   image (rbd import) is what the host reads;
# - adjacent commands of one pass leave as one librbd request (merged > 0;
#   0 with coalesce=off, the control);
# - UNMAP and WRITE SAME with UNMAP free the image's objects, and the blocks
#   read back as zeros;
# - rbd resize reaches a live session as CAPACITY DATA HAS CHANGED, and READ
#   CAPACITY then gives the new size, without a restart; a write that runs
#   past a shrunk image's end (which librbd shortens and reports done)
#   fails instead of answering GOOD;
# - a missing pool or image, an unreadable ceph.conf, a refused key, an
#   unknown client, unreachable monitors, and pool or image settings that
#   undo rbio's librbd settings (rbd_cache, rbd_skip_partial_discard) each
#   make tgtadm fail with one line in tgtd's log naming the cause, leave no
#   LU, and tgtd serves on;
# - targets.conf with bs-type rbio_rbd brings an RBD LU up with tgt-admin.
# A cluster that cannot start fails the test with ceph-dev's reason.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 90
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
CEPH_DEV="$RBIO_SOURCE_DIR/scripts/ceph-dev.sh"
CEPH_DIR="$WORK/ceph"
CONF="$CEPH_DIR/ceph.conf"
CEPH_PORT=$((16800 + TEST_PORT_SHIFT))
IQN=iqn.2026-11.io.rbio:rbd
for t in "$PROBE" "$RBIO" "$RW_CHECK"; do
  [[ -x $t ]] || { echo "no $t: build first" >&2; exit 2; }
done

rbd_cleanup() {
  local rc=$?
  # tgtd first: its librbd clients must not outlive the cluster.
  "$SANDBOX" stop "$STATE" >/dev/null 2>&1 || rc=1
  bash "$CEPH_DEV" stop --dir "$CEPH_DIR" >/dev/null 2>&1 || :
  tgt_test_cleanup "$rc"
}
trap rbd_cleanup EXIT

rbd_() { timeout 60 rbd -c "$CONF" "$@"; }
rados_() { timeout 60 rados -c "$CONF" "$@"; }

bash "$CEPH_DEV" start --dir "$CEPH_DIR" --port "$CEPH_PORT"
tgtd_start >/dev/null
tadm --op new --mode target --tid 1 -T "$IQN"
tadm --op bind --mode target --tid 1 -I ALL
U="iscsi://127.0.0.1:$PORT/$IQN"

# lun_blocks LUN: the LU's size in 512-byte blocks (READ CAPACITY 16).
lun_blocks() {
  local last
  last=$(iscsi-readcapacity16 "$U/$1" | sed -n 's/^RETURNED LOGICAL BLOCK ADDRESS://p')
  echo $((last + 1))
}
# objects IMAGE: how many data objects of IMAGE exist in the pool.
# Fails (no output) when the image or the listing cannot be read, so a
# failed rados never reads as "no objects".
objects() {
  local prefix list
  prefix=$(rbd_ info "$1" | sed -n 's/.*block_name_prefix: //p') && [[ -n $prefix ]] || return 1
  list=$(rados_ -p rbd ls) || return 1
  grep -c "^$prefix\." <<<"$list" || :
}
# pattern_file FILE FIRST COUNT SEED: the blocks scsi_probe writes (each
# 16-byte slot "%08x%07x\0" of the LBA and seed), as one file.
pattern_file() {
  python3 - "$@" <<'EOF'
import sys
path, first, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(path, "wb") as f:
    for lba in range(first, first + count):
        f.write((b"%08x%07x\0" % (lba, seed & 0xfffffff)) * 32)
EOF
}
same_bytes() {  # same_bytes FILE OFFSET FILE2: FILE2 equals FILE's bytes at OFFSET
  cmp -s <(tail -c +"$(($2 + 1))" "$1" | head -c "$(stat -c %s "$3")") "$3"
}

# ---------------------------------------------------------------- data
rbd_ create --size 64M data
check "an rbio LU on rbd:rbd/data is created" new_lun 1 1 rbd:rbd/data rbio "rbd_conf=$CONF"
check "the log names the image and librbd's cache off" log_has "opened rbd image rbd/data (67108864 bytes.*librbd cache off"
check "the LU's capacity is the image's (131072 blocks)" eval '[[ $(lun_blocks 1) == 131072 ]]'
check "libiscsi writes and reads back, 32 commands in flight" \
  timeout 120 "$RW_CHECK" "$U/1" --inflight 32 --rounds 2 --seed 15
check "256 blocks written at LBA 4096 through iSCSI" timeout 60 "$PROBE" "$U/1" write 4096 256 7
pattern_file "$WORK/expect-7" 4096 256 7
rbd_ export data "$WORK/data.export" >/dev/null 2>&1
check "rbd export holds exactly what the host wrote" same_bytes "$WORK/data.export" $((4096 * 512)) "$WORK/expect-7"
check "the LU still reads it back" timeout 60 "$PROBE" "$U/1" verify 4096 256 7

pattern_file "$WORK/import" 0 2048 9
truncate -s 16M "$WORK/import"
rbd_ import --no-progress "$WORK/import" imported >/dev/null
check "an LU on an imported image" new_lun 1 2 rbd:rbd/imported rbio "rbd_conf=$CONF"
check "the host reads what rbd import put in the image" timeout 60 "$PROBE" "$U/2" verify 0 2048 9

# Merging: 64 one-block writes in flight at once leave as fewer requests.
check "64 adjacent one-block writes in flight succeed" eval 'timeout 60 "$PROBE" "$U/2" writes 8192 64 > "$WORK/writes.out"'
tadm --op delete --mode logicalunit --tid 1 --lun 2
merged_of_lun2() { grep "tid:1 lun:2: removed" "$STATE/tgtd.log" | sed -n 's/.* merged=\([0-9]*\).*/\1/p' | tail -1; }
check "adjacent commands of a pass leave as one librbd request (merged > 0)" eval '(( $(merged_of_lun2) > 0 ))'
# Control: the same writes with merging off must show none, or the check
# above proves nothing.
new_lun 1 2 rbd:rbd/imported rbio "rbd_conf=$CONF:coalesce=off"
timeout 60 "$PROBE" "$U/2" writes 8192 64 > "$WORK/writes.out"
tadm --op delete --mode logicalunit --tid 1 --lun 2
check "control: with coalesce=off nothing is merged" eval '(( $(merged_of_lun2) == 0 ))'

# ---------------------------------------------------------------- unmap
rbd_ create --size 32M thin
new_lun 1 3 rbd:rbd/thin rbio "rbd_conf=$CONF"
check "every block of a 32 MiB LU written" timeout 120 "$RW_CHECK" "$U/3" --fill
check "the image then has its 8 objects" eval '(( $(objects thin) == 8 ))'
check "UNMAP of the first 16 MiB" \
  timeout 60 "$RBIO" discard -T "$IQN" -p "127.0.0.1:$PORT" --lun 3 --offset 0 --length 16777216
check "UNMAP removed 4 of the 8 objects" eval '(( $(objects thin) == 4 ))'
check "WRITE SAME(16) with UNMAP over the rest" \
  timeout 60 "$RBIO" discard -T "$IQN" -p "127.0.0.1:$PORT" --lun 3 --offset 16777216 --length 16777216 --write-same
check "WRITE SAME with UNMAP removed the other 4" eval '(( $(objects thin) == 0 ))'
rbd_ export thin "$WORK/thin.export" >/dev/null 2>&1
check "the image reads as zeros" cmp -s "$WORK/thin.export" <(head -c 33554432 /dev/zero)
check "the LU reads as zeros too" eval 'timeout 60 "$RW_CHECK" "$U/3" --scan'
# write_same_zeros LBA BLOCKS: WRITE SAME(16), UNMAP not set, one block of zeros.
write_same_zeros() {
  timeout 60 "$PROBE" "$U/3" cdb-out "$(printf '9300%016x%08x0000' "$1" "$2")" "$(printf '0%.0s' $(seq 1 1024))"
}
check "WRITE SAME(16) of zeros, UNMAP not set, over the first 4 MiB: GOOD" \
  eval '[[ $(write_same_zeros 0 8192) == GOOD ]]'
check "... wrote them (SBC's UNMAP=0: preallocation): 1 object" eval '(( $(objects thin) == 1 ))'
# COMPARE AND WRITE at LBA 8 (zeros after the WRITE SAME above): librbd
# compares and writes one 512-byte sector atomically in the OSD, so the LU
# takes one block. (librbd 16.2 never signals its completion on the image's
# event socket: before the store took it by callback, this never returned.)
# caw LBA BLOCKS CMP_BYTE DATA_BYTE: each half BLOCKS x 512 bytes of one byte.
caw() {
  local half=$(( $2 * 512 ))
  timeout 60 "$PROBE" "$U/3" cdb-out "$(printf '8900%016x000000%02x0000' "$1" "$2")" \
    "$(printf "$3%.0s" $(seq 1 "$half"))$(printf "$4%.0s" $(seq 1 "$half"))"
}
read_block() { timeout 60 "$PROBE" "$U/3" cdb "$(printf '2800%08x00000100' "$1")" 512 --hex | cut -d' ' -f2; }
check "COMPARE AND WRITE of one block that matches: GOOD" eval '[[ $(caw 8 1 00 ab) == GOOD ]]'
check "... wrote its data" eval '[[ $(read_block 8) == $(printf "ab%.0s" $(seq 1 512)) ]]'
check "COMPARE AND WRITE that does not match: MISCOMPARE (0E/1D/00)" \
  eval '[[ $(caw 8 1 00 cd) == "CHECK key=e asc=1d00" ]]'
check "... and wrote nothing" eval '[[ $(read_block 8) == $(printf "ab%.0s" $(seq 1 512)) ]]'
# In the second 4 MiB object (LBA 8200, zeros), expecting a 01 at byte 300:
# the sense's INFORMATION names byte 300 (librbd 16.2 reports it as the
# object's image offset plus 300).
caw_info() {
  timeout 60 "$PROBE" "$U/3" cdb-out "$(printf '8900%016x000000010000' 8200)" \
    "$(printf '00%.0s' $(seq 1 300))01$(printf '00%.0s' $(seq 1 211))$(printf 'ab%.0s' $(seq 1 512))" --info
}
check "a MISCOMPARE in the second object names the first differing byte (INFORMATION 300)" \
  eval '[[ $(caw_info) == "CHECK key=e asc=1d00 info=300" ]]'
check "COMPARE AND WRITE of two blocks (over librbd's one sector): INVALID FIELD IN CDB" \
  eval '[[ $(caw 16 2 00 ab) == "CHECK key=5 asc=2400" ]]'
# Byte 5 of the Block Limits VPD page (INQUIRY EVPD B0h).
max_compare_and_write() { "$PROBE" "$U/3" cdb 1201b0004000 64 --hex | cut -d' ' -f2 | cut -c11-12; }
check "its Block Limits page says MAXIMUM COMPARE AND WRITE LENGTH 1" \
  eval '[[ $(max_compare_and_write) == 01 ]]'

# ---------------------------------------------------------------- resize
check "the LU has 65536 blocks before the resize" eval '[[ $(lun_blocks 3) == 65536 ]]'
"$PROBE" "$U/3" wait-ua 2a09 30 > "$WORK/ua.out" 2>&1 &
ua_pid=$!
check "a session waits for a unit attention" wait_for 15 grep -q ready "$WORK/ua.out"
rbd_ resize --size 48M thin >/dev/null 2>&1
check "the live session gets CAPACITY DATA HAS CHANGED (2A/09)" wait "$ua_pid"
check "tgtd logs the new capacity" log_has "capacity 33554432 -> 50331648 bytes"
check "READ CAPACITY gives the new size (98304 blocks)" eval '[[ $(lun_blocks 3) == 98304 ]]'
check "the grown part is usable" timeout 60 "$PROBE" "$U/3" write 90000 16 3
check "... and reads back" timeout 60 "$PROBE" "$U/3" verify 90000 16 3
# Shrunk under one block, READ CAPACITY would give a last LBA of -1 (an
# enormous LU): the size hosts know stays, with a log line.
rbd_ resize --size 0 --allow-shrink thin >/dev/null 2>&1
check "an image shrunk to 0 bytes is logged, not served as a new size" \
  wait_for 15 log_has "rbd image rbd/thin shrank to 0 bytes, under one 512-byte block"
check "... and READ CAPACITY keeps 98304 blocks" eval '[[ $(lun_blocks 3) == 98304 ]]'
# librbd shortens a write that runs past the image's end and reports
# success, so a write the image no longer holds whole must fail: here the
# image has 256 bytes and hosts still know 98304 blocks (as in the moment
# between any shrink and tgtd's notice of it).
write_block() {
  timeout 60 "$PROBE" "$U/3" cdb-out "$(printf '2a00%08x00000100' "$1")" "$(printf 'cd%.0s' $(seq 1 512))"
}
rbd_ resize --size 256B --allow-shrink thin >/dev/null 2>&1
check "an image shrunk to 256 bytes is logged" \
  wait_for 15 log_has "rbd image rbd/thin shrank to 256 bytes, under one 512-byte block"
check "a write of block 0, half past the end, fails (MEDIUM ERROR, WRITE ERROR), not GOOD" \
  eval '[[ $(write_block 0) == "CHECK key=3 asc=0c00" ]]'
check "... with a log line naming the cause" log_has "ends past rbd image rbd/thin's 256 bytes"
rbd_ resize --size 48M thin >/dev/null 2>&1
check "the image back to the size hosts know is logged" \
  wait_for 15 log_has "rbd image rbd/thin is back to 50331648 bytes, the size hosts know"
# Writes that finish while a header notice is being read wait for its
# size (librbd may have clipped them to it): header notices (image-meta
# changes, as fast as a client makes them) during verified writes at 32 in
# flight; none may hang or fail, and writes were held (counted at the LU's
# removal, below).
timeout 120 "$RW_CHECK" "$U/3" --inflight 32 --rounds 4 --seed 31 > "$WORK/notices.out" 2>&1 &
rw_pid=$!
timeout 150 /usr/bin/python3 "$RBIO_SOURCE_DIR/tests/integration/rbd_header_notices.py" \
  "$CONF" rbd thin "$rw_pid" > "$WORK/notifier.out" 2>&1 &
notifier_pid=$!
check "writes and reads back at 32 in flight across header notices" wait "$rw_pid"
tail -2 "$WORK/notices.out"
check "... while another client made them" wait "$notifier_pid"
cat "$WORK/notifier.out"

# ---------------------------------------------------------------- bad input
# refused LUN DESCRIPTION LOG_PATTERN PATH BSOPTS: tgtadm fails, tgtd logs
# the reason, and no LU is left.
refused() {
  local lun=$1 pattern=$3 path=$4 opts=$5
  if new_lun 1 "$lun" "$path" rbio "$opts" 2>/dev/null; then
    echo "tgtadm accepted LUN $lun on $path"
    return 1
  fi
  log_has "$pattern"
  ! tadm --op show --mode target | grep -q "LUN: $lun\$"
}
check "a missing pool is refused, named" refused 10 x "pool 'nopool' does not exist" rbd:nopool/x "rbd_conf=$CONF"
check "a missing image is refused, named" refused 11 x "image 'nosuch' does not exist" rbd:rbd/nosuch "rbd_conf=$CONF"
check "an unreadable ceph.conf is refused, named" refused 12 x "reading $WORK/none.conf: No such file" \
  rbd:rbd/data "rbd_conf=$WORK/none.conf"
ceph-authtool --create-keyring "$WORK/wrong.keyring" --gen-key -n client.admin >/dev/null
check "a wrong key is refused, named" refused 13 x "authentication as client.admin refused" \
  rbd:rbd/data "rbd_conf=$CONF:rbd_keyring=$WORK/wrong.keyring"
check "an unknown client is refused, named" refused 14 x "authentication as client.nobody refused" \
  rbd:rbd/data "rbd_conf=$CONF:rbd_id=nobody"
check "a missing keyring file is refused, named" refused 15 x "keyring $WORK/none.keyring: No such file" \
  rbd:rbd/data "rbd_conf=$CONF:rbd_keyring=$WORK/none.keyring"
sed 's/^mon host = .*/mon host = 127.0.0.1:9/' "$CONF" > "$WORK/dead.conf"
t0=$SECONDS
check "unreachable monitors are refused, named" refused 16 x "no monitor answered within 3 s" \
  rbd:rbd/data "rbd_conf=$WORK/dead.conf:rbd_timeout=3"
check "... within rbd_timeout, not librados' 300 s ($((SECONDS - t0)) s)" eval '(( SECONDS - t0 < 20 ))'
check "a bad path is refused, named" refused 17 x "expected rbd:POOL/IMAGE" rbd:justapool "rbd_conf=$CONF"
# Pool and image settings take precedence over the client's own.
rbd_ create --size 8M cached
# refused_setting LUN image|pool KEY VALUE RBIO_VALUE DESC: with rbd/cached
# (or its pool) set to KEY=VALUE, LUN LUN on it is refused, naming the
# setting; the setting is removed again.
refused_setting() {
  local lun=$1 level=$2 key=$3 value=$4 ours=$5 desc=$6 at=rbd/cached whose="the image's"
  [[ $level == pool ]] && at=rbd whose="the pool's"
  rbd_ config "$level" set "$at" "$key" "$value"
  check "$desc" refused "$lun" x "$whose setting $key=$value overrides rbio's $ours" rbd:rbd/cached "rbd_conf=$CONF"
  rbd_ config "$level" rm "$at" "$key"
}
refused_setting 18 image rbd_cache true false "an image set to use librbd's cache is refused, named"
refused_setting 19 pool rbd_skip_partial_discard true false "a pool set to skip partial discards is refused, named"
# Fencing: a gateway that breaks another's lock must blocklist it.
refused_setting 19 image rbd_blocklist_on_break_lock false true \
  "an image set not to fence the lock's previous owner is refused, named"
refused_setting 19 pool rbd_persistent_cache_mode ssd disabled \
  "a pool set to a persistent write-back cache is refused, named"
check "... and served once the setting is gone" new_lun 1 19 rbd:rbd/cached rbio "rbd_conf=$CONF"
# One LU per image in a gateway when either takes the lock over: two
# would break each other's lock, so blocklist each other, at every write.
check "a second LU on an image LU 19 serves is refused with rbd_lock=takeover, named" \
  refused 20 x "rbd image rbd/cached is already served by another LU of this tgtd: two LUs" \
  rbd:rbd/cached "rbd_conf=$CONF:rbd_lock=takeover"
check "... and served beside it with the cooperative lock" new_lun 1 20 rbd:rbd/cached rbio "rbd_conf=$CONF"
tadm --op delete --mode logicalunit --tid 1 --lun 20
tadm --op delete --mode logicalunit --tid 1 --lun 19
echo "--- what tgtd logged for the refused LUs ---"
grep -E "rbio: tid:1 lun:(1[0-9]|20): " "$STATE/tgtd.log" | sed 's/^.*rbio: /  /'
check "tgtd still serves the first LU" timeout 60 "$PROBE" "$U/1" verify 4096 256 7

tadm --op delete --mode logicalunit --tid 1 --lun 1
tadm --op delete --mode logicalunit --tid 1 --lun 3
grep -h "rbio: tid:1 lun:[13]: removed" "$STATE/tgtd.log" | sed 's/^.*rbio: /  /'
# Both LUs' removal lines, each with its error count: a missing line is
# a failure, not a pass.
check "no command ended in error on the RBD LUs but the ones meant to (the COMPARE AND WRITE of two blocks, the write past the end)" eval \
  'grep -q "rbio: tid:1 lun:1: removed;.* miscompares=0 errors=0$" "$STATE/tgtd.log" &&
   grep -q "rbio: tid:1 lun:3: removed;.* errors=2$" "$STATE/tgtd.log"'
check "the two COMPARE AND WRITEs that found other data were counted apart, as miscompares" \
  log_has "rbio: tid:1 lun:3: removed;.* miscompares=2 errors="

check "writes done during header notices were held until the notice was read (rbd_writes_held > 0)" \
  log_has "rbio: tid:1 lun:3: removed;.* rbd_writes_held=[1-9]"

# ---------------------------------------------------------------- targets.conf
# The documented way (last: tgt-admin -e removes targets its file does not
# list, so tid 1 goes): bs-type rbio_rbd at target level (tgt-admin skips a
# path that is not an existing file unless the target's bs-type contains
# "rbd"; a bs-type inside a <backing-store> block is not looked at there).
CONF_IQN=iqn.2026-11.io.rbio:from-targets-conf
rbd_ create --size 16M fromconf
cat > "$WORK/targets.conf" <<CONF
<target $CONF_IQN>
    bs-type rbio_rbd
    bsopts "rbd_conf=$CONF:queue_depth=64"
    backing-store rbd:rbd/fromconf
</target>
CONF
check "tgt-admin -e brings up an LU on an RBD image" tgt-admin -C "$CTL" -c "$WORK/targets.conf" -e
check "... served by rbio with the bsopts given" log_has "opened rbd image rbd/fromconf (16777216 bytes.*queue_depth=64"
check "... and it takes I/O" timeout 60 "$PROBE" "iscsi://127.0.0.1:$PORT/$CONF_IQN/1" write 0 64 5
check "tgt-admin --delete removes it again" tgt-admin -C "$CTL" -c "$WORK/targets.conf" --delete "$CONF_IQN"
finish
