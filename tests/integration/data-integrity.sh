#!/usr/bin/env bash
# Data written through a real tgtd with an rbio LUN reads back byte for
# byte: many sizes and alignments, 1 and 32 commands in flight, with every
# optimisation on and with each turned off.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 1

tgtd_start
check "tgtadm lists the rbio backing store" \
  bash -c "tgtadm -C $CTL --mode system --op show | grep -qE '^ +rbio'"

variants=("" "batch=off" "coalesce=off" "inline_reap=off;queue_depth=4" "coalesce_max_kib=16")
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
check "batching gathered several commands per submit at 32 in flight" \
  bash -c "grep 'rbio: tid:1 lun:1: removed' '$STATE/tgtd.log' | grep -q 'submit_calls='"
check "tgtd is still serving" tgtd_alive
finish
