#!/usr/bin/env bash
# Conformance checks on one stock tgtd with libiscsi's iscsi-test-cu, in one
# of two modes. Both compare a candidate run against a baseline run of the
# same test selection and fail on anything that passes in the baseline but
# not in the candidate; tests listed in known-flaky.txt are only reported.
#
# --compare backing-store (the default): a tgt backing store against a stock
# one. tgtd serves two targets, each with one LUN on its own sparse file on
# tmpfs:
#   baseline  --bstype <baseline>  (stock rdwr by default)
#   candidate --bstype <bstype>    (rbio by default)
# Both share tgtd's SCSI emulation, so a difference points at the backing
# store. The candidate must also pass the thin provisioning tests listed in
# thin-tests.txt, which a fully provisioned baseline skips or fails.
#
# --compare transport: the iSCSI/TCP transport. tgtd (the same one for both
# sides) listens on two portals, gets RBIO_TRANSPORT=on,
# RBIO_PORTALS=127.0.0.1:<rbio portal> and RBIO_CONFIG=/dev/null (no
# /etc/rbio/tgtd.conf), and serves:
#   stock  127.0.0.1:<--portal-port>       tgt's own transport
#   rbio   127.0.0.1:<--rbio-portal-port>  rbio's transport (bs_rbio.so)
# (a bs_rbio.so without the transport leaves both portals stock, and the
# comparison must then hold trivially). For each --digest setting there is
# one target with one --bstype LUN; the selection runs through the stock
# portal, then, on a fresh file under the same LUN, through the rbio portal.
# Through each portal libiscsi's tools (iscsi-ls, iscsi-inq, iscsi-readcapacity16,
# iscsi-swp, iscsi-perf) run first; whatever exits 0 through stock must exit
# 0 through rbio, and print the same (iscsi-perf: exit status only).
#
# Both modes check, before the suites, that the header digest asked for is
# the one negotiated (a libiscsi login through the run's portal).
#
# Usage: run-conformance.sh --state DIR [options]
#   --compare MODE       backing-store (default) or transport
#   --modules DIR        folder with bs_<bstype>.so for tgtd's backing-store
#                        path (omit for built-in backing stores)
#   --state DIR          scratch folder (tgtd state, logs, default results)
#   --control-port N     tgtd control port (default 5800)
#   --portal-port P      iSCSI portal port on 127.0.0.1 (default 13800); in
#                        transport mode the stock portal
#   --rbio-portal-port P transport mode: the portal rbio's transport takes
#                        over (default: --portal-port + 1)
#   --bstype NAME        candidate backing store; in transport mode that of
#                        every LUN (default rbio)
#   --baseline NAME      baseline backing store (default rdwr; backing-store
#                        mode only)
#   --results DIR        where result files go (default STATE/results)
#   --tests PATTERN      iscsi-test-cu selection (default ALL). This is
#                        iscsi-test-cu's syntax, not a regex:
#                        FAMILY[.SUITE[.TEST]] with shell wildcards, several
#                        separated by commas, e.g. 'ALL.Unmap,ALL.WriteSame*'
#   --digest LIST        header digest settings, comma-separated: none,
#                        crc32c; each gives its own pair of runs (default:
#                        tgtd's, none, in backing-store mode; none,crc32c in
#                        transport mode). Set on the target side:
#                        iscsi-test-cu 1.19 ignores the URL's
#                        ?header_digest= and always offers "None,CRC32C", so
#                        only a target that accepts just CRC32C makes the
#                        suite run with digests. (libiscsi offers no data
#                        digest at all.)
#   --thin-param         also set thin_provisioning=1 with tgtadm on the
#                        candidate LUN (every LUN in transport mode); off:
#                        the module must enable it itself
#   --multipath          give iscsi-test-cu each LUN twice (two sessions), so
#                        the MultipathIO tests run instead of skipping
#   --size SIZE          size of each LUN's file (default 128M)
#   --candidate-rbd CONF backing-store mode: the candidate LUN is an RBD image
#                        (pool rbd, image conformance-tTID, made fresh for
#                        each run) of the Ceph cluster CONF names, served as
#                        rbd:rbd/IMAGE with bsopts rbd_conf=CONF
#   --timeout SEC        time budget for all suites of one run (default 600);
#                        suites not started within it count as not run
#
# Output, for each run NAME: the backing store (rdwr, rbio; with the same
# bstype on both sides the candidate becomes <bstype>-thin or
# <bstype>-candidate) in backing-store mode, and <transport>-<digest>
# (stock-none, rbio-none, stock-crc32c, rbio-crc32c) in transport mode; with
# several digest settings in backing-store mode -<digest> is appended too:
#   RESULTS/NAME.{passed,failed,skipped,notrun}  SUITE.TEST names, sorted
#   RESULTS/NAME.skip-reasons   why each skipped test skipped
#   RESULTS/NAME.log            iscsi-test-cu's console output, all suites
#   RESULTS/NAME.suite-times    seconds, FAMILY.SUITE, exit status per run
#   RESULTS/NAME.times          seconds per test
#   RESULTS/NAME.login          the target's login replies (negotiated keys)
#   RESULTS/NAME.tools/         transport mode: each tool's output (ID.out),
#                               exit status (ID.rc) and command (index)
#   RESULTS/rbio-transport.stats  transport mode: the transport's counters
#                               (RBIO_STATS_FILE), if it writes any
#   RESULTS/tgtd.log, RESULTS/summary.txt
# and on stdout a summary (a table per run, then per digest setting) whose
# last line is "N passed, M failed" (checks that held, regressions). Exit
# status 0 only if M is 0; 2 on a setup error.
set -euo pipefail
# EPOCHREALTIME and awk must agree on the decimal point; sort on collation.
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
sandbox=$repo/scripts/tgtd-sandbox.sh
helper=$here/cu_results.py

