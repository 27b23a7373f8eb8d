#!/usr/bin/env bash
# Nothing leaks: file descriptors (io_uring, eventfd, backing file) come back
# when LUs go, and tgtd under valgrind ends with no leak record that
# involves rbio after LUs were created, used (with errors) and removed.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 3

# 1. File descriptors over create/use/remove cycles, on a normal tgtd.
tgtd_start
new_target 1 leaks
truncate -s 16M "$WORK/a.img"
fds() { ls "/proc/$(tgtd_pid)/fd" | wc -l; }
# refused ARGS...: new_lun with ARGS must fail (a missing file, a bad key).
refused() { ! new_lun "$@" 2>/dev/null; }
before=$(fds)
accepted=0
for _ in $(seq 1 20); do
  new_lun 1 1 "$WORK/a.img" rbio
  "$RW_CHECK" "$(url leaks)" --inflight 4 --rounds 1 > /dev/null
  refused 1 2 "$WORK/missing.img" rbio || accepted=$((accepted + 1))
  tadm --op delete --mode logicalunit --tid 1 --lun 1
done
after=$(fds)
check "an LU on a missing file was refused 20 times of 20" test "$accepted" -eq 0
check "no fd leaked over 20 LU create/use/remove cycles ($before before, $after after)" test "$before" -eq "$after"
tgtd_stop

# 2. valgrind memcheck on tgtd.
: > "$STATE/tgtd.log"
tgtd_start --valgrind
new_target 1 leaks
truncate -s 32M "$WORK/b.img"
new_lun 1 1 "$WORK/b.img" rbio
new_lun 1 2 "$WORK/b.img" rbio "inline_io=off;queue_depth=8"
check "under valgrind: an LU on a missing file is refused" refused 1 3 "$WORK/missing.img" rbio
check "under valgrind: an unknown --bsopts key is refused" refused 1 3 "$WORK/b.img" rbio "bogus=1"
"$RW_CHECK" "$(url leaks 1)" --inflight 8 --rounds 1 > /dev/null
"$RW_CHECK" "$(url leaks 2)" --inflight 8 --rounds 1 > /dev/null
truncate -s 1M "$WORK/b.img"
rc=0; "$RW_CHECK" "$(url leaks 2)" --scan > /dev/null 2>&1 || rc=$?
check "under valgrind: reads past the shrunk file's end fail (exit $rc, wanted 1)" test "$rc" -eq 1
tadm --op delete --mode logicalunit --tid 1 --lun 1
tgtd_stop   # removes the remaining LU with its target, then tgtd exits
vlog="$STATE/valgrind.log"
check "tgtd under valgrind exited normally (leak summary written)" grep -q "LEAK SUMMARY\|All heap blocks were freed" "$vlog"
# Loss records are blocks of lines; keep those that mention rbio.
rbio_leaks=$(awk '/(definitely|indirectly|possibly) lost in loss record/ {rec=1; buf=$0; next}
                  rec && /^==[0-9]+== *$/ {if (buf ~ /rbio/) print buf; rec=0; next}
                  rec {buf = buf "\n" $0}' "$vlog")
check "no leak record involves rbio" test -z "$rbio_leaks"
[[ -n $rbio_leaks ]] && echo "$rbio_leaks"
check "valgrind saw no invalid read or write in rbio" \
  bash -c "! grep -A8 'Invalid \\(read\\|write\\|free\\)' '$vlog' | grep -q rbio"
finish
