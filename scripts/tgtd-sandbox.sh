#!/usr/bin/env bash
# Runs the stock tgtd in a private mount namespace with a chosen folder of
# backing-store modules on /usr/lib/tgt/backing-store, its own control port
# and its own loopback portal. Nothing is installed or changed on the host.
#
#   tgtd-sandbox.sh start STATE_DIR [--modules DIR] [--control-port N]
#                         [--portal ADDR:PORT]... [--valgrind] [--tgtd BINARY]
#                         [-- extra tgtd args]
#   tgtd-sandbox.sh stop STATE_DIR
#
# --portal may be given more than once: one tgtd then listens on each (the
# default is 127.0.0.1:3260). tgtd inherits the environment, e.g. rbio's
# RBIO_TRANSPORT / RBIO_PORTALS.
# STATE_DIR receives tgtd.pid, tgtd.log and the overlay scratch space.
# `stop` ends only the tgtd this script started (by the PID it recorded).
set -euo pipefail

die() { printf 'tgtd-sandbox: error: %s\n' "$*" >&2; exit 1; }

cmd=${1:-}; state=${2:-}
[[ -n $cmd && -n $state ]] || die "usage: $0 start|stop STATE_DIR [options]"
shift 2

start() {
  local modules="" port=5700 portals=() valgrind=0 extra=() tgtd=tgtd
  while (( $# )); do
    case $1 in
      --modules) modules=$(realpath "$2"); shift 2 ;;
      --control-port) port=$2; shift 2 ;;
      --portal) portals+=("$2"); shift 2 ;;
      --valgrind) valgrind=1; shift ;;
      --tgtd) tgtd=$2; shift 2 ;;
      --) shift; extra=("$@"); break ;;
      *) die "unknown option $1" ;;
    esac
  done
  [[ $port =~ ^[0-9]+$ ]] || die "control port must be a number: $port"
  (( ${#portals[@]} )) || portals=(127.0.0.1:3260)
  # tgtd's iSCSI driver takes a comma-separated list: portal=A,portal=B.
  local portal iscsi_opts=""
  for portal in "${portals[@]}"; do
    [[ $portal == *,* ]] && die "one portal per --portal: $portal"
    iscsi_opts+=${iscsi_opts:+,}portal=$portal
  done
  mkdir -p "$state"
  state=$(realpath "$state")
  [[ -f $state/tgtd.pid ]] && kill -0 "$(cat "$state/tgtd.pid")" 2>/dev/null \
    && die "a tgtd started from $state is still running (pid $(cat "$state/tgtd.pid"))"
  rm -rf "$state/ovl" && mkdir -p "$state/ovl/upper" "$state/ovl/work" "$state/empty"
  [[ -n $modules ]] || modules="$state/empty"

  # /usr/lib/tgt/backing-store need not exist on the host: an overlay on
  # /usr/lib inside the namespace gives us a mount point without touching it.
  local prefix=()
  (( valgrind )) && prefix=(valgrind --error-exitcode=99 --leak-check=full
                            --errors-for-leak-kinds=definite --track-fds=no
                            --log-file="$state/valgrind.log")
  local inner='set -e
    if [ ! -d /usr/lib/tgt/backing-store ]; then
      mount -t overlay overlay -o lowerdir=/usr/lib,upperdir="$1/ovl/upper",workdir="$1/ovl/work" /usr/lib
      mkdir -p /usr/lib/tgt/backing-store
    fi
    mount --bind "$2" /usr/lib/tgt/backing-store
    shift 2
    exec "$@"'
  : > "$state/tgtd.log"
  # rbio's transport settings: a host's /etc/rbio/tgtd.conf does not leak in
  # (RBIO_CONFIG and RBIO_TRANSPORT / RBIO_PORTALS from the caller do), and
  # the statistics file stays in the state folder.
  export RBIO_CONFIG=${RBIO_CONFIG:-/dev/null}
  export RBIO_STATS_FILE=${RBIO_STATS_FILE:-$state/rbio.stats}
  unshare -m --propagation private sh -c "$inner" sh "$state" "$modules" \
    "${prefix[@]}" "$tgtd" -f -C "$port" --iscsi "$iscsi_opts" "${extra[@]}" \
    >> "$state/tgtd.log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$state/tgtd.pid"
  echo "$port" > "$state/control-port"
  local i
  for (( i = 0; i < 300; i++ )); do
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$state/tgtd.log" >&2
      die "tgtd exited during start-up (log: $state/tgtd.log)"
    fi
    if tgtadm -C "$port" --mode system --op show >/dev/null 2>&1; then
      echo "tgtd running: pid $pid, control port $port, portal ${portals[*]}"
      return 0
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  die "tgtd did not answer on control port $port within 30 s (log: $state/tgtd.log)"
}

stop() {
  [[ -f $state/tgtd.pid ]] || return 0
  local pid port i
  pid=$(cat "$state/tgtd.pid"); port=$(cat "$state/control-port" 2>/dev/null || echo 0)
  if kill -0 "$pid" 2>/dev/null; then
    # A clean shutdown, as tgt's own init script does it: offline, remove
    # every target (their LUs close their backing stores), then exit. This
    # lets valgrind see a normal exit and report leaks.
    tgtadm -C "$port" --op update --mode sys --name State -v offline >/dev/null 2>&1 || true
    local tid
    for tid in $(tgtadm -C "$port" --lld iscsi --op show --mode target 2>/dev/null \
                 | sed -n 's/^Target \([0-9]*\):.*/\1/p'); do
      tgtadm -C "$port" --lld iscsi --op delete --mode target --tid "$tid" --force >/dev/null 2>&1 || true
    done
    tgtadm -C "$port" --op delete --mode system >/dev/null 2>&1 || true
    for (( i = 0; i < 300; i++ )); do
      kill -0 "$pid" 2>/dev/null || break
      # The process may linger as a zombie of an earlier shell; reap if ours.
      [[ $(ps -o stat= -p "$pid" 2>/dev/null) == Z* ]] && break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null && [[ $(ps -o stat= -p "$pid" 2>/dev/null) != Z* ]]; then
      kill -TERM "$pid" 2>/dev/null || true; sleep 1
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  rm -f "$state/tgtd.pid"
}

case $cmd in
  start) start "$@" ;;
  stop) stop ;;
  *) die "unknown command $cmd (start|stop)" ;;
esac