die() { printf 'run-conformance: error: %s\n' "$*" >&2; exit 2; }
log() { printf '== %s\n' "$*"; }

compare=backing-store modules="" state="" control_port=5800 portal_port=13800
rbio_port="" bstype=rbio baseline=rdwr results="" tests=ALL digest_list=-
thin_param=0 multipath=0 size=128M suite_timeout=600 candidate_rbd=""
while (( $# )); do
  case $1 in
    --compare) compare=$2; shift 2 ;;
    --modules) modules=$2; shift 2 ;;
    --state) state=$2; shift 2 ;;
    --control-port) control_port=$2; shift 2 ;;
    --portal-port) portal_port=$2; shift 2 ;;
    --rbio-portal-port) rbio_port=$2; shift 2 ;;
    --bstype) bstype=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --digest) digest_list=$2; shift 2 ;;
    --thin-param) thin_param=1; shift ;;
    --multipath) multipath=1; shift ;;
    --size) size=$2; shift 2 ;;
    --candidate-rbd) candidate_rbd=$2; shift 2 ;;
    --timeout) suite_timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
if [[ -n $candidate_rbd ]]; then
  [[ $compare == backing-store ]] || die "--candidate-rbd works in backing-store mode only"
  [[ -r $candidate_rbd ]] || die "--candidate-rbd: cannot read $candidate_rbd"
  command -v rbd >/dev/null || die "--candidate-rbd: no rbd command (scripts/setup.sh installs ceph-common)"
fi
[[ -n $state ]] || die "--state DIR is required"
case $compare in
  backing-store|transport) ;;
  *) die "--compare must be backing-store or transport" ;;
esac
if [[ $compare == transport ]]; then
  : "${rbio_port:=$(( portal_port + 1 ))}"
else
  rbio_port=""
fi
for n in "$control_port" "$portal_port" ${rbio_port:+"$rbio_port"}; do
  [[ $n =~ ^[0-9]+$ ]] || die "ports must be numbers: $n"
