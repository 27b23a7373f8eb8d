#!/usr/bin/env bash
# The Debian packages as an admin gets them: `cpack` builds rbio-tgt, rbio
# and rbio-fio from this build, and apt installs them into a clean Debian
# root (debootstrap of the host's release from Debian's mirror, cached by
# scripts/package-root.sh; each run works on an overlay over it, so the
# cached root stays clean), resolving every dependency (tgt, fio, the
# libraries) from the mirror. Then, inside that root (chroot, in private
# mount, PID and network namespaces):
#   - dpkg -s shows the Depends computed from the binaries, the exact tgt
#     and fio versions, and /etc/rbio/tgtd.conf as a conffile;
#   - tgtd -f --control-port N loads bs_rbio.so ("backing store 'rbio'
#     registered", the TCP portal taken over), tgtadm makes an rbio LU on a
#     file, the installed `rbio` reads it (inquiry) and fio writes and
#     verifies it through the installed engine;
#   - tgt.service's own ExecStart, ExecStartPost and ExecStop lines, read
#     from the unit file the tgt package installed and run word for word:
#     the module loads, a target of /etc/tgt/conf.d with bs-type rbio is
#     served, tgtd exits cleanly; the module's lines are in tgtd's output
#     (under systemd: the journal of tgt.service);
#   - rbio-session@.service: systemd-analyze verify, and its ExecStart and
#     ExecStop (with its EnvironmentFile) log in with a FUSE mount and out;
#   - rbio-tgt installed again while tgtd runs says it needs a restart, and
#     removed while /etc/tgt uses bs-type rbio warns, naming the file.
# The root's tgtds listen in their own network namespace, so the default
# portal 0.0.0.0:3260 of tgt.service clashes with nothing on the host.
source "$(dirname "$0")/../lib/tgt-test.sh"

CACHE="$RBIO_SOURCE_DIR/.cache/package-root"
CTL_PORT=80   # tgtd's control port (a socket in the root's own /run)
IQN=iqn.2026-11.io.rbio:package-test
SVC_IQN=iqn.2026-11.io.rbio:package-service
PATHS=PATH=/usr/sbin:/usr/bin:/sbin:/bin

[[ $(id -u) -eq 0 ]] || skip_test "needs root (debootstrap, chroot, namespaces)"
for t in debootstrap unshare nsenter chroot cpack dpkg-deb ip; do
  command -v "$t" >/dev/null || skip_test "$t not installed (scripts/setup.sh installs it)"
done
[[ -f $RBIO_BUILD_DIR/CPackConfig.cmake ]] || { echo "no $RBIO_BUILD_DIR/CPackConfig.cmake: configure first" >&2; exit 2; }

WORK=$(mktemp -d /dev/shm/rbio-package-XXXXXX)
R="$WORK/root"          # the root, mounted only inside the namespaces
NS_HOLDER="" NS=""
cleanup() {
  local rc=${1:-$?}
  set +e  # every step is best effort
  # Killing the PID namespace's first process kills every process in it;
  # unshare (which ignores SIGTERM while it waits) then exits, and the mounts
  # go with the mount namespace.
  [[ -z $NS ]] || kill -KILL "$NS" 2>/dev/null
  [[ -z $NS_HOLDER ]] || kill -KILL "$NS_HOLDER" 2>/dev/null
  [[ -z $NS_HOLDER ]] || wait "$NS_HOLDER" 2>/dev/null
  if (( rc != 0 )); then
    local f
    for f in "$WORK"/*.log; do
      [[ -f $f ]] || continue
      echo "--- ${f##*/} (last 30 lines) ---"; tail -30 "$f"
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

