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
open_flags() {  # octal flags of tgtd's fd on $1; fails if tgtd has none
  local fd
  fd=$(ls -l "/proc/$(tgtd_pid)/fd" | awk -v f="$1" '$NF == f {print $(NF-2)}' | head -1)
  [[ -n $fd ]] || return 1
  awk '/^flags:/ {print $2}' "/proc/$(tgtd_pid)/fdinfo/$fd"
}
# opened_with FILE MASK / opened_without FILE MASK (octal masks).
opened_with() { local f; f=$(open_flags "$1") && [[ -n $f ]] && (( (8#$f & 8#$2) == 8#$2 )); }
opened_without() { local f; f=$(open_flags "$1") && [[ -n $f ]] && (( (8#$f & 8#$2) == 0 )); }
for flag in direct sync; do
  truncate -s 64M "$WORK/$flag.img"
  new_target $tid "$flag"
  tadm --op new --mode logicalunit --tid $tid --lun 1 -b "$WORK/$flag.img" --bstype rbio --bsoflags $flag
  check "bsoflags $flag: data reads back with 32 in flight" \
    "$RW_CHECK" "$(url $flag)" --inflight 32 --rounds 1 --seed $tid
  tid=$((tid + 1))
done
check "bsoflags direct opens the file O_DIRECT" opened_with "$WORK/direct.img" 40000
check "bsoflags sync opens the file O_SYNC" opened_with "$WORK/sync.img" 4010000
check "without bsoflags the file is neither" opened_without "$WORK/lun1.img" 4050000

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
# counter TID NAME: NAME=value from LU TID's removal line.
counter() { sed -n "s/.*rbio: tid:$1 lun:1: removed;.*[ ;]$2=\([0-9.]*\).*/\1/p" "$STATE/tgtd.log"; }
# cmp_counter TID NAME OP THRESHOLD: the counter, compared (awk: decimals).
cmp_counter() {
  awk -v v="$(counter "$1" "$2")" -v op="$3" -v t="$4" \
    'BEGIN { if (v == "") exit 1; exit !(op == ">=" ? v >= t : op == "<" ? v < t : v == t) }'
}
check "the counters saw the I/O and no errors (LU 2: $(counter 2 commands) commands)" \
  bash -c "grep 'rbio: tid:2 lun:1: removed' '$STATE/tgtd.log' | grep -qE 'commands=[1-9][0-9]* .* errors=0'"
# Batching and merging through io_uring (LU 2, inline_io=off), and the
# controls with each turned off (LU 3 batch=off, LU 4 coalesce=off). The
# workload mixes 1 and 32 in flight, so the ratios are diluted. Measured
# (3 runs): LU 2 1.49-1.64 I/Os per io_uring submit, 51-67 merged; LU 3
# (batch=off) 1.00 per submit, 0 merged; LU 4 (coalesce=off) 1.49-1.65 per
# submit, 0 merged. Under ASan beside the rest of the suite LU 2 saw
# 1.29-1.32 per submit and merged 26-29 in clean-clone runs and 13 in one
# CI run (2026-12-02): whether I/Os meet in one batch is timing. So the
# thresholds sit under the lowest seen and above the controls, which are
# structural (batch=off submits one at a time, coalesce=off never merges).
MIN_IOS_PER_SUBMIT=1.1 MIN_MERGED=4
check "batched: at least $MIN_IOS_PER_SUBMIT I/Os per io_uring submit ($(counter 2 uring_ios_per_submit))" \
  cmp_counter 2 uring_ios_per_submit ">=" "$MIN_IOS_PER_SUBMIT"
check "... and below it with batch=off ($(counter 3 uring_ios_per_submit))" \
  cmp_counter 3 uring_ios_per_submit "<" "$MIN_IOS_PER_SUBMIT"
check "adjacent writes merged: at least $MIN_MERGED merged ($(counter 2 merged))" \
  cmp_counter 2 merged ">=" "$MIN_MERGED"
check "... and below it with coalesce=off ($(counter 4 merged))" \
  cmp_counter 4 merged "<" "$MIN_MERGED"
check "tgtd is still serving" tgtd_alive
finish
