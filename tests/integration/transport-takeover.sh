#!/usr/bin/env bash
# rbio's TCP transport inside stock tgtd: it takes over the portals (also
# ones added later with tgtadm, or only the listed ones), serves sessions,
# several connections and CHAP through them, writes its statistics file and
# shows connections in tgtadm; and every way of keeping tgtd stock works:
# RBIO_TRANSPORT=off, transport = off in the config file (and the
# environment overriding it back on), a config file with an error, and a
# tgtd binary other than the one the module was built for.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 7
PORT2=$((PORT + 100))
STATS="$WORK/rbio.stats"

served_line() { echo "rbio: tcp: portal 127.0.0.1:$1 served by rbio's transport"; }
log_lacks() { ! grep -q -- "$1" "$STATE/tgtd.log"; }
stat_of() { sed -n "s/^$1=//p" "$STATS"; }
setup_lun() {
  new_target 1 takeover
  truncate -s 64M "$WORK/lun.img" "$WORK/lun2.img"
  new_lun 1 1 "$WORK/lun.img" rbio
  new_lun 1 2 "$WORK/lun2.img" rbio
}
io_works() { "$RW_CHECK" "$(url takeover)" --inflight 32 --rounds 1 >/dev/null; }
restart() { tgtd_stop; rm -f "$STATS"; : > "$STATE/tgtd.log"; tgtd_start "$@" >/dev/null; setup_lun; }
# stats_settled: the file (rewritten when a connection ends and once a
# second) counts a connection and none open.
stats_settled() {
  [[ -f $STATS ]] && (( $(stat_of connections_total) >= 1 && $(stat_of connections_open) == 0 ))
}
# at_least NAME MIN / below NAME MAX: a counter of the statistics file
# against a threshold (awk: the ratios are decimals).
at_least() { awk -v v="$(stat_of "$1")" -v t="$2" 'BEGIN { exit !(v != "" && v >= t) }'; }
below() { awk -v v="$(stat_of "$1")" -v t="$2" 'BEGIN { exit !(v != "" && v < t) }'; }
# epoll_ctl calls per PDU sent, against a threshold.
epoll_per_pdu() {
  awk -v e="$(stat_of epoll_ctl_calls)" -v p="$(stat_of pdus_out)" -v t="$2" -v op="$1" \
    'BEGIN { if (p == "" || p == 0) exit 1; r = e / p; exit !(op == "below" ? r < t : r >= t) }'
}
# What batching must achieve for io_works (32 commands in flight), from
# measurement on a 2-core machine with other tests running (3 runs with
# every optimisation on, 2 with each one off alone, 1 with all off): on,
# 3.7-14 PDUs per receive, 3.3-9.6 per send, 0.03-0.05 epoll_ctl per PDU
# sent; batch_reads off 0.37-0.52 per receive, coalesce off 0.97-1.00 per
# send, send_inline off 0.37-0.59 epoll_ctl per PDU. Since responses of
# commands finished in the store's flush leave in the same loop turn,
# send_inline off gives 0.148-0.178 and on 0.019-0.027 (2 runs at load 13):
# the epoll_ctl threshold sits between them. The same thresholds are
# asserted the other way round with the optimisations off below. Six
# clean-clone CI runs (2026-12-02, plain and ASan beside the whole suite)
# saw on as low as 2.51 per receive and 2.44 per send, off at most 0.44
# and 0.98 (a send call without coalescing carries at most one PDU), so
# both thresholds sit at 1.5, between the lowest on and the highest off.
MIN_PDUS_PER_RECV=1.5
MIN_PDUS_PER_SEND=1.5
MAX_EPOLL_CTL_PER_PDU=0.08
# direct_commands: commands of io_works taken past tgt's reader and writer,
# per PDU received. Most of its PDUs cannot be: writes larger than the first
# burst (R2T, Data-Out PDUs), reads larger than one Data-In, the login,
# READ CAPACITY, a write whose data was not all in when its pass ran, the
# logout. Measured 0.22 (541 of 2,516, 2026-12-04) and 0 with
# direct_commands = off (the control below).
MIN_DIRECT_PER_PDU_IN=0.1
direct_per_pdu() {
  awk -v d="$(stat_of direct_commands)" -v i="$(stat_of pdus_in)" -v t="$2" -v op="$1" \
    'BEGIN { if (i == "" || i == 0 || d == "") exit 1; r = d / i; exit !(op == "below" ? r < t : r >= t) }'
}