# in_ns COMMAND...: in the namespaces' mount and PID namespaces, on the
# host's network (apt reaches the mirror). in_root: chrooted into the root,
# with a clean environment. in_root_net: in the namespaces' own network
# (loopback only) as well.
in_ns() { nsenter -t "$NS" -m -p -- "$@"; }
in_root() { nsenter -t "$NS" -m -p -- chroot "$R" env -i "$PATHS" HOME=/root LANG=C.UTF-8 "$@"; }
in_root_net() { nsenter -t "$NS" -m -p -n -- chroot "$R" env -i "$PATHS" HOME=/root LANG=C.UTF-8 "$@"; }

t0=$SECONDS
# --- the clean root and the packages ----------------------------------------
check "the clean Debian root is prepared (scripts/package-root.sh)" \
  bash "$RBIO_SOURCE_DIR/scripts/package-root.sh" --quiet
# A shared lock: package-root.sh does not refresh the root under a run.
exec 9< "$CACHE/lock"
flock -s 9
echo "root ready after $((SECONDS - t0)) s"

build_packages() { (cd "$RBIO_BUILD_DIR" && cpack -B "$WORK/debs") > "$WORK/cpack.log" 2>&1; }
check "cpack builds the packages" build_packages
DEBS=()
for p in rbio-tgt rbio rbio-fio; do
  f=$(compgen -G "$WORK/debs/${p}_*.deb") || f=""
  check "cpack made $p" test -f "$f"
  DEBS+=("$f")
done
(( checks_failed == 0 )) || exit 1

# --- namespaces and the root's overlay --------------------------------------
unshare --mount --propagation private --pid --net --fork --kill-child -- sleep infinity &
NS_HOLDER=$!
ns_ready() {
  local c
  c=$(cat "/proc/$NS_HOLDER/task/$NS_HOLDER/children" 2>/dev/null) || return 1
  [[ -n $c ]] && NS=${c%% *}
}
wait_for 10 ns_ready || { echo "FAIL: the namespaces did not start"; exit 1; }
mkdir -p "$WORK/upper" "$WORK/ovl" "$R"
mount_root() {
  in_ns mount -t overlay overlay -o "lowerdir=$CACHE/root,upperdir=$WORK/upper,workdir=$WORK/ovl" "$R"
  in_ns mount -t proc proc "$R/proc"
  in_ns mount --bind /dev "$R/dev"
  in_ns mount --bind "$(realpath /etc/resolv.conf)" "$R/etc/resolv.conf"
  # apt's downloads, kept between runs (package-root.sh's archives/).
  in_ns mount --bind "$CACHE/archives" "$R/var/cache/apt/archives"
  nsenter -t "$NS" -n -- ip link set lo up
}
check "a fresh overlay of the clean root is mounted" mount_root

# --- apt install -------------------------------------------------------------
# Readable for apt's unprivileged _apt user.
in_ns install -d -m 755 "$R/tmp/debs"
in_ns install -m 644 "${DEBS[@]}" "$R/tmp/debs/"
ROOT_DEBS=()
for f in "${DEBS[@]}"; do ROOT_DEBS+=("/tmp/debs/${f##*/}"); done
t1=$SECONDS
apt_install() {
  in_root DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${ROOT_DEBS[@]}" \
    > "$WORK/apt.log" 2>&1
}
check "apt-get install rbio-tgt rbio rbio-fio (dependencies from the mirror)" apt_install
echo "apt-get install: $((SECONDS - t1)) s, $(grep -c '^Setting up ' "$WORK/apt.log") packages set up"
(( checks_failed == 0 )) || exit 1

# --- what dpkg knows -------------------------------------------------------------
field() { in_root dpkg-query -W -f="\${$2}" "$1"; }
host_tgt=$(dpkg-query -W -f='${Version}' tgt)
host_fio=$(dpkg-query -W -f='${Version}' fio)
# depends_has PACKAGE ENTRY: the installed package's Depends lists ENTRY.
depends_has() {
  local d
  d=$(field "$1" Depends)
  [[ ", $d, " == *", $2, "* ]] || { echo "  $1 Depends: $d (no '$2')"; return 1; }
}
# The Depends dpkg installed are those cpack computed (dpkg-shlibdeps).
same_depends() { [[ $(field "$1" Depends) == $(dpkg-deb -f "$2" Depends) ]]; }
for i in 0 1 2; do
  p=$(dpkg-deb -f "${DEBS[$i]}" Package)
  check "$p is installed" eval '[[ $(field "$p" Status) == "install ok installed" ]]'
  check "$p's installed Depends are the computed ones: $(field "$p" Depends)" same_depends "$p" "${DEBS[$i]}"
