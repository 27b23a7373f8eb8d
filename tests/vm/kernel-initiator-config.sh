#!/usr/bin/env bash
# The real Linux iSCSI initiator (open-iscsi + iscsi_tcp + sd) against the
# stock tgtd with bs_rbio.so, inside a qemu guest, on the configuration
# paths a site uses rather than the defaults:
#  1. a targets.conf (bs-type rbio, bsopts, initiator-address ALL) brought
#     up by tgt-admin -e: a file system whose file survives logout/login,
#     then tgt-admin --delete ALL;
#  2. header and data digests (CRC32C) negotiated by the kernel initiator,
#     with a fio verify job over the digested session;
#  3. CHAP: a wrong password is refused (authorization failure), the right
#     one logs in and reads.
#
# Run on the host, it starts itself in a guest through scripts/vm/run.sh
# (ctest does that explicitly: test vm.kernel-initiator-config).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/guest.sh" 780 "$@"

source "$HERE/lib.sh"

must "tgtd starts with the build's module" tgtd_start
start_initiator

# --- 1. targets.conf through tgt-admin ----------------------------------------
CONF_IQN=iqn.2026-11.io.rbio:vm-conf
truncate -s 128M "$WORK/conf.img"
# bsopts items are separated by ':' (tgt-admin runs tgtadm through a shell,
# where ';' would end the command).
cat > "$WORK/targets.conf" <<CONF
default-driver iscsi
<target $CONF_IQN>
    <backing-store $WORK/conf.img>
        bs-type rbio
        bsopts "queue_depth=64:coalesce_max_kib=256"
    </backing-store>
    initiator-address ALL
</target>
CONF
must "tgt-admin -e brings targets.conf up" tgt-admin -C "$CTL" -c "$WORK/targets.conf" -e
show=$(tadm --op show --mode target)
check "the LU uses the rbio backing store" grep -q "Backing store type: rbio" <<<"$show"
check "the bsopts items reached the module" \
  eval 'log_has "queue_depth=64:" && log_has "coalesce_max_kib=256"'
must "sendtargets discovery finds the configured target" discover "$CONF_IQN"
must "node settings for fast failures" set_node "$CONF_IQN" "${FAST[@]}"
must "login to the configured target" login "$CONF_IQN"
must "its LUN appears as a SCSI disk" wait_disk 1
echo "configured LUN is $DISK"
check "the disk has the file's size (128 MiB)" test "$(blockdev --getsize64 "$DISK")" -eq $((128 << 20))
must "mkfs.ext4 on the disk" mkfs.ext4 -q -F "$DISK"
must "mount it" mount "$DISK" "$MNT"
write_file() {
  head -c $((3 << 20)) /dev/urandom > "$MNT/data"
  (cd "$MNT" && sha256sum data) > "$WORK/sums"
  sync
}
check "write a 3 MiB file and checksum it" write_file
check "unmount" umount "$MNT"
check "logout" logout "$CONF_IQN"
check "the disk goes away with the session" wait_no_disk "$DISK"
must "login again" login "$CONF_IQN"
must "the LUN appears again" wait_disk 1
must "mount it again" mount "$DISK" "$MNT"
check "the file reads back with the same checksum" \
  eval '(cd "$MNT" && sha256sum --quiet -c "$WORK/sums")'
check "unmount again" umount "$MNT"
check "logout" logout "$CONF_IQN"
check "the disk goes away" wait_no_disk "$DISK"
check "no session is left" no_session
check "tgt-admin --delete ALL removes the target" \
  tgt-admin -C "$CTL" -c "$WORK/targets.conf" --delete ALL
# no_target: tgtadm answers, and lists no target (a failed tgtadm prints
# nothing too, so its status is checked first).
no_target() { local out; out=$(tadm --op show --mode target) && [[ -z $out ]]; }
check "no target is left" no_target
check "the removed LU logged its counters, no I/O errors" \
  eval 'grep "rbio: tid:1 lun:1: removed" "$STATE/tgtd.log" | grep -q " errors=0"'

# --- 2. header and data digests -------------------------------------------------
DIG_IQN=iqn.2026-11.io.rbio:vm-digest
truncate -s 64M "$WORK/digest.img"
must "a target with an rbio LUN for digests" \
  eval 'new_target 2 vm-digest && new_lun 2 1 "$WORK/digest.img" rbio'
