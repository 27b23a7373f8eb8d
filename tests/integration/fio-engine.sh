#!/usr/bin/env bash
# rbio's fio external engine (initiator/fio/librbio_fio.so) against a real
# tgtd loading the module (rbio transport, --bstype rbio): fio write jobs
# with verify=crc32c read every block back and check it (4 KiB random at
# 32 in flight, 1 MiB sequential at 8, mixed sizes with CRC32C digests);
# commands of one commit leave together (fewer sendmsg calls than commands);
# sync=1 writes reach tgtd's store as durable (RWF_DSYNC) writes, plain ones
# do not;
# a wrong target, an unreachable portal and a LUN beyond 16383 make fio fail
# with the reason.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 30
source "$(dirname "$0")/../lib/fio-rbio.sh"
[[ -f $FIO_ENGINE ]] || { echo "no $FIO_ENGINE: build first" >&2; exit 2; }
# Before any check: a skip later would hide the failures before it.
command -v strace >/dev/null || skip_test "strace not installed (scripts/setup.sh installs it)"
IQN=iqn.2026-11.io.rbio:fio-disk
P="127.0.0.1:$PORT"

tgtd_start >/dev/null
new_target 1 fio-disk
truncate -s 128M "$WORK/lun.img"
new_lun 1 1 "$WORK/lun.img" rbio
check "rbio's transport serves the portal" log_has "portal 127.0.0.1:$PORT served by rbio's transport"

check "fio: 4 KiB random writes, 32 in flight, verify=crc32c" \
  fio_verify_ok rand4k "$P" "$IQN" 1 randwrite 4k 32 32M
check "... several commands per sendmsg" fio_batched rand4k
# Control: fio committing each I/O alone gives the engine nothing to batch.
check "fio: the same with one I/O per commit (control)" \
  fio_verify_ok rand4k-single "$P" "$IQN" 1 randwrite 4k 32 32M iodepth_batch_submit=1 iodepth_batch_complete_min=1
check "... and then about one command per sendmsg (the check above fails)" eval '! fio_batched rand4k-single'
check "fio: 1 MiB sequential writes, 8 in flight, verify=crc32c" \
  fio_verify_ok seq1m "$P" "$IQN" 1 write 1M 8 64M
tadm --op update --mode target --tid 1 --name HeaderDigest --value CRC32C
tadm --op update --mode target --tid 1 --name DataDigest --value CRC32C
check "fio: 4-256 KiB random writes with CRC32C digests, verify=crc32c" \
  fio_verify_ok mixed "$P" "$IQN" 1 randwrite 4k-256k 16 32M header_digest=crc32c data_digest=crc32c

# sync=1: file engines open with O_SYNC; this one sends each write with
# FUA, which tgtd's store (write cache on, the LU on tmpfs: I/O inline)
# writes with RWF_DSYNC. Seen by strace on tgtd, against a job without.
strace -f -e trace=pwrite64,pwritev2 -o "$WORK/strace" -p "$(tgtd_pid)" 2>"$WORK/strace.err" &
tracer=$!
check "strace attached to tgtd" wait_for 10 grep -q attached "$WORK/strace.err"
check "fio: 16 writes of 4 KiB with sync=1, one in flight, verify=crc32c" \
  fio_verify_ok sync "$P" "$IQN" 1 write 4k 1 64k sync=1
check "fio: the same without sync=1, at 1 MiB (control)" \
  fio_verify_ok nosync "$P" "$IQN" 1 write 4k 1 64k offset=1M
end_started "$tracer"
check "each sync=1 write reached the store with RWF_DSYNC, no other write did" \
  eval '(( $(grep -cE "pwritev2\(.*, 1, [0-9]+, RWF_DSYNC\)" "$WORK/strace") == 16 &&
          $(grep -c RWF_DSYNC "$WORK/strace") == 16 ))'
# plain_writes_in LO HI: pwrite64 calls of 4 KiB at offsets LO <= off < HI
plain_writes_in() {
  sed -nE 's/.*pwrite64\(.*, 4096, ([0-9]+)\) += 4096$/\1/p' "$WORK/strace" |
    awk -v lo="$1" -v hi="$2" '$1 >= lo && $1 < hi { n++ } END { print n + 0 }'
}
check "... the control's 16 as plain pwrites" eval '(( $(plain_writes_in 1048576 1114112) == 16 ))'

check "an unknown target fails the job (fio exits non-zero)" \
  fio_verify_fails nosuch "$P" iqn.2026-11.io.rbio:no-such-target 1 randwrite 4k 1 1M
check "... with the login status" grep -q "target not found" "$WORK/fio-nosuch.out"
check "an unreachable portal fails the job (fio exits non-zero)" \
  fio_verify_fails unreach 127.0.0.1:1 "$IQN" 1 randwrite 4k 1 1M
check "... saying it cannot connect" grep -q "cannot connect" "$WORK/fio-unreach.out"
# Encoded, LUN 16384 would go out as LUN 0 (flat addressing has 14 bits).
check "lun=16384 fails the job: beyond the largest LUN" \
  fio_verify_fails biglun "$P" "$IQN" 16384 randwrite 4k 1 1M
check "... fio names the option and its limit" grep -qF "lun: max value out of range: 16384 (16383 max)" "$WORK/fio-biglun.out"
# A secret without a user would log in without CHAP, the typo unseen.
check "chap_secret without chap_user fails the job" \
  fio_verify_fails nouser "$P" "$IQN" 1 randwrite 4k 1 1M chap_secret=s3cret-s3cret
check "... naming both options" grep -qF "option 'chap_secret' is set without 'chap_user'" "$WORK/fio-nouser.out"
# 0 used to mean the default, 30 s, silently.
check "command_timeout=0 fails the job, fio naming its range" \
  eval 'fio_verify_fails notimeout "$P" "$IQN" 1 randwrite 4k 1 1M command_timeout=0 &&
        grep -qF "command_timeout: min value out of range: 0 (1 min)" "$WORK/fio-notimeout.out"'
check "tgtd is alive" tgtd_alive
finish
