#!/usr/bin/env bash
# Builds rbio's libFuzzer targets with clang (the libraries instrumented
# with coverage and ASan/UBSan) and runs them from their committed seed
# corpora. A crash, sanitizer report, leak or timeout fails the run and
# leaves the input that caused it in the scratch folder.
#
#   scripts/fuzz.sh build               configure and build every target
#   scripts/fuzz.sh list                the targets, one per line
#   scripts/fuzz.sh run NAME [SECONDS]  one target, SECONDS (default 60)
#   scripts/fuzz.sh all [SECONDS]       build, then every target in turn
#
# The build lives in $RBIO_BUILD_DIR/fuzz (default build/fuzz); new inputs
# libFuzzer finds go to $RBIO_BUILD_DIR/fuzz-corpus/NAME, never into the
# committed seeds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${RBIO_BUILD_DIR:-$ROOT/build}"
FUZZ_BUILD="$BUILD/fuzz"

die() { printf 'fuzz.sh: error: %s\n' "$*" >&2; exit 1; }

# NAME TARGET BINARY-SUBDIR SEED-CORPUS
TARGETS=(
  "rx            rbio_rx_fuzz                 iser-opt/fuzz   iser-opt/fuzz/corpus"
  "stream_rx     rbio_stream_rx_fuzz          iser-opt/fuzz   iser-opt/fuzz/corpus"
  "iser_header   rbio_iser_header_fuzz        iser-opt/fuzz   iser-opt/fuzz/corpus-iser-header"
  "session       rbio_initiator_session_fuzz  initiator/fuzz  initiator/fuzz/corpus"
  "login_text    rbio_initiator_login_text_fuzz initiator/fuzz initiator/fuzz/corpus-login-text"
  "cdb           rbio_cdb_fuzz                tgt-backend/fuzz tgt-backend/fuzz/corpus/cdb"
  "alua          rbio_alua_fuzz               tgt-backend/fuzz tgt-backend/fuzz/corpus/alua"
  "config        rbio_config_fuzz             tgt-backend/fuzz tgt-backend/fuzz/corpus/config"
)

lookup() {
  local t
  for t in "${TARGETS[@]}"; do
    read -r name target dir seeds <<<"$t"
    [[ $name == "$1" ]] && return 0
  done
  die "no fuzz target '$1' (scripts/fuzz.sh list)"
}

build() {
  command -v clang++ >/dev/null || die "clang++ is not installed (scripts/setup.sh installs clang)"
  mkdir -p "$FUZZ_BUILD"
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$FUZZ_BUILD" -DRBIO_BUILD_FUZZERS=ON -DRBIO_BUILD_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$FUZZ_BUILD/configure.log" 2>&1 \
    || { cat "$FUZZ_BUILD/configure.log"; die "configuring the fuzz build failed"; }
  local t targets=()
  for t in "${TARGETS[@]}"; do read -r _ target _ _ <<<"$t"; targets+=("$target"); done
  cmake --build "$FUZZ_BUILD" -j"$(nproc)" --target "${targets[@]}"
}

run() {
  local secs=${2:-60}
  [[ $secs =~ ^[0-9]+$ ]] || die "seconds must be a number: $secs"
  lookup "$1"
  local bin="$FUZZ_BUILD/$dir/$target" scratch="$BUILD/fuzz-corpus/$name"
  [[ -x $bin ]] || die "$bin is not built (scripts/fuzz.sh build)"
  [[ -d $ROOT/$seeds ]] || die "no seed corpus $ROOT/$seeds"
  mkdir -p "$scratch"
  echo "fuzz.sh: $name for $secs s from $seeds"
  # -timeout: an input running 10 s is a hang; -rss_limit_mb: a leak or a
  # runaway allocation; both are findings. libFuzzer's own exit code for a
  # finding is 77, which ctest would count as a skip: make it 1.
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -artifact_prefix="$scratch/" "$scratch" "$ROOT/$seeds"
}

case ${1:-} in
  build) build ;;
  list) for t in "${TARGETS[@]}"; do read -r name _ <<<"$t"; echo "$name"; done ;;
  run) [[ -n ${2:-} ]] || die "usage: scripts/fuzz.sh run NAME [SECONDS]"; run "$2" "${3:-60}" ;;
  all) build; for t in "${TARGETS[@]}"; do read -r n _ <<<"$t"; run "$n" "${2:-60}"; done ;;
  *) die "usage: scripts/fuzz.sh build | list | run NAME [SECONDS] | all [SECONDS]" ;;
esac
