#!/usr/bin/env bash
# The userspace initiator (`rbio`) against a real tgtd loading the module:
# discovery, `rbio bench --verify` reads and writes at 4 KiB x 32 and
# 1 MiB x 8, CHAP accepted and refused, header and data digests (CRC32C),
# an unknown target, an unreachable portal, a LUN that does not exist and a
# LUN removed under running I/O with their exit codes, a 16 TiB LU; all of
# it once through rbio's transport and once through tgt's stock one
# (RBIO_TRANSPORT=off).
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
tgt_test_init 20
IQN=iqn.2026-11.io.rbio:initiator-test
P="127.0.0.1:$PORT"

bench() { rc_is 0 timeout 120 "$RBIO" bench -T "$IQN" -p "$P" --lun 1 --time 2 --verify "$@"; }

run_all() {
  local label=$1
  echo "== $label: discovery"
  check "discover lists the target at the portal" \
    bash -c "'$RBIO' discover --no-store -p '$P' | grep -qx '127.0.0.1:$PORT,1 $IQN'"

  echo "== $label: bench --verify"
  check "4 KiB random reads, 32 in flight, verified" bench --rw randread --bs 4k --iodepth 32
  check "4 KiB random writes, 32 in flight, read back" bench --rw randwrite --bs 4k --iodepth 32
  check "1 MiB sequential reads, 8 in flight, verified" bench --rw read --bs 1M --iodepth 8
  check "1 MiB sequential writes, 8 in flight, read back" bench --rw write --bs 1M --iodepth 8
  check "mixed 64 KiB, 16 in flight, verified" bench --rw rw --bs 64k --iodepth 16
  check "the report has IOPS, percentiles and transport counters" \
    bash -c "grep -q 'iops=' '$WORK/out' && grep -q 'p99.9=' '$WORK/out' && grep -q 'syscalls_per_io=' '$WORK/out'"

  echo "== $label: CHAP"
  tadm --op new --mode account --user rbiouser --password rbio-secret-1
  tadm --op bind --mode account --tid 1 --user rbiouser
  check "the right CHAP secret logs in (exit 0)" \
    bench --rw randread --bs 4k --iodepth 8 --chap-user rbiouser --chap-secret rbio-secret-1
  check "a wrong CHAP secret is an authentication failure (exit 5)" \
    rc_is 5 "$RBIO" bench -T "$IQN" -p "$P" --time 1 --chap-user rbiouser --chap-secret wrong-secret
  check "no CHAP where the target requires it (exit 5)" rc_is 5 "$RBIO" bench -T "$IQN" -p "$P" --time 1
  tadm --op unbind --mode account --tid 1 --user rbiouser
  tadm --op delete --mode account --user rbiouser

  echo "== $label: digests"
  tadm --op update --mode target --tid 1 --name HeaderDigest --value CRC32C
  tadm --op update --mode target --tid 1 --name DataDigest --value CRC32C
  check "CRC32C header and data digests, 64 KiB mixed, verified" \
    bench --rw rw --bs 64k --iodepth 16 --header-digest crc32c --data-digest crc32c
  check "both digests were negotiated" out_has "HeaderDigest=CRC32C DataDigest=CRC32C"
  check "4 KiB random writes with digests, read back" \
    bench --rw randwrite --bs 4k --iodepth 32 --header-digest prefer --data-digest prefer
  tadm --op update --mode target --tid 1 --name HeaderDigest --value None
  tadm --op update --mode target --tid 1 --name DataDigest --value None

  echo "== $label: errors"
  check "an unknown target (exit 6)" \
    rc_is 6 "$RBIO" bench -T iqn.2026-11.io.rbio:no-such-target -p "$P" --time 1
  local t0=$SECONDS
  check "an unreachable portal (exit 3)" \
    rc_is 3 "$RBIO" bench -T "$IQN" -p 127.0.0.1:1 --time 1
  check "... and it fails fast" test $((SECONDS - t0)) -le 2
  check "bad options (exit 2)" rc_is 2 "$RBIO" bench -T "$IQN" -p "$P" --rw sideways
  # Values the parser used to take (each then ran, or tried to reach the
  # closed portal: exit 3): a --bs that wraps to 1024 when narrowed, a minus
  # sign behind a blank, a flag given a value, a CHAP secret without a user,
  # a zero size with a unit (its minimum was divided by the unit: 0); and
  # a --fence that is not one of its two values.
  local bad
  # And two that MultipathSession refuses before any login (exit 1, an
  # "internal error", until bench said so as a usage error): a second
  # portal with a replacement timeout of 0, and 17 portals.
  local seventeen
  seventeen=$(for i in $(seq 2 17); do printf -- '-p 127.0.0.1:%s ' "$i"; done)
  for bad in "--bs 4194305k" "--bs 4294967808" "--lun=' -18446744073709551615'" "--verify=0" \
             "--chap-secret=s3cret" "--iodepth=' 5'" "--size 0k" "--fence reset" \
             "-p 127.0.0.1:2 --replacement-timeout 0" "$seventeen"; do
    check "rejected: bench $bad (exit 2, one line)" \
      eval 'rc_is 2 "$RBIO" bench -T "$IQN" -p 127.0.0.1:1 --time 1 '"$bad"' && [[ $(wc -l <"$WORK/out") -eq 1 ]]'
  done
  # Commands of one portal took the last of several -p without a word; the
  # ones that do not log in took login options and ignored them. Mutual
  # CHAP with one secret both ways lets a false target pass it.
  for bad in "inquiry -T $IQN -p $P -p 127.0.0.1:1" "discard -T $IQN -p $P -p 127.0.0.1:1 --offset 0 --length 4k" \
             "discover -p $P -p 127.0.0.1:1" "session --chap-user u" "logout -T $IQN --transport iser" \
             "target-metrics --header-digest crc32c" \
             "login -T $IQN -p $P --chap-user u --chap-secret s3cret-s3cret --chap-user-in t --chap-secret-in s3cret-s3cret"; do
    check "rejected: $bad (exit 2, one line)" \
      eval 'rc_is 2 "$RBIO" '"$bad"' && [[ $(wc -l <"$WORK/out") -eq 1 ]]'
  done
  check "rbio bench --help and rbio login -h print the help (exit 0)" \
    eval 'rc_is 0 "$RBIO" bench --help && out_has "^usage: rbio" && rc_is 0 "$RBIO" login -T "$IQN" -h && out_has "^usage: rbio"'
  check "rejected: a misspelt --log-level (exit 2, named)" \
    eval 'rc_is 2 "$RBIO" --log-levelx bench -T "$IQN" -p 127.0.0.1:1 && out_has "unknown command .--log-levelx."'
  check "a LUN the target does not have (exit 7, one line naming it)" \
    eval 'rc_is 7 "$RBIO" bench -T "$IQN" -p "$P" --lun 9 --time 1 && [[ $(grep -c "^rbio: " "$WORK/out") -eq 1 ]] && grep -q "LUN 9" "$WORK/out"'
  # A 16 TiB LU (sparse) at 512 bytes: bench kept a generation and a busy
  # bit per block even without --verify, 132 GiB, and failed as an
  # internal error; --verify over all of it is a usage error naming --size.
  truncate -s 16T "$WORK/huge.img"
  new_lun 1 3 "$WORK/huge.img" rbio
  check "bench over a whole 16 TiB LU at 512 bytes runs (no table per block without --verify)" \
    eval 'rc_is 0 timeout 60 "$RBIO" bench -T "$IQN" -p "$P" --lun 3 --bs 512 --time 1 && out_has "iops="'
  check "... with --verify: exit 2, naming --size" \
    eval 'rc_is 2 "$RBIO" bench -T "$IQN" -p "$P" --lun 3 --bs 512 --time 1 --verify && out_has "use --size"'
  check "... and with --verify --size 64M it runs" \
    rc_is 0 timeout 60 "$RBIO" bench -T "$IQN" -p "$P" --lun 3 --bs 512 --time 1 --verify --size 64M
  tadm --op delete --mode logicalunit --tid 1 --lun 3
  rm -f "$WORK/huge.img"
  # A LUN removed while I/O runs on it: the commands fail, bench ends with
  # the I/O error's exit code, well before its 30 s.
  new_lun 1 2 "$WORK/lun2.img" rbio
  local bench_pid rc=0
  "$RBIO" bench -T "$IQN" -p "$P" --lun 2 --time 30 --rw randwrite --bs 4k --iodepth 16 \
    > "$WORK/gone.out" 2>&1 &
  bench_pid=$!
  check "I/O runs on LUN 2" wait_for_io "$WORK/gone.out"
  t0=$SECONDS
  # tgt refuses while a command is in its LU queue. A client that resubmits
  # from its completions keeps the queue busy for good, so it is paused
  # (SIGSTOP) with its session open: what it had sent finishes, the LU is
  # removed under it, and it resumes into a LUN that is gone.
  kill -STOP "$bench_pid"
  remove_lun2() { tadm --op delete --mode logicalunit --tid 1 --lun 2 2>/dev/null; }
  check "LUN 2 can be removed while its session is open" wait_for 10 remove_lun2
  kill -CONT "$bench_pid"
  wait "$bench_pid" || rc=$?
  check "bench on the removed LUN ends with exit 7 (I/O error)" test "$rc" -eq 7
  check "... within 15 s" test $((SECONDS - t0)) -le 15
  check "... saying why in one line" eval 'tail -3 "$WORK/gone.out" | grep -q "^rbio: "'
  tail -2 "$WORK/gone.out"
  check "tgtd is alive" tgtd_alive
}

setup() {
  tadm --op new --mode target --tid 1 -T "$IQN"
  tadm --op bind --mode target --tid 1 -I ALL
  truncate -s 128M "$WORK/lun.img" "$WORK/lun2.img"
  new_lun 1 1 "$WORK/lun.img" rbio
}

echo "== the command line"
check "rbio --version prints rbio's version ($RBIO_VERSION)" \
  eval '[[ $("$RBIO" --version) == "rbio $RBIO_VERSION" ]]'

on_both_transports setup run_all

finish
