#!/usr/bin/env bash
# A LOGICAL UNIT RESET while a long VERIFY runs in the store. tgt answers a
# reset only once the store has finished every command the LU had; a
# VERIFY of a whole 2 TiB LU reads all of it (BYTCHK 00b), minutes even
# from a sparse file, and hosts' reset timeouts are seconds. rbio's store
# asks between 1 MiB steps whether tgt is waiting to abort the command
# (the `aborting` hook) and ends it there, so the reset is answered at
# once. Without that check the reset waits for the whole VERIFY, and the
# reset check below fails (scsi_probe gives up after 15 s).
# On io_uring (LUN 1) and inline I/O (LUN 2).
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 79
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
[[ -x $PROBE ]] || { echo "no $PROBE: build first" >&2; exit 2; }

# 2^32 blocks of 512 bytes: VERIFY(16)'s largest length covers it all but
# one block. Sparse: nothing of it is ever written.
truncate -s 2T "$WORK/big.img"
tgtd_start >/dev/null
new_target 1 disk
check "LUN 1, 2 TiB (I/O through io_uring)" new_lun 1 1 "$WORK/big.img" rbio inline_io=off
check "LUN 2 on the same file (inline I/O)" new_lun 1 2 "$WORK/big.img" rbio inline_io=on

probe() { local lun=$1; shift; "$PROBE" "$(url disk "$lun")" "$@"; }
# verify16 LBA BLOCKS: VERIFY(16), BYTCHK 00b (the medium alone).
verify16() { printf '8f00%016x%08x0000' "$1" "$2"; }
now_ms() { date +%s%3N; }

for lun in 1 2; do
  # How long the whole VERIFY would take, from a 2 GiB one: the reset
  # must come well before, or this test could not tell the two apart.
  t0=$(now_ms)
  out=$(probe "$lun" cdb "$(verify16 0 $((1 << 22)))") || :
  t1=$(now_ms)
  whole_s=$(( (t1 - t0) * 1024 / 1000 ))
  check "LUN $lun: VERIFY of 2 GiB: $out in $((t1 - t0)) ms, so about ${whole_s} s for the whole LU" \
    test "$out" = GOOD
  check "LUN $lun: ... which is over 20 s, four times the reset's limit" test "$whole_s" -gt 20

  out=$(probe "$lun" cdb-reset "$(verify16 0 $(( (1 << 32) - 1 )))") || :
  ms=${out##*ms=}
  check "LUN $lun: LOGICAL UNIT RESET during a VERIFY of the whole LU is answered function complete ($out)" \
    eval '[[ $out == "reset=0 ms="* ]]'
  check "LUN $lun: ... within 5 s of being sent" eval '[[ $ms =~ ^[0-9]+$ ]] && (( ms < 5000 ))'
  check "LUN $lun: the LU serves again: a VERIFY of 2 GiB is GOOD" \
    eval '[[ $(probe '"$lun"' cdb $(verify16 0 $((1 << 22)))) == GOOD ]]'
done
finish
