#!/usr/bin/env bash
# A single-node Ceph cluster for tests and benches, from Debian's packages:
# one monitor and one OSD on loopback, with its own data folder. No mgr: a
# pacific monitor runs RBD without one (health is kept from turning to "no
# active mgr" by `mon mgr mkfs grace`); `ceph pg stat` and `ceph osd df`
# need one and hang, so nothing here uses them.
#
#   scripts/ceph-dev.sh start  [--dir DIR] [--port N] [--store memstore|bluestore] [--size MiB]
#                              [--watch-timeout S]
#   scripts/ceph-dev.sh stop   [--dir DIR]
#   scripts/ceph-dev.sh status [--dir DIR]
#   scripts/ceph-dev.sh osd-stop|osd-start [--dir DIR]   (fault tests: the OSD alone)
#
# After `start`, DIR/ceph.conf and DIR/keyring (client.admin) are what
# clients use (`rbd -c DIR/ceph.conf ...`, tgtd's rbio bsopts
# `rbd_conf=DIR/ceph.conf`), and pool "rbd" exists. Every ceph call is
# wrapped in a timeout: a client facing a dead cluster waits 300 s.
#
# Defaults: DIR .cache/ceph-dev, monitor port 16789, memstore (data in RAM,
# 4 KiB pages, lost when the OSD stops); bluestore on a sparse file keeps
# data across an OSD restart (what the OSD fault test uses).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/.cache/ceph-dev"
PORT=16789
STORE=memstore
SIZE_MIB=4096
WATCH_TIMEOUT=""
TIMEOUT="${CEPH_DEV_TIMEOUT:-30}"

die() { printf 'ceph-dev: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'ceph-dev: %s\n' "$*"; }

cmd="${1:-}"
[[ -n $cmd ]] || die "usage: ceph-dev.sh start|stop|status|osd-stop|osd-start [--dir DIR] [--port N] [--store memstore|bluestore] [--size MiB] [--watch-timeout S]"
shift
while (( $# )); do
  case "$1" in
    --dir) DIR="${2:?--dir needs a folder}"; shift 2 ;;
    --port) PORT="${2:?--port needs a number}"; shift 2 ;;
    --store) STORE="${2:?--store needs memstore or bluestore}"; shift 2 ;;
    --size) SIZE_MIB="${2:?--size needs MiB}"; shift 2 ;;
    --watch-timeout) WATCH_TIMEOUT="${2:?--watch-timeout needs seconds}"; shift 2 ;;
    *) die "unknown option: $1" ;;
  esac
done
[[ $PORT =~ ^[0-9]+$ ]] && (( PORT > 1024 && PORT < 65536 )) || die "--port must be 1025-65535, not '$PORT'"
[[ $STORE == memstore || $STORE == bluestore ]] || die "--store must be memstore or bluestore, not '$STORE'"
[[ $SIZE_MIB =~ ^[0-9]+$ ]] && (( SIZE_MIB >= 1024 )) || die "--size must be at least 1024 (MiB), not '$SIZE_MIB'"
# Clients ping their watches every 5 s (objecter_tick_interval): a timeout
# under 10 s would drop live ones.
[[ -z $WATCH_TIMEOUT ]] || { [[ $WATCH_TIMEOUT =~ ^[0-9]+$ ]] && (( WATCH_TIMEOUT >= 10 )); } ||
  die "--watch-timeout must be at least 10 (seconds), not '$WATCH_TIMEOUT'"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
CONF="$DIR/ceph.conf"

ceph_() { timeout "$TIMEOUT" ceph -c "$CONF" "$@"; }

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Stops the daemon whose pid file is $1 (only a process this script
# started), waiting for it to exit.
stop_daemon() {
  local pidfile="$1" pid i
  pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid="$(cat "$pidfile")"
  kill "$pid"
  for (( i = 0; i < 100; i++ )); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || :
  rm -f "$pidfile"
}

# The last non-empty line of a daemon's output, without colour codes.
last_line() { grep -v '^[[:space:]]*$' "$1" | tail -1 | sed 's/\x1b\[[0-9;]*m//g'; }

wait_until() {  # wait_until SECONDS WHAT COMMAND...
  local secs="$1" what="$2" i
  shift 2
  for (( i = 0; i < secs * 10; i++ )); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$what did not happen within ${secs} s (logs in $DIR/log)"
}

write_conf() {
  local fsid="$1"
  cat > "$CONF" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$((PORT + 1)),v1:127.0.0.1:$PORT]
public network = 127.0.0.0/8
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $DIR/keyring
log file = $DIR/log/\$name.log
admin socket = $DIR/run/\$name.asok
pid file = $DIR/run/\$name.pid
run dir = $DIR/run
ms bind ipv4 = true
ms bind ipv6 = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon allow pool delete = true
# No mgr: keep health from turning to "no active mgr".
mon mgr mkfs grace = 31536000
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
# Dev folders live on shared disks: warn only when nearly full.
mon data avail warn = 2
mon data avail crit = 1
osd crush chooseleaf type = 0
# A client facing an unreachable cluster gives up after this, not 300 s.
client mount timeout = 20
rados mon op timeout = 20
rados osd op timeout = 0

[mon.a]
mon data = $DIR/mon.a

[osd.0]
osd data = $DIR/osd.0
keyring = $DIR/osd.0/keyring
osd objectstore = $STORE
memstore device bytes = $(( SIZE_MIB * 1024 * 1024 ))
memstore page set = true
memstore page size = 4096
bluestore block path = $DIR/osd.0.block
bluestore block size = $(( SIZE_MIB * 1024 * 1024 ))
bluestore block create = true
bluestore fsck on mount = false
osd max object name len = 256
osd max object namespace len = 64
osd heartbeat grace = 5
${WATCH_TIMEOUT:+# How long the watch of a dead client outlives it (30 s by default).
osd client watch timeout = $WATCH_TIMEOUT}

[client]
# Several clients of one name (tgtd, rbd, rados) run at once.
admin socket = $DIR/run/\$name.\$pid.asok
log file = $DIR/log/\$name.\$pid.log
EOF
}