done
[[ $rbio_port != "$portal_port" ]] || die "--rbio-portal-port must differ from --portal-port"
# RBIO_TEST_PORT_SHIFT moves every port, as for the integration tests
# (tests/lib/tgt-test.sh), so a second checkout's tests can run beside CI's.
port_shift=${RBIO_TEST_PORT_SHIFT:-0}
[[ $port_shift =~ ^[0-9]+$ ]] || die "RBIO_TEST_PORT_SHIFT must be a number"
control_port=$((control_port + port_shift)) portal_port=$((portal_port + port_shift))
[[ -z $rbio_port ]] || rbio_port=$((rbio_port + port_shift))
[[ $suite_timeout =~ ^[0-9]+$ ]] || die "--timeout must be a number of seconds"
# digests: the settings as given (none, crc32c; "" = tgtd's default).
if [[ $digest_list == - ]]; then
  [[ $compare == transport ]] && digest_list=none,crc32c || digest_list=""
fi
IFS=, read -r -a digests <<< "$digest_list"
(( ${#digests[@]} )) || digests=("")
declare -A seen_digest
for d in "${digests[@]}"; do
  case $d in
    ""|none|crc32c) ;;
    *) die "--digest takes none and/or crc32c (libiscsi has no data digest): $d" ;;
  esac
  [[ -z ${seen_digest[x$d]:-} ]] || die "--digest names ${d:-the default} twice"
  seen_digest[x$d]=1
done
# tgtadm's value for a digest setting.
tgt_digest() { case $1 in none) echo None ;; crc32c) echo CRC32C ;; esac; }

# A missing tool is a missing prerequisite: exit 77, which ctest reports
# as skipped (and scripts/test.sh fails on unless tests/allowed-skips.txt
# lists the test), never a pass.
missing_tool() { printf 'SKIP: %s not found (scripts/setup.sh installs it)\n' "$1"; exit 77; }
for tool in tgtadm iscsi-test-cu iscsi-inq timeout stdbuf python3 ss; do
  command -v "$tool" >/dev/null || missing_tool "$tool"
done
if [[ $compare == transport ]]; then
  for tool in iscsi-ls iscsi-readcapacity16 iscsi-swp iscsi-perf; do
    command -v "$tool" >/dev/null || missing_tool "$tool"
  done
fi
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

# ---- the plan: targets, runs and the pairs compared -----------------------
iqn_prefix=iqn.2026-01.org.rbio:conformance
init1=$iqn_prefix.initiator1
init2=$iqn_prefix.initiator2
# Targets by tid: IQN, backing store, digest setting, thin_provisioning=1.
declare -A t_iqn t_bs t_digest t_thin t_used t_rbd
# Runs by index: result name, what is compared (backing store or transport),
# digest setting, target, portal port.
run_name=() run_label=() run_digest=() run_tid=() run_port=()
# Pairs: "BASELINE_INDEX CANDIDATE_INDEX".
pairs=()
add_target() {   # TID IQN_SUFFIX BSTYPE DIGEST THIN [RBD_CONF]
  t_iqn[$1]=$iqn_prefix.$2 t_bs[$1]=$3 t_digest[$1]=$4 t_thin[$1]=$5 t_rbd[$1]=${6:-}
}
add_run() {      # NAME LABEL DIGEST TID PORT
  run_name+=("$1") run_label+=("$2") run_digest+=("$3") run_tid+=("$4") run_port+=("$5")
}
tid=0
if [[ $compare == transport ]]; then
  for d in "${digests[@]}"; do
    dn=${d:-default}
    tid=$(( tid + 1 ))
    add_target "$tid" "$bstype.$dn" "$bstype" "$d" "$thin_param"
    add_run "stock-$dn" stock "$d" "$tid" "$portal_port"
    add_run "rbio-$dn" rbio "$d" "$tid" "$rbio_port"
    pairs+=("$(( ${#run_name[@]} - 2 )) $(( ${#run_name[@]} - 1 ))")
  done