echo "== default: the transport takes over"
RBIO_STATS_FILE=$STATS tgtd_start >/dev/null
setup_lun
check "the portal is served by rbio's transport" log_has "$(served_line "$PORT")"
check "data reads back through it (32 in flight)" io_works
check "the statistics file counts the connection, and none open" wait_for 10 stats_settled
check "requests were batched: at least $MIN_PDUS_PER_RECV PDUs per receive call ($(stat_of pdus_per_recv))" \
  at_least pdus_per_recv "$MIN_PDUS_PER_RECV"
check "responses were coalesced: at least $MIN_PDUS_PER_SEND PDUs per send call ($(stat_of pdus_per_send))" \
  at_least pdus_per_send "$MIN_PDUS_PER_SEND"
check "responses left inline: below $MAX_EPOLL_CTL_PER_PDU epoll_ctl per PDU sent ($(stat_of epoll_ctl_calls) for $(stat_of pdus_out))" \
  epoll_per_pdu below "$MAX_EPOLL_CTL_PER_PDU"
check "a closed connection logged its counters" log_has "connection ended; pdus_in="
# write_in_place (default on; the LUs are bs rbio without O_DIRECT): the
# 4-8 KiB writes, all immediate data, run from the receive buffer.
check "writes were executed from the receive buffer ($(stat_of lent) lent, $(stat_of lend_refused) refused)" \
  at_least lent 1
check "a closed connection logged its lent writes" log_has "lent=[1-9][0-9]* lend_refused="
check "direct commands: at least $MIN_DIRECT_PER_PDU_IN per PDU in ($(stat_of direct_commands) of $(stat_of pdus_in))" \
  direct_per_pdu at_least "$MIN_DIRECT_PER_PDU_IN"

iscsi-perf -t 3 -m 8 "$(url takeover)" >/dev/null 2>&1 & perf=$!
shows_address() { tadm --op show --mode target | grep -q "IP Address: 127.0.0.1"; }
check "tgtadm shows the connection's address" wait_for 10 shows_address
check "two sessions at once (one per LUN) both verify their data" \
  bash -c "'$RW_CHECK' '$(url takeover 1)' --inflight 16 --rounds 1 --seed 1 >/dev/null &
           '$RW_CHECK' '$(url takeover 2)' --inflight 16 --rounds 1 --seed 2 >/dev/null; r=\$?
           wait \$!; exit \$(( r | \$? ))"
rc=0; wait "$perf" || rc=$?
check "iscsi-perf beside them ran its 3 s cleanly (exit $rc)" test "$rc" -eq 0

echo "== header digests (libiscsi offers no data digest; the vm tests cover it)"
tadm --op update --mode target --tid 1 --name HeaderDigest --value CRC32C
check "data reads back with HeaderDigest=CRC32C required by the target" io_works
tadm --op update --mode target --tid 1 --name HeaderDigest --value None

echo "== NOP-In pings on the optimized path"
tadm --op update --mode target --tid 1 --name nop_interval --value 1
tadm --op update --mode target --tid 1 --name nop_count --value 2
check "a session answering NOP-In pings stays up for 4 s of I/O" \
  iscsi-perf -t 4 -m 4 "$(url takeover)"