start() {
  if pid_alive "$DIR/run/mon.a.pid"; then
    log "already running in $DIR (monitor 127.0.0.1:$PORT)"
    return 0
  fi
  local b
  for b in ceph-mon ceph-osd ceph-authtool monmaptool rbd ceph; do
    command -v "$b" >/dev/null || die "$b not found: run scripts/setup.sh (Debian packages ceph-mon, ceph-osd, ceph-common)"
  done
  rm -rf "$DIR/mon.a" "$DIR/osd.0" "$DIR/osd.0.block" "$DIR/run" "$DIR/log" "$DIR/keyring" "$DIR/monmap"
  mkdir -p "$DIR/run" "$DIR/log" "$DIR/mon.a" "$DIR/osd.0"
  local fsid osd_uuid t0=$SECONDS
  fsid="$(uuidgen)"
  osd_uuid="$(uuidgen)"
  write_conf "$fsid"

  ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$DIR/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$((PORT + 1)),v1:127.0.0.1:$PORT]" \
    "$DIR/monmap" >/dev/null
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" \
    > "$DIR/log/mkfs-mon.out" 2>&1 || die "ceph-mon --mkfs failed: $(last_line "$DIR/log/mkfs-mon.out")"
  ceph-mon -c "$CONF" -i a > "$DIR/log/mon.out" 2>&1 \
    || die "ceph-mon did not start: $(last_line "$DIR/log/mon.out")"
  wait_until 20 "the monitor answering" ceph_ mon stat

  ceph_ osd new "$osd_uuid" 0 > /dev/null
  ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" --no-mon-config \
    > "$DIR/log/mkfs-osd.out" 2>&1 || die "ceph-osd --mkfs failed: $(last_line "$DIR/log/mkfs-osd.out")"
  ceph-authtool "$DIR/osd.0/keyring" --create-keyring --gen-key -n osd.0 >/dev/null
  ceph_ auth add osd.0 osd 'allow *' mon 'allow profile osd' -i "$DIR/osd.0/keyring" >/dev/null 2>&1
  osd_start
  ceph_ osd pool create rbd 8 8 >/dev/null 2>&1
  ceph_ osd pool application enable rbd rbd >/dev/null 2>&1
  # PGs active: an object write returns. (Without a mgr there is no PG
  # summary to poll.)
  wait_until 30 "pool rbd accepting writes" \
    timeout 5 rados -c "$CONF" -p rbd put ceph-dev-ready /dev/null
  timeout 5 rados -c "$CONF" -p rbd rm ceph-dev-ready >/dev/null 2>&1 || :
  log "up in $(( SECONDS - t0 )) s: $CONF (monitor 127.0.0.1:$PORT, $STORE OSD, pool rbd)"
}

osd_start() {
  pid_alive "$DIR/run/osd.0.pid" && return 0
  [[ -f $CONF ]] || die "no cluster in $DIR (run start first)"
  ceph-osd -c "$CONF" -i 0 > "$DIR/log/osd.out" 2>&1 \
    || die "ceph-osd did not start: $(last_line "$DIR/log/osd.out")"
  wait_until 30 "osd.0 up" osd_up
}

osd_up() { ceph_ osd dump 2>/dev/null | grep -q '^osd\.0 up'; }

osd_stop() {
  stop_daemon "$DIR/run/osd.0.pid"
  # Tell the monitor now instead of waiting for its heartbeat grace.
  ceph_ osd down 0 >/dev/null 2>&1 || :
}

stop() {
  stop_daemon "$DIR/run/osd.0.pid"
  stop_daemon "$DIR/run/mon.a.pid"
  # memstore data lives in the OSD's RAM; bluestore's file is sparse but
  # large: nothing is kept for the next start.
  rm -rf "$DIR/osd.0" "$DIR/osd.0.block" "$DIR/mon.a"
  log "stopped ($DIR)"
}

status() {
  pid_alive "$DIR/run/mon.a.pid" || { log "not running ($DIR)"; return 3; }
  ceph_ -s
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  osd-stop) osd_stop ;;
  osd-start) osd_start ;;
  *) die "unknown command '$cmd' (start|stop|status|osd-stop|osd-start)" ;;
esac