else
  # The result names double as file names; when both sides use the same
  # backing store (e.g. rdwr against rdwr --thin-param) they must still
  # differ.
  bname=$baseline cname=$bstype
  if [[ $bname == "$cname" ]]; then
    (( thin_param )) && cname=$bstype-thin || cname=$bstype-candidate
  fi
  for d in "${digests[@]}"; do
    sfx=""
    (( ${#digests[@]} > 1 )) && sfx=-${d:-default}
    tid=$(( tid + 1 ))
    add_target "$tid" "$bname$sfx" "$baseline" "$d" 0
    add_run "$bname$sfx" "$bname" "$d" "$tid" "$portal_port"
    tid=$(( tid + 1 ))
    add_target "$tid" "$cname$sfx" "$bstype" "$d" "$thin_param" "$candidate_rbd"
    add_run "$cname$sfx" "$cname" "$d" "$tid" "$portal_port"
    pairs+=("$(( ${#run_name[@]} - 2 )) $(( ${#run_name[@]} - 1 ))")
  done
fi

for n in "${run_name[@]}"; do
  rm -rf "$results/$n".{passed,failed,skipped,notrun,skip-reasons,times,notes,summary,log,timed,suite-times,login,tools}
done
rm -f "$results"/{plan.txt,compare.counts,all-tests.txt,tgtd.log,summary.txt}

# tgtadm talks to whichever tgtd owns the control port, so a port already in
# use would silently point our setup at somebody else's daemon.
tgtadm -C "$control_port" --mode system --op show >/dev/null 2>&1 \
  && die "control port $control_port is already served by another tgtd"
for p in "$portal_port" ${rbio_port:+"$rbio_port"}; do
  ss -Hltn "sport = :$p" | grep -q . && die "portal port $p is already in use"
done

# ---- tgtd ------------------------------------------------------------------
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
    local t
    for t in "${!t_iqn[@]}"; do
      tgtadm -C "$control_port" --lld iscsi --op delete --mode target --tid "$t" \
        --force >/dev/null 2>&1 || true
    done
    # A tgtd that crashed, hung or exited non-zero at shutdown fails the run.
    if ! "$sandbox" stop "$tgtd_state"; then
      echo "FAILED: tgtd did not shut down cleanly (see above; log: $results/tgtd.log)"
      (( rc != 0 )) || rc=1
    fi
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
tgtd_env=()
if [[ $compare == transport ]]; then
  sandbox_args+=(--portal "127.0.0.1:$rbio_port")
  # rbio's transport takes over only the rbio portal. RBIO_CONFIG=/dev/null:
  # an /etc/rbio/tgtd.conf on this machine must not change what is tested.
  # Its counters go with the results.
  tgtd_env=(RBIO_CONFIG=/dev/null RBIO_TRANSPORT=on "RBIO_PORTALS=127.0.0.1:$rbio_port"
            "RBIO_STATS_FILE=$results/rbio-transport.stats")
  rm -f "$results/rbio-transport.stats"
  echo "   tgtd environment: ${tgtd_env[*]}"
fi
started=1
env "${tgtd_env[@]}" "$sandbox" "${sandbox_args[@]}"
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

# add_lu TID: LUN 1 of target TID on a fresh sparse file, or a fresh RBD
# image (--candidate-rbd).
add_lu() {
  local tid=$1 file=$shm/target$1.img
  local extra=()
  if [[ -n ${t_rbd[$tid]} ]]; then
    local conf=${t_rbd[$tid]} image=conformance-t$tid
    timeout 60 rbd -c "$conf" rm "$image" >/dev/null 2>&1 || :
    timeout 60 rbd -c "$conf" create --size "$size" "$image" || die "cannot create RBD image $image (cluster $conf)"
    file=rbd:rbd/$image
    extra=(--bsopts "rbd_conf=$conf")
  else
    rm -f "$file"
    truncate -s "$size" "$file"
  fi
  if ! tadm --op new --mode logicalunit --tid "$tid" --lun 1 -b "$file" --bstype "${t_bs[$tid]}" "${extra[@]}"; then
    tail -n 20 "$tgtd_state/tgtd.log" >&2 || true
    die "tgtd refused a LUN with --bstype ${t_bs[$tid]} (module missing or failing to open $file?)"
  fi
  if (( t_thin[$tid] )); then
    tadm --op update --mode logicalunit --tid "$tid" --lun 1 --params thin_provisioning=1
  fi
}
# reset_lu TID: LUN 1 again on a fresh file, so that each run starts from the
# same state. tgt refuses to remove an LU while commands are in flight.
reset_lu() {
  local tid=$1 i
  for (( i = 0; i < 50; i++ )); do
    tadm --op delete --mode logicalunit --tid "$tid" --lun 1 2>/dev/null && break
    sleep 0.2
  done
  (( i < 50 )) || die "could not remove LUN 1 of target $tid to reset it"
  add_lu "$tid"
}
for tid in $(printf '%s\n' "${!t_iqn[@]}" | sort -n); do
  tadm --op new --mode target --tid "$tid" -T "${t_iqn[$tid]}"
  add_lu "$tid"
  if [[ -n ${t_digest[$tid]} ]]; then
    tadm --op update --mode target --tid "$tid" --name HeaderDigest \
      --value "$(tgt_digest "${t_digest[$tid]}")"
  fi
  tadm --op bind --mode target --tid "$tid" -I ALL
done
# Record what tgtd made of the LUNs: a candidate that should be thin but shows
# "Thin-provisioning: No" explains a wall of skipped tests at a glance.
tadm --op show --mode target | awk '
  /^Target [0-9]+:/ { target = $3 }
  /^ *LUN: / { lun = $2 }
  lun == 1 && /Backing store type:|Thin-provisioning:/ { sub(/^ */, ""); info[target] = info[target] "  " $0 }
  END { for (t in info) print "   " t info[t] }' | sort
for tid in $(printf '%s\n' "${!t_iqn[@]}" | sort -n); do
  [[ -n ${t_digest[$tid]} ]] \
    && echo "   ${t_iqn[$tid]}: header digest $(tgt_digest "${t_digest[$tid]}")"
done

iscsi-test-cu -l > "$results/all-tests.txt"

python3 "$helper" plan --listing "$results/all-tests.txt" --pattern "$tests" > "$results/plan.txt"
[[ -s $results/plan.txt ]] || die "--tests '$tests' selects no test (see $results/all-tests.txt)"

# ---- one run -----------------------------------------------------------------
run_url() { echo "iscsi://127.0.0.1:${run_port[$1]}/${t_iqn[${run_tid[$1]}]}/1"; }

# probe_digest I: logs in through run I's portal with libiscsi's defaults (as
# iscsi-test-cu does) and sets negotiated to the header digest the target
# chose (empty if the login failed).
probe_digest() {
  local i=$1 name=${run_name[$1]}
  LIBISCSI_DEBUG=6 timeout --kill-after=5 60 iscsi-inq -i "$init1" "$(run_url "$i")" \
    2>&1 >/dev/null < /dev/null | grep -o 'TargetLoginReply: .*' > "$results/$name.login" || true
  negotiated=$(sed -n 's/^TargetLoginReply: HeaderDigest=\([^ ]*\).*/\1/p' "$results/$name.login" | head -n 1)
}

# run_tools I: libiscsi's tools through run I's portal, each with its output,
# exit status and command kept in RESULTS/NAME.tools/ for cu_results.py
# compare-tools. The kind says what must match between baseline and
# candidate: "output" (exit status and output) or "status" (exit status).
run_tools() {
  local i=$1 url portal
  tools_dir=$results/${run_name[$i]}.tools
  url=$(run_url "$i") portal=iscsi://127.0.0.1:${run_port[$i]}
  rm -rf "$tools_dir"; mkdir -p "$tools_dir"
  echo "127.0.0.1:${run_port[$i]}" > "$tools_dir/portal"
  tool ls-luns output iscsi-ls -i "$init1" -s "$portal"
  tool ls-urls output iscsi-ls -i "$init1" --url "$portal"
  tool inq output iscsi-inq -i "$init1" "$url"
  # VPD pages 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2 (iscsi-inq takes decimal).
  local page
  for page in 0 128 131 176 177 178; do
    tool "inq-vpd-$(printf '0x%02x' "$page")" output iscsi-inq -i "$init1" -e 1 -c "$page" "$url"
  done
  tool readcapacity16 output iscsi-readcapacity16 -i "$init1" "$url"
  tool readcapacity16-size output iscsi-readcapacity16 -i "$init1" -s "$url"
  tool swp-show output iscsi-swp -i "$init1" "$url"
  tool swp-on output iscsi-swp -i "$init1" -s on "$url"
  tool swp-show-on output iscsi-swp -i "$init1" "$url"
  tool swp-off output iscsi-swp -i "$init1" -s off "$url"
  tool swp-show-off output iscsi-swp -i "$init1" "$url"
  # Throughput varies from run to run; what must hold is a clean exit.
  tool perf-seq status iscsi-perf -i "$init1" -t 2 "$url"
  tool perf-random status iscsi-perf -i "$init1" -t 2 -r "$url"
  echo "   ${run_name[$i]}: libiscsi tools: $(tools_exited_0 "$tools_dir") exited 0"
}
# tools_exited_0 DIR: "N/M", N of the M tools run into DIR exited 0.
tools_exited_0() {
  echo "$(cat "$1"/*.rc | grep -cx 0 || true)/$(wc -l < "$1/index")"
}
# tool ID KIND COMMAND...: one tool run for run_tools (into tools_dir).
tool() {
  local id=$1 kind=$2 rc=0
  shift 2
  printf '%s\t%s\t%s\n' "$id" "$kind" "$*" >> "$tools_dir/index"
  timeout --kill-after=5 60 "$@" > "$tools_dir/$id.out" 2>&1 < /dev/null || rc=$?
  echo "$rc" > "$tools_dir/$id.rc"
}

# run_suites I: the selection against run I's LUN, one iscsi-test-cu process
# per suite (see cu_results.py plan for why), all within one --timeout
# budget. Sets run_bad to the number of runs that did not end normally.
run_suites() {
  local i=$1 name=${run_name[$1]} url suite arg t0 s0 rc left
  url=$(run_url "$i")
  local urls=("$url")
  (( multipath )) && urls+=("$url")
  log "$name: iscsi-test-cu per suite of --test=$tests against ${urls[*]}"
  : > "$results/$name.log"; : > "$results/$name.timed"; : > "$results/$name.suite-times"
  t0=$SECONDS run_bad=0
  while IFS=$'\t' read -r suite arg <&3; do
    left=$(( suite_timeout - (SECONDS - t0) ))
    if (( left <= 0 )); then
      echo "   $name: time budget of ${suite_timeout}s used up before $suite; the rest did not run"
      run_bad=$(( run_bad + 1 )); break
    fi
    # Without tgtd every remaining suite would only fail to log in.
    if ! tgtd_alive; then
      echo "   $name: tgtd is gone; $suite and the rest did not run"
      run_bad=$(( run_bad + 1 )); break
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
      suite_rc=$?
      rm -f "$pidfile"  # reaped: the watchdog and cleanup must not signal a recycled pid
      echo "$suite_rc" > "$rcfile"
    ) 2>&1 | python3 "$helper" stamp "$results/$name.log" "$results/$name.timed" &
    # The pipeline's status is the stamper's (the suite's is in $rcfile): a
    # failed stamper means a log and times that cannot be trusted.
    if ! wait $!; then
      echo "   $name: $suite: the log stamper failed; its results are incomplete"
      run_bad=$(( run_bad + 1 ))
    fi
    rc=$(cat "$rcfile" 2>/dev/null || echo 255)
    rm -f "$pidfile"
    printf '%s\t%s\t%s\n' "$(awk -v a="$s0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')" \
      "$suite" "$rc" >> "$results/$name.suite-times"
    case $rc in
      0|1) ;;   # 1 only means "some test failed"
      124|137) echo "   $name: $suite TIMED OUT (budget ${suite_timeout}s)"; run_bad=$(( run_bad + 1 )) ;;
      143) echo "   $name: $suite stopped: tgtd died under it"; run_bad=$(( run_bad + 1 )) ;;
      *) echo "   $name: $suite: iscsi-test-cu exited with status $rc"; run_bad=$(( run_bad + 1 )) ;;
    esac
  done 3< "$results/plan.txt"
  durations[$i]=$(( SECONDS - t0 ))
  python3 "$helper" parse --timed "$results/$name.timed" --listing "$results/all-tests.txt" \
    --pattern "$tests" --out "$results/$name" --suite-times "$results/$name.suite-times"
  printf '   %s: %s in %ds\n' "$name" "$(cat "$results/$name.summary")" "${durations[$i]}"
}

