#!/usr/bin/env bash
# The rbio initiator over several gateways of one LU (two tgtd+bs_rbio.so,
# ALUA port groups 1 and 2, states from a shared groups file): `rbio bench`
# with two -p sends I/O only to the active/optimized gateway, follows a
# state flip mid-run without an error, spreads I/O over two active/optimized
# gateways, survives SIGKILL of the gateway carrying I/O (verify clean,
# failover time printed) and takes the gateway back once it is restarted
# (fail back); a single portal under the same kill fails (the control);
# all-standby fails after --replacement-timeout; a portal of another LU is
# refused. Then the fio engine with portal=A,B (verify, and a gateway
# killed mid-job), and `rbio login --mount` with two portals whose files
# keep working through a gateway kill and whose session process stays idle.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
in_private_mount_namespace "$0" "$@"
tgt_test_init 64
PROBE="$RBIO_BUILD_DIR/tests/integration/scsi_probe"
source "$(dirname "$0")/../lib/fio-rbio.sh"
for t in fio python3; do command -v "$t" >/dev/null || { echo "SKIP: $t not installed"; exit 77; }; done
[[ -x $PROBE && -x $RBIO && -f $FIO_ENGINE ]] || { echo "build scsi_probe, rbio and the fio engine first" >&2; exit 2; }
[[ -c /dev/fuse ]] || { echo "SKIP: no /dev/fuse"; exit 77; }

