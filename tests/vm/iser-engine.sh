#!/usr/bin/env bash
# rbio's RDMA engine (iser-opt's IserEndpoint) on soft-RoCE in the guest:
# iSER-shaped reads (RDMA WRITE + response SEND in one post) and writes (RDMA
# READ, then the response), every byte verified, with the target side's
# counters checked against issue 6's goals at 32 in flight: >= 8 work
# requests per post call and <= 0.25 signalled completions per read I/O.
# The same run with batching and selective signalling off must show one work
# request per post and every send signalled, so the counters can fail.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/lib-rxe.sh"
CHECK="${RBIO_BUILD_DIR:?}/tests/vm/iser_engine_check"
[[ -x $CHECK ]] || { echo "no $CHECK: build first" >&2; exit 2; }

rxe_up
failed=0
run() {
  local name=$1; shift
  echo "== $name: iser_engine_check $*"
  if timeout 300 "$CHECK" --addr "$RXE_ADDR" "$@" | tee "$VM_OUT/$name.txt"; then
    echo "PASS: $name"
  else
    echo "FAIL: $name"; failed=$((failed + 1))
  fi
}
value() { sed -n "s/^target: .*$2=\([0-9.]*\).*/\1/p" "$VM_OUT/$1.txt"; }

run read-4k-qd32 --port 7471 --ios 4000 --depth 32 --expect-wrs-per-post 8 --expect-signaled-per-io 0.25
run write-4k-qd32 --port 7472 --ios 4000 --depth 32 --write --expect-wrs-per-post 8
run read-1m-qd8 --port 7473 --ios 200 --depth 8 --size 1048576
run read-4k-qd1 --port 7474 --ios 1000 --depth 1
run read-4k-qd32-unoptimised --port 7475 --ios 2000 --depth 32 --no-batch --signal-every 1
if [[ -s $VM_OUT/read-4k-qd32-unoptimised.txt ]]; then
  wpp=$(value read-4k-qd32-unoptimised wrs_per_post) spi=$(value read-4k-qd32-unoptimised signaled_per_io)
  if [[ $wpp == 1.00 && $spi == 2.000 ]]; then echo "PASS: the off switches post one request per call and signal every send"
  else echo "FAIL: off switches: wrs_per_post=$wpp signaled_per_io=$spi (expected 1.00 and 2.000)"; failed=$((failed + 1)); fi
fi
echo "$failed check(s) failed"
(( failed == 0 ))
