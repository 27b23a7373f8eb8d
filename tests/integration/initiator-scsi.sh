#!/usr/bin/env bash
# Every SCSI command of the userspace initiator against a real tgtd: TEST
# UNIT READY, REPORT LUNS, INQUIRY (standard; VPD 00h, 80h, 83h, B0h, B2h),
# READ CAPACITY(16), READ/WRITE(10) and (16), SYNCHRONIZE CACHE(10), WRITE
# SAME(16) with and without UNMAP, UNMAP (split by the advertised limits),
# sense data of refused commands, UNIT ATTENTION after login and after a LUN
# reset. Three LUs on one target: bs_rbio.so (thin provisioning by default),
# stock rdwr with thin_provisioning=1, and stock rdwr without it (UNMAP
# refused). Data is compared through the initiator and in the backing files;
# UNMAP and WRITE SAME with UNMAP must shrink the files' allocated blocks.
# All of it once with rbio's transport and once with RBIO_TRANSPORT=off.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
tgt_test_init 25
IQN=iqn.2026-11.io.rbio:scsi-test
P="127.0.0.1:$PORT"
SCSI_CHECK="$RBIO_BUILD_DIR/tests/integration/initiator_scsi_check"

setup() {
  tadm --op new --mode target --tid 1 -T "$IQN"
  tadm --op bind --mode target --tid 1 -I ALL
  rm -f "$WORK"/lun*.img
  for l in 1 2 3; do truncate -s 64M "$WORK/lun$l.img"; done
  new_lun 1 1 "$WORK/lun1.img" rbio
  new_lun 1 2 "$WORK/lun2.img" rdwr
  tadm --op update --mode logicalunit --tid 1 --lun 2 --params thin_provisioning=1
  new_lun 1 3 "$WORK/lun3.img" rdwr
}

# scsi_check LUN MODE: the library's checks; their lines are indented.
scsi_check() {
  local rc=0
  "$SCSI_CHECK" "$P" "$IQN" "$1" "$WORK/lun$1.img" "$2" >"$WORK/out" 2>&1 || rc=$?
  sed 's/^/    /' "$WORK/out"
  (( rc == 0 )) && grep -q '^[1-9][0-9]* passed, 0 failed$' "$WORK/out"
}

allocated() { echo $(( $(stat -c %b "$1") * 512 )); }

# The CLI: rbio inquiry and rbio discard.
cli_checks() {
  check "rbio inquiry: identity, capacity, VPD list (exit 0)" rc_is 0 "$RBIO" inquiry -T "$IQN" -p "$P" --lun 1
  check "... 64 MiB in 512-byte blocks" out_has "capacity: 131072 blocks of 512 bytes (67108864 bytes)"
  check "... the supported pages" out_has "VPD 0x00 supported pages: 0x00 0x80 0x83 0xb0 0xb1 0xb2"
  check "rbio inquiry --vpd all (exit 0)" rc_is 0 "$RBIO" inquiry -T "$IQN" -p "$P" --lun 1 --vpd all
  check "... the serial number" out_has "VPD 0x80 unit serial number: beaf11"
  check "... bs_rbio's UNMAP descriptor limit" out_has "maximum unmap block descriptor count: 256"
  # tgt 1.0.85 refuses COMPARE AND WRITE; bs_rbio.so passes it to its store.
  check "... COMPARE AND WRITE of up to 128 blocks" out_has "maximum compare and write length: 128"
  # tgt fills the page again when thin_provisioning is set (tgt-admin sets
  # it for targets.conf's params); the engine's limit must stay advertised.
  check "tgtadm --params thin_provisioning=1 on the rbio LU" \
    tadm --op update --mode logicalunit --tid 1 --lun 1 --params thin_provisioning=1
  check "rbio inquiry --vpd all after it (exit 0)" rc_is 0 "$RBIO" inquiry -T "$IQN" -p "$P" --lun 1 --vpd all
  check "... the UNMAP descriptor limit is still 256" out_has "maximum unmap block descriptor count: 256"
  check "... LBPU" out_has "LBPU (UNMAP): 1"
  check "rbio inquiry --vpd lbp of the rdwr LU: no LBPU" \
    bash -c "'$RBIO' inquiry -T '$IQN' -p '$P' --lun 3 --vpd lbp | grep -q 'LBPU (UNMAP): 0'"
  check "rbio inquiry --vpd 0xb1 (no decoder): hex (exit 0)" \
    rc_is 0 "$RBIO" inquiry -T "$IQN" -p "$P" --lun 1 --vpd 0xb1
  check "... its bytes" out_has "VPD 0xb1 ("
  check "rbio inquiry --vpd junk (exit 2)" rc_is 2 "$RBIO" inquiry -T "$IQN" -p "$P" --vpd junk

  local l before after
  for l in 1 2; do
    dd if=/dev/urandom of="$WORK/lun$l.img" bs=1M seek=20 count=4 conv=notrunc status=none
    before=$(allocated "$WORK/lun$l.img")
    check "rbio discard of 4 MiB on LUN $l (exit 0)" \
      rc_is 0 "$RBIO" discard -T "$IQN" -p "$P" --lun $l --offset $((20 << 20)) --length 4M
    after=$(allocated "$WORK/lun$l.img")
    check "... the backing file lost 4 MiB of blocks ($before -> $after)" test $((before - after)) -ge $((4 << 20))
    check "... and reads zeros there" cmp -s -n $((4 << 20)) -i $((20 << 20)):0 "$WORK/lun$l.img" /dev/zero
    dd if=/dev/urandom of="$WORK/lun$l.img" bs=1M seek=20 count=4 conv=notrunc status=none
    before=$(allocated "$WORK/lun$l.img")
    # --offset takes the size suffixes --length does.
    check "rbio discard --write-same on LUN $l (exit 0; --offset 20M)" \
      rc_is 0 "$RBIO" discard -T "$IQN" -p "$P" --lun $l --offset 20M --length 4M --write-same
    after=$(allocated "$WORK/lun$l.img")
    check "... the backing file lost 4 MiB of blocks ($before -> $after)" test $((before - after)) -ge $((4 << 20))
  done
  check "rbio discard on the LU without UNMAP (exit 7)" \
    rc_is 7 "$RBIO" discard -T "$IQN" -p "$P" --lun 3 --offset 0 --length 1M
  check "... says so" out_has "does not support UNMAP"
  check "rbio discard --write-same there: refused by the target (exit 7)" \
    rc_is 7 "$RBIO" discard -T "$IQN" -p "$P" --lun 3 --offset 0 --length 1M --write-same
  check "... with the sense" out_has "ILLEGAL REQUEST"
  check "rbio discard unaligned (exit 2)" \
    rc_is 2 "$RBIO" discard -T "$IQN" -p "$P" --lun 1 --offset 100 --length 4k
  check "rbio discard beyond the end (exit 2)" \
    rc_is 2 "$RBIO" discard -T "$IQN" -p "$P" --lun 1 --offset $((64 << 20)) --length 4k
}

run_all() {
  echo "== $1"
  check "bs_rbio.so LU (thin): every SCSI command" scsi_check 1 rbio
  check "rdwr LU with thin_provisioning=1: every SCSI command" scsi_check 2 rdwr-thin
  check "rdwr LU, fully provisioned: every SCSI command, UNMAP refused" scsi_check 3 rdwr
  cli_checks
  check "tgtd is alive" tgtd_alive
}

on_both_transports setup run_all

finish
