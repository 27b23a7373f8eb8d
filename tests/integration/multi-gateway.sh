#!/usr/bin/env bash
# Several gateways, one LU: tgtds with bs_rbio.so export the same backing
# file with the same identity, each as its own ALUA target port group, the
# states shared through one groups file. Checks what a host relies on:
# one identity, per-gateway port designators, REPORT TARGET PORT GROUPS,
# standby refusing I/O, a unit attention when states change, a write
# acknowledged by one gateway read back through another, bad ALUA settings
# that change nothing, and no acknowledged write lost when a gateway is
# killed mid-write, then both, and one comes back.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
tgt_test_init 60
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
[[ -x $PROBE ]] || { echo "no $PROBE: build first" >&2; exit 2; }

source "$(dirname "$0")/../lib/gateways.sh"
gateways_init
probe() { local g=$1; shift; "$PROBE" "$(gw_url "$g")" "$@"; }

writer="" LOOP=""
multi_gateway_cleanup() {
  local rc=$?
  if [[ -n $writer ]]; then kill "$writer" 2>/dev/null || true; fi
  gateways_stop "$rc" || rc=1
  if [[ -n $LOOP ]]; then losetup -d "$LOOP" || true; fi
  tgt_test_cleanup "$rc"
}
trap multi_gateway_cleanup EXIT

