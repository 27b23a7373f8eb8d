# shellcheck shell=bash
# shellcheck disable=SC2034  # sets variables the scripts that source it read
# Soft-RoCE inside the guest (sourced by VM tests): a veth pair with an
# address and an rxe device on it, as ../shared/docs/ENVIRONMENT.md describes.
# Sets RXE_ADDR. The guest is thrown away afterwards, so nothing is undone.
# RXE_MTU, if set, is the veth pair's MTU (rxe's RoCE MTU follows it, up to
# 4096: jumbo frames, as RoCE fabrics are usually set up).
RXE_ADDR=10.99.0.1
rxe_up() {
  modprobe -a veth rdma_rxe ib_uverbs rdma_ucm || { echo "rxe: modprobe failed" >&2; return 1; }
  ip link add rbio-veth0 type veth peer name rbio-veth1
  ip addr add "$RXE_ADDR/24" dev rbio-veth0
  if [[ -n ${RXE_MTU:-} ]]; then
    ip link set rbio-veth0 mtu "$RXE_MTU" && ip link set rbio-veth1 mtu "$RXE_MTU" ||
      { echo "rxe: cannot set MTU $RXE_MTU on the veth pair" >&2; return 1; }
  fi
  ip link set rbio-veth0 up
  ip link set rbio-veth1 up
  ip link set lo up
  rdma link add rbio-rxe0 type rxe netdev rbio-veth0
  local i
  for (( i = 0; i < 50; i++ )); do
    rdma link show rbio-rxe0/1 2>/dev/null | grep -q 'state ACTIVE' && return 0
    sleep 0.1
  done
  echo "rxe: rbio-rxe0 did not become ACTIVE" >&2; rdma link >&2; return 1
}

# must_rxe: rxe_up, or the test fails here.
must_rxe() { rxe_up || { echo "FAIL: soft-RoCE did not come up"; exit 1; }; }

# For the tests of rbio's iSER transport (called after lib.sh is sourced):
# tgtadm on tgt's iser driver, tgtd with the build's module taking over its
# iSER listeners, and a --lld iser target.
iser_adm() { tgtadm -C "$CTL" --lld iser "$@"; }
start_tgtd_rbio_iser() {
  must "tgtd starts with the build's module and its iSER driver" tgtd_start -- --iser pool_sz_mb=128
  must "rbio's transport takes over tgt's iSER listeners" \
    log_has "rbio: iser: .* iSER listener(s) served by rbio's transport"
}
# iser_target TID IQN FILE: a --lld iser target bound to -I ALL only, LUN 1 on FILE (bs rbio).
iser_target() {
  iser_adm --op new --mode target --tid "$1" -T "$2" &&
  iser_adm --op bind --mode target --tid "$1" -I ALL &&
  iser_adm --op new --mode logicalunit --tid "$1" --lun 1 -b "$3" --bstype rbio
}

# tgtd_rdma_count KIND [ERE]: how many of tgtd's KIND resources (qp, mr)
# rdma lists, of those matching ERE. Prints nothing and fails when rdma
# cannot list them, so that 0 always means none and never "no answer".
tgtd_rdma_count() {
  local out
  out=$(rdma res show "$1") || return 1
  awk -v re="${2:-}" '/comm tgtd/ && $0 ~ re { n++ } END { print n + 0 }' <<< "$out"
}
tgtd_qps() { tgtd_rdma_count qp; }
tgtd_mrs_of() { tgtd_rdma_count mr "mrlen ($1)( |\$)"; }
# count_is N COMMAND...: COMMAND prints a count, and it is N.
count_is() { local n; n=$("${@:2}") && [[ -n $n && $n -eq $1 ]]; }

# rbio's iSER connections that tgtd has logged as ended (with counters).
ended_count() { awk '/rbio: iser: .*connection ended; pdus_in=[1-9]/ { n++ } END { print n + 0 }' "$STATE/tgtd.log"; }
# conn_line NAME BEFORE: the first connection to end after BEFORE had (the
# line is logged when it ends, a moment after the bench), kept in NAME.conn.
conn_line() {
  wait_for 10 eval "(( \$(ended_count) > $2 ))" &&
  grep "rbio: iser: .*connection ended; pdus_in=[1-9]" "$STATE/tgtd.log" | sed -n "$(( $2 + 1 ))p" > "$WORK/$1.conn" &&
  cat "$WORK/$1.conn" && test -s "$WORK/$1.conn"
}
wpp_of() { sed -n 's/.* wrs_per_post=\([0-9.]*\).*/\1/p' "$WORK/$1.conn"; }
# wpp NAME OP THRESHOLD: NAME's connection's work requests per post.
wpp() { awk -v v="$(wpp_of "$1")" -v op="$2" -v t="$3" 'BEGIN { if (v == "") exit 1; exit !(op == ">=" ? v >= t : v < t) }'; }
# Doorbell batching, for vm.iser-initiator's 3 s of 4 KiB reads x 32 from
# the rbio initiator (with --verify): 9.86 work requests per post at tgtd, and 1.00
# with coalesce = off (no batching, every send signalled), measured in one
# guest run on 2026-12-01 (bench/iser-compare.sh's longer runs saw 34-62).
# 9.86 is too close to issue 6's goal of 8 for a check under TCG and a
# loaded host, so the threshold is 4: 2.5x below the batched figure, 4x
# above the unbatched one, asserted both ways (the control run below).
# Writes get no threshold: a 4 KiB write needs one work request, its
# response, and commands reach tgtd one or two per wake-up (1.25-1.66 per
# post measured, bench/README.md). vm.iser-kernel-initiator sets its own for the
# kernel's initiator.
MIN_WRS_PER_POST=4
