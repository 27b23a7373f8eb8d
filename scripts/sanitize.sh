#!/usr/bin/env bash
# Builds rbio with sanitizers in trees of their own and runs tests there
# (ctest label `sanitize` in the main build does both).
#
#   scripts/sanitize.sh build asan|tsan
#   scripts/sanitize.sh run asan unit             the unit tests, ASan + UBSan
#   scripts/sanitize.sh run asan integration NAME integration.NAME, ASan + UBSan
#                                                 (tgtd gets the runtime preloaded)
#   scripts/sanitize.sh run tsan initiator        the initiator's unit tests and
#                                                 integration.initiator-fuse, TSan
#   scripts/sanitize.sh list asan                 the integration tests run under ASan
#
# Trees: $RBIO_BUILD_DIR/asan (-DRBIO_SANITIZE=address,undefined) and
# $RBIO_BUILD_DIR/tsan (-DRBIO_SANITIZE=thread). A run fails when a test
# fails or when any process of it wrote a sanitizer report: every
# instrumented process logs to $TREE/sanitizer-logs/RUN/ (tgtd too, and
# tgtd-sandbox.sh stop fails on those of its tgtd), so reports of background
# processes (rbio's session daemon) count too; they are printed.
# A missing runtime (libasan, libtsan) is exit 77.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RBIO_BUILD_DIR:-$ROOT/build}"

die() { printf 'sanitize.sh: error: %s\n' "$*" >&2; exit 1; }
skip() { printf 'sanitize.sh: SKIP: %s\n' "$*"; exit 77; }

# Integration tests that load the module into tgtd, run under ASan + UBSan.
# Not run, and why:
#   leaks              runs tgtd under valgrind; valgrind and ASan's runtime
#                      do not mix (and LeakSanitizer is off in tgtd: tgt's own
#                      exit-time allocations; the module's leaks are this
#                      test's job in the main tree)
#   initiator-hostile  no tgtd; runs the initiator under valgrind (same)
#   istgt              no tgtd, no module: the initiator against istgt (the
#                      initiator runs under ASan in every test below)
ASAN_INTEGRATION=(data-integrity faults targets-conf transport-takeover hostile-input
                  initiator initiator-fuse fio-engine initiator-recovery initiator-auth
                  initiator-redirect accept-ready initiator-scsi multi-gateway disk-errors
                  rbd rbd-osd-restart target-metrics rbd-fencing writeback-errors
                  write-cache unmap-unsupported)

# Control ports and portals of a tree's tests, moved clear of the main
# tree's (5700-5810, 13700-13810) and of each other; on top of the caller's
# own RBIO_TEST_PORT_SHIFT, if any.
BASE_SHIFT=${RBIO_TEST_PORT_SHIFT:-0}
[[ $BASE_SHIFT =~ ^[0-9]+$ ]] || die "RBIO_TEST_PORT_SHIFT must be a number"
ASAN_PORT_SHIFT=$((BASE_SHIFT + 200))
TSAN_PORT_SHIFT=$((BASE_SHIFT + 400))

tree_of() {
  case $1 in
    asan) TREE="$BUILD/asan"; SAN=address,undefined; RUNTIME=libasan.so ;;
    tsan) TREE="$BUILD/tsan"; SAN=thread; RUNTIME=libtsan.so ;;
    *) die "no sanitizer '$1' (asan|tsan)" ;;
  esac
}