checks_ok=0 checks_bad=0
check() {
  if "$@"; then checks_ok=$(( checks_ok + 1 )); return 0; fi
  checks_bad=$(( checks_bad + 1 )); return 1
}

# ---- the runs, in order (the baseline of each pair first: if the candidate
# brings tgtd down, the baseline's results are already in) -------------------
declare -A durations negotiated_by
for i in "${!run_name[@]}"; do
  name=${run_name[$i]} tid=${run_tid[$i]}
  if ! tgtd_alive; then
    echo "   $name: tgtd is gone; not run"
    durations[$i]=0 negotiated_by[$i]=""
    check false; continue
  fi
  (( ${t_used[$tid]:-0} )) && reset_lu "$tid"
  t_used[$tid]=1
  probe_digest "$i"
  negotiated_by[$i]=$negotiated
  if [[ -n ${run_digest[$i]} ]]; then
    want=$(tgt_digest "${run_digest[$i]}")
    check test "$negotiated" = "$want" \
      || echo "FAILED: $name: header digest ${negotiated:-(login failed)} negotiated, $want asked for (see $results/$name.login)"
  fi
  [[ $compare == transport ]] && run_tools "$i"
  run_suites "$i"
  # A baseline that did not complete makes the comparison meaningless; a
  # candidate that did not complete is a failure in itself.
  check test "$run_bad" -eq 0 \
    || echo "FAILED: $run_bad iscsi-test-cu run(s) on $name did not end normally (see above)"
