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
# stats_settle: the file is rewritten when a connection ends and once a second
stats_settle() { sleep 1.3; }

echo "== default: the transport takes over"
RBIO_STATS_FILE=$STATS tgtd_start >/dev/null
setup_lun
check "the portal is served by rbio's transport" log_has "$(served_line "$PORT")"
check "data reads back through it (32 in flight)" io_works
stats_settle
check "the statistics file counts the connection" test "$(stat_of connections_total)" -ge 1
check "no connection is left open" test "$(stat_of connections_open)" -eq 0
check "requests were batched: more than one PDU per receive call" \
  awk -v v="$(stat_of pdus_per_recv)" 'BEGIN { exit !(v > 1.0) }'
check "responses were coalesced: more than one PDU per send call" \
  awk -v v="$(stat_of pdus_per_send)" 'BEGIN { exit !(v > 1.0) }'
check "a closed connection logged its counters" log_has "connection ended; pdus_in="

iscsi-perf -t 3 -m 8 "$(url takeover)" >/dev/null 2>&1 & perf=$!
sleep 1.5
check "tgtadm shows the connection's address" \
  grep -q "IP Address: 127.0.0.1" <<<"$(tadm --op show --mode target)"
check "two sessions at once (one per LUN) both verify their data" \
  bash -c "'$RW_CHECK' '$(url takeover 1)' --inflight 16 --rounds 1 --seed 1 >/dev/null &
           '$RW_CHECK' '$(url takeover 2)' --inflight 16 --rounds 1 --seed 2 >/dev/null; r=\$?
           wait \$!; exit \$(( r | \$? ))"
wait "$perf" || true

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
# A stopped initiator's kernel still acknowledges TCP: only the pings find it.
iscsi-perf -t 60 -m 4 "$(url takeover)" > /dev/null 2>&1 &
stopped=$!
sleep 2  # logged in and reading
kill -STOP "$stopped"
check "a stopped initiator's connection ends after 2 unanswered pings" \
  wait_for 10 log_has "no reply to 2 NOP-In pings"
kill -9 "$stopped"; wait "$stopped" 2>/dev/null || true
tadm --op update --mode target --tid 1 --name nop_interval --value 0

echo "== CHAP accounts set with tgtadm"
tadm --op new --mode account --user rbiouser --password rbio-secret-1
tadm --op bind --mode account --tid 1 --user rbiouser
chap_url() { url takeover | sed "s|iscsi://|iscsi://rbiouser%$1@|"; }
check "login with the right CHAP secret works" iscsi-inq "$(chap_url rbio-secret-1)"
# The reject must reach the initiator before tgt closes the connection.
check "login with a wrong CHAP secret is refused as an authentication failure" \
  bash -c "iscsi-inq '$(chap_url wrong-secret)' 2>&1 | grep -q 'Authentication failure'"
check "login without CHAP is refused" bash -c "! iscsi-inq '$(url takeover)' 2>/dev/null"
tadm --op unbind --mode account --tid 1 --user rbiouser
check "tgtd is alive" tgtd_alive

echo "== a portal added with tgtadm is taken over too"
tadm --op new --mode portal --param "portal=127.0.0.1:$PORT2"
sleep 2.2
check "the new portal is served by rbio's transport" log_has "$(served_line "$PORT2")"
check "data reads back through the new portal" \
  "$RW_CHECK" "iscsi://127.0.0.1:$PORT2/iqn.2026-11.io.rbio:takeover/1" --inflight 8 --rounds 1

tgtd_stop >/dev/null
check "tgtd's exit removes the statistics file" test ! -e "$STATS"

echo "== RBIO_PORTALS limits the takeover to the listed portals"
RBIO_PORTALS="127.0.0.1:$PORT2" RBIO_STATS_FILE=$STATS restart
tadm --op new --mode portal --param "portal=127.0.0.1:$PORT2"
sleep 2.2
check "the listed portal is served by rbio" log_has "$(served_line "$PORT2")"
check "the other portal stays stock" log_lacks "$(served_line "$PORT")"
check "data reads back through the stock portal" io_works

echo "== every optimisation of the transport off, then a tiny receive buffer"
printf 'batch_reads = off\ncoalesce = off\nsend_inline = off\n' > "$WORK/rbio.conf"
RBIO_CONFIG="$WORK/rbio.conf" RBIO_STATS_FILE=$STATS restart
check "data reads back with batching, coalescing and inline sending off" io_works
stats_settle
check "without batching a receive call brings at most one PDU" \
  awk -v v="$(stat_of pdus_per_recv)" 'BEGIN { exit !(v > 0 && v <= 1.0) }'
check "without coalescing a send call carries at most one PDU" \
  awk -v v="$(stat_of pdus_per_send)" 'BEGIN { exit !(v > 0 && v <= 1.0) }'
check "without inline sending every response waits for EPOLLOUT" \
  test "$(stat_of epoll_ctl_calls)" -gt 100
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
