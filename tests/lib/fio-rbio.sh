# shellcheck shell=bash
# fio with rbio's external engine (initiator/fio/librbio_fio.so). Source it
# after tgt-test.sh (it uses $RBIO_BUILD_DIR and $WORK).
FIO_ENGINE="$RBIO_BUILD_DIR/initiator/fio/librbio_fio.so"
# An engine built with ASan (scripts/sanitize.sh) needs its runtime loaded
# before fio's own libraries: fio then runs with it preloaded. fio's own
# allocations at exit are not the engine's: no leak check in fio.
FIO_ENV=()
if [[ -f $FIO_ENGINE ]] && readelf -d "$FIO_ENGINE" | grep -q 'NEEDED.*\[libasan\.so'; then
  # libstdc++ too: fio is C, and ASan's __cxa_throw interceptor needs it
  # loaded when the runtime starts (else the engine's first throw aborts).
  FIO_ENV=(env "LD_PRELOAD=$(ldd "$FIO_ENGINE" | awk '$1 ~ /^lib(asan|stdc\+\+)\.so/ { printf "%s ", $3 }')"
           "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0")
fi

# fio_verify_job NAME PORTAL TARGET LUN RW BS IODEPTH SIZE [extra fio options...]
# Writes SIZE bytes of the LU with RW (randwrite, write, ...) at BS and
# IODEPTH, then reads every block back and checks its crc32c (verify=crc32c,
# do_verify=1). Output in $WORK/fio-NAME.out; exit status is fio's.
fio_verify_job() {
  local name=$1 portal=$2 target=$3 lun=$4 rw=$5 bs=$6 depth=$7 size=$8
  shift 8
  local job="$WORK/fio-$name.fio"
  cat > "$job" <<JOB
[global]
ioengine=external:$FIO_ENGINE
portal=$portal
target=$target
lun=$lun
verify=crc32c
do_verify=1
verify_fatal=1
verify_dump=0
verify_state_save=0
randrepeat=0
size=$size

[$name]
rw=$rw
bs=$bs
iodepth=$depth
iodepth_batch_submit=$(( depth > 4 ? depth / 4 : 1 ))
iodepth_batch_complete_min=$(( depth > 4 ? depth / 4 : 1 ))
JOB
  local extra
  for extra in "$@"; do echo "$extra" >> "$job"; done
  (cd "$WORK" && RBIO_FIO_STATS=1 timeout 300 "${FIO_ENV[@]}" fio --output-format=normal "$job" > "$WORK/fio-$name.out" 2>&1)
}

# fio_ok NAME: fio ran the job to the end with no error and verified data
# (a verify job reports read I/O: the read-back pass).
fio_ok() {
  local out="$WORK/fio-$1.out"
  if grep -q "err= 0" "$out" && ! grep -qiE "verify: bad|fio: .*error|bad magic|crc32c: verify failed" "$out" \
     && grep -qE "^ +read: IOPS=" "$out"; then
    return 0
  fi
  echo "  fio output ($out):"; tail -25 "$out" | sed 's/^/    /'
  return 1
}

# fio_batched NAME: the engine sent at least two commands per sendmsg on
# average (commands of one commit leave together). Measured (4 KiB x 32,
# fio committing 8 at a time): 8.0; one I/O per commit, the control in
# integration.fio-engine: 1.0.
fio_batched() {
  local line cmds sends
  line=$(grep -m1 "rbio: .*commands=" "$WORK/fio-$1.out") || { echo "  no engine statistics"; return 1; }
  cmds=$(sed -E 's/.*commands=([0-9]+).*/\1/' <<<"$line")
  sends=$(sed -E 's/.*send_calls=([0-9]+).*/\1/' <<<"$line")
  echo "  $line"
  (( sends > 0 && cmds >= 2 * sends ))
}

# fio_verify_ok NAME PORTAL TARGET LUN RW BS IODEPTH SIZE [options...]:
# fio_verify_job exits 0 and fio_ok NAME holds (both; the output is shown
# when either fails).
fio_verify_ok() {
  local rc=0
  fio_verify_job "$@" || rc=$?
  if (( rc != 0 )); then echo "  fio exited $rc"; fio_ok "$1"; return 1; fi
  fio_ok "$1"
}
# fio_verify_fails NAME ...: the same job must fail (fio exits non-zero).
fio_verify_fails() { ! fio_verify_job "$@"; }