done
# A backing-store module and rbio's transport run inside tgtd.
check tgtd_alive \
  || echo "FAILED: tgtd (pid $tgtd_pid) died during the run; see $results/tgtd.log"

# ---- comparisons -------------------------------------------------------------
compare_args=(--flaky "$here/known-flaky.txt" --all-names "$results/all-tests.txt"
              --counts "$results/compare.counts")
# Required of the candidate although the baseline cannot pass them: thin
# provisioning, and COMPARE AND WRITE on an rbio LUN (a file or RBD).
if [[ $compare == backing-store ]]; then
  cat "$here/thin-tests.txt" > "$results/required-tests.txt"
  [[ $bstype == rbio ]] && cat "$here/caw-tests.txt" >> "$results/required-tests.txt"
  compare_args+=(--thin "$results/required-tests.txt")
fi
for pair in "${pairs[@]}"; do
  read -r b c <<< "$pair"
  bn=${run_name[$b]} cn=${run_name[$c]}
  echo
  log "$cn against $bn"
  python3 "$helper" compare --baseline "$results/$bn" --candidate "$results/$cn" \
    --bname "$bn" --cname "$cn" "${compare_args[@]}"
  read -r ok bad < "$results/compare.counts"
  checks_ok=$(( checks_ok + ok )) checks_bad=$(( checks_bad + bad ))
  if [[ $compare == transport ]]; then
    python3 "$helper" compare-tools --baseline "$results/$bn.tools" \
      --candidate "$results/$cn.tools" --bname "$bn" --cname "$cn" \
      --counts "$results/compare.counts"
    read -r ok bad < "$results/compare.counts"
    checks_ok=$(( checks_ok + ok )) checks_bad=$(( checks_bad + bad ))
  fi
