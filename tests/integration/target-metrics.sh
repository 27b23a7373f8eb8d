#!/usr/bin/env bash
# Live metrics: tgtd with rbio's module writes, once a second, every rbio LU
# and every connection of its transports in Prometheus' text format to
# metrics_file (here RBIO_METRICS_FILE). Read with Prometheus' own parser
# (Debian's python3-prometheus-client): the file parses and follows the
# conventions, the LUs and a connection (labels included, an initiator name
# that needs escaping among them) have values, and counters grow while
# initiators load the LUs; a closed connection's series go; `rbio
# target-metrics` prints the file or says in one line why it cannot; the
# file goes when tgtd exits; with tgt's own transport the LUs still have
# metrics; a bad metrics_file is a log line, not a crash, and a path that
# becomes writable is written.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 80
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
QUERY="$(dirname "$0")/metrics_query.py"
METRICS="$WORK/prom/rbio.prom"   # its folder does not exist yet: tgtd creates it
TARGET=iqn.2026-11.io.rbio:metrics
# An initiator name that needs escaping in a label value (a double quote and
# a backslash; tgt accepts any name with -I ALL).
ODD_INITIATOR='iqn.2026-11.io.rbio:metrics-"quoted"\back'

[[ -x $RBIO ]] || { echo "no $RBIO: build first" >&2; exit 2; }
/usr/bin/python3 -c 'import prometheus_client.parser' 2>/dev/null \
  || skip_test "python3-prometheus-client is not installed (scripts/setup.sh installs it)"
command -v iscsi-perf >/dev/null || skip_test "iscsi-perf (libiscsi-bin) is not installed"

mq() { /usr/bin/python3 "$QUERY" "$METRICS" "$@"; }
value() { mq value "$@"; }
# has NAME [LABEL=VALUE]...: exactly one such sample (quiet: polled).
has() { value "$@" >/dev/null 2>&1; }
# above MIN NAME [LABEL=VALUE]...: the sample's value is larger than MIN
# (quiet, as has: these are polled by wait_for).
above() { local min=$1 v; shift; v=$(value "$@" 2>/dev/null) && (( v > min )); }
# equals N NAME [LABEL=VALUE]...
equals() { local want=$1 v; shift; v=$(value "$@" 2>/dev/null) && (( v == want )); }
parses() { [[ -f $METRICS ]] && mq check >/dev/null; }
# The labels of each LU's series (LU1 is also read by eval'd checks).
# shellcheck disable=SC2034
LU1=("target=$TARGET" lun=1) LU2=("target=$TARGET" lun=2)
setup_luns() {
  new_target 1 metrics
  truncate -s 64M "$WORK/lun1.img" "$WORK/lun2.img"
  new_lun 1 1 "$WORK/lun1.img" rbio
  new_lun 1 2 "$WORK/lun2.img" rbio
}
restart() { tgtd_stop; : > "$STATE/tgtd.log"; tgtd_start >/dev/null; setup_luns; }

echo "== the file, parsed by prometheus_client"
RBIO_METRICS_FILE=$METRICS tgtd_start >/dev/null
setup_luns
check "tgtd logs where the metrics go" log_has "rbio: metrics: written once a second to $METRICS"
check "the file appears (its missing folder created) and parses" wait_for 10 parses
# tgtd wrote it once at start, before the LUs were added: they come with a
# later tick.
check "both LUs appear with their size" wait_for 10 \
  eval 'equals $((64 << 20)) rbio_lu_size_bytes "${LU1[@]}" && equals $((64 << 20)) rbio_lu_size_bytes "${LU2[@]}"'
info_of_lu1() {
  local l; l=$(mq labels rbio_lu_info "${LU1[@]}") &&
  grep -qx "backing_store=rbio" <<< "$l" && grep -qxF "path=$WORK/lun1.img" <<< "$l"
}
check "LU 1's info names its backing store and file" info_of_lu1
check "it follows the conventions: rbio_*, typed, with help, counters in _total, no duplicates" \
  eval 'n=$(mq check) && echo "  $n samples" && (( n > 4 ))'
check "build info names the tgt version" eval 'grep -q "^tgt_version=." <<< "$(mq labels rbio_build_info)"'
check "build info names rbio's version ($RBIO_VERSION)" equals 1 rbio_build_info "version=$RBIO_VERSION"
check "no connection is open yet" equals 0 rbio_open_connections transport=tcp
check "the file is readable by node_exporter's user (0644)" test "$(stat -c %a "$METRICS")" = 644
check "no temporary file is left next to it" test ! -e "$METRICS.tmp"

echo "== values of an LU after writes and reads"
check "data written reads back through rbio's transport" \
  "$RW_CHECK" "$(url metrics 1)" --inflight 16 --rounds 1 >/dev/null
check "LU 1 counted writes and their bytes" wait_for 5 \
  eval 'above 0 rbio_lu_writes_total "${LU1[@]}" && above 0 rbio_lu_written_bytes_total "${LU1[@]}"'
check "LU 1 counted reads, bytes and commands" wait_for 5 \
  eval 'above 0 rbio_lu_read_bytes_total "${LU1[@]}" && above 0 rbio_lu_commands_total "${LU1[@]}"'
