# shellcheck shell=bash
# wait_for, shared by the tests (through tgt-test.sh) and the benches
# (through bench/lib.sh), so that every wait on a condition is the same poll.

# wait_for SECONDS COMMAND...: polls COMMAND until it succeeds or time is up.
wait_for() {
  local end=$((SECONDS + $1)); shift
  until "$@"; do
    (( SECONDS < end )) || return 1
    sleep 0.2
  done
}
