#!/usr/bin/env bash
# data_budget_mib and data_budget_total_mib: a host that sends large READs and stops reading its
# responses must not make tgtd pin memory without bound (tgt gives every
# command its whole buffer as it arrives; rbio/bs/data_budget.h).
#
# One tgtd on rbio's TCP transport: LUN 1 a small file for the good client
# (iscsi_rw_check, which writes and verifies every byte), LUN 2 a sparse
# 8 GiB file. The hostile client (iscsi_hostile flood) sends 32 READ(16) of
# 64 MiB (2 GiB) on LUN 2 and reads nothing, holding its connection:
#   data_budget_mib = 256: tgtd closes that connection with its log line
#     and counts it in rbio_connections_over_data_budget_total; its peak
#     RSS (VmHWM) stays under the budget + 200 MiB; the good client works
#     while the flood holds and after.
#   control, data_budget_mib = 0 and data_budget_total_mib = 0: the same
#     flood keeps its connection, and tgtd's peak RSS passes 1 GiB (the
#     store filled buffers that cannot leave).
#   data_budget_mib = 256 again: 64 READ(10) of 8 MiB, which rbio's
#     transport serves past tgt's reader (direct_commands: the host takes
#     16 MiB Data-In PDUs), close their connection the same way; 3 READs of
#     64 MiB (192 MiB, within it) keep theirs, and the metrics show the
#     192 MiB held (rbio_connection_data_buffer_bytes); and one connection of 1 MiB
#     reads, then writes, 8 in flight (iscsi-rwperf, 2 s each) moves more
#     than the budget (+ 128 MiB) without being closed: a buffer's bytes
#     come back once its response has been sent.
#   data_budget_total_mib = 320, no budget per connection: host a holds
#     192 MiB; host b's third READ of 64 MiB would take tgtd to 384 MiB,
#     and closes host a (it holds the most), while host b and the good
#     client go on; then host c alone, at 320 MiB, holds the most itself
#     and its sixth READ closes it. Peak RSS stays under the total + 200.
#   control, no total either: hosts a and b hold 384 MiB together and
#     both keep their connections.
# After each flood, tgtd's RSS falls back under 300 MiB.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 110
HOSTILE="$RBIO_BUILD_DIR/tests/integration/iscsi_hostile"
PERF="$RBIO_BUILD_DIR/bench/iscsi-rwperf"
for tool in "$HOSTILE" "$RW_CHECK" "$PERF"; do [[ -x $tool ]] || { echo "no $tool: build first" >&2; exit 2; }; done
IQN=iqn.2026-11.io.rbio:budget
METRICS="$WORK/rbio.prom"
BUDGET_MIB=256

# start BUDGET [TOTAL]: tgtd with data_budget_mib = BUDGET (and
# data_budget_total_mib = TOTAL, else its default), its target and LUs.
start() {
  printf 'data_budget_mib = %s\nmetrics_file = %s\n' "$1" "$METRICS" > "$WORK/rbio.conf"
  [[ -n ${2:-} ]] && printf 'data_budget_total_mib = %s\n' "$2" >> "$WORK/rbio.conf"
  RBIO_CONFIG="$WORK/rbio.conf" tgtd_start > /dev/null
  if [[ -n ${2:-} ]]; then
    check "tgtd runs with data_budget_mib=$1 data_budget_total_mib=$2" \
      wait_for 10 log_has "data_budget_mib=$1 data_budget_total_mib=$2 "
  else
    check "tgtd runs with data_budget_mib=$1 and data_budget_total_mib from memory (auto)" \
      wait_for 10 log_has "data_budget_mib=$1 data_budget_total_mib=[0-9]* (auto) "
  fi
  new_target 1 budget
  truncate -s 16M "$WORK/good.img"
  truncate -s 8G "$WORK/big.img"
  truncate -s 64M "$WORK/perf.img"
  new_lun 1 1 "$WORK/good.img" rbio
  new_lun 1 2 "$WORK/big.img" rbio
  new_lun 1 3 "$WORK/perf.img" rbio
}
kib_of() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$(tgtd_pid)/status"; }
good_client() { timeout 60 "$RW_CHECK" "$(url budget 1)" --inflight 8 --rounds 1 --seed "$1" > "$WORK/good.log" 2>&1; }
hwm_over() { (($(kib_of VmHWM) > $1 * 1024)); }
rss_under() { (($(kib_of VmRSS) < $1 * 1024)); }
over_budget_total() { sed -n 's/^rbio_connections_over_data_budget_total{[^}]*} //p' "$METRICS"; }
metric_is() { [[ $(over_budget_total) == "$1" ]]; }
# The data buffers every connection holds, in MiB (rbio_connection_data_buffer_bytes).
held_mib() { awk '/^rbio_connection_data_buffer_bytes\{/ { b += $NF } END { print int(b / 1048576) }' "$METRICS"; }
held_mib_at_least() { (($(held_mib) >= $1)); }
# The process's gauges: all data buffers held, and data_budget_total_mib, in MiB.
gauge_mib() { awk -v f="$1" '$1 ~ "^" f "\\{" { print int($NF / 1048576) }' "$METRICS"; }