done

# The comparison means something only if the rbio portal really went
# through rbio's transport and the stock one did not.
if [[ $compare == transport ]]; then
  served="rbio: tcp: portal 127.0.0.1:%s served by rbio's transport"
  # shellcheck disable=SC2059
  if grep -qF "$(printf "$served" "$rbio_port")" "$tgtd_state/tgtd.log" &&
     ! grep -qF "$(printf "$served" "$portal_port")" "$tgtd_state/tgtd.log"; then
    checks_ok=$(( checks_ok + 1 ))
  else
    checks_bad=$(( checks_bad + 1 ))
    echo "FAIL: tgtd's log does not show :$rbio_port (only) taken over by rbio's transport"
  fi
  # The statistics file is rewritten once a second and when a connection
  # ends: wait (up to 10 s) for it to count one.
  stats_count_connections() {
    local c
    c=$(sed -n 's/^connections_total=//p' "$results/rbio-transport.stats" 2>/dev/null) || return 1
    (( ${c:-0} > 0 ))
  }
  for (( w = 0; w < 100; w++ )); do stats_count_connections && break; sleep 0.1; done
  if stats_count_connections; then
    checks_ok=$(( checks_ok + 1 ))
  else
    checks_bad=$(( checks_bad + 1 ))
    echo "FAIL: rbio's statistics file counts no connection: $results/rbio-transport.stats"
  fi