# answers G WANT ARGS...: the probe's one-line answer on gateway G is WANT.
answers() {
  local g=$1 want=$2 got; shift 2
  got=$(probe "$g" "$@") || return 1
  [[ $got == "$want" ]] || { echo "  gateway $g answered '$got', expected '$want'" >&2; return 1; }
}
# supported_opcodes G: the opcodes REPORT SUPPORTED OPERATION CODES (all
# commands) lists on gateway G, one per line.
supported_opcodes() {
  local out hex i
  out=$(probe "$1" cdb a30c00000000000020000000 8192 --hex) || return 1
  [[ $out == "GOOD "* ]] || return 1
  hex=${out#GOOD }
  for ((i = 8; i + 16 <= ${#hex}; i += 16)); do echo "${hex:i:2}"; done
}
lists_only_what_runs() {
  local listed op
  listed=$(supported_opcodes "$1" | tr '\n' ' ') || return 1
  for op in 28 2a; do
    [[ " $listed" == *" $op "* ]] || { echo "  $op is not listed: $listed" >&2; return 1; }
  done
  for op in 15 55 16 17 56 57 5e 5f 89 8b; do
    [[ " $listed" != *" $op "* ]] || { echo "  $op is listed: $listed" >&2; return 1; }
  done
}
READ10=28000000000000000100
TUR=000000000000
PR_IN=5e0000000000000010
RESERVE6=160000000000
# MODE SELECT(10), PF, 28 bytes: an 8-byte header, then the caching page
# (08h, 18 bytes) with WCE off.
MODE_SELECT10=55100000000000001c00
CACHING_WCE0=00000000000000000812000000000000000000000000000000000000
# rtpg_is G LINES...: gateway G's REPORT TARGET PORT GROUPS lists exactly these groups.
rtpg_is() {
  local g=$1 got; shift
  got=$(probe "$g" rtpg) && [[ $got == "$(printf '%s\n' "$@")" ]]
}

# metric_is G SAMPLE: gateway G's metrics file holds this sample line
# (quiet: polled by wait_for; the file is rewritten every second).
# SAMPLE without the control_port label every sample carries first.
metric_is() {
  local sample
  sample="${2%%\{*}{control_port=\"$(gw_ctl "$1")\",${2#*\{}"
  grep -qxF -- "$sample" "$(gw_state "$1")/rbio.prom" 2>/dev/null
}
prom() { echo "RBIO_METRICS_FILE=$(gw_state "$1")/rbio.prom"; }
port_state() { echo "rbio_alua_port_state{port_group=\"$1\",state=\"$2\",groups_file=\"$GROUPS_FILE\"} 1"; }
group_state() { echo "rbio_alua_group_state{group=\"$1\",state=\"$2\",groups_file=\"$GROUPS_FILE\"} 1"; }
file_ok() { echo "rbio_alua_groups_file_ok{groups_file=\"$GROUPS_FILE\"} $1"; }

set_groups "1 active/optimized" "2 standby"
must_start "gateway 1 (port group 1) starts and exports the LU" eval 'gw_start 1 "$(prom 1)" && gw_export 1'
# Gateway 2 is configured as docs/several-gateways.md shows: targets.conf.
cat > "$WORK/targets.conf" <<CONF
<target iqn.2026-11.io.rbio:mp>
    <backing-store $LU_FILE>
        bs-type rbio
        scsi_id $SCSI_ID
        scsi_sn $SCSI_SN
    </backing-store>
    allow-in-use yes
    initiator-address ALL
</target>
CONF
must_start "gateway 2 (port group 2) starts and exports the same LU from targets.conf" \
  eval 'gw_start 2 "$(prom 2)" && tgt-admin -C "$(gw_ctl 2)" -c "$WORK/targets.conf" -e'
check "gateway 2's metrics: its port group standby, its copy of the groups file in use" \
  wait_for 10 eval 'metric_is 2 "$(port_state 2 standby)" && metric_is 2 "$(file_ok 1)"'
check "... and every group of its copy" \
  eval 'metric_is 2 "$(group_state 1 active/optimized)" && metric_is 2 "$(group_state 2 standby)"'
check "tgt-admin gave it tid 1, LUN 1" eval 'gw_adm 2 --op show --mode target | grep -q "^Target 1: iqn.2026-11.io.rbio:mp" &&
  gw_adm 2 --op show --mode target | grep -q "LUN: 1"'
check "gateway 1 logs its ALUA state" gw_log_has 1 "rbio: alua: on, port group 1: active/optimized"

# --- one identity, two target ports -----------------------------------------
for g in 1 2; do
  check "gateway $g: INQUIRY reports implicit ALUA (TPGS=1)" \
    eval "probe $g inquiry | grep -q '^tpgs=1 '"
done
# shellcheck disable=SC2034  # read by the eval'd check below
serial1=$(probe 1 serial) serial2=$(probe 2 serial)
check "both gateways report the serial number set by scsi_sn" \
  eval '[[ ${serial1// /} == "$SCSI_SN" && "$serial1" == "$serial2" ]]'
# shellcheck disable=SC2034  # read by the eval'd check below
lu1=$(probe 1 designators | grep '^lu ') lu2=$(probe 2 designators | grep '^lu ')
check "both gateways report the same LU designators (T10 vendor id and NAA)" \
  eval '[[ -n $lu1 && "$lu1" == "$lu2" && $(grep -c "^lu 3 " <<<"$lu1") == 2 ]]'
check "the NAA IEEE registered extended designator comes from scsi_id" \
  grep -q "^lu 3 6[0-9a-f]*${SCSI_ID#6}$" <<<"$lu1"
check "gateway 1's port designators: relative target port 1, target port group 1" \
  eval '[[ $(probe 1 designators | grep "^port ") == $'"'"'port 4 00000001\nport 5 00000001'"'"' ]]'
check "gateway 2's port designators: relative target port 2, target port group 2" \
  eval '[[ $(probe 2 designators | grep "^port ") == $'"'"'port 4 00000002\nport 5 00000002'"'"' ]]'

# --- states --------------------------------------------------------------------
for g in 1 2; do
  check "gateway $g: REPORT TARGET PORT GROUPS lists group 1 active/optimized, group 2 standby" \
    rtpg_is "$g" "group 1 active/optimized ports 1" "group 2 standby ports 2"
done
check "the extended RTPG header carries the implicit transition time" \
  eval 'probe 2 rtpg --extended | grep -qx "transition_time=10"'
check "gateway 1 (active/optimized) serves READ" answers 1 GOOD cdb "$READ10" 512
check "gateway 2 (standby) fails READ with NOT READY 04/0B" answers 2 "CHECK key=2 asc=040b" cdb "$READ10" 512
check "gateway 2 (standby) fails TEST UNIT READY with NOT READY 04/0B" answers 2 "CHECK key=2 asc=040b" cdb "$TUR"
check "gateway 2 (standby) still answers MODE SENSE" answers 2 GOOD cdb 1a003f00ff00 255
# A host that finds the LU through the standby port first must learn its size.
check "gateway 2 (standby) answers READ CAPACITY(10)" answers 2 GOOD cdb 25000000000000000000 8
check "gateway 2 (standby) answers READ CAPACITY(16)" answers 2 GOOD cdb 9e100000000000000000000000200000 32
check "gateway 2 (standby) fails GET LBA STATUS, another SERVICE ACTION IN(16), with 04/0B" \
  answers 2 "CHECK key=2 asc=040b" cdb 9e120000000000000000000000200000 32
for g in 1 2; do
  check "gateway $g refuses PERSISTENT RESERVE IN on a multi-gateway LU (20/00)" \
    answers "$g" "CHECK key=5 asc=2000" cdb "$PR_IN" 16
  check "gateway $g refuses RESERVE(6) on a multi-gateway LU (20/00)" \
    answers "$g" "CHECK key=5 asc=2000" cdb "$RESERVE6"
  # WCE=0 (write-through) in the caching page: it would hold on this gateway only.
  check "gateway $g refuses MODE SELECT(10) on a multi-gateway LU (20/00)" \
    answers "$g" "CHECK key=5 asc=2000" cdb-out "$MODE_SELECT10" "$CACHING_WCE0"
  check "gateway $g's REPORT SUPPORTED OPERATION CODES lists READ and WRITE, no reservation, MODE SELECT, ORWRITE or COMPARE AND WRITE" \
    lists_only_what_runs "$g"
done

# A state change reaches hosts as a unit attention on their live sessions.
for g in 1 2; do
  "$PROBE" "$(gw_url "$g")" wait-ua 2a06 20 > "$WORK/ua$g.out" 2>&1 &
  eval "ua_pid$g=$!"
done
check "both watchers hold a session" wait_for 15 eval 'grep -qsx ready "$WORK/ua1.out" && grep -qsx ready "$WORK/ua2.out"'
set_groups "1 standby" "2 active/optimized"
# shellcheck disable=SC2154  # set by the eval above
check "gateway 1's session gets ASYMMETRIC ACCESS STATE CHANGED (2A/06)" wait "$ua_pid1"
# shellcheck disable=SC2154  # set by the eval above
check "gateway 2's session gets ASYMMETRIC ACCESS STATE CHANGED (2A/06)" wait "$ua_pid2"
check "gateway 2 logs the change" gw_log_has 2 "rbio: alua: states changed, unit attention raised: port group 2: active/optimized"
check "gateway 2 (now active/optimized) serves READ" answers 2 GOOD cdb "$READ10" 512
check "gateway 1 (now standby) fails READ with 04/0B" answers 1 "CHECK key=2 asc=040b" cdb "$READ10" 512
check "gateway 1's metrics say standby" wait_for 10 metric_is 1 "$(port_state 1 standby)"
# Changes while a host's path is idle: one unit attention, not one per
# change, which the host would get one command at a time.
"$PROBE" "$(gw_url 1)" count-ua 2a06 "$WORK/ua-go" 60 > "$WORK/ua-count.out" 2>&1 &
# shellcheck disable=SC2034  # read by the eval'd check below
ua_count_pid=$!
check "an idle session on gateway 1" wait_for 15 grep -qsx ready "$WORK/ua-count.out"
changes_count() { grep -c "rbio: alua: states changed" "$(gw_state 1)/tgtd.log"; }
changes_logged() { [[ $(changes_count) == "$1" ]]; }
changes=$(changes_count)
set_groups "1 unavailable" "2 active/optimized"
check "a change while it is idle" wait_for 10 changes_logged $((changes + 1))
set_groups "1 standby" "2 active/optimized"
check "... and another" wait_for 10 changes_logged $((changes + 2))
touch "$WORK/ua-go"
check "... reach it as one ASYMMETRIC ACCESS STATE CHANGED" \
  eval 'wait "$ua_count_pid" && grep -qx "ua=1" "$WORK/ua-count.out"'
set_groups "1 unavailable" "2 active/non-optimized"
check "unavailable: gateway 1 fails READ with NOT READY 04/0C" \
  wait_for 10 answers 1 "CHECK key=2 asc=040c" cdb "$READ10" 512
check "active/non-optimized: gateway 2 serves READ" answers 2 GOOD cdb "$READ10" 512
set_groups "1 transitioning" "2 active/optimized"
check "transitioning: gateway 1 fails READ with NOT READY 04/0A" \
  wait_for 10 answers 1 "CHECK key=2 asc=040a" cdb "$READ10" 512

# --- read-after-write across gateways -------------------------------------------
set_groups "1 active/optimized" "2 active/optimized"
check "both gateways become active/optimized" wait_for 10 eval \
  'rtpg_is 1 "group 1 active/optimized ports 1" "group 2 active/optimized ports 2" &&
   rtpg_is 2 "group 1 active/optimized ports 1" "group 2 active/optimized ports 2"'
check "64 blocks written through gateway 1" probe 1 write 1000 64 7
check "... read back at once through gateway 2" probe 2 verify 1000 64 7
check "64 blocks overwritten through gateway 2" probe 2 write 1000 64 8
check "... read back at once through gateway 1" probe 1 verify 1000 64 8
check "(the verifier fails on data that was not written)" eval '! probe 1 verify 1000 64 9 2>/dev/null'

# --- bad ALUA settings change nothing ----------------------------------------------
set_groups "1 active/optimized" "2 sleeping"
check "an unknown state: one log line naming it" wait_for 10 gw_log_has 2 "unknown state 'sleeping'"
check "... and gateway 2 keeps serving as active/optimized" answers 2 GOOD cdb "$READ10" 512
check "... its metrics say the file is not in use and the state is kept" \
  wait_for 10 eval 'metric_is 2 "$(file_ok 0)" && metric_is 2 "$(port_state 2 active/optimized)"'
set_groups "1 active/optimized" "70000 standby"
check "a port group out of range: one log line" wait_for 10 gw_log_has 2 "port group '70000' is not a number from 1 to 65535"
set_groups "3 standby"
check "a file without this gateway's group: one log line" wait_for 10 gw_log_has 2 "does not list this gateway's port group 2"
check "... and the states are kept" \
  rtpg_is 2 "group 1 active/optimized ports 1" "group 2 active/optimized ports 2"
rm -f "$GROUPS_FILE"
check "a missing groups file: one log line" wait_for 10 gw_log_has 1 "alua-groups: No such file or directory"
check "... and gateway 1 keeps serving" answers 1 GOOD cdb "$READ10" 512
logged_once() { [[ $(grep -c "$1" "$(gw_state 2)/tgtd.log") == 1 ]] || { echo "  not once: $1"; return 1; }; }
check "each bad version is logged once" eval 'logged_once "unknown state .sleeping." &&
  logged_once "port group .70000. is not a number" && logged_once "does not list this gateway.s port group 2"'
check "tgtd keeps running through all of it" eval 'kill -0 $(cat "$(gw_state 1)/tgtd.pid") && kill -0 $(cat "$(gw_state 2)/tgtd.pid")'
set_groups "1 active/optimized" "2 active/optimized"
check "a good groups file again: in use on both gateways" \
  wait_for 10 eval 'metric_is 1 "$(file_ok 1)" && metric_is 2 "$(file_ok 1)"'

# --- a groups file whose file system stops answering -------------------------------
# An NFS server gone (hard mount) or a CephFS MDS failing over blocks open()
# on the file; a FIFO without a writer blocks open() the same way. The read
# waits in a thread of its own: tgtd goes on serving. (Gateway 3, with a
# file of its own, so that the FIFO has one reader.)
G3_GROUPS="$WORK/alua-groups-3"
printf '3 active/optimized\n' > "$G3_GROUPS"
must_start "gateway 3 starts on a groups file of its own and exports the LU" \
  eval 'gw_start 3 RBIO_ALUA_GROUPS="$G3_GROUPS" "$(prom 3)" && gw_export 3'
g3_file_ok() { metric_is 3 "rbio_alua_groups_file_ok{groups_file=\"$G3_GROUPS\"} $1"; }
check "gateway 3 uses its groups file" wait_for 10 g3_file_ok 1
mkfifo "$WORK/groups.fifo"
ln "$WORK/groups.fifo" "$G3_GROUPS.new" && mv "$G3_GROUPS.new" "$G3_GROUPS"
check "gateway 3 logs a read of the groups file that does not return" \
  wait_for 15 gw_log_has 3 "alua-groups-3: a read has not returned for [56] s (is its file system answering?); port group 3 stays active/optimized"
check "... its metrics say the file is not in use" wait_for 5 g3_file_ok 0
# With the read on tgtd's event loop, this READ would wait for the file.
check "... and it serves READ meanwhile" \
  eval '[[ $(timeout 10 "$PROBE" "$(gw_url 3)" cdb "$READ10" 512) == GOOD ]]'
check "... and answers tgtadm" timeout 10 tgtadm -C "$(gw_ctl 3)" --lld iscsi --op show --mode target
# The file system answers again: the regular file back, and a writer lets
# the waiting read return, with the same version of the file.
printf '3 active/optimized\n' > "$G3_GROUPS.new" && mv "$G3_GROUPS.new" "$G3_GROUPS"
timeout 10 sh -c 'printf "3 active/optimized\n" > "$1"' sh "$WORK/groups.fifo"
check "gateway 3 logs that the groups file answers again" \
  wait_for 10 gw_log_has 3 "alua-groups-3 answers again; port group 3 stays active/optimized"
check "... and uses it again" wait_for 10 g3_file_ok 1
"$SANDBOX" stop "$(gw_state 3)"
rm -f "$WORK/groups.fifo"

# A gateway that starts on a bad groups file says so at once (and once), not
# only when the file next changes.
printf '3 sleeping\n' > "$WORK/bad-groups"
check "a gateway started on a groups file with an unknown state starts" \
  gw_start 3 RBIO_ALUA_GROUPS="$WORK/bad-groups"
check "... and logs what is wrong with the file" gw_log_has 3 "unknown state 'sleeping' (known: .*); port group 3 stays transitioning"
"$SANDBOX" stop "$(gw_state 3)"

# A gateway whose own settings are wrong keeps running but refuses rbio LUs:
# serving one without knowing its port group would mislead hosts.
check "a gateway with RBIO_PORT_GROUP=abc starts" gw_start 3 RBIO_PORT_GROUP=abc
check "... logs why" gw_log_has 3 "rbio: alua: the ALUA settings cannot be read, so rbio LUs are refused"
rbio_lu_refused() {
  gw_adm 3 --op new --mode target --tid 1 -T iqn.2026-11.io.rbio:mp &&
    gw_adm 3 --op bind --mode target --tid 1 -I ALL || return 1
  if gw_adm 3 --op new --mode logicalunit --tid 1 --lun 1 -b "$LU_FILE" --bstype rbio 2>/dev/null; then
    return 1
  fi
}
check "... refuses an rbio LU" rbio_lu_refused
check "... and serves an rdwr LU" eval 'gw_adm 3 --op new --mode logicalunit --tid 1 --lun 2 -b "$LU_FILE" --bstype rdwr &&
  "$PROBE" "iscsi://127.0.0.1:$(gw_port 3)/iqn.2026-11.io.rbio:mp/2" inquiry >/dev/null'
"$SANDBOX" stop "$(gw_state 3)"

# Page caches are per box: a block device (which other boxes may reach too)
# is shared by gateways only with O_DIRECT.
LOOP=$(losetup --find --show "$LU_FILE")
check "an ALUA LU on a block device without O_DIRECT is refused" \
  eval '! gw_adm 1 --op new --mode logicalunit --tid 1 --lun 2 -b "$LOOP" --bstype rbio 2>/dev/null'
check "... with the reason in the log" gw_log_has 1 "a block device served by several gateways needs O_DIRECT"
check "... and accepted with bsoflags direct" \
  gw_adm 1 --op new --mode logicalunit --tid 1 --lun 2 -b "$LOOP" --bstype rbio --bsoflags direct
check "... where it serves I/O" eval 'probe_lun2() { "$PROBE" "iscsi://127.0.0.1:$(gw_port 1)/iqn.2026-11.io.rbio:mp/2" "$@"; };
  probe_lun2 write 5000 16 3 && probe_lun2 verify 5000 16 3'
gw_adm 1 --op delete --mode logicalunit --tid 1 --lun 2
losetup -d "$LOOP" && LOOP=""

# --- a gateway killed mid-write, then both, then one back ---------------------------
ACKED="$WORK/acked"
: > "$ACKED"
probe 1 write-log 20000 60000 "$ACKED" 2> "$WORK/writer.err" &
writer=$!
check "the writer has writes acknowledged through gateway 1" wait_for 30 eval '(( $(wc -l < "$ACKED") >= 300 ))'
kill_tgtd "$(gw_state 1)"
check "the writer stops when gateway 1 dies" wait_for 30 eval '! kill -0 "$writer" 2>/dev/null'
check "... with a failure (nonzero exit)" eval '! wait "$writer"'
writer=""  # reaped: the cleanup must not signal a recycled pid
echo "  acknowledged before the kill: $(wc -l < "$ACKED") blocks"
check "every write gateway 1 acknowledged reads back through gateway 2" probe 2 verify-log "$ACKED"
check "writing goes on through gateway 2" probe 2 write-log 90000 500 "$ACKED"
kill_tgtd "$(gw_state 2)"
check "gateway 1 comes back alone" eval 'gw_start 1 && gw_export 1'
check "every acknowledged write, through either gateway, reads back through it" \
  probe 1 verify-log "$ACKED"
finish
