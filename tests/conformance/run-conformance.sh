#!/usr/bin/env bash
# Conformance check of a tgt backing store against a stock one, using
# libiscsi's iscsi-test-cu.
#
# One stock tgtd (started through scripts/tgtd-sandbox.sh, so the module under
# test is seen on tgtd's backing-store path without installing anything)
# serves two targets, each with one LUN on its own sparse file on tmpfs:
#   baseline  --bstype <baseline>  (stock rdwr by default)
#   candidate --bstype <bstype>    (rbio by default)
# The same test selection runs against both LUNs, one iscsi-test-cu process
# per suite (cu_results.py plan says why). The candidate must pass everything
# the baseline passes (both share tgtd's SCSI emulation, so a difference
# points at the backing store), and must also pass the thin provisioning
# tests listed in thin-tests.txt, which a fully provisioned baseline skips or
# fails. Tests listed in known-flaky.txt are only reported.
#
# Usage: run-conformance.sh --state DIR [options]
#   --modules DIR        folder with bs_<bstype>.so for tgtd's backing-store
#                        path (omit for built-in backing stores)
#   --state DIR          scratch folder (tgtd state, logs, default results)
#   --control-port N     tgtd control port (default 5800)
#   --portal-port P      iSCSI portal port on 127.0.0.1 (default 13800)
#   --bstype NAME        candidate backing store (default rbio)
#   --baseline NAME      baseline backing store (default rdwr)
#   --results DIR        where result files go (default STATE/results)
#   --tests PATTERN      iscsi-test-cu selection (default ALL). This is
#                        iscsi-test-cu's syntax, not a regex:
#                        FAMILY[.SUITE[.TEST]] with shell wildcards, several
#                        separated by commas, e.g. 'ALL.Unmap,ALL.WriteSame*'
#   --digest none|crc32c header digest for both targets (default: tgtd's,
#                        none). Set on the target side: iscsi-test-cu 1.19
#                        ignores the URL's ?header_digest= and always offers
#                        "None,CRC32C", so only a target that accepts just
#                        CRC32C makes the suite run with digests. (libiscsi
#                        offers no data digest at all.)
#   --thin-param         also set thin_provisioning=1 on the candidate LUN
#                        with tgtadm (off: the module must enable it itself)
#   --multipath          give iscsi-test-cu each LUN twice (two sessions), so
#                        the MultipathIO tests run instead of skipping
#   --size SIZE          size of each LUN's file (default 128M)
#   --timeout SEC        time budget for all suites on one LUN (default 600);
#                        suites not started within it count as not run
#
# Output, for NAME = baseline and candidate (the bstype; with the same bstype
# on both sides the candidate becomes <bstype>-thin or <bstype>-candidate):
#   RESULTS/NAME.{passed,failed,skipped,notrun}  SUITE.TEST names, sorted
#   RESULTS/NAME.skip-reasons   why each skipped test skipped
#   RESULTS/NAME.log            iscsi-test-cu's console output, all suites
#   RESULTS/NAME.suite-times    seconds, FAMILY.SUITE, exit status per run
#   RESULTS/NAME.times          seconds per test
#   RESULTS/tgtd.log
# and on stdout a summary whose last line is "N passed, M failed" (checks
# that held, regressions). Exit status 0 only if M is 0; 2 on a setup error.
set -euo pipefail
# EPOCHREALTIME and awk must agree on the decimal point; sort on collation.
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
sandbox=$repo/scripts/tgtd-sandbox.sh
helper=$here/cu_results.py

die() { printf 'run-conformance: error: %s\n' "$*" >&2; exit 2; }
log() { printf '== %s\n' "$*"; }

modules="" state="" control_port=5800 portal_port=13800 bstype=rbio
baseline=rdwr results="" tests=ALL digest="" thin_param=0 multipath=0
size=128M suite_timeout=600
while (( $# )); do
  case $1 in
    --modules) modules=$2; shift 2 ;;
    --state) state=$2; shift 2 ;;
    --control-port) control_port=$2; shift 2 ;;
    --portal-port) portal_port=$2; shift 2 ;;
    --bstype) bstype=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --digest) digest=$2; shift 2 ;;
    --thin-param) thin_param=1; shift ;;
    --multipath) multipath=1; shift ;;
    --size) size=$2; shift 2 ;;
    --timeout) suite_timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ -n $state ]] || die "--state DIR is required"