need_runtime() {
  local cc=${CC:-gcc} lib
  command -v "$cc" >/dev/null || skip "no C compiler $cc"
  lib=$("$cc" -print-file-name="$RUNTIME")
  [[ $lib == /* && -e $lib ]] || skip "$cc has no $RUNTIME (Debian: libasan8 / libtsan2)"
}

build() {
  tree_of "$1"; need_runtime
  mkdir -p "$TREE"
  # -O1 -g1, as the sanitizers' own documentation builds: line tables are
  # all a report's stack needs, and the tree compiles in about half the
  # time of -O2 -g (this build is CI's longest single step).
  local flags="-O1 -g1 -DNDEBUG"
  cmake -S "$ROOT" -B "$TREE" -DRBIO_SANITIZE="$SAN" -DRBIO_BUILD_TESTS=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" > "$TREE/configure.log" 2>&1 \
    || { cat "$TREE/configure.log"; die "configuring $TREE failed"; }
  local targets
  if [[ $1 == asan ]]; then
    # Everything the unit and the integration tests above use (not the
    # benchmarks nor the vm tests' programs).
    targets=(bs_rbio rbio rbio_fio rbio_unit_test_programs iscsi_rw_check scsi_probe faulty_disk
             iscsi_hostile initiator_tmf_check initiator_scsi_check)
  else
    # The initiator only: tgtd loads the main build's plain module.
    targets=(rbio rbio_initiator_unit_tests)
  fi
  cmake --build "$TREE" -j"${RBIO_SANITIZE_JOBS:-2}" --target "${targets[@]}"
}

# report_dir NAME: a fresh folder for the run's sanitizer logs; sets the
# sanitizers' options for every process started from here on.
report_dir() {
  LOGS="$TREE/sanitizer-logs/$1"
  rm -rf "$LOGS" && mkdir -p "$LOGS"
  # halt at the first finding; the exit status is then non-zero (1, or 66
  # for TSan), which fails whatever ran the process.
  # tgtd's own (tgtd-sandbox.sh sets them) go here too: a test that
  # ignores a failed `stop` (multi-gateway's clean-up) does not hide them.
  export RBIO_SANITIZER_LOG_DIR=$LOGS
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:log_path=$LOGS/asan"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$LOGS/ubsan"
  export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:log_path=$LOGS/tsan:suppressions=$ROOT/tests/sanitize/tsan.supp"
  export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitize/lsan.supp:print_suppressions=0"
}

# judge RC: fails on a failed ctest run or on any report in $LOGS.
judge() {
  local rc=$1 f found=0
  for f in "$LOGS"/*; do
    [[ -s $f ]] || continue
    found=1
    echo "--- sanitizer report $f ---"; cat "$f"
  done
  if (( found )); then
    echo "sanitize.sh: FAIL: sanitizer reports above (in $LOGS)"
    return 1
  fi
  if (( rc == 77 )); then return 77; fi
  (( rc == 0 )) || { echo "sanitize.sh: FAIL: exit status $rc"; return 1; }
  echo "sanitize.sh: passed, no sanitizer reports"
}

run() {
  tree_of "$1"; need_runtime
  [[ -f $TREE/CTestTestfile.cmake ]] || die "$TREE is not built (scripts/sanitize.sh build $1)"
  local what=${2:-} rc=0
  export RBIO_BUILD_DIR=$TREE RBIO_SOURCE_DIR=$ROOT
  case $1:$what in
    asan:unit)
      # Every unit test (one process per gtest case), then the project's
      # rule on skips: one that tests/allowed-skips.txt does not list fails.
      report_dir unit
      rm -f "$TREE/sanitize-unit.xml"
      (cd "$TREE" && ctest -L unit -j"${RBIO_SANITIZE_JOBS:-2}" --timeout 300 --output-on-failure \
         --no-tests=error --output-junit "$TREE/sanitize-unit.xml") || rc=$?
      if [[ -f $TREE/sanitize-unit.xml ]]; then
        python3 "$ROOT/scripts/check-skips.py" "$TREE/sanitize-unit.xml" "$ROOT/tests/allowed-skips.txt" \
          || { (( rc != 0 )) || rc=1; }
      else
        echo "sanitize.sh: ctest wrote no results"; (( rc != 0 )) || rc=1
      fi
      ;;
    asan:integration)
      # The test's own script, so that its exit status (77: skipped) is kept.
      local name=${3:-}
      [[ " ${ASAN_INTEGRATION[*]} " == *" $name "* ]] \
        || die "integration.$name is not among the ASan tests (scripts/sanitize.sh list asan)"
      report_dir "integration.$name"
      RBIO_TEST_PORT_SHIFT=$ASAN_PORT_SHIFT bash "$ROOT/tests/integration/$name.sh" || rc=$?
      ;;
    tsan:initiator)
      # The initiator's unit tests, then its threads at work: rbio login
      # --mount's session daemon with the FUSE export (libfuse's worker
      # threads) and its LU I/O thread. tgtd loads the main build's plain
      # module. Nothing else in initiator/ starts a thread: a Session is
      # single-threaded (rbio bench, the other initiator tests), and the fio
      # engine has none of its own and no state shared between jobs (each
      # has its own session), so under TSan it would only test fio.
      [[ -f $BUILD/modules/bs_rbio.so ]] || skip "no $BUILD/modules/bs_rbio.so (build the main tree first)"
      report_dir initiator
      "$TREE/tests/unit/rbio_initiator_unit_tests" || rc=$?
      local r2=0
      RBIO_MODULES_DIR=$BUILD/modules RBIO_TEST_PORT_SHIFT=$TSAN_PORT_SHIFT \
        bash "$ROOT/tests/integration/initiator-fuse.sh" || r2=$?
      if (( rc == 0 )); then rc=$r2; elif (( r2 != 0 && r2 != 77 )); then rc=1; fi
      ;;
    *) die "usage: scripts/sanitize.sh run asan unit | run asan integration NAME | run tsan initiator" ;;
  esac
  judge "$rc"
}

case ${1:-} in
  build) [[ -n ${2:-} ]] || die "usage: scripts/sanitize.sh build asan|tsan"; build "$2" ;;
  run) shift; run "$@" ;;
  list) [[ ${2:-} == asan ]] || die "usage: scripts/sanitize.sh list asan"; printf '%s\n' "${ASAN_INTEGRATION[@]}" ;;
  *) die "usage: scripts/sanitize.sh build asan|tsan | run asan unit | run asan integration NAME | run tsan initiator | list asan" ;;
esac