fi

# ---- summary -----------------------------------------------------------------
# count NAME RESULT: how many tests of run NAME had RESULT.
count() { if [[ -f $results/$1.$2 ]]; then wc -l < "$results/$1.$2"; else echo 0; fi; }
{
  echo
  # One row per run: what is compared, digest asked for, digest negotiated,
  # test counts, (transport mode) tools that exited 0, time of the suites.
  if [[ $compare == transport ]]; then
    transport_log=$(grep -a -i 'rbio.*transport' "$tgtd_state/tgtd.log" 2>/dev/null | head -n 3 || true)
    echo "rbio transport (tgtd's log): ${transport_log:-no mention}"
    printf '%-16s %-8s %-8s %7s %7s %7s %7s %6s %6s\n' transport digest login \
      passed failed skipped notrun tools time
  else
    printf '%-16s %-8s %-8s %7s %7s %7s %7s %6s\n' "backing store" digest login \
      passed failed skipped notrun time
  fi
  for i in "${!run_name[@]}"; do
    n=${run_name[$i]}
    row=("${run_label[$i]}" "${run_digest[$i]:-default}" "${negotiated_by[$i]:--}"
         "$(count "$n" passed)" "$(count "$n" failed)" "$(count "$n" skipped)"
         "$(count "$n" notrun)")
    if [[ $compare == transport ]]; then
      row[0]+=" :${run_port[$i]}"
      tools=-
      [[ -f $results/$n.tools/index ]] && tools=$(tools_exited_0 "$results/$n.tools")
      printf '%-16s %-8s %-8s %7d %7d %7d %7d %6s %5ds\n' "${row[@]}" "$tools" "${durations[$i]}"
    else
      printf '%-16s %-8s %-8s %7d %7d %7d %7d %5ds\n' "${row[@]}" "${durations[$i]}"
    fi
  done
  echo -n "(login: the header digest negotiated"
  [[ $compare == transport ]] && echo -n "; tools: libiscsi tools that exited 0"
  echo "; time: iscsi-test-cu's)"
  echo "total run time $(( SECONDS - t_run ))s; results in $results"
  echo "$checks_ok passed, $checks_bad failed"
} | tee "$results/summary.txt"
(( checks_bad == 0 ))