done
check "rbio-tgt Depends tgt (= $host_tgt), the tgt it was built for" depends_has rbio-tgt "tgt (= $host_tgt)"
for lib in liburing2 libibverbs1 librdmacm1 libstdc++6; do
  check "rbio-tgt Depends $lib (computed from bs_rbio.so)" eval 'depends_has rbio-tgt "$(field rbio-tgt Depends | grep -o "$lib ([^)]*)")"'
done
check "rbio-fio Depends fio (= $host_fio)" depends_has rbio-fio "fio (= $host_fio)"
check "rbio Depends fuse3 (fusermount3)" depends_has rbio fuse3
for lib in libfuse3-3 libopeniscsiusr libboost-log1.74.0 libssl3; do
  check "rbio Depends $lib (computed from rbio)" eval 'depends_has rbio "$(field rbio Depends | grep -o "$lib ([^)]*)")"'
done
check "the root's tgt is the one rbio-tgt was built for ($host_tgt)" eval '[[ $(field tgt Version) == "$host_tgt" ]]'
check "/etc/rbio/tgtd.conf is a conffile of rbio-tgt" eval '[[ $(field rbio-tgt Conffiles) == *"/etc/rbio/tgtd.conf "* ]]'
check "bs_rbio.so is in tgtd's module folder" in_root test -f /usr/lib/tgt/backing-store/bs_rbio.so
check "rbio-tgt ships the alerting rules and the pages they name (metrics, Ceph RBD, several gateways)" eval \
  'in_root test -f /usr/share/doc/rbio-tgt/examples/rbio-alerts.yml && in_root test -f /usr/share/doc/rbio-tgt/metrics.md &&
   in_root test -f /usr/share/doc/rbio-tgt/ceph-rbd.md && in_root test -f /usr/share/doc/rbio-tgt/several-gateways.md'
check "rbio ships the several-gateways page its own links to" in_root test -f /usr/share/doc/rbio/several-gateways.md
rbio_help() {
  in_root rbio --help > "$WORK/help.out" 2>&1
  [[ $(head -1 "$WORK/help.out") == "usage: rbio "* ]]
}
check "rbio --help runs" rbio_help
check "rbio --version names the package's version" eval '[[ $(in_root rbio --version) == "rbio $(field rbio Version)" ]]'
check "rbio-session@.service is installed" in_root test -f /lib/systemd/system/rbio-session@.service

# --- tgtd -f --control-port N, tgtadm, rbio, fio -----------------------------
TGTD_JOB=""
# start_tgtd LOG COMMAND...: COMMAND (a tgtd in the foreground) in the root's
# network namespace, its output in LOG.
start_tgtd() {
  local log=$1; shift
  nsenter -t "$NS" -m -p -n -- chroot "$R" env -i "$PATHS" LANG=C.UTF-8 "$@" > "$log" 2>&1 < /dev/null &
  TGTD_JOB=$!
}
# stopped_cleanly: the tgtd of TGTD_JOB exited with status 0 within 30 s.
stopped_cleanly() {
  local rc=0
  wait_for 30 eval '! kill -0 "$TGTD_JOB" 2>/dev/null' || { echo "  tgtd still running"; return 1; }
  wait "$TGTD_JOB" || rc=$?
  TGTD_JOB=""
  (( rc == 0 )) || { echo "  tgtd exited with status $rc"; return 1; }
}
tadm_root() { in_root_net tgtadm -C "$CTL_PORT" --lld iscsi "$@"; }
log_in() { grep -q -- "$2" "$WORK/$1"; }

