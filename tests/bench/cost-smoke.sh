#!/usr/bin/env bash
# bench/cost.sh --quick --no-iser end to end (control ports 5825-5828,
# portals 13825-13828): bs-compare at 1 in flight, transport-compare at 32
# in flight, tcp-instructions under callgrind, then the table. It checks
# what the run leaves behind, not the numbers: cost.md with the table and
# every TCP row holding figures and a verdict, the iSER row marked NOT RUN,
# cost.csv with the same rows, and each step's own output. About 90 s.
source "$(dirname "$0")/../lib/tgt-test.sh"

COST=$RBIO_SOURCE_DIR/bench/cost.sh
[[ -f $MODULES/bs_rbio.so && -x $RBIO_BUILD_DIR/bench/iscsi-rwperf ]] \
  || { echo "no $MODULES/bs_rbio.so or $RBIO_BUILD_DIR/bench/iscsi-rwperf: build first" >&2; exit 2; }
command -v iscsi-perf >/dev/null || skip_test "iscsi-perf is missing (libiscsi-bin; scripts/setup.sh installs it)"
command -v strace >/dev/null || skip_test "strace is missing (scripts/setup.sh installs it)"
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null \
  || skip_test "valgrind is missing (scripts/setup.sh installs it)"

WORK=$(mktemp -d /dev/shm/rbio-cost-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/out
CPORT=$(( 5825 + TEST_PORT_SHIFT )) PPORT=$(( 13825 + TEST_PORT_SHIFT ))
run_cost() {
  bash "$COST" --quick --no-iser --out "$OUT" --ports "$CPORT,$PPORT" > "$WORK/run.log" 2>&1 \
    || { tail -n 20 "$WORK/run.log"; return 1; }
}
# rows_with METRIC: cost.md rows of that metric whose stock and rbio cells
# hold numbers and whose status is a verdict.
rows_with() {
  awk -F'|' -v m="$1" 'index($3, m) && $5 ~ /^ *[0-9.]+ *$/ && $6 ~ /^ *[0-9.]+ *$/ && $9 ~ /^ *(MET|NOT MET|info) *$/' "$OUT/cost.md" | wc -l
}

check "cost.sh --quick --no-iser runs to the end" run_cost
check "it printed a progress line per step" eval '(( $(grep -c "^cost: \[[1-3]/3\] " "$WORK/run.log") == 3 ))'
check "cost.md has the table header" grep -qF "| area | metric | workload | stock | rbio | rbio/stock | goal (issue 18) | status |" "$OUT/cost.md"
check "cost.md says the load" grep -q "load at start [0-9]" "$OUT/cost.md"
check "QD1 rows: read and write, with a verdict on >= 0.9x" eval '(( $(rows_with "IOPS at 1 in flight") == 2 ))'
check "CPU per I/O rows: read and write on bs null and bs rbio" eval '(( $(rows_with "tgtd CPU us per I/O") == 4 ))'
check "system calls per I/O row" eval '(( $(rows_with "system calls per I/O") >= 1 ))'
for m in "user-space instructions per command" "allocations per command" "copies per command" "instructions in memcpy"; do
  check "TCP rows: $m, read and write" eval "(( \$(rows_with '$m') == 2 ))"
done
check "the iSER row is marked NOT RUN" grep -q "^| iSER |.*| NOT RUN (--no-iser) |$" "$OUT/cost.md"
check "cost.csv: header and one line per table row" \
  eval '[[ $(head -n 1 "$OUT/cost.csv") == area,metric,workload,stock,rbio,rbio_over_stock,goal,status ]] &&
        (( $(tail -n +2 "$OUT/cost.csv" | wc -l) == $(grep -c "^| \(TCP\|iSER\)" "$OUT/cost.md") ))'
check "each step left its own output" \
  eval '[[ -s $OUT/bs-compare.md && -s $OUT/transport-compare/results.tsv && -s $OUT/tcp-instructions/results.md ]]'
finish