check "no connection was closed for unanswered pings" log_lacks "NOP-In pings"
# tgt's core frees a ping's NOP-Out reply without sending anything and
# turns sending off, even with a response queued behind it: that response
# waited for the next ping (about 1 s here) until the pass turned it on again.
check "a response queued behind a ping's NOP-Out reply leaves at once (3 rounds, each under 500 ms)" \
  "$RBIO_BUILD_DIR/tests/integration/iscsi_hostile" ping-reply --port "$PORT" \
  --target iqn.2026-11.io.rbio:takeover --wait-ms 500
# A stopped initiator's kernel still acknowledges TCP: only the pings find it.
iscsi-perf -t 60 -m 4 "$(url takeover)" > /dev/null 2>&1 &
stopped=$!
check "the initiator to be stopped is logged in" wait_for 10 shows_address
kill -STOP "$stopped"
check "a stopped initiator's connection ends after 2 unanswered pings" \
  wait_for 10 log_has "no reply to 2 NOP-In pings"
kill -9 "$stopped"
rc=0; wait "$stopped" 2>/dev/null || rc=$?
check "... and it was still there to be killed (status $rc, wanted 137)" test "$rc" -eq 137
tadm --op update --mode target --tid 1 --name nop_interval --value 0

echo "== CHAP accounts set with tgtadm"
tadm --op new --mode account --user rbiouser --password rbio-secret-1
tadm --op bind --mode account --tid 1 --user rbiouser
chap_url() { url takeover | sed "s|iscsi://|iscsi://rbiouser%$1@|"; }
check "login with the right CHAP secret works" iscsi-inq "$(chap_url rbio-secret-1)"
# The reject must reach the initiator before tgt closes the connection.
check "login with a wrong CHAP secret is refused as an authentication failure" \
  bash -c "iscsi-inq '$(chap_url wrong-secret)' 2>&1 | grep -q 'Authentication failure'"
check "login without CHAP is refused as an authentication failure" \
  bash -c "! iscsi-inq '$(url takeover)' > '$WORK/nochap.out' 2>&1 && grep -q 'Authentication failure' '$WORK/nochap.out'"
tadm --op unbind --mode account --tid 1 --user rbiouser
check "tgtd is alive" tgtd_alive

echo "== a portal added with tgtadm is taken over too"
tadm --op new --mode portal --param "portal=127.0.0.1:$PORT2"
check "the new portal is served by rbio's transport (within 10 s)" wait_for 10 log_has "$(served_line "$PORT2")"
check "data reads back through the new portal" \
  "$RW_CHECK" "iscsi://127.0.0.1:$PORT2/iqn.2026-11.io.rbio:takeover/1" --inflight 8 --rounds 1
# Deleted and added back within one tick: tgt's new portal and socket may
# get the old ones' address and number; the takeover must see a new one.
served_count() { grep -c -- "$(served_line "$PORT2")" "$STATE/tgtd.log"; }
tadm --op delete --mode portal --param "portal=127.0.0.1:$PORT2"
tadm --op new --mode portal --param "portal=127.0.0.1:$PORT2"
check "a portal deleted and added back at once is taken over again (within 10 s)" \
  wait_for 10 eval '(( $(served_count) == 2 ))'
check "data reads back through it" \
  "$RW_CHECK" "iscsi://127.0.0.1:$PORT2/iqn.2026-11.io.rbio:takeover/1" --inflight 8 --rounds 1

tgtd_stop >/dev/null
check "tgtd's exit removes the statistics file" test ! -e "$STATS"

echo "== write_in_place = off: every write's data is copied"
printf 'write_in_place = off\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" RBIO_STATS_FILE=$STATS restart
check "data reads back with write_in_place off" io_works
check "the statistics file counts the connection, and none open" wait_for 10 stats_settled
check "no write was lent, none asked for ($(stat_of lent) lent, $(stat_of lend_refused) refused)" \
  test "$(stat_of lent)/$(stat_of lend_refused)" = 0/0

