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
# STATE_DIR receives tgtd.pid, tgtd.log, tgtd.status (tgtd's exit status,
# written when it exits) and the overlay scratch space.
# `stop` ends only the tgtd this script started (by the PID it recorded) and
# fails when tgtd did not exit cleanly: a non-zero exit status, a signal, no
# exit within 30 s of the shutdown request, or (under --valgrind) valgrind's
# "Process terminating" (valgrind's own error status 99 is left to the
# caller, which reads valgrind.log), or a sanitizer report.
#
# Sanitizers: when the module folder's bs_rbio.so was built with ASan (or
# TSan; -DRBIO_SANITIZE, scripts/sanitize.sh) it needs the runtime loaded
# first, and the stock tgtd is not built with it, so tgtd (and only tgtd: not
# the shell or mount before it) is started with LD_PRELOAD of the runtime
# bs_rbio.so names (and libstdc++). RBIO_TGTD_PRELOAD="PATH..." preloads those
# instead (RBIO_TGTD_PRELOAD=none: nothing). Reports go to
# STATE_DIR/tgtd-PORT.sanitizer.log.PID (the folder RBIO_SANITIZER_LOG_DIR
# instead, if set: scripts/sanitize.sh then sees them even when a test
# ignores a failed stop); a finding aborts tgtd, and `stop` fails on any
# report of a tgtd started from STATE_DIR (printing it). Leak checking is off in tgtd (tgt's
# own allocations at exit; the module's leaks are integration.leaks' job,
# under valgrind); UBSan halts at the first finding.
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
  rm -f "$state/tgtd.pid" "$state/tgtd.status" "$state/valgrind" "$state/stock-iser"
  # tgt's own iSER driver serves this tgtd's iSER portals (rbio's iSER
  # transport, or all of rbio's, switched off): see the known crash in stop.
  if [[ ${RBIO_ISER:-} == off || ${RBIO_TRANSPORT:-} == off ]]; then : > "$state/stock-iser"; fi
  rm -rf "$state/ovl" && mkdir -p "$state/ovl/upper" "$state/ovl/work" "$state/empty"
  [[ -n $modules ]] || modules="$state/empty"

  # A sanitizer runtime for tgtd, if the module needs one (see the top).
  local preload=${RBIO_TGTD_PRELOAD:-}
  if [[ -z $preload && -f $modules/bs_rbio.so ]]; then
    local needed
    needed=$(readelf -d "$modules/bs_rbio.so" | sed -n 's/.*NEEDED.*\[\(lib[at]san\.so[.0-9]*\)\].*/\1/p' | head -1)
    if [[ -n $needed ]]; then
      preload=$(ldd "$modules/bs_rbio.so" | awk -v n="$needed" '$1 == n { print $3 }')
      [[ -f $preload ]] || die "$modules/bs_rbio.so needs $needed, which ldd does not find"
      # tgtd is C: without libstdc++ loaded when the runtime starts, ASan's
      # __cxa_throw interceptor has nothing to call and the module's first
      # exception aborts tgtd ("real___cxa_throw != 0" CHECK failed).
      local cxx
      cxx=$(ldd "$modules/bs_rbio.so" | awk '$1 ~ /^libstdc\+\+\.so/ { print $3 }')
      [[ -z $cxx ]] || preload+=" $cxx"
    fi
  fi
  [[ $preload == none ]] && preload=""
  # Earlier reports from this folder stay: `stop` fails on them too.
  local sanlog="${RBIO_SANITIZER_LOG_DIR:-$state}/tgtd-$port.sanitizer.log"
  if [[ -n $preload ]]; then
    local f
    for f in $preload; do [[ -f $f ]] || die "preload: no file $f"; done
    (( ! valgrind )) || die "--valgrind and a sanitizer runtime ($preload) do not mix"
    echo "$sanlog" >> "$state/sanitizer-logs"
    export ASAN_OPTIONS="abort_on_error=1:detect_leaks=0:log_path=$sanlog:${RBIO_TGTD_ASAN_OPTIONS:-}"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$sanlog"
    export TSAN_OPTIONS="halt_on_error=1:log_path=$sanlog:${RBIO_TGTD_TSAN_OPTIONS:-}"
  fi
  # /usr/lib/tgt/backing-store need not exist on the host: an overlay on
  # /usr/lib inside the namespace gives us a mount point without touching it.
  local prefix=()
  if (( valgrind )); then
    prefix=(valgrind --error-exitcode=99 --leak-check=full
            --errors-for-leak-kinds=definite --track-fds=no
            --log-file="$state/valgrind.log")
    : > "$state/valgrind"   # tells `stop` how to read the exit status
  fi
  # The shell's PID is tgtd's (unshare and exec keep it): it is recorded
  # before the exec, so the PID file never names anything else.
  local inner='set -e
    echo $$ > "$1/tgtd.pid.new" && mv "$1/tgtd.pid.new" "$1/tgtd.pid"
    if [ ! -d /usr/lib/tgt/backing-store ]; then
      mount -t overlay overlay -o lowerdir=/usr/lib,upperdir="$1/ovl/upper",workdir="$1/ovl/work" /usr/lib
      mkdir -p /usr/lib/tgt/backing-store
    fi
    mount --bind "$2" /usr/lib/tgt/backing-store
    if [ -n "$3" ]; then LD_PRELOAD=$3; export LD_PRELOAD; fi
    shift 3
    exec "$@"'
  : > "$state/tgtd.log"
  [[ -z $preload ]] || echo "tgtd-sandbox: tgtd runs with $preload preloaded (reports: $sanlog.PID)" >> "$state/tgtd.log"
  # rbio's transport settings: a host's /etc/rbio/tgtd.conf does not leak in
  # (RBIO_CONFIG and RBIO_TRANSPORT / RBIO_PORTALS from the caller do), and
  # the statistics file stays in the state folder.
  export RBIO_CONFIG=${RBIO_CONFIG:-/dev/null}
  export RBIO_STATS_FILE=${RBIO_STATS_FILE:-$state/rbio.stats}
  echo "$port" > "$state/control-port"
  # A watcher subshell is tgtd's parent: it reaps tgtd and writes its exit
  # status (128+N for signal N) to tgtd.status for `stop` to judge.
  (
    rc=0
    unshare -m --propagation private sh -c "$inner" sh "$state" "$modules" "$preload" \
      "${prefix[@]}" "$tgtd" -f -C "$port" --iscsi "$iscsi_opts" "${extra[@]}" || rc=$?
    echo "$rc" > "$state/tgtd.status.new" && mv "$state/tgtd.status.new" "$state/tgtd.status"
  ) >> "$state/tgtd.log" 2>&1 < /dev/null &
  local i pid
  for (( i = 0; i < 300; i++ )); do
    if [[ -f $state/tgtd.status ]]; then
      cat "$state/tgtd.log" >&2
      print_sanitizer_reports >&2
      rm -f "$state/tgtd.pid"
      die "tgtd exited during start-up with status $(cat "$state/tgtd.status") (log: $state/tgtd.log)"
    fi
    if [[ -f $state/tgtd.pid ]] && tgtadm -C "$port" --mode system --op show >/dev/null 2>&1; then
      pid=$(cat "$state/tgtd.pid")
      echo "tgtd running: pid $pid, control port $port, portal ${portals[*]}"
      return 0
    fi
    sleep 0.1
  done
  if [[ -f $state/tgtd.pid ]]; then kill -KILL "$(cat "$state/tgtd.pid")" 2>/dev/null || true; fi
  rm -f "$state/tgtd.pid"
  die "tgtd did not answer on control port $port within 30 s (log: $state/tgtd.log)"
}

