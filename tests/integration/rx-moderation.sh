#!/usr/bin/env bash
# Receive moderation of rbio's TCP transport (rx_wait_pdus, rx_wait_us;
# rbio/iser/rx_moderation.hpp). Once requests have arrived many at once, the
# socket wakes tgtd only when as many are in again, and a command that
# comes alone is answered when the wait timer ends; a burst below the
# minimum, or rx_wait_pdus = 0 (the control), answers it at once. With a
# 100 ms timer the difference is a hundred times any scheduling delay here.
# Then real initiators: data written and read back at 32 in flight through
# moderated waits, none at one command in flight, and a bad setting.
# What moderation saves per I/O is the benchmarks' to say (bench/tcp-ab.sh;
# bench/README.md, "Receive moderation"); the figures below are printed
# for the log, not checked.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 12
PERF="$RBIO_BUILD_DIR/bench/iscsi-rwperf"
HOSTILE="$RBIO_BUILD_DIR/tests/integration/iscsi_hostile"
for tool in "$PERF" "$HOSTILE"; do [[ -x $tool ]] || { echo "no $tool: build first" >&2; exit 2; }; done
IQN=iqn.2026-11.io.rbio:moderation

setup() {
  new_target 1 moderation
  truncate -s 64M "$WORK/lun.img" "$WORK/lun2.img"
  new_lun 1 1 "$WORK/lun.img" null
  new_lun 1 2 "$WORK/lun2.img" rbio
}
restart() { tgtd_stop >/dev/null; : > "$STATE/tgtd.log"; tgtd_start >/dev/null; setup; }
# The counters tgtd logged when the last connection ended.
ended() { awk '/connection ended;/ { l = $0 } END { print l }' "$STATE/tgtd.log"; }
last_value() { ended | tr ' ' '\n' | sed -n "s/^$1=//p"; }
# after_connection CMD...: runs CMD, then waits for tgtd to log the end of
# its connection (the counters below are that connection's).
after_connection() {
  local before rc=0
  before=$(ended)
  "$@" || rc=$?
  logged() { [[ $(ended) != "$before" ]]; }
  # Without the log line the counters read would be the previous
  # connection's.
  wait_for 10 logged || { echo "  tgtd logged no end of that connection" >&2; return 1; }
  return "$rc"
}
# lone_ms COUNT: the lone commands' waits (ms), one per line.
lone_ms() {
  after_connection "$HOSTILE" lone-after-burst --port "$PORT" --target "$IQN" --count "$1" > "$WORK/lone.out" ||
    { cat "$WORK/lone.out"; return 1; }
  sed -n 's/.*lone_ms=//p' "$WORK/lone.out"
}
all_at_least() { awk -v t="$1" 'NF { n++; if ($1 < t) bad = 1 } END { exit !(n == 3 && !bad) }' <<< "$2"; }
all_below() { awk -v t="$1" 'NF { n++; if ($1 >= t) bad = 1 } END { exit !(n == 3 && !bad) }' <<< "$2"; }
# perf RW DEPTH: 3 s of 4 KiB I/O on the null LU; prints its connection's
# counters; WAITS = the moderation's system calls.
perf() {
  local args=(-m "$2" -s 4096 -t 3 -i "$TEST_INITIATOR")
  [[ $1 == write ]] && args+=(-w)
  after_connection "$PERF" "${args[@]}" "$(url moderation 1)" > "$WORK/perf.out" 2>&1 ||
    { cat "$WORK/perf.out"; return 1; }
  WAITS=$(last_value rx_wait_calls)
  echo "   $1 x$2: $(last_value pdus_in) PDUs in, $(last_value pdus_per_recv) per receive," \
    "$(last_value recv_calls) receive and $(last_value send_calls) send calls, $WAITS moderation calls," \
    "$(last_value rx_wait_expired) waits ended by the timer"
}

echo "== moderation on, a 100 ms wait timer"
printf 'rx_wait_us = 100000\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" tgtd_start >/dev/null
setup
check "the settings line shows the moderation" log_has "rx_wait_pdus=16 rx_wait_us=100000"
waits=$(lone_ms 16)
check "after 16 commands at once, a lone one waits for the timer: at least 50 ms (${waits//$'\n'/ })" \
  all_at_least 50 "$waits"
check "its connection counted the waits the timer ended ($(last_value rx_wait_expired))" \
  test "$(last_value rx_wait_expired)" -ge 3
waits=$(lone_ms 4)
check "after 4 at once (below the minimum of 8), a lone one is answered at once: under 50 ms (${waits//$'\n'/ })" \
  all_below 50 "$waits"

echo "== the defaults (rx_wait_us 300), real initiators"
RBIO_CONFIG=/dev/null restart
check "the settings line shows the moderation's defaults" log_has "rx_wait_pdus=16 rx_wait_us=300"
perf read 32
check "4 KiB reads x32 (libiscsi, one PDU per call) were moderated ($WAITS moderation calls)" test "$WAITS" -gt 0
perf write 32
perf read 1
check "one command in flight: no moderation call ($WAITS)" test "$WAITS" = 0
# iscsi_rw_check's phases change its depth within one session: every byte
# must come back through waits the timer ends.
check "data written and read back at 32 in flight (bs rbio)" \
  after_connection "$RW_CHECK" "$(url moderation 2)" --inflight 32 --rounds 3
echo "   its connection: $(last_value rx_wait_calls) moderation calls, $(last_value rx_wait_expired) waits ended by the timer"

echo "== control: rx_wait_pdus = 0"
printf 'rx_wait_pdus = 0\nrx_wait_us = 100000\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" restart
waits=$(lone_ms 16)
check "after 16 commands at once, a lone one is answered at once: under 50 ms (${waits//$'\n'/ })" \
  all_below 50 "$waits"
perf read 32
check "4 KiB reads x32: no moderation call ($WAITS)" test "$WAITS" = 0

echo "== a bad setting: reported with file, line and key; tgtd serves stock"
printf 'rx_wait_us = 5\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" restart
check "the log names the file, the line and the key" \
  log_has "bad settings, TCP portals stay with tgt's transport: $WORK/rbio.conf:1: rx_wait_us: '5' is not a number from 10 to 100000"
check "and data reads back through tgt's transport" "$RW_CHECK" "$(url moderation 2)" --inflight 8 --rounds 1
finish