echo "== direct_commands = off: every PDU through tgt's reader and writer"
printf 'direct_commands = off\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" RBIO_STATS_FILE=$STATS restart
check "data reads back with direct_commands off" io_works
check "the statistics file counts the connection, and none open" wait_for 10 stats_settled
check "the control: below $MIN_DIRECT_PER_PDU_IN direct commands per PDU in ($(stat_of direct_commands) of $(stat_of pdus_in))" \
  direct_per_pdu below "$MIN_DIRECT_PER_PDU_IN"

echo "== RBIO_PORTALS limits the takeover to the listed portals"
RBIO_PORTALS="127.0.0.1:$PORT2" RBIO_STATS_FILE=$STATS restart
tadm --op new --mode portal --param "portal=127.0.0.1:$PORT2"
check "the listed portal is served by rbio (within 10 s)" wait_for 10 log_has "$(served_line "$PORT2")"
check "the other portal stays stock" log_lacks "$(served_line "$PORT")"
check "data reads back through the stock portal" io_works

echo "== every optimisation of the transport off, then a tiny receive buffer"
printf 'batch_reads = off\ncoalesce = off\nsend_inline = off\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" RBIO_STATS_FILE=$STATS restart
check "data reads back with batching, coalescing and inline sending off" io_works
check "the statistics file counts the connection, and none open" wait_for 10 stats_settled
# The controls: the thresholds above fail with the optimisations off.
check "without batching: below $MIN_PDUS_PER_RECV PDUs per receive call ($(stat_of pdus_per_recv))" \
  below pdus_per_recv "$MIN_PDUS_PER_RECV"
check "without coalescing: below $MIN_PDUS_PER_SEND PDUs per send call ($(stat_of pdus_per_send))" \
  below pdus_per_send "$MIN_PDUS_PER_SEND"
check "without inline sending: at least $MAX_EPOLL_CTL_PER_PDU epoll_ctl per PDU sent ($(stat_of epoll_ctl_calls) for $(stat_of pdus_out))" \
  epoll_per_pdu at_least "$MAX_EPOLL_CTL_PER_PDU"
printf 'rx_buffer_kib = 16\ndirect_read_kib = 4\nmax_queued_kib = 64\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" restart
check "data reads back through a 16 KiB receive buffer, direct reads from 4 KiB" io_works

echo "== RBIO_TRANSPORT=off keeps tgtd stock"
RBIO_TRANSPORT=off RBIO_STATS_FILE=$STATS restart
check "the log says the transport is off" log_has "rbio: tcp: transport off"
check "no portal is taken over" log_lacks "served by rbio"
check "data reads back through the stock transport" io_works
check "no statistics file is written" test ! -e "$STATS"

echo "== the config file, and the environment overriding it"
printf '# test\ntransport = off\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" restart
check "transport = off in the file keeps tgtd stock" log_has "rbio: tcp: transport off"
RBIO_CONFIG="$WORK/rbio.conf" RBIO_TRANSPORT=on restart
check "RBIO_TRANSPORT=on overrides the file" log_has "$(served_line "$PORT")"
printf 'transport = on\ncoalesce = sometimes\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" restart
check "a bad config file is reported with file, line and key" \
  log_has "bad settings, TCP portals stay with tgt's transport: $WORK/rbio.conf:2: coalesce"
check "and tgtd serves data stock" io_works

echo "== a tgtd the module was not built for stays stock"
cp /usr/sbin/tgtd "$WORK/tgtd-other"
objcopy --remove-section .note.gnu.build-id "$WORK/tgtd-other"
restart --tgtd "$WORK/tgtd-other"
check "the mismatch is logged once" \
  test "$(grep -c "TCP portals stay with tgt's transport" "$STATE/tgtd.log")" -eq 1
check "no portal is taken over" log_lacks "served by rbio"
check "data reads back through the stock transport" io_works
finish