check "LU 2, untouched, counted nothing" equals 0 rbio_lu_commands_total "${LU2[@]}"
check "the connection was counted as accepted" wait_for 5 above 0 rbio_connections_accepted_total

echo "== a connection under load: labels, and counters that grow"
iscsi-perf -i "$ODD_INITIATOR" -t 120 -m 8 "$(url metrics 2)" >/dev/null 2>&1 & perf=$!
conn=(transport=tcp "target=$TARGET" "initiator=$ODD_INITIATOR" "portal=127.0.0.1:$PORT")
check "the loading connection appears with its labels (the initiator name escaped and back)" \
  wait_for 15 has rbio_connection_received_pdus_total "${conn[@]}"
check "one connection is open" equals 1 rbio_open_connections transport=tcp
peer_label() { local l; l=$(mq labels rbio_connection_sent_bytes_total "${conn[@]}") && grep -qE '^peer=127\.0\.0\.1:[0-9]+$' <<< "$l"; }
check "its peer label is the initiator's address and port" peer_label
pdus=$(value rbio_connection_received_pdus_total "${conn[@]}")
sent=$(value rbio_connection_sent_bytes_total "${conn[@]}")
reads=$(value rbio_lu_read_bytes_total "${LU2[@]}")
echo "  first read: $pdus PDUs received, $sent bytes sent, LU 2 $reads bytes read"
check "PDUs received grow between two reads" wait_for 10 above "$pdus" rbio_connection_received_pdus_total "${conn[@]}"
check "bytes sent grow" wait_for 10 above "$sent" rbio_connection_sent_bytes_total "${conn[@]}"
check "LU 2's bytes read grow" wait_for 10 above "$reads" rbio_lu_read_bytes_total "${LU2[@]}"
check "the TCP-only counters are there, the RDMA ones are not" \
  eval 'above 0 rbio_connection_receive_calls_total "${conn[@]}" &&
        [[ $(mq count rbio_connection_rdma_completions_total transport=tcp) == 0 ]]'
# iscsi-perf's READs are taken past tgt's reader and writer (direct_commands).
check "direct commands are counted on TCP too" above 0 rbio_connection_direct_commands_total "${conn[@]}"
check "the file still parses under load" eval 'mq check >/dev/null'
kill "$perf"   # iscsi-perf ends cleanly on SIGTERM; an error before would show in its status
rc=0; wait "$perf" || rc=$?
check "iscsi-perf loaded the LU without an error until stopped (status $rc)" test "$rc" = 0
check "the closed connection's series go" \
  wait_for 10 eval '[[ $(mq count rbio_connection_received_pdus_total "initiator=$ODD_INITIATOR") == 0 ]]'
check "no connection is open any more" equals 0 rbio_open_connections transport=tcp

echo "== rbio target-metrics"
# shellcheck disable=SC2034  # out is read by the eval'd checks below
out="$WORK/cli.out" err="$WORK/cli.err"
check "prints the file RBIO_METRICS_FILE names" \
  eval 'RBIO_METRICS_FILE=$METRICS "$RBIO" target-metrics > "$out" && grep -q "^rbio_lu_commands_total{" "$out"'
check "what it prints parses" eval '/usr/bin/python3 "$QUERY" - check < "$out" >/dev/null'
check "--file names the file" \
  eval '"$RBIO" target-metrics --file "$METRICS" > "$out" && grep -q "^# TYPE rbio_lu_reads_total counter" "$out"'
printf 'metrics_file = %s\n' "$METRICS" > "$WORK/tgtd.conf"
check "... and metrics_file of the config file" \
  eval 'RBIO_CONFIG=$WORK/tgtd.conf "$RBIO" target-metrics > "$out" && grep -q "^rbio_build_info" "$out"'
# cli_fails CODE WHAT [ENV...] -- ARGS...: exit CODE and one line on stderr naming WHAT.
cli_fails() {
  local code=$1 what=$2 rc=0; shift 2
  env "$@" > /dev/null 2> "$err" || rc=$?
  (( rc == code )) && [[ $(wc -l < "$err") == 1 ]] && grep -qF -- "$what" "$err" \
    || { echo "  exit $rc: $(cat "$err")"; return 1; }
}
: > "$WORK/empty.conf"
check "no metrics_file anywhere: one line, exit 14" \
  cli_fails 14 "metrics_file is not set in $WORK/empty.conf" -u RBIO_METRICS_FILE RBIO_CONFIG="$WORK/empty.conf" "$RBIO" target-metrics
check "no file there: one line naming it, exit 14" \
  cli_fails 14 "no metrics in $WORK/none.prom: No such file or directory" "$RBIO" target-metrics --file "$WORK/none.prom"
: > "$WORK/empty.prom"
check "an empty file: exit 14" cli_fails 14 "the file is empty" "$RBIO" target-metrics --file "$WORK/empty.prom"
cp "$METRICS" "$WORK/old.prom" && touch -d '-1 min' "$WORK/old.prom"
check "a file not rewritten for a minute is printed with a warning" \
  eval '"$RBIO" target-metrics --file "$WORK/old.prom" > "$out" 2> "$err" &&
        grep -q "^rbio_build_info" "$out" && grep -q "was last written 6[0-9] s ago: has tgtd stopped" "$err"'
