# shellcheck shell=bash
# shellcheck disable=SC2034  # sets variables the scripts that source it read
# Shared by the bench/ scripts. Source it after setting BENCH_NAME (used to
# prefix messages); it sets ROOT and SANDBOX.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SANDBOX=$ROOT/scripts/tgtd-sandbox.sh

die() { printf '%s: error: %s\n' "$BENCH_NAME" "$*" >&2; exit 1; }
note() { printf '%s: %s\n' "$BENCH_NAME" "$*" >&2; }
# wait_for SECONDS COMMAND..., as the tests have it
# shellcheck source=tests/lib/wait.sh
source "$ROOT/tests/lib/wait.sh"

# usage [STATUS]: the calling script's header comment, up to `set -euo`.
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit "${1:-0}"
}

# need_pkg TEST-COMMAND PACKAGE: apt-get install PACKAGE if TEST fails.
need_pkg() {
  if ! eval "$1" >/dev/null 2>&1; then
    note "installing $2 (needed: $1)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1; } \
      || die "could not install $2"
  fi
}

# split_bstypes SPEC: the iSER benches' --bstype, "B" for both targets or
# "STOCK,RBIO", each rdwr or rbio, into BS_STOCK and BS_RBIO.
split_bstypes() {
  local extra b
  IFS=, read -r BS_STOCK BS_RBIO extra <<< "$1"
  BS_RBIO=${BS_RBIO:-$BS_STOCK}
  for b in "$BS_STOCK" "$BS_RBIO"; do
    [[ -z $extra && ( $b == rdwr || $b == rbio ) ]] \
      || die "--bstype takes rdwr or rbio, or two of them as STOCK,RBIO (got '$1')"
  done
}