[[ $control_port =~ ^[0-9]+$ && $portal_port =~ ^[0-9]+$ ]] || die "ports must be numbers"
[[ $suite_timeout =~ ^[0-9]+$ ]] || die "--timeout must be a number of seconds"
case $digest in
  "") ;;
  none) digest=None ;;
  crc32c) digest=CRC32C ;;
  *) die "--digest must be none or crc32c (libiscsi has no data digest)" ;;
esac
for tool in tgtadm iscsi-test-cu timeout stdbuf python3 ss; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
if [[ -n $modules ]]; then
  [[ -d $modules ]] || die "--modules $modules is not a directory"
  modules=$(realpath "$modules")
  [[ -f $modules/bs_$bstype.so ]] \
    || printf 'warning: %s has no bs_%s.so; tgtd will only know built-in backing stores\n' \
              "$modules" "$bstype" >&2
fi

mkdir -p "$state"
state=$(realpath "$state")
results=$(realpath -m "${results:-$state/results}")
mkdir -p "$results"
# The result names double as file names; when both sides use the same
# backing store (e.g. rdwr against rdwr --thin-param) they must still differ.
bname=$baseline cname=$bstype
if [[ $bname == "$cname" ]]; then
  (( thin_param )) && cname=$bstype-thin || cname=$bstype-candidate
fi
rm -f "$results"/{"$bname","$cname"}.{passed,failed,skipped,notrun,skip-reasons,times,notes,summary,log,timed,suite-times} \
      "$results"/{plan.txt,compare.counts,all-tests.txt,tgtd.log}

# tgtadm talks to whichever tgtd owns the control port, so a port already in
# use would silently point our setup at somebody else's daemon.
tgtadm -C "$control_port" --mode system --op show >/dev/null 2>&1 \
  && die "control port $control_port is already served by another tgtd"
ss -Hltn "sport = :$portal_port" | grep -q . \
  && die "portal port $portal_port is already in use"

# Backing files live on tmpfs: the suite writes the whole LUN several times
# and must not be slowed or limited by a real disk; tmpfs also supports the
# hole punching that UNMAP relies on.
shm=$(mktemp -d /dev/shm/rbio-conformance.XXXXXX)
tgtd_state=$state/tgtd
pidfile=$state/suite.pid rcfile=$state/suite.rc
watchdog=""
started=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # Best effort from here on: one failed step must not skip the rest.
  set +e
  # Interrupted in the middle of a suite: background jobs of a script do not
  # get the terminal's SIGINT, and a CI's SIGTERM reaches only us.
  [[ -n $watchdog ]] && kill "$watchdog" 2>/dev/null
  [[ -s $pidfile ]] && kill -TERM "$(cat "$pidfile")" 2>/dev/null
  rm -f "$pidfile"
  if (( started )); then
    # tgtd ignores the sandbox's "system delete" while targets exist and the
    # stop then waits 30 s before signalling; removing our targets first
    # lets it exit at once.
    local tid
    for tid in 2 1; do
      tgtadm -C "$control_port" --lld iscsi --op delete --mode target --tid "$tid" \
        --force >/dev/null 2>&1 || true
    done
    "$sandbox" stop "$tgtd_state" || true
    cp -f "$tgtd_state/tgtd.log" "$results/tgtd.log" 2>/dev/null || true
  fi
  rm -rf "$shm"
  exit "$rc"
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap stops tgtd.
trap 'exit 130' INT
trap 'exit 143' TERM

t_run=$SECONDS
sandbox_args=(start "$tgtd_state" --control-port "$control_port"
              --portal "127.0.0.1:$portal_port")