source "$(dirname "$0")/../lib/gateways.sh"
gateways_init 32M
SD="$WORK/state"
MNT="$WORK/mnt"
mkdir -p "$MNT"
bg=""
multipath_cleanup() {
  local rc=$?
  set +e
  [[ -n $bg ]] && kill "$bg" 2>/dev/null
  local sp; sp=$(sed -n 's/^pid=//p' "$SD"/*.state 2>/dev/null | head -1)
  timeout 20 "$RBIO" logout --state-dir "$SD" >/dev/null 2>&1
  mountpoint -q "$MNT" && umount -l "$MNT"
  # Only if that pid is still this test's session process (logout may have
  # ended it, and init reaps it: the pid could be anyone's by now).
  [[ -n $sp ]] && tr '\0' ' ' <"/proc/$sp/cmdline" 2>/dev/null | grep -qF -- "--state-dir $SD" &&
    kill -KILL "$sp" 2>/dev/null
  gateways_stop "$rc" || rc=1
  tgt_test_cleanup "$rc"
}
trap multipath_cleanup EXIT

probe() { local g=$1; shift; "$PROBE" "$(gw_url "$g")" "$@"; }
# states_are S1 S2: both gateways report group 1 in S1 and group 2 in S2.
states_are() {
  local want g
  want=$(printf 'group 1 %s ports 1\ngroup 2 %s ports 2' "$1" "$2")
  for g in 1 2; do [[ $(probe "$g" rtpg 2>/dev/null) == "$want" ]] || return 1; done
}
# groups S1 S2: the groups file, and both gateways acting on it.
groups() { set_groups "1 $1" "2 $2" && wait_for 10 states_are "$1" "$2"; }

bench() { "$RBIO" bench -T "$GW_TARGET" --lun 1 --bs 4k --iodepth 16 --size 8M --verify "$@"; }
both() { bench -p "$(gw_portal 1)" -p "$(gw_portal 2)" "$@"; }
# field FILE G NAME: NAME=VALUE of gateway G's path line in bench's report.
field() { grep "^  path $(gw_portal "$2") " "$1" | sed -E "s/.* $3=([0-9.]+).*/\1/"; }
path_state() { grep "^  path $(gw_portal "$2") " "$1" | sed -E 's/.*port group [0-9]+ ([a-z/-]+):.*/\1/'; }
summary() { grep '^  multipath:' "$1" | sed -E "s/.* $2=([0-9.]+).*/\1/"; }
# progress FILE G: "STATE:COMMANDS" of gateway G on the last progress line.
progress() { grep 'MB/s (last second)' "$1" | tail -1 | sed -nE "s/.*$(gw_portal "$2")=([a-z/-]+:[0-9]+).*/\1/p"; }
# shellcheck disable=SC2053  # $3 is a glob pattern ("down:*")
progress_has() { [[ $(progress "$1" "$2") == $3 ]]; }
verified() { grep -q 'verify: [1-9][0-9]* blocks read back and matched' "$1"; }

must_start "two gateways (port groups 1 and 2) export the LU" \
  eval 'set_groups "1 active/optimized" "2 standby" && gw_start 1 && gw_export 1 && gw_start 2 && gw_export 2'
check "they report 1 active/optimized, 2 standby" wait_for 10 states_are active/optimized standby

# --- ALUA decides where I/O goes -------------------------------------------
check "bench --verify over both portals (1 active/optimized, 2 standby) succeeds" \
  rc_is 0 both --rw rw --time 2
cp "$WORK/out" "$WORK/standby.out"
check "... its data verified" verified "$WORK/standby.out"
c1=$(field "$WORK/standby.out" 1 commands) c2=$(field "$WORK/standby.out" 2 commands)
echo "  commands: gateway 1 $c1, gateway 2 $c2"
check "... every command went to gateway 1" eval '(( c1 > 1000 && c2 == 0 ))'
check "... and gateway 2 is reported standby" eval '[[ $(path_state "$WORK/standby.out" 2) == standby ]]'

both --rw rw --time 5 > "$WORK/flip.out" 2>&1 & bg=$!
check "states flipped mid-run: bench is doing I/O through gateway 1" wait_for_io "$WORK/flip.out"
set_groups "1 standby" "2 active/optimized"
check "... bench finishes without an error" wait "$bg"
bg=""
check "... its data verified" verified "$WORK/flip.out"
c1=$(field "$WORK/flip.out" 1 commands) c2=$(field "$WORK/flip.out" 2 commands)
echo "  commands: gateway 1 $c1, gateway 2 $c2; $(grep '^  multipath:' "$WORK/flip.out")"
check "... I/O moved to gateway 2" eval '(( c2 > 1000 ))'
check "... gateway 1 refused or flagged the change (04/0B, 2A/06) and is now standby" eval \
  '(( $(field "$WORK/flip.out" 1 refused) + $(field "$WORK/flip.out" 1 unit_attentions) > 0 )) &&
   [[ $(path_state "$WORK/flip.out" 1) == standby && $(path_state "$WORK/flip.out" 2) == active/optimized ]]'

check "both active/optimized" groups active/optimized active/optimized
check "bench over both succeeds" rc_is 0 both --rw rw --time 2
cp "$WORK/out" "$WORK/both.out"
c1=$(field "$WORK/both.out" 1 commands) c2=$(field "$WORK/both.out" 2 commands)
echo "  commands: gateway 1 $c1, gateway 2 $c2"
check "... both carry I/O, each at least 40%" eval '(( c1 * 10 >= (c1 + c2) * 4 && c2 * 10 >= (c1 + c2) * 4 ))'

# --- failover and fail back ----------------------------------------------------
check "1 active/optimized, 2 active/non-optimized" groups active/optimized active/non-optimized
both --rw rw --time 10 > "$WORK/kill.out" 2>&1 & bg=$!
check "gateway kill: bench is doing I/O through gateway 1 only" \
  eval 'wait_for_io "$WORK/kill.out" && [[ $(progress "$WORK/kill.out" 2) == ano:0 ]] &&
        (( $(progress "$WORK/kill.out" 1 | cut -d: -f2) > 0 ))'
before=$(progress "$WORK/kill.out" 2 | cut -d: -f2)
kill_tgtd "$(gw_state 1)"
check "... gateway 1 SIGKILLed: bench shows its path down" wait_for 10 progress_has "$WORK/kill.out" 1 "down:*"
check "... and I/O going on through gateway 2" \
  wait_for 10 eval '(( $(progress "$WORK/kill.out" 2 | cut -d: -f2) > before + 1000 ))'
check "... gateway 1 restarted" eval 'gw_start 1 && gw_export 1'
check "... its path comes back active/optimized (fail back)" wait_for 15 progress_has "$WORK/kill.out" 1 "ao:*"
check "... bench finishes with exit 0" wait "$bg"
bg=""
check "... its data verified" verified "$WORK/kill.out"
grep -E '^  (multipath|path)' "$WORK/kill.out"
ms=$(summary "$WORK/kill.out" last_failover_ms)
echo "  failover: first moved command done ${ms} ms after the failure; longest gap between completions $(summary "$WORK/kill.out" longest_io_gap_ms) ms"
check "... one failover, commands moved, failover time printed (under 2 s)" eval \
  '(( $(summary "$WORK/kill.out" failovers) == 1 && $(summary "$WORK/kill.out" commands_moved) > 0 )) &&
   [[ -n $ms ]] && awk -v m="$ms" "BEGIN { exit !(m > 0 && m < 2000) }"'
check "... gateway 1 logged in twice and carried I/O after its return" eval \
  '(( $(field "$WORK/kill.out" 1 logins) == 2 && $(field "$WORK/kill.out" 1 since_login) > 1000 ))'

# The control: the same kill with one portal is fatal (the session gives up
# after --replacement-timeout), so the checks above can fail.
bench -p "$(gw_portal 1)" --rw rw --time 10 --replacement-timeout 1 > "$WORK/single.out" 2>&1 & bg=$!
wait_for_io "$WORK/single.out"
kill_tgtd "$(gw_state 1)"
rc=0; wait "$bg" || rc=$?
bg=""
check "control: the same kill with a single -p makes bench fail (exit 10)" eval '(( rc == 10 ))'
tail -1 "$WORK/single.out"
check "gateway 1 restarted" eval 'gw_start 1 && gw_export 1'

check "both standby" groups standby standby
check "no path serving I/O: bench fails after --replacement-timeout (exit 10)" \
  rc_is 10 both --rw randread --time 2 --replacement-timeout 2
check "... naming the paths' states" out_has "no path served I/O to LUN 1 for 2000 ms.*standby"

# A third gateway serving another LU under the same target name.
gw_start 3 && gw_adm 3 --op new --mode target --tid 1 -T "$GW_TARGET" && gw_adm 3 --op bind --mode target --tid 1 -I ALL &&
  truncate -s 32M "$WORK/other.img" &&
  gw_adm 3 --op new --mode logicalunit --tid 1 --lun 1 -b "$WORK/other.img" --bstype rbio &&
  gw_adm 3 --op update --mode logicalunit --tid 1 --lun 1 --params "scsi_id=6001405ffff0000,scsi_sn=OTHER"
check "a portal serving another LU is refused (exit 6)" \
  rc_is 6 bench -p "$(gw_portal 1)" -p "$(gw_portal 3)" --rw randread --time 1
check "... naming both LUs" out_has "serves another LU as LUN 1"
"$SANDBOX" stop "$(gw_state 3)"

# --- the fio engine --------------------------------------------------------------
check "fio: both active/optimized" groups active/optimized active/optimized
check "fio with portal=A,B: verify job passes" \
  fio_verify_job mp "$(gw_portal 1),$(gw_portal 2)" "$GW_TARGET" 1 randwrite 4k 16 16M
check "... with verified data" fio_ok mp
grep -A2 'rbio: mp' "$WORK/fio-mp.out"
# shellcheck disable=SC2034  # read by the eval'd check below
f1=$(grep "path $(gw_portal 1) " "$WORK/fio-mp.out" | sed -E 's/.* commands=([0-9]+).*/\1/')
# shellcheck disable=SC2034  # read by the eval'd check below
f2=$(grep "path $(gw_portal 2) " "$WORK/fio-mp.out" | sed -E 's/.* commands=([0-9]+).*/\1/')
check "... both paths carried commands" eval '(( f1 > 500 && f2 > 500 ))'

# The LU file changes once fio writes: by then both paths are logged in.
touch "$WORK/fio-start"
fio_verify_job kill "$(gw_portal 1) $(gw_portal 2)" "$GW_TARGET" 1 randwrite 4k 8 16M rate_iops=2000 & bg=$!
check "fio with a gateway killed mid-job: fio is writing" wait_for 10 test "$LU_FILE" -nt "$WORK/fio-start"
kill_tgtd "$(gw_state 2)"
check "... the job finishes" wait "$bg"
bg=""
check "... with verified data" fio_ok kill
grep -A2 'rbio: kill' "$WORK/fio-kill.out"
check "... after one failover" grep -q 'multipath: failovers=1 ' "$WORK/fio-kill.out"
check "gateway 2 restarted" eval 'gw_start 2 && gw_export 2'

# --- rbio login --mount with two portals ---------------------------------------------
session_pid() { sed -n 's/^pid=//p' "$SD"/*.state 2>/dev/null | head -1; }
session_has() { "$RBIO" session --state-dir "$SD" 2>/dev/null | grep -q -- "$1"; }
check "login --mount with two portals" \
  rc_is 0 timeout 60 "$RBIO" login -T "$GW_TARGET" -p "$(gw_portal 1)" -p "$(gw_portal 2)" --mount "$MNT" --state-dir "$SD"
check "... serves the LU as a file" test -f "$MNT/lun1"
check "... rbio session lists both paths" eval 'session_has "path $(gw_portal 1) port group 1" && session_has "path $(gw_portal 2) port group 2"'
head -c 16M /dev/urandom > "$WORK/src"
# 16 writes of 1 MiB (R2T and Data-Out on the paths), gateway 1 killed after
# the first; 30 s is ample (a stalled pass would take seconds per write).
timeout 30 bash -c 'for i in $(seq 0 15); do
    dd if="$1/src" of="$2/lun1" bs=1M skip="$i" seek="$i" count=1 conv=notrunc status=none || exit 1
    if (( i == 0 )); then touch "$1/first-written"; fi
  done' sh "$WORK" "$MNT" & bg=$!
check "FUSE: the first 1 MiB write through the mount completes" wait_for 10 test -f "$WORK/first-written"
kill_tgtd "$(gw_state 1)"
check "FUSE: writes go on through gateway 2 after gateway 1 is killed" wait "$bg"
bg=""
check "... and the data reads back through the file" cmp -n 16777216 "$WORK/src" "$MNT/lun1"
check "... and is in the LU (backing file)" cmp -n 16777216 "$WORK/src" "$LU_FILE"
check "... rbio session shows gateway 1's path down" wait_for 10 session_has "path $(gw_portal 1) port group 1 down"
check "gateway 1 restarted: its path comes back" \
  eval 'gw_start 1 && gw_export 1 && wait_for 15 session_has "path $(gw_portal 1) port group 1 active/optimized"'
"$RBIO" session --state-dir "$SD" | grep '  path '
pid=$(session_pid)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
t0=$(ticks "$pid"); sleep 3; t1=$(ticks "$pid")  # a measurement over 3 s, not a wait
echo "  idle session process: $((t1 - t0)) clock ticks of CPU in 3 s ($(getconf CLK_TCK)/s)"
check "... the idle session process (two paths) uses under 5% of a core" eval '(( (t1 - t0) * 100 < 5 * 3 * $(getconf CLK_TCK) ))'
# Gateway 1's sandbox, started after the mount, holds a copy of this mount
# namespace and so of the FUSE mount, which would keep the FUSE connection
# up after logout's unmount: it goes first (logout then has one path).
"$SANDBOX" stop "$(gw_state 1)"
check "logout with gateway 1 stopped" rc_is 0 timeout 60 "$RBIO" logout --state-dir "$SD"
check "... the session process is gone" wait_for 10 eval '! kill -0 "$pid" 2>/dev/null || grep -q "^[^)]*) Z" "/proc/$pid/stat"'
finish