port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# fdiv A B [PRECISION]: A / B with PRECISION decimals (default 2), "-" when B is 0.
fdiv() { awk -v a="$1" -v b="$2" -v p="${3:-2}" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.*f", p, a / b }'; }

# strace_attached PID: strace follows every thread of PID (each task's
# TracerPid is set), so a measurement started now is counted whole. Gives
# up after 5 s.
strace_attached() {
  local i t all
  for (( i = 0; i < 250; i++ )); do
    all=1
    for t in /proc/"$1"/task/*/status; do
      [[ $(awk '/^TracerPid:/ {print $2}' "$t" 2>/dev/null) != 0 ]] || { all=0; break; }
    done
    (( all )) && return 0
    sleep 0.02
  done
  return 1
}

# stats_rewritten FILE: waits (up to 5 s) until tgtd has written FILE anew
# (a new file is renamed over it once a second), so what it says covers
# everything that finished before the call.
stats_rewritten() {
  local ino i
  ino=$(stat -c %i "$1" 2>/dev/null) || return 1
  for (( i = 0; i < 250; i++ )); do
    [[ $(stat -c %i "$1" 2>/dev/null) != "$ino" ]] && return 0
    sleep 0.02
  done
  return 1
}

# CPU accounting without forking (so it costs nothing inside a timed point).
CLK_TCK=$(getconf CLK_TCK)
# proc_ticks PID: TICKS=utime+stime of every thread of PID, live or exited
# (/proc/PID/stat); returns 1 when PID is gone.
proc_ticks() {
  local line f
  read -r line 2>/dev/null < "/proc/$1/stat" || return 1
  line=${line##*) }
  read -r -a f <<< "$line"
  TICKS=$(( f[11] + f[12] ))
}
# SYS_BUSY/SYS_STEAL: ticks of all CPUs busy (user, nice, system, irq,
# softirq) and stolen by the hypervisor, from /proc/stat.
sys_ticks() {
  local f
  read -r -a f < /proc/stat
  SYS_BUSY=$(( f[1] + f[2] + f[3] + f[6] + f[7] )) SYS_STEAL=$(( f[8] ))
}
# CHILD_MS=user+system CPU of this shell's waited-for children, in ms.
# `times` must run in this shell (a $(...) subshell starts from zero); its
# output goes through $WORK/times, so the caller must have set WORK.
child_ms() {
  local l2
  times > "$WORK/times"
  { read -r _; read -r l2; } < "$WORK/times"
  [[ $l2 =~ ^([0-9]+)m([0-9]+)\.([0-9]+)s\ ([0-9]+)m([0-9]+)\.([0-9]+)s$ ]] || die "cannot parse times: $l2"
  CHILD_MS=$(( (BASH_REMATCH[1] * 60 + 10#${BASH_REMATCH[2]}) * 1000 + 10#${BASH_REMATCH[3]}
             + (BASH_REMATCH[4] * 60 + 10#${BASH_REMATCH[5]}) * 1000 + 10#${BASH_REMATCH[6]} ))
}

# stats_read FILE ARRAY: ARRAY = key -> value of rbio's TCP transport
# statistics file (docs/tcp-transport.md); returns 1 when there is none (no
# file, or not transport=rbio). The file may be being rewritten: retry a
# few times until it parses with its core keys.
STATS_KEYS=(connections_open connections_total pdus_in bytes_in recv_calls pdus_out bytes_out send_calls would_block epoll_ctl_calls syscalls)
stats_read() {
  local file=$1 k v try ok
  local -n arr=$2
  for (( try = 0; try < 5; try++ )); do
    arr=()
    [[ -f $file ]] || return 1
    while IFS='=' read -r k v; do
      [[ $k =~ ^[a-z_]+$ ]] && arr[$k]=$v
    done < "$file" 2>/dev/null || true
    [[ ${arr[transport]:-} == rbio ]] || { arr=(); [[ -s $file ]] && return 1; sleep 0.02; continue; }
    ok=1
    for k in "${STATS_KEYS[@]}"; do [[ ${arr[$k]:-} =~ ^[0-9]+$ ]] || { ok=0; break; }; done
    (( ok )) && return 0
    sleep 0.02
  done
  arr=()
  return 1
}

# iperf_server_start PORT LOG: a loopback iperf3 server in the background,
# IPERF_PID its PID (the caller stops it by that PID); fails unless it
# listens within 5 s.
iperf_server_start() {
  local port=$1 log=$2 i
  iperf3 -s -B 127.0.0.1 -p "$port" > "$log" 2>&1 &
  IPERF_PID=$!
  # Right after the fork the child may not have exec'd iperf3 yet.
  for (( i = 0; i < 100; i++ )); do
    [[ $(cat "/proc/$IPERF_PID/comm" 2>/dev/null) == iperf3 ]] && break; sleep 0.02
  done
  [[ $(cat "/proc/$IPERF_PID/comm" 2>/dev/null) == iperf3 ]] || die "pid $IPERF_PID is not the iperf3 server"
  for (( i = 0; i < 100; i++ )); do port_busy "$port" && break; sleep 0.05; done
  port_busy "$port" || die "iperf3 server did not start: $(cat "$log")"
}

# iperf_run PORT SECONDS JSON [LEN]: one TCP stream over 127.0.0.1 (writes
# of LEN bytes if given); sets IP_MBS (MB/s received, "nan" on failure) and
# IP_CPU ("sender%/receiver%").
iperf_run() {
  local port=$1 secs=$2 out=$3 len=${4:-} rc=0 lenopt=()
  [[ -n $len ]] && lenopt=(-l "$len")
  timeout --foreground $(( secs + 30 )) iperf3 -c 127.0.0.1 -p "$port" -t "$secs" "${lenopt[@]}" -J > "$out" 2>&1 || rc=$?
  IP_MBS=nan IP_CPU=-
  if (( rc != 0 )); then note "iperf3 client failed (exit $rc): $(grep -m1 error "$out" || tail -n 2 "$out")"; return; fi
  IP_MBS=$(awk '/"sum_received"/ { f = 1 } f && /"bits_per_second"/ { gsub(/[^0-9.e+]/, "", $2); printf "%.1f", $2 / 8 / 1e6; exit }' "$out")
  IP_CPU=$(awk '/"host_total"/ { gsub(/[^0-9.]/, "", $2); h = $2 } /"remote_total"/ { gsub(/[^0-9.]/, "", $2); r = $2 } END { printf "%.0f%%/%.0f%%", h, r }' "$out")
  [[ $IP_MBS =~ ^[0-9.]+$ ]] || { note "cannot parse iperf3 output"; IP_MBS=nan; }
}