check "a relative metrics_file: the config error, exit 14" \
  cli_fails 14 "environment RBIO_METRICS_FILE: metrics_file: 'x.prom' is not an absolute path" \
  RBIO_CONFIG="$WORK/empty.conf" RBIO_METRICS_FILE=x.prom "$RBIO" target-metrics

echo "== two tgtds of one box (docs/several-gateways.md)"
A_STATE=$STATE A_CTL=$CTL A_PORT=$PORT
B_CTL=$((A_CTL + 1))
check "every sample names the tgtd by its control port ($A_CTL)" \
  eval '[[ $(mq count rbio_lu_size_bytes "control_port=$A_CTL") == 2 && $(mq count rbio_connections_accepted_total "control_port=$A_CTL") == 1 ]]'
# The second tgtd reads the same settings: the same metrics_file.
tgt_gateway b "$B_CTL" $((A_PORT + 1))
RBIO_METRICS_FILE=$METRICS tgtd_start >/dev/null
check "a second tgtd on the same metrics_file does not write it: a log line naming the lock" \
  wait_for 10 log_has "rbio: metrics: cannot write them: $METRICS: another process writes this file (it holds $METRICS.lock)"
check "... the first tgtd's file keeps its LUs, with its own control port" \
  eval '[[ $(mq count rbio_build_info "control_port=$B_CTL") == 0 ]] && has rbio_lu_size_bytes "${LU1[@]}" "control_port=$A_CTL"'
tgtd_stop
check "the second tgtd's exit leaves the first's file" parses
: > "$STATE/tgtd.log"
printf 'metrics_file = %s\n' "$WORK/prom/rbio-%c.prom" > "$WORK/percent-c.conf"
RBIO_CONFIG=$WORK/percent-c.conf tgtd_start >/dev/null
B_METRICS="$WORK/prom/rbio-$B_CTL.prom"
check "metrics_file with %c: the second tgtd writes its own file ($B_METRICS)" \
  wait_for 10 eval 'METRICS=$B_METRICS has rbio_build_info "control_port=$B_CTL"'
check "rbio target-metrics --control-port $B_CTL prints that file" \
  eval 'RBIO_CONFIG=$WORK/percent-c.conf "$RBIO" target-metrics --control-port "$B_CTL" > "$out" &&
        grep -q "^rbio_build_info{control_port=\"$B_CTL\"" "$out"'
check "... and refuses --control-port with --file" \
  cli_fails 2 "not with --file" "$RBIO" target-metrics --file "$B_METRICS" --control-port 1
tgtd_stop
check "its file goes with it" test ! -e "$B_METRICS"
STATE=$A_STATE CTL=$A_CTL PORT=$A_PORT

echo "== tgtd exits: the file goes"
tgtd_stop
check "the metrics file is removed with tgtd" test ! -e "$METRICS"

echo "== tgt's own TCP transport: the LUs still have metrics"
: > "$STATE/tgtd.log"
RBIO_TRANSPORT=off RBIO_METRICS_FILE=$METRICS tgtd_start >/dev/null
setup_luns
check "the file appears with the transport off" wait_for 10 parses
check "data reads back through tgt's transport" "$RW_CHECK" "$(url metrics 2)" --inflight 8 --rounds 1 >/dev/null
check "LU 2 counted the writes" wait_for 10 above 0 rbio_lu_written_bytes_total "${LU2[@]}"
check "no connection of rbio's transport was counted" equals 0 rbio_connections_accepted_total

echo "== bad metrics_file settings"
tgtd_stop
: > "$STATE/tgtd.log"
RBIO_METRICS_FILE=relative.prom tgtd_start >/dev/null
setup_luns
check "a relative path is a log line naming it" \
  log_has "rbio: metrics: bad setting, no metrics file: environment RBIO_METRICS_FILE: metrics_file: 'relative.prom' is not an absolute path"
check "tgtd serves on, through rbio's transport" \
  eval 'log_has "served by rbio'"'"'s transport" && "$RW_CHECK" "$(url metrics 1)" --inflight 8 --rounds 1 >/dev/null'

tgtd_stop
: > "$STATE/tgtd.log"
LATE="$WORK/late/sub/rbio.prom"   # two folders missing: only the last is created
RBIO_METRICS_FILE=$LATE tgtd_start >/dev/null
setup_luns
check "an unwritable path is a log line naming it" \
  wait_for 10 log_has "rbio: metrics: cannot write them: $LATE.lock: No such file or directory"
check "tgtd serves on" eval 'tgtd_alive && "$RW_CHECK" "$(url metrics 1)" --inflight 8 --rounds 1 >/dev/null'
mkdir "$WORK/late"
check "once the path can be written, it is, and the log says so" \
  wait_for 10 eval 'log_has "rbio: metrics: written to $LATE again" && METRICS=$LATE parses'
check "the failure was logged once, not every second" test "$(grep -c "cannot write them" "$STATE/tgtd.log")" = 1

finish