[[ -n $modules ]] && sandbox_args+=(--modules "$modules")
started=1
"$sandbox" "${sandbox_args[@]}"
tgtd_pid=$(cat "$tgtd_state/tgtd.pid")
# tgtd is not our child, so a dead one may linger as a zombie that kill -0
# still reports as present.
tgtd_alive() {
  kill -0 "$tgtd_pid" 2>/dev/null && [[ $(ps -o stat= -p "$tgtd_pid" 2>/dev/null) != Z* ]]
}
# When tgtd dies under a suite, libiscsi keeps trying to reconnect until the
# whole time budget is gone; this watchdog stops that suite instead (timeout
# passes the SIGTERM on to iscsi-test-cu). Later suites are not started.
( while tgtd_alive; do sleep 1; done
  [[ -s $pidfile ]] && kill -TERM "$(cat "$pidfile")" 2>/dev/null ) &
watchdog=$!

tadm() { tgtadm -C "$control_port" --lld iscsi "$@"; }
iqn_prefix=iqn.2026-01.org.rbio:conformance
init1=$iqn_prefix.initiator1
init2=$iqn_prefix.initiator2

# add_lun TID NAME BSTYPE: one target with LUN 1 on a fresh sparse file.
add_lun() {
  local tid=$1 name=$2 bs=$3 file=$shm/$2.img
  truncate -s "$size" "$file"
  tadm --op new --mode target --tid "$tid" -T "$iqn_prefix.$name"
  if ! tadm --op new --mode logicalunit --tid "$tid" --lun 1 -b "$file" --bstype "$bs"; then
    tail -n 20 "$tgtd_state/tgtd.log" >&2 || true
    die "tgtd refused a LUN with --bstype $bs (module missing or failing to open $file?)"
  fi
  if [[ -n $digest ]]; then
    tadm --op update --mode target --tid "$tid" --name HeaderDigest --value "$digest"
  fi
  tadm --op bind --mode target --tid "$tid" -I ALL
}
add_lun 1 "$bname" "$baseline"
add_lun 2 "$cname" "$bstype"
if (( thin_param )); then
  tadm --op update --mode logicalunit --tid 2 --lun 1 --params thin_provisioning=1
fi
[[ -n $digest ]] && echo "   header digest on both targets: $digest"
# Record what tgtd made of the LUNs: a candidate that should be thin but shows
# "Thin-provisioning: No" explains a wall of skipped tests at a glance.
tadm --op show --mode target | awk '
  /^Target [0-9]+:/ { target = $3 }
  /^ *LUN: / { lun = $2 }
  lun == 1 && /Backing store type:|Thin-provisioning:/ { sub(/^ */, ""); info[target] = info[target] "  " $0 }
  END { for (t in info) print "   " t info[t] }' | sort

iscsi-test-cu -l > "$results/all-tests.txt"

python3 "$helper" plan --listing "$results/all-tests.txt" --pattern "$tests" > "$results/plan.txt"
[[ -s $results/plan.txt ]] || die "--tests '$tests' selects no test (see $results/all-tests.txt)"