# tgtd offers no digests unless told to: an initiator that insists on CRC32C
# is otherwise refused ("HeaderDigest=CRC32C is required, can't accept
# HeaderDigest=None").
must "the target is set to offer CRC32C header and data digests" \
  eval 'tadm --op update --mode target --tid 2 --name HeaderDigest --value CRC32C &&
        tadm --op update --mode target --tid 2 --name DataDigest --value CRC32C'
must "discovery finds the digest target" discover "$DIG_IQN"
must "the node asks for CRC32C header and data digests" \
  set_node "$DIG_IQN" "${FAST[@]}" node.conn[0].iscsi.HeaderDigest=CRC32C \
    node.conn[0].iscsi.DataDigest=CRC32C
must "login with digests" login "$DIG_IQN"
iscsiadm -m session -P 2 > "$WORK/session" || true
grep -E 'Digest:' "$WORK/session" | sed 's/^[[:space:]]*/  negotiated: /'
check "HeaderDigest negotiated as CRC32C" grep -qE '^[[:space:]]*HeaderDigest: CRC32C$' "$WORK/session"
check "DataDigest negotiated as CRC32C" grep -qE '^[[:space:]]*DataDigest: CRC32C$' "$WORK/session"
must "its LUN appears as a SCSI disk" wait_disk 1
check "fio 4 KiB random writes, 16 in flight, crc32c verified, over digests" \
  fio_job digest4k "$DISK" --rw=randwrite --bs=4k --iodepth=16 --size=16M
check "logout" logout "$DIG_IQN"
check "the disk goes away" wait_no_disk "$DISK"
check "no session is left" no_session

# --- 3. CHAP --------------------------------------------------------------------
CHAP_IQN=iqn.2026-11.io.rbio:vm-chap
CHAP_USER=rbio-user CHAP_PASS=rbio-secret-12
truncate -s 64M "$WORK/chap.img"
must "a target with an rbio LUN for CHAP" \
  eval 'new_target 3 vm-chap && new_lun 3 1 "$WORK/chap.img" rbio'
must "tgtadm creates a CHAP account" \
  tadm --mode account --op new --user "$CHAP_USER" --password "$CHAP_PASS"
must "tgtadm binds it to the target" \
  tadm --mode account --op bind --tid 3 --user "$CHAP_USER"
must "discovery finds the CHAP target" discover "$CHAP_IQN"
must "the node uses CHAP with a wrong password" \
  set_node "$CHAP_IQN" "${FAST[@]}" node.session.auth.authmethod=CHAP \
    node.session.auth.username="$CHAP_USER" node.session.auth.password=wrong-password-1
wrong_login() {
  local rc=0
  login "$CHAP_IQN" > "$WORK/wrong-login" 2>&1 || rc=$?
  sed 's/^/  /' "$WORK/wrong-login"
  echo "  iscsiadm exit code $rc"
  # 24: ISCSI_ERR_LOGIN_AUTH_FAILED
  (( rc == 24 )) && grep -qi 'authori[sz]ation failure' "$WORK/wrong-login"
}
check "login with the wrong password fails with an authorization failure (24)" wrong_login
check "no session after the refused login" no_session
must "the node gets the right password" \
  set_node "$CHAP_IQN" node.session.auth.password="$CHAP_PASS"
must "login with the right password" login "$CHAP_IQN"
must "its LUN appears as a SCSI disk" wait_disk 1
check "a direct read of 4 MiB works" \
  dd if="$DISK" of=/dev/null bs=1M count=4 iflag=direct status=none
check "logout" logout "$CHAP_IQN"
check "the disk goes away" wait_no_disk "$DISK"

# --- end --------------------------------------------------------------------------
check "no session is left at the end" no_session
kill "$ISCSID_PID" 2>/dev/null || true; wait "$ISCSID_PID" 2>/dev/null || true; ISCSID_PID=""
tgtd_stop
for t in 2 3; do
  check "tid $t's LU logged its counters, no I/O errors" \
    eval 'grep "rbio: tid:$t lun:1: removed" "$STATE/tgtd.log" | grep -q " errors=0"'
done
finish
