# Shared by the bench/ scripts. Source it after setting BENCH_NAME (used to
# prefix messages); it sets ROOT and SANDBOX.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SANDBOX=$ROOT/scripts/tgtd-sandbox.sh

die() { printf '%s: error: %s\n' "$BENCH_NAME" "$*" >&2; exit 1; }
note() { printf '%s: %s\n' "$BENCH_NAME" "$*" >&2; }

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
