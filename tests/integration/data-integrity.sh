#!/usr/bin/env bash
# Data written through a real tgtd with an rbio LUN reads back byte for
# byte: many sizes and alignments, 1 and 32 commands in flight, with every
# optimisation on and with each turned off.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 1

tgtd_start
check "tgtadm lists the rbio backing store" \
  bash -c "tgtadm -C $CTL --mode system --op show | grep -qE '^ +rbio'"

# On tmpfs small I/O is done inline by default; inline_io=off sends it all
# through io_uring.
variants=("" "inline_io=off" "inline_io=off;batch=off" "inline_io=off;coalesce=off"
          "inline_io=off;inline_reap=off;queue_depth=4" "coalesce_max_kib=16;inline_max_kib=4")
tid=1
for opts in "${variants[@]}"; do
  truncate -s 64M "$WORK/lun$tid.img"
  new_target $tid "data$tid"
  new_lun $tid 1 "$WORK/lun$tid.img" rbio "$opts"
  for qd in 1 32; do
    check "bsopts '${opts:-default}': data reads back with $qd in flight" \
      "$RW_CHECK" "$(url data$tid)" --inflight $qd --rounds 2 --seed $((tid * 10 + qd))
  done
  tid=$((tid + 1))
done

# bsoflags: the file is really opened O_DIRECT / O_SYNC (tgtd's fdinfo
# says so) and data still reads back.
open_flags() {  # octal flags of tgtd's fd on $1
  local fd
  fd=$(ls -l "/proc/$(tgtd_pid)/fd" | awk -v f="$1" '$NF == f {print $(NF-2)}' | head -1)
  awk '/^flags:/ {print $2}' "/proc/$(tgtd_pid)/fdinfo/$fd"
}
for flag in direct sync; do
  truncate -s 64M "$WORK/$flag.img"
  new_target $tid "$flag"
  tadm --op new --mode logicalunit --tid $tid --lun 1 -b "$WORK/$flag.img" --bstype rbio --bsoflags $flag
  check "bsoflags $flag: data reads back with 32 in flight" \
    "$RW_CHECK" "$(url $flag)" --inflight 32 --rounds 1 --seed $tid
  tid=$((tid + 1))
done
check "bsoflags direct opens the file O_DIRECT" \
  bash -c "(( 0$(open_flags "$WORK/direct.img") & 040000 ))"
check "bsoflags sync opens the file O_SYNC" \
  bash -c "(( (0$(open_flags "$WORK/sync.img") & 04010000) == 04010000 ))"
check "without bsoflags the file is neither" \
  bash -c "(( (0$(open_flags "$WORK/lun1.img") & 04050000) == 0 ))"

# What an initiator sees of the LU.
check "READ CAPACITY reports the file size" \
  bash -c "iscsi-readcapacity16 '$(url data1)' | grep -q 'LOGICAL BLOCK LENGTH IN BYTES:512' && iscsi-readcapacity16 '$(url data1)' | grep -q 'Total size:67108864'"
check "thin provisioning is advertised (LBPME, LBPRZ)" \
  bash -c "iscsi-readcapacity16 '$(url data1)' | grep -q 'LBPME:1 LBPRZ:1'"
check "tgtadm shows the LU as rbio with thin provisioning" \
  bash -c "tgtadm -C $CTL --lld iscsi --op show --mode target | grep -A16 'LUN: 1' | grep -q 'Thin-provisioning: Yes'"

# Removing the LUs hands back every resource and logs the counters.
for ((t = 1; t < tid; t++)); do tadm --op delete --mode logicalunit --tid $t --lun 1; done
check "counters are logged when an LU is removed" log_has "rbio: tid:1 lun:1: removed; commands="
check "the counters saw the I/O and no errors" \
  bash -c "grep 'rbio: tid:2 lun:1: removed' '$STATE/tgtd.log' | grep -qE 'commands=[1-9][0-9]* .*submit_calls=[1-9].* errors=0'"
check "tgtd is still serving" tgtd_alive
finish