start_tgtd "$WORK/tgtd.log" tgtd -f --control-port "$CTL_PORT"
check "tgtd answers on control port $CTL_PORT" wait_for 30 tadm_root --mode system --op show
check "tgtd's log: the packaged version, backing store 'rbio' registered" \
  wait_for 10 log_in tgtd.log "version $(field rbio-tgt Version), backing store 'rbio' registered (built against tgt $host_tgt)"
check "tgtd's log: the TCP portal served by rbio's transport" wait_for 10 log_in tgtd.log "served by rbio's transport"
check "tgtadm lists rbio among the backing stores" eval 'tadm_root --mode system --op show | grep -qw rbio'
make_lu() {
  in_root truncate -s 64M /srv/lun1.img
  tadm_root --op new --mode target --tid 1 -T "$IQN"
  tadm_root --op new --mode logicalunit --tid 1 --lun 1 -b /srv/lun1.img --bstype rbio
  tadm_root --op bind --mode target --tid 1 -I ALL
  tadm_root --op show --mode target | grep -q "Backing store type: rbio"
}
check "tgtadm creates an rbio LU on a file" make_lu
check "the installed rbio reads it (rbio inquiry)" eval \
  'in_root_net rbio inquiry -T "$IQN" -p 127.0.0.1:3260 --lun 1 > "$WORK/inquiry.log" 2>&1'
fio_job() {
  in_ns tee "$R/tmp/verify.fio" > /dev/null <<JOB
[verify]
ioengine=external:/usr/lib/rbio/fio/librbio_fio.so
portal=127.0.0.1:3260
target=$IQN
lun=1
rw=randwrite
bs=64k
iodepth=8
size=8m
verify=crc32c
do_verify=1
verify_fatal=1
JOB
  in_root_net fio /tmp/verify.fio > "$WORK/fio.log" 2>&1
}
check "the installed fio writes and verifies the LU through rbio-fio's engine" fio_job
# As tgt's own ExecStop: the targets go first (their LUs close their
# backing stores), then tgtd (it refuses while a target exists).
stop_tgtd() {
  tadm_root --op delete --mode target --tid 1 --force
  in_root_net tgtadm -C "$CTL_PORT" --op delete --mode system
}
check "tgtd stops (tgtadm: delete the target, then the system)" stop_tgtd
check "tgtd exits cleanly" stopped_cleanly

# --- tgt.service, word for word ---------------------------------------------------
UNIT=/lib/systemd/system/tgt.service
unit_lines() { in_ns sed -n "s/^$2=//p" "$R$1"; }
# run_line LINE: one Exec line as systemd runs it without a shell: words
# split at spaces. A line with quoting, variables, specifiers or a prefix
# (- @ + !) is refused, so that a changed unit is looked at again.
run_line() {
  local words
  [[ $1 =~ ^/[A-Za-z0-9_./=\ -]*$ ]] || { echo "  not a plain command line: $1"; return 1; }
  read -ra words <<< "$1"
  in_root_net "${words[@]}" >> "$WORK/service-commands.log" 2>&1
}
mapfile -t starts < <(unit_lines "$UNIT" ExecStart)
check "tgt.service has one ExecStart: ${starts[*]}" eval '(( ${#starts[@]} == 1 ))'
config_target() {
  in_root truncate -s 32M /srv/svc.img
  in_ns tee "$R/etc/tgt/conf.d/rbio-package-test.conf" > /dev/null <<CONF
<target $SVC_IQN>
    <backing-store /srv/svc.img>
        bs-type rbio
    </backing-store>
    initiator-address ALL
</target>
CONF
}
check "a target with bs-type rbio in /etc/tgt/conf.d" config_target
# Else the checks of tgt.service and rbio-session@ below cannot run: a
# failure, not a silent pass.
check "tgt.service's ExecStart is a plain command line (no quoting, \$VAR or prefix)" \
  eval '[[ ${starts[0]:-} =~ ^/[A-Za-z0-9_./=\ -]*$ ]]'
