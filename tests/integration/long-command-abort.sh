#!/usr/bin/env bash
# Task management while a long VERIFY runs in the store. tgt answers a
# LOGICAL UNIT RESET or an ABORT TASK only once the store has finished the
# commands it ends; a VERIFY of a whole 2 TiB LU reads all of it (BYTCHK
# 00b), minutes even from a sparse file, and hosts' task management
# timeouts are seconds. rbio's store asks between 1 MiB steps whether tgt
# is waiting to abort the command (the `aborting` hook) and ends it there,
# so the request is answered at once. Without that check it waits for the
# whole VERIFY, and the checks below fail (scsi_probe gives up after 15 s).
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 79
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
[[ -x $PROBE ]] || { echo "no $PROBE: build first" >&2; exit 2; }

# 2^32 blocks of 512 bytes: VERIFY(16)'s largest length covers it all but
# one block. Sparse: nothing of it is ever written.
truncate -s 2T "$WORK/big.img"
tgtd_start >/dev/null
new_target 1 disk
check "an LU of 2 TiB" new_lun 1 1 "$WORK/big.img" rbio

probe() { "$PROBE" "$(url disk 1)" "$@"; }
# verify16 LBA BLOCKS: VERIFY(16), BYTCHK 00b (the medium alone).
verify16() { printf '8f00%016x%08x0000' "$1" "$2"; }
WHOLE=$(verify16 0 $(( (1 << 32) - 1 )))
GIB2=$(verify16 0 $((1 << 22)))
ms_of() { local out=${1##*ms=}; [[ $out =~ ^[0-9]+$ ]] && echo "$out"; }

# How long the whole VERIFY would take, from a 2 GiB one (its round trip
# alone, less a one-block one's): the answers below must come well before,
# or this test could not tell the two apart.
one=$(probe cdb-ms "$(verify16 0 1)") || :
big=$(probe cdb-ms "$GIB2") || :
big_ms=$(ms_of "$big") || big_ms=0
one_ms=$(ms_of "$one") || one_ms=0
whole_s=$(( (big_ms - one_ms) * 1024 / 1000 ))
check "VERIFY of 2 GiB ($big; of one block: $one): about ${whole_s} s for the whole LU" \
  eval '[[ $big == "GOOD ms="* && $one == "GOOD ms="* ]]'
check "... which is over 20 s, four times the limit below" test "$whole_s" -gt 20

# tgt's answers: function complete (0) to the reset; to an ABORT TASK that
# waited for its command "task does not exist" (1, tgt 1.0.85's target.c),
# which initiators take as done. tgt logs each command it found to end
# ("abort_cmd(...) found TAG STATE", state 6: in the store), which tells
# that 1 from one for a command it did not find.
declare -A ANSWER=([lun-reset]=0 [abort-task]=1)
for tmf in lun-reset abort-task; do
  found=$(grep -c 'abort_cmd([0-9]*) found [0-9a-f]* 6$' "$STATE/tgtd.log") || :
  out=$(probe cdb-tmf "$WHOLE" "$tmf") || :
  check "$tmf during a VERIFY of the whole LU: answered ${ANSWER[$tmf]} ($out)" \
    eval '[[ $out == "tmf=${ANSWER[$tmf]} ms="* ]]'
  check "... after tgt found the VERIFY in the store" \
    test "$(grep -c 'abort_cmd([0-9]*) found [0-9a-f]* 6$' "$STATE/tgtd.log")" -eq $((found + 1))
  check "... within 5 s of being sent" eval 'ms=$(ms_of "$out") && (( ms < 5000 ))'
  check "... and the LU serves again: a VERIFY of 2 GiB is GOOD" eval '[[ $(probe cdb "$GIB2") == GOOD ]]'
done
finish
