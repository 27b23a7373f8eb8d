#!/usr/bin/env bash
# bench/socket_paths end to end, shortest run (1 round of 1 s per mode and
# shape, about 10 s): every mode answers requests and the table has a row
# of figures for each; a zero-copy row says how many sends the kernel
# copied; a bad option is one line on stderr and exit 2. It checks what the
# probe prints, never the numbers, which depend on the machine.
source "$(dirname "$0")/../lib/tgt-test.sh"

PROBE=$RBIO_BUILD_DIR/bench/socket_paths
[[ -x $PROBE ]] || { echo "no $PROBE: build first" >&2; exit 2; }

WORK=$(mktemp -d /dev/shm/rbio-socket-paths-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
run_probe() {
  "$PROBE" --rounds 1 --seconds 1 --modes epoll,uring,zerocopy --shapes read,write \
    > "$WORK/out.md" 2> "$WORK/err.log" || { cat "$WORK/err.log"; return 1; }
}
# rows MODE: table rows of that mode whose seven figures (CPU, ratio, with
# the client's, ratio, rate, calls, per pass) are numbers above zero.
rows() {
  awk -F'|' -v m="$1" '$3 ~ "^ *"m" *$" { for (i = 4; i <= 10; i++) if ($i + 0 <= 0) next; n++ }
                       END { print n + 0 }' "$WORK/out.md"
}
bad_option() {
  local rc=0
  "$PROBE" --depth 0 > "$WORK/bad.out" 2> "$WORK/bad.err" || rc=$?
  (( rc == 2 )) && [[ ! -s $WORK/bad.out ]] && (( $(wc -l < "$WORK/bad.err") == 1 )) &&
    grep -q "^socket_paths: --depth wants a whole number" "$WORK/bad.err"
}

check "socket_paths runs every mode and shape" run_probe
check "it printed a progress line per round" eval '(( $(grep -c "^socket_paths: .* round 1/1 " "$WORK/err.log") == 6 ))'
for m in epoll uring zerocopy; do
  check "$m: a row of figures for read and for write" eval "(( \$(rows $m) == 2 ))"
done
check "zero-copy rows count the sends copied" \
  eval '(( $(grep -cE "^\| (read|write) \| zerocopy \|.*\| [0-9]+ of [1-9][0-9]* \|$" "$WORK/out.md") == 2 ))'
check "a bad option: one line, exit 2" bad_option
finish