# flood_as NAME COUNT MIB [MRDSL [CLIENT OPTIONS...]]: a hostile client's
# flood on LUN 2, held until released (release_as NAME); its output in
# $WORK/NAME.out.
declare -A FLOOD_PIDS
flood_as() {
  local name=$1 count=$2 mib=$3 mrdsl=${4:-262144}
  shift $(($# < 4 ? $# : 4))
  rm -f "$WORK/$name.release"
  timeout 120 "$HOSTILE" flood --port "$PORT" --target "$IQN" --lun 2 --count "$count" --kib $((mib * 1024)) \
    --mrdsl "$mrdsl" --hold-ms 500 --release "$WORK/$name.release" --max-hold-ms 60000 "$@" \
    > "$WORK/$name.out" 2>&1 &
  FLOOD_PIDS[$name]=$!
  check "hostile client $name sent its $count READs of $mib MiB and holds" wait_for 30 grep -q holding "$WORK/$name.out"
}
release_as() {
  local rc=0
  touch "$WORK/$1.release"
  wait "${FLOOD_PIDS[$1]}" || rc=$?
  sed 's/^/  /' "$WORK/$1.out"
  check "hostile client $1 ran (exit $rc)" test "$rc" = 0
}
closed_by_target_as() { grep -q "connection closed by the target" "$WORK/$1.out"; }
# What tgtd's log says of client NAME's connection (127.0.0.1:PORT, the
# port the client printed): a client cannot see a FIN queued behind
# responses it has not read, so whether tgtd closed it is asked of the log.
peer_of() { echo "127.0.0.1:$(sed -n 's/^flood: from port //p' "$WORK/$1.out")"; }
log_closed_as() { log_has "rbio: tcp: $(peer_of "$1"): closing connection: ${2:-}"; }
not_closed_as() { ! log_has "rbio: tcp: $(peer_of "$1"): closing connection"; }
flood() { flood_as flood "$@"; }
flood_release() { release_as flood; }
closed_by_target() { closed_by_target_as flood; }
# perf_moves [-w] MIB: one connection of 1 MiB I/Os, 8 in flight, for 2 s
# on LUN 3 completes and moves at least MIB MiB.
perf_moves() {
  local args=() ios rc=0
  [[ $1 == -w ]] && { args=(-w); shift; }
  timeout 60 "$PERF" "${args[@]}" -m 8 -s 1048576 -t 2 -i "$TEST_INITIATOR" "$(url budget 3)" > "$WORK/perf.out" 2>&1 || rc=$?
  cat "$WORK/perf.out"
  ios=$(sed -n 's/^RESULT .* ios=\([0-9]*\) .*/\1/p' "$WORK/perf.out")
  ((rc == 0 && ${ios:-0} >= $1))
}

echo "== data_budget_mib = $BUDGET_MIB: 32 READs of 64 MiB, never read"
start "$BUDGET_MIB"
check "the metric starts at 0" wait_for 10 metric_is 0
# The closes expected: the client waits up to 10 s after its hold for the
# socket to go (tgtd logs a close at once, but closes the socket once the
# commands it had in the store are done).
CLOSE_WAIT=(--expect-close --wait-ms 10000)
flood 32 64 262144 "${CLOSE_WAIT[@]}"
check "tgtd logs the close with the budget" \
  wait_for 20 log_has "closing connection: a command wants 64 MiB of data buffers while the connection holds 256 MiB, over data_budget_mib=256"
check "the good client verifies its data while the flood holds" good_client 1
echo "   tgtd's peak RSS: $(($(kib_of VmHWM) / 1024)) MiB"
check "tgtd's peak RSS stayed under the budget + 200 MiB" test "$(kib_of VmHWM)" -lt $(((BUDGET_MIB + 200) * 1024))
flood_release
check "the target had closed the hostile connection" closed_by_target
check "rbio_connections_over_data_budget_total counts it" wait_for 10 metric_is 1
check "the good client verifies its data after the flood" good_client 2
check "tgtd's RSS is back under 300 MiB" wait_for 10 rss_under 300

echo "== data_budget_mib = $BUDGET_MIB: 64 READ(10) of 8 MiB past tgt's reader, never read"
flood 64 8 16777215 "${CLOSE_WAIT[@]}"
check "tgtd logs the close with the budget" \
  wait_for 20 log_has "closing connection: a command wants 8 MiB of data buffers while the connection holds 256 MiB, over data_budget_mib=256"
flood_release
check "the target had closed the hostile connection" closed_by_target
check "rbio_connections_over_data_budget_total counts 2" wait_for 10 metric_is 2
check "tgtd's RSS is back under 300 MiB" wait_for 10 rss_under 300

echo "== data_budget_mib = $BUDGET_MIB: 3 READs of 64 MiB (within it), never read"
flood 3 64
check "the good client verifies its data meanwhile" good_client 3
check "rbio_connection_data_buffer_bytes shows the 192 MiB the flood holds" wait_for 10 held_mib_at_least 192
echo "   data buffers held: $(held_mib) MiB"
flood_release
check "the target kept that connection" bash -c "! grep -q 'connection closed by the target' '$WORK/flood.out'"
check "rbio_connection_data_buffer_bytes is back under 1 MiB once it left" wait_for 10 eval '(( $(held_mib) == 0 ))'

echo "== data_budget_mib = $BUDGET_MIB: one connection moves more than the budget"
check "1 MiB reads x8 for 2 s: at least $((BUDGET_MIB + 128)) MiB, never closed" perf_moves $((BUDGET_MIB + 128))
check "1 MiB writes x8 for 2 s: at least $((BUDGET_MIB + 128)) MiB, never closed" perf_moves -w $((BUDGET_MIB + 128))
check "the metric still counts 2" metric_is 2
tgtd_stop > /dev/null

echo "== data_budget_total_mib = 320 (no budget per connection): hosts that do not read their responses"
: > "$STATE/tgtd.log"
start 0 320
check "rbio_data_buffer_limit_bytes shows the total" wait_for 10 eval '[[ $(gauge_mib rbio_data_buffer_limit_bytes) == 320 ]]'
flood_as a 3 64
check "host a holds 192 MiB (rbio_connection_data_buffer_bytes)" wait_for 10 held_mib_at_least 192
flood_as b 3 64
check "host b's third READ closes host a ($(peer_of a)), which holds the most" \
  wait_for 20 log_closed_as a "it holds 192 MiB of data buffers, the most of the connections not being closed, and a command of 64 MiB on another would take tgtd's over data_budget_total_mib=320"
check "tgtd ended host a's connection" wait_for 10 log_has "rbio: tcp: $(peer_of a): connection ended"
check "host b's connection ($(peer_of b)) stays" not_closed_as b
check "the good client verifies its data while host b holds" good_client 5
check "rbio_connection_data_buffer_bytes is host b's 192 MiB alone" wait_for 10 eval '(( $(held_mib) == 192 ))'
check "rbio_data_buffer_bytes, the process's, agrees" eval '[[ $(gauge_mib rbio_data_buffer_bytes) == 192 ]]'
check "rbio_connections_over_data_budget_total counts it" wait_for 10 metric_is 1
check "host b's connection stays meanwhile" not_closed_as b
release_as a
release_as b
flood_as c 8 64
check "host c's sixth READ, holding 320 MiB and the most itself, closes host c ($(peer_of c))" \
  wait_for 20 log_closed_as c "a command wants 64 MiB of data buffers while the connection holds 320 MiB, the most of any connection, and tgtd's would go over data_budget_total_mib=320"
release_as c
check "rbio_connections_over_data_budget_total counts 2" wait_for 10 metric_is 2
echo "   tgtd's peak RSS: $(($(kib_of VmHWM) / 1024)) MiB"
check "tgtd's peak RSS stayed under the total + 200 MiB" test "$(kib_of VmHWM)" -lt $(((320 + 200) * 1024))
check "tgtd's RSS is back under 300 MiB" wait_for 10 rss_under 300
tgtd_stop > /dev/null

echo "== control: data_budget_mib = 0 and data_budget_total_mib = 0, the same flood"
: > "$STATE/tgtd.log"
start 0 0
flood 32 64
check "tgtd's peak RSS passes 1 GiB: the buffers the flood pins" wait_for 30 hwm_over 1024
echo "   tgtd's peak RSS: $(($(kib_of VmHWM) / 1024)) MiB"
check "the good client verifies its data while the flood holds" good_client 4
check "tgtd has not closed the hostile connection ($(peer_of flood))" not_closed_as flood
flood_release
check "tgtd logged no close for the budget" bash -c "! grep -q 'over data_budget_mib' '$STATE/tgtd.log'"
echo "== control: two hosts of 192 MiB each, no total, both kept"
flood_as a 3 64
flood_as b 3 64
check "together they hold more than 320 MiB" wait_for 10 held_mib_at_least 384
check "tgtd has closed neither connection" eval 'not_closed_as a && not_closed_as b'
release_as a
release_as b
check "tgtd logged no close for the total" bash -c "! grep -q 'over data_budget_total_mib' '$STATE/tgtd.log'"
check "tgtd's RSS is back under 300 MiB" wait_for 20 rss_under 300
finish