if (( ${#starts[@]} == 1 )) && [[ ${starts[0]} =~ ^/[A-Za-z0-9_./=\ -]*$ ]]; then
  read -ra start_words <<< "${starts[0]}"
  start_tgtd "$WORK/tgt.service.log" "${start_words[@]}"
  check "tgt.service's ExecStart answers (tgtadm --mode system --op show)" \
    wait_for 30 in_root_net tgtadm --mode system --op show
  check "tgt.service's tgtd logs: backing store 'rbio' registered" \
    wait_for 10 log_in tgt.service.log "backing store 'rbio' registered"
  check "tgt.service's tgtd logs: portal 0.0.0.0:3260 served by rbio's transport" \
    wait_for 10 log_in tgt.service.log "portal 0.0.0.0:3260 served by rbio's transport"
  mapfile -t posts < <(unit_lines "$UNIT" ExecStartPost)
  for line in "${posts[@]}"; do
    check "ExecStartPost=$line" run_line "$line"
  done
  served() { in_root_net tgtadm --lld iscsi --op show --mode target | grep -A40 "$SVC_IQN" | grep -q "Backing store type: rbio"; }
  check "the conf.d target is served with backing store rbio" served
  check "the installed rbio reads it" eval \
    'in_root_net rbio inquiry -T "$SVC_IQN" -p 127.0.0.1:3260 --lun 1 >> "$WORK/inquiry.log" 2>&1'
  # Installed again while tgtd runs: that tgtd keeps the module it loaded.
  check "rbio-tgt installed again while tgtd runs says tgtd needs a restart" eval \
    'in_root dpkg -i "${ROOT_DEBS[0]}" > "$WORK/reinstall.log" 2>&1 &&
     grep -q "^rbio-tgt: tgtd (pid [0-9 ]*) runs without this version of bs_rbio.so until it restarts" "$WORK/reinstall.log"'

  # --- rbio-session@.service's commands against it -------------------------------
  SUNIT=/lib/systemd/system/rbio-session@.service
  # The root's own systemd (package-root.sh includes it, as on a server).
  # A directive it ignores is only a warning: any output fails too.
  verify_unit() {
    in_root systemd-analyze verify rbio-session@test.service > "$WORK/verify.log" 2>&1
    [[ ! -s $WORK/verify.log ]]
  }
  check "systemd-analyze verify rbio-session@test.service: no error, no warning" verify_unit
  session_conf() {
    in_root mkdir -p /srv/mnt
    printf 'TARGET=%s\nLOGIN_OPTIONS=-p 127.0.0.1:3260 --mount /srv/mnt --log-level info\n' "$SVC_IQN" \
      | in_ns tee "$R/etc/rbio/sessions/test.conf" > /dev/null
  }
  check "an /etc/rbio/sessions/test.conf" session_conf
  # The EnvironmentFile as systemd reads it: KEY=VALUE lines, the value as
  # written (no quotes needed); into ENV (NAME=VALUE words) and ENV_VALUE.
  ENV=()
  declare -A ENV_VALUE=()
  read_env_file() {
    local line
    while IFS= read -r line; do
      [[ $line =~ ^([A-Z_]+)=(.*)$ ]] || continue
      ENV+=("$line")
      ENV_VALUE[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
    done < <(in_ns cat "$R/etc/rbio/sessions/test.conf")
    (( ${#ENV[@]} == 2 ))
  }
  check "/etc/rbio/sessions/test.conf sets TARGET and LOGIN_OPTIONS" read_env_file
  # session_line KEY: the unit's KEY= line with the variables expanded as
  # systemd does: ${V} inside one word, $V split at spaces into words.
  # A leading "-" (the exit status ignored) is left out: the checks
  # below say which status they expect.
  session_line() {
    local line word w out=()
    line=$(unit_lines "$SUNIT" "$1")
    line=${line#-}
    for word in $line; do
      case $word in
        '$LOGIN_OPTIONS') read -ra w <<< "${ENV_VALUE[LOGIN_OPTIONS]}"; out+=("${w[@]}") ;;
        *'${TARGET}'*) out+=("${word//'${TARGET}'/${ENV_VALUE[TARGET]}}") ;;
        *'$'*|*'%'*) echo "  unexpected word in $1: $word" >&2; return 1 ;;
        *) out+=("$word") ;;
      esac
    done
    printf '%s\n' "${out[@]}"
  }
  # session_cmd KEY: the unit's KEY= line run as systemd runs it: the
  # EnvironmentFile's variables in the environment, stdout and stderr on
  # one stream (here a file standing for the journal) whose DEVICE:INODE
  # is in JOURNAL_STREAM.
  JOURNAL="$WORK/session-journal.log"
  : > "$JOURNAL"
  session_cmd() {
    local words
    mapfile -t words < <(session_line "$1")
    (( ${#words[@]} )) || return 1
    in_root_net JOURNAL_STREAM="$(stat -c %d:%i "$JOURNAL")" "${ENV[@]}" "${words[@]}" >> "$JOURNAL" 2>&1
  }
  check "rbio-session@test's ExecStart logs in (rbio login returns once the session is up)" session_cmd ExecStart
  check "the session process logs to the journal: 'rbio: info: logged in to'" \
    grep -q "^rbio: info: logged in to $SVC_IQN" "$JOURNAL"
  check "... and not to /run/rbio/initiator/KEY.log" \
    in_ns test ! -e "$R/run/rbio/initiator/${SVC_IQN//:/_}.log"
  check "its session process serves /srv/mnt/lun1 (32 MiB)" eval '[[ $(in_ns stat -c %s "$R/srv/mnt/lun1") == 33554432 ]]'
  check "rbio session lists it" eval 'in_root_net rbio session | grep -q "$SVC_IQN"'
  check "rbio-session@test's ExecStop logs out" session_cmd ExecStop
  check "no session is left" eval '! in_root_net rbio session -T "$SVC_IQN" > /dev/null 2>&1'
  # An admin logs out by hand: the session process ends by itself (exit 0),
  # and systemd still runs ExecStop, which finds no session.
  check "ExecStart logs in again" session_cmd ExecStart
  check "an admin's rbio logout -T logs out" in_root_net rbio logout -T "$SVC_IQN"
  stop_rc=0
  session_cmd ExecStop || stop_rc=$?
  check "ExecStop then finds no session (exit 11)" test "$stop_rc" = 11
  check "... which its '-' prefix keeps from failing the unit (Restart=on-failure would log in again)" \
    eval '[[ $(unit_lines "$SUNIT" ExecStop) == -/usr/bin/rbio\ * ]]'

  mapfile -t stops < <(unit_lines "$UNIT" ExecStop)
  for line in "${stops[@]}"; do
    check "ExecStop=$line" run_line "$line"
  done
  check "tgt.service's tgtd exits cleanly" stopped_cleanly
  # Removed while a target of /etc/tgt uses it: tgt's next start would
  # fail on that target and serve none.
  check "apt-get remove rbio-tgt warns, naming the conf.d file with bs-type rbio" eval \
    'in_root DEBIAN_FRONTEND=noninteractive apt-get remove -y -q rbio-tgt > "$WORK/remove.log" 2>&1 &&
     grep -q "^rbio-tgt:   /etc/tgt/conf.d/rbio-package-test.conf" "$WORK/remove.log" &&
     grep -q "serves no target at all" "$WORK/remove.log"'
  check "... and removes it (bs_rbio.so gone)" in_root test ! -e /usr/lib/tgt/backing-store/bs_rbio.so
fi

echo "package test: $((SECONDS - t0)) s"
finish