# exited_within SECONDS: tgtd's watcher wrote its exit status in time.
exited_within() {
  local i
  for (( i = 0; i < $1 * 10; i++ )); do
    [[ -f $state/tgtd.status ]] && return 0
    sleep 0.1
  done
  return 1
}

# Sanitizer reports of the tgtds started from this folder (any, ever);
# start records where each writes them.
sanitizer_report_files() {
  local prefix f
  [[ -f $state/sanitizer-logs ]] || return 0
  sort -u "$state/sanitizer-logs" | while read -r prefix; do
    for f in "$prefix".*; do
      if [[ -s $f ]]; then echo "$f"; fi
    done
  done
}
has_sanitizer_report() { [[ -n $(sanitizer_report_files) ]]; }
print_sanitizer_reports() {
  local f
  for f in $(sanitizer_report_files); do echo "--- $f ---"; cat "$f"; done
}

stop() {
  if [[ ! -f $state/tgtd.pid ]]; then
    # Nothing running; a report of an earlier tgtd still counts.
    if has_sanitizer_report; then
      print_sanitizer_reports >&2
      die "a sanitizer reported a finding in tgtd (the report is above)"
    fi
    return 0
  fi
  local pid port problems=()
  pid=$(cat "$state/tgtd.pid"); port=$(cat "$state/control-port" 2>/dev/null || echo 0)
  if ! [[ -f $state/tgtd.status ]]; then
    # A clean shutdown, as tgt's own init script does it: offline, remove
    # every target (their LUs close their backing stores), then exit. This
    # lets valgrind see a normal exit and report leaks. The requests' own
    # statuses do not matter: how tgtd exits does, and is judged below.
    # Each has a time limit: a stopped or hung tgtd never answers.
    timeout 10 tgtadm -C "$port" --op update --mode sys --name State -v offline >/dev/null 2>&1 || true
    # tgt refuses to remove an LU that still has commands (a connection
    # closed a moment ago whose reads are in the store), and then the
    # system: asked again until it goes, for up to 20 s.
    local tid until=$((SECONDS + 20))
    while :; do
      for tid in $(timeout 10 tgtadm -C "$port" --lld iscsi --op show --mode target 2>/dev/null \
                   | sed -n 's/^Target \([0-9]*\):.*/\1/p'); do
        timeout 10 tgtadm -C "$port" --lld iscsi --op delete --mode target --tid "$tid" --force >/dev/null 2>&1 || true
      done
      timeout 10 tgtadm -C "$port" --op delete --mode system >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null && (( SECONDS < until )) || break
      sleep 0.2
    done
    if ! exited_within 30; then
      problems+=("tgtd (pid $pid) did not exit within 30 s of the shutdown request: killed")
      kill -KILL "$pid" 2>/dev/null || true
      exited_within 10 || problems+=("tgtd (pid $pid) did not go away after SIGKILL")
    fi
  fi
  rm -f "$state/tgtd.pid"
  local status
  status=$(cat "$state/tgtd.status" 2>/dev/null) || status=unknown
  if [[ -f $state/valgrind ]]; then
    # valgrind's error status (99) is the caller's to judge from the log;
    # a signal that ended tgtd is a crash whatever the status.
    if grep -q "Process terminating with default action of signal" "$state/valgrind.log" 2>/dev/null; then
      problems+=("valgrind: tgtd crashed: $(grep -m1 -A3 "Process terminating" "$state/valgrind.log" | tr '\n' ' ')")
    fi
    [[ $status == 0 || $status == 99 ]] || problems+=("tgtd under valgrind exited with status $status")
  elif [[ $status == 139 && -f $state/stock-iser ]] && grep -q "iser_cm_conn_established" "$state/tgtd.log"; then
    # A known defect of tgt 1.0.85 itself, not of rbio: after its own iSER
    # driver has served connections on soft-RoCE, tgtd sometimes ends with
    # SIGSEGV in its shutdown (seen in vm.iser-initiator with the sandbox
    # of the base commit too: once clean, once crashed). Said, not failed,
    # and only for a tgtd whose iSER was tgt's; every other crash fails.
    printf 'tgtd-sandbox: note: tgtd (pid %s) ended by SIGSEGV at shutdown after tgt'"'"'s own iSER driver served it: a known tgt 1.0.85 defect, not counted (log: %s)\n' \
      "$pid" "$state/tgtd.log" >&2
  elif [[ $status != 0 ]]; then
    if [[ $status =~ ^[0-9]+$ ]] && (( status > 128 )); then
      problems+=("tgtd (pid $pid) was ended by signal $((status - 128)) ($(kill -l "$((status - 128))" 2>/dev/null || echo '?'))")
    else
      problems+=("tgtd (pid $pid) exited with status $status")
    fi
  fi
  if has_sanitizer_report; then
    print_sanitizer_reports >&2
    problems+=("a sanitizer reported a finding in tgtd (the report is above)")
  fi
  (( ${#problems[@]} == 0 )) && return 0
  local p
  for p in "${problems[@]}"; do printf 'tgtd-sandbox: error: %s (log: %s)\n' "$p" "$state/tgtd.log" >&2; done
  return 1
}

case $cmd in
  start) start "$@" ;;
  stop) stop ;;
  *) die "unknown command $cmd (start|stop)" ;;
esac
