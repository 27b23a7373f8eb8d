# shellcheck shell=bash
# Gateways on one RBD image (rbd-fencing.sh, rbd-takeover.sh): what the
# cluster says about them, and a host session whose write comes late.
# Source after gateways.sh, with CONF set to the cluster's ceph.conf; the
# image is rbd/lun, and gateway G writes its metrics to $WORK/gwG.prom.

rbd_() { timeout 60 rbd -c "$CONF" "$@"; }
# addr_of G: gateway G's Ceph client address, from its log's last open.
addr_of() {
  sed -n -e 's/.*opened rbd image .*) as client\.[0-9]* at \([^ ]*\).*/\1/p' \
    -e 's/.*: opened again as client\.[0-9]* at \([^ ]*\) after.*/\1/p' "$(gw_state "$1")/tgtd.log" | tail -1
}
# owner: the client address that holds the image's exclusive lock.
owner() { rbd_ lock ls --format json lun | sed -n 's/.*"address":"\([^"]*\)".*/\1/p'; }
# blocklisted ADDR / not_blocklisted ADDR: whether the cluster's blocklist
# holds the client address; both fail when the cluster does not answer (a
# negated probe would pass then).
blocklist() { timeout 30 ceph -c "$CONF" osd blocklist ls 2> /dev/null | awk '{ print $1 }'; }
blocklisted() {
  local l
  l=$(blocklist) || { echo "  ceph osd blocklist ls failed"; return 1; }
  grep -qxF "$1" <<< "$l"
}
not_blocklisted() {
  local l
  l=$(blocklist) || { echo "  ceph osd blocklist ls failed"; return 1; }
  ! grep -qxF "$1" <<< "$l"
}
# metric G NAME VALUE: gateway G's metrics file has LUN 1's NAME at VALUE
# (tgtd rewrites it once a second).
metric() { grep -qE "^$2\\{.*lun=\"1\"\\} $3\$" "$WORK/gw$1.prom"; }

# start_late G NAME [--tur-first]: a session to gateway G that writes
# pattern 3 at LBAs 0-7 once $WORK/NAME.go exists; its output goes to
# $WORK/NAME.out, its PID to $late (the test's cleanup ends it).
late=""
start_late() {
  rm -f "$WORK/$2.go"
  "$PROBE" "$(gw_url "$1")" write-after "$WORK/$2.go" 0 8 3 ${3:+"$3"} > "$WORK/$2.out" 2>&1 &
  late=$!
  wait_for 30 grep -sqx ready "$WORK/$2.out"
}
# finish_late NAME: lets it write; its exit status.
finish_late() {
  local rc=0
  touch "$WORK/$1.go"
  wait "$late" || rc=$?
  late=""
  sed 's/^/  late write: /' "$WORK/$1.out"
  return "$rc"
}
# late_refused NAME: lets it write; the write failed, none of it GOOD
# (its session was ended), as scsi_probe's exit 1 and output say.
late_refused() {
  local rc=0
  finish_late "$1" || rc=$?
  (( rc == 1 )) && ! grep -q GOOD "$WORK/$1.out"
}