# run_lun NAME: the selection against LUN 1 of target NAME, one iscsi-test-cu
# process per suite (see cu_results.py plan for why), all within one
# --timeout budget. Sets lun_bad to the number of runs that did not end
# normally.
run_lun() {
  local name=$1 url suite arg t0 s0 rc left
  url="iscsi://127.0.0.1:$portal_port/$iqn_prefix.$name/1"
  local urls=("$url")
  (( multipath )) && urls+=("$url")
  log "$name: iscsi-test-cu per suite of --test=$tests against ${urls[*]}"
  : > "$results/$name.log"; : > "$results/$name.timed"; : > "$results/$name.suite-times"
  t0=$SECONDS lun_bad=0
  while IFS=$'\t' read -r suite arg <&3; do
    left=$(( suite_timeout - (SECONDS - t0) ))
    if (( left <= 0 )); then
      echo "   $name: time budget of ${suite_timeout}s used up before $suite; the rest did not run"
      lun_bad=$(( lun_bad + 1 )); break
    fi
    # Without tgtd every remaining suite would only fail to log in.
    if ! tgtd_alive; then
      echo "   $name: tgtd is gone; $suite and the rest did not run"
      lun_bad=$(( lun_bad + 1 )); break
    fi
    s0=$EPOCHREALTIME
    # -d allows the destructive tests (the LUN is a scratch file). stdbuf
    # keeps the output line buffered so the stamper's per-test times are
    # real; kill-after ends a run that ignores SIGTERM. The pipeline runs in
    # the background because bash defers a trapped SIGINT/SIGTERM until a
    # foreground command ends, while a wait returns at once; the suite's
    # pid is recorded for the watchdog and for cleanup.
    rm -f "$pidfile" "$rcfile"
    (
      set +e
      timeout --kill-after=10 "$left" \
        stdbuf -oL -eL iscsi-test-cu -d -i "$init1" -I "$init2" --test="$arg" "${urls[@]}" \
        < /dev/null 3<&- &
      echo $! > "$pidfile"
      wait $!
      echo $? > "$rcfile"
    ) 2>&1 | python3 "$helper" stamp "$results/$name.log" "$results/$name.timed" &
    wait $! || true
    rc=$(cat "$rcfile" 2>/dev/null || echo 255)
    rm -f "$pidfile"
    printf '%s\t%s\t%s\n' "$(awk -v a="$s0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')" \
      "$suite" "$rc" >> "$results/$name.suite-times"
    case $rc in
      0|1) ;;   # 1 only means "some test failed"
      124|137) echo "   $name: $suite TIMED OUT (budget ${suite_timeout}s)"; lun_bad=$(( lun_bad + 1 )) ;;
      143) echo "   $name: $suite stopped: tgtd died under it"; lun_bad=$(( lun_bad + 1 )) ;;
      *) echo "   $name: $suite: iscsi-test-cu exited with status $rc"; lun_bad=$(( lun_bad + 1 )) ;;
    esac
  done 3< "$results/plan.txt"
  durations[$name]=$(( SECONDS - t0 ))
  python3 "$helper" parse --timed "$results/$name.timed" --listing "$results/all-tests.txt" \
    --pattern "$tests" --out "$results/$name" --suite-times "$results/$name.suite-times"
  printf '   %s: %s in %ds\n' "$name" "$(cat "$results/$name.summary")" "${durations[$name]}"
}

declare -A durations
checks_ok=0 checks_bad=0
# The baseline runs first: if the candidate brings tgtd down, the baseline's
# results are already in.
run_lun "$bname"; base_bad=$lun_bad
run_lun "$cname"; cand_bad=$lun_bad

# Infrastructure checks. A baseline that did not complete makes the
# comparison meaningless; a candidate that did not complete or a tgtd that
# died (a backing-store module runs inside tgtd) is a failure in itself.
check() {
  if "$@"; then checks_ok=$(( checks_ok + 1 )); return 0; fi
  checks_bad=$(( checks_bad + 1 )); return 1
}
check test "$base_bad" -eq 0 \
  || echo "FAILED: $base_bad iscsi-test-cu run(s) on $bname did not end normally (see above)"
check test "$cand_bad" -eq 0 \
  || echo "FAILED: $cand_bad iscsi-test-cu run(s) on $cname did not end normally (see above)"
check tgtd_alive \
  || echo "FAILED: tgtd (pid $tgtd_pid) died during the run; see $results/tgtd.log"

echo
python3 "$helper" compare --baseline "$results/$bname" --candidate "$results/$cname" \
  --bname "$bname" --cname "$cname" --thin "$here/thin-tests.txt" \
  --flaky "$here/known-flaky.txt" --all-names "$results/all-tests.txt" \
  --counts "$results/compare.counts"
read -r ok bad < "$results/compare.counts"
checks_ok=$(( checks_ok + ok )) checks_bad=$(( checks_bad + bad ))

echo
printf '%-24s %7s %7s %7s %7s %6s\n' "backing store" passed failed skipped notrun time
for n in "$bname" "$cname"; do
  printf '%-24s %7d %7d %7d %7d %5ds\n' "$n" \
    "$(wc -l < "$results/$n.passed")" "$(wc -l < "$results/$n.failed")" \
    "$(wc -l < "$results/$n.skipped")" "$(wc -l < "$results/$n.notrun")" "${durations[$n]}"
done
echo "total run time $(( SECONDS - t_run ))s; results in $results"
echo "$checks_ok passed, $checks_bad failed"
(( checks_bad == 0 ))
