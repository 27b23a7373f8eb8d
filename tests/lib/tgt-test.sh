# shellcheck shell=bash
# shellcheck disable=SC2034  # sets variables the scripts that source it read
# Shared helpers for tests that drive a real tgtd. Source it, then call
# tgt_test_init PORT_OFFSET. Each test gets its own tgtd in a private mount
# namespace, its own control port (5700+offset) and portal (13700+offset;
# both moved by RBIO_TEST_PORT_SHIFT),
# and a scratch folder on tmpfs that is removed at exit.
set -euo pipefail

RBIO_SOURCE_DIR=${RBIO_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
RBIO_BUILD_DIR=${RBIO_BUILD_DIR:-$RBIO_SOURCE_DIR/build}
SANDBOX="$RBIO_SOURCE_DIR/scripts/tgtd-sandbox.sh"
# RBIO_MODULES_DIR: another build's module folder for tgtd (the TSan run
# checks the initiator against the plain module; scripts/sanitize.sh).
MODULES="${RBIO_MODULES_DIR:-$RBIO_BUILD_DIR/modules}"
# RBIO_TEST_PORT_SHIFT moves every control port and portal by that much, so
# a second tree's tests (scripts/sanitize.sh) run beside the main ones.
TEST_PORT_SHIFT=${RBIO_TEST_PORT_SHIFT:-0}
[[ $TEST_PORT_SHIFT =~ ^[0-9]+$ ]] || { echo "RBIO_TEST_PORT_SHIFT must be a number" >&2; exit 2; }
RW_CHECK="$RBIO_BUILD_DIR/tests/integration/iscsi_rw_check"
# rbio's version as project() in the top CMakeLists.txt sets it: what
# rbio --version and rbio_build_info must name.
RBIO_VERSION=$(sed -n 's/^project(rbio VERSION \([0-9][0-9.]*\) .*/\1/p' "$RBIO_SOURCE_DIR/CMakeLists.txt")
[[ -n $RBIO_VERSION ]] || { echo "no project(rbio VERSION ...) in $RBIO_SOURCE_DIR/CMakeLists.txt" >&2; exit 2; }
TEST_INITIATOR=iqn.2026-11.io.rbio:test-initiator

checks_passed=0
checks_failed=0

tgt_test_init() {
  local off=$1
  CTL=$((5700 + TEST_PORT_SHIFT + off))
  PORT=$((13700 + TEST_PORT_SHIFT + off))
  [[ -f $MODULES/bs_rbio.so ]] || { echo "no $MODULES/bs_rbio.so: build first" >&2; exit 2; }
  WORK=$(mktemp -d /dev/shm/rbio-test-XXXXXX)
  STATE="$WORK/tgtd"
  trap tgt_test_cleanup EXIT
}

# Several tgtds in one test (gateways exporting one LU, e.g. for
# dm-multipath): tgt_gateway NAME CTL PORT points STATE, CTL and PORT at
# that gateway's own state folder ($WORK/tgtd-NAME), control port and
# portal, so that tgtd_start, tgtd_stop, tgtd_pid, tadm, log_has... act on
# it until the next call. Every gateway named is stopped at exit, besides
# the default $STATE.
TGT_GATEWAYS=()
tgt_gateway() {
  STATE="$WORK/tgtd-$1" CTL=$2 PORT=$3
  [[ " ${TGT_GATEWAYS[*]} " == *" $STATE "* ]] || TGT_GATEWAYS+=("$STATE")
}

# end_started PID: for an EXIT trap, ends a process the test started and
# reaps it. Its status is no result, and it never fails: under set -e a
# failing kill or wait (a process already gone, or ended by the signal)
# would end the trap before the rest of the cleanup.
end_started() { kill "$1" 2>/dev/null || :; wait "$1" 2>/dev/null || :; }

# tgt_test_cleanup [STATUS]: the EXIT trap (STATUS defaults to $?).
tgt_test_cleanup() {
  local rc=${1:-$?} s
  local states=("${TGT_GATEWAYS[@]}")
  [[ " ${states[*]} " == *" ${STATE:-} "* ]] || states+=("${STATE:-}")
  for s in "${states[@]}"; do
    [[ -n $s ]] || continue
    # A tgtd that crashed, hung or exited non-zero at shutdown fails the test.
    if ! "$SANDBOX" stop "$s"; then
      echo "FAIL: tgtd ($s) did not shut down cleanly (see above)"
      (( rc != 0 )) || rc=1
    fi
    if (( rc != 0 )) && [[ -f $s/tgtd.log ]]; then
      if (( ${#states[@]} > 1 )); then
        echo "--- tgtd log of ${s##*/} (last 40 lines) ---"
      else
        echo "--- tgtd log (last 40 lines) ---"
      fi
      tail -40 "$s/tgtd.log"
    fi
  done
  rm -rf "$WORK"
  exit $rc
}

tgtd_start() { "$SANDBOX" start "$STATE" --modules "$MODULES" --control-port "$CTL" --portal "127.0.0.1:$PORT" "$@"; }
tgtd_stop() { "$SANDBOX" stop "$STATE"; }
tgtd_pid() { cat "$STATE/tgtd.pid"; }
tadm() { tgtadm -C "$CTL" --lld iscsi "$@"; }

# new_target TID NAME: a target that accepts every initiator.
new_target() {
  tadm --op new --mode target --tid "$1" -T "iqn.2026-11.io.rbio:$2"
  tadm --op bind --mode target --tid "$1" -I ALL
}

# new_lun TID LUN FILE BSTYPE [BSOPTS]
new_lun() {
  local args=(--op new --mode logicalunit --tid "$1" --lun "$2" -b "$3" --bstype "$4")
  [[ -n ${5:-} ]] && args+=(--bsopts "$5")
  tadm "${args[@]}"
}

url() { echo "iscsi://127.0.0.1:$PORT/iqn.2026-11.io.rbio:$1/${2:-1}"; }

# check DESCRIPTION COMMAND...: counts and reports one check.
#
# Every step of COMMAND counts: a function (or eval'd list) fails at its
# first failing command, as under `set -e`, instead of passing on its last
# one. `set -e` itself cannot do this (bash ignores it for a command whose
# status is tested, and everything that command calls), so an ERR trap,
# inherited by functions and subshells (-E), returns from the function the
# failing command ran in; that failure propagates the same way up to here.
# COMMAND runs in this shell, so variables it sets (e.g. DISK) stay set.
# Commands whose failure is expected must say so (`! cmd`, `cmd || ...`,
# `if cmd`), which the trap, like `set -e`, leaves alone. `! { a && b; }`
# does not: a failing b counts before `!` can invert the group; expect a
# multi-step failure with `if` inside a function instead.
_check_run() { "$@"; }
check() {
  # Underscored locals: COMMAND is often an eval that reads the caller's
  # variables (rc, desc, ...), which a plain `local rc` here would shadow.
  local _check_desc=$1; shift
  local _check_rc=0 _check_opts=$- _check_prev_trap
  _check_prev_trap=$(trap -p ERR)
  set +e -E
  trap 'if [[ ${FUNCNAME[0]:-} != check ]]; then return; fi' ERR
  _check_run "$@"; _check_rc=$?
  trap - ERR
  [[ -n $_check_prev_trap ]] && eval "$_check_prev_trap"
  [[ $_check_opts == *E* ]] || set +E
  [[ $_check_opts == *e* ]] && set -e
  if (( _check_rc == 0 )); then
    checks_passed=$((checks_passed + 1)); echo "ok: $_check_desc"
  else
    checks_failed=$((checks_failed + 1)); echo "FAIL: $_check_desc"
  fi
}

# A missing prerequisite is never a pass: the test exits 77, which ctest
# (SKIP_RETURN_CODE 77) reports as skipped and scripts/test.sh fails on
# unless tests/allowed-skips.txt lists the test.
# skip_test REASON: nothing more can run; skip now.
skip_test() { echo "SKIP: $*"; exit 77; }
# skip_part REASON: a part of the test cannot run; the rest does, and the
# test then ends as skipped (if nothing failed).
skipped_parts=()
skip_part() { echo "SKIP (part): $*"; skipped_parts+=("$*"); }

# The summary line CI reads, and the exit status: 1 if a check failed, 77 if
# none did but a part was skipped, else 0.
finish() {
  echo "$checks_passed passed, $checks_failed failed"
  (( checks_failed == 0 )) || return 1
  if (( ${#skipped_parts[@]} )); then
    printf 'SKIP: not run: %s\n' "${skipped_parts[@]}"
    return 77
  fi
}

# wait_for SECONDS COMMAND...
# shellcheck source=tests/lib/wait.sh
source "$(dirname "${BASH_SOURCE[0]}")/wait.sh"

tgtd_alive() { kill -0 "$(tgtd_pid)" 2>/dev/null && tgtadm -C "$CTL" --mode system --op show >/dev/null; }
log_has() { grep -q -- "$1" "$STATE/tgtd.log"; }
