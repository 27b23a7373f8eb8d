#!/usr/bin/env bash
# Boots a throw-away qemu guest running Debian's kernel on the host's own
# root file system and runs one script in it, as root. The host kernel has
# no SCSI, iSCSI or RDMA; the guest has all of them, so the real kernel
# initiator (open-iscsi) can be tested against the build's tgtd module.
#
#   scripts/vm/run.sh [--timeout S] [--mem MIB] [--out DIR] [--console] [--net]
#                     SCRIPT|COMMAND [ARGS...]
#
#   --timeout S   power the guest off after S seconds (default 600); exit 124
#   --mem MIB     guest memory (default 2048)
#   --out DIR     keep the run's files (stdout, stderr, exit-code,
#                 console.log, anything the script put in $VM_OUT) in DIR;
#                 by default a temporary folder, removed at the end
#   --console     also show the guest's serial console on stderr
#   --net         give the guest a NIC on qemu's user-mode network (guest
#                 10.0.2.15/24, the host's loopback at 10.0.2.2), for tests
#                 whose guest talks to a service on the host (a Ceph cluster);
#                 the guest configures it itself (tests/vm/lib-net.sh)
#
# The host's root is shared read-only over 9p with a tmpfs overlay on top,
# so the script sees /work/main/build, tgtd, iscsiadm, mkfs... and may write
# anywhere without changing the host. Fresh tmpfs on /run and /dev/shm (/tmp is the host's, through the overlay);
# no network devices unless --net (only the guest's own loopback). The script runs in its
# caller's working folder, with RBIO_* variables passed through,
# RBIO_VM_GUEST=1, and VM_OUT=/run/vm-out (the writable share: files put
# there are in --out DIR afterwards).
#
# Its stdout and stderr come back through that share (followed live) and so
# does its exit code, which is this script's exit code. Otherwise: 124 when
# the timeout hit, 125 when the guest ended without one (kernel panic, init
# failure; the console's end is printed). Guests run one at a time: a second
# run.sh waits for the first (TCG keeps both cores busy).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="$ROOT/.cache/vm"

die() { printf 'vm: error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '7,20p' "$0" >&2; exit 2; }

timeout_s=600 mem=2048 keep_out="" console=0 nic=(-nic none)
while (( $# )); do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --out) keep_out=$2; shift 2 ;;
    --console) console=1; shift ;;
    # restrict=off: the guest may reach the host (10.0.2.2 is its loopback);
    # nothing on the host reaches the guest (no hostfwd).
    --net) nic=(-nic 'user,model=virtio-net-pci,net=10.0.2.0/24,host=10.0.2.2'); shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
(( $# )) || usage
[[ $timeout_s =~ ^[0-9]+$ && $mem =~ ^[0-9]+$ ]] || die "--timeout and --mem take numbers"

# Cheap when the cache is current (a stamp check); builds it otherwise.
bash "$HERE/prepare.sh" --quiet
kver=$(cat "$CACHE/kver")
# The cache path reaches the guest on the kernel command line.
[[ $CACHE != *[[:space:]]* ]] || die "the checkout's path must not contain blanks: $CACHE"

# One guest at a time, whoever starts it.
exec 9> "$CACHE/run.lock"
if ! flock -n 9; then
  echo "vm: waiting for another guest to finish" >&2
  flock 9
fi

if [[ -n $keep_out ]]; then
  mkdir -p "$keep_out"
  out=$(realpath "$keep_out")
  rm -f "$out"/{stdout,stderr,exit-code,exit-code.new,booted,init-error,console.log,cmd,script}
else
  out=$(mktemp -d "${TMPDIR:-/tmp}/rbio-vm.XXXXXX")
fi

qpid="" tails=()
cleanup() {
  local rc=$?
  # Never leave a guest behind: if we are interrupted (ctest's own timeout,
  # Ctrl-C) the timeout(1) wrapper and the qemu under it go with us.
  if [[ -n $qpid ]] && kill -0 "$qpid" 2>/dev/null; then
    kill -TERM "$qpid" 2>/dev/null || true
    wait "$qpid" 2>/dev/null || true
  fi
  local t
  for t in "${tails[@]}"; do kill "$t" 2>/dev/null || true; done
  [[ -n $keep_out ]] || rm -rf "$out"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The guest sees the host's files at the same paths, except where the guest
# mounts something fresh: a script under one of those is copied into the
# share and run from there.
script=$1; shift
if [[ -f $script ]]; then
  script=$(realpath "$script")
  runner=(bash); [[ -x $script ]] && runner=()
  case $script in
    /run/*|/dev/*|/proc/*|/sys/*)
      cp -p "$script" "$out/script"; script=/run/vm-out/script ;;
  esac
  run=("${runner[@]}" "$script")
else
  # Not a file: a command looked up in the guest's PATH (e.g. `run.sh uname -r`).
  run=("$script")
fi

# The command the guest's init runs (chrooted into the guest's root), with
# arguments quoted here so nothing passes through the kernel command line.
{
  echo "# written by scripts/vm/run.sh"
  echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  echo "export HOME=/root LANG=C.UTF-8 TERM=dumb RBIO_VM_GUEST=1 VM_OUT=/run/vm-out"
  while IFS='=' read -r name _; do
    [[ $name == RBIO_* && $name != RBIO_VM_GUEST ]] && printf 'export %s=%q\n' "$name" "${!name}"
  done < <(env)
  printf 'cd %q 2>/dev/null || cd /\n' "$PWD"
  printf 'exec'; printf ' %q' "${run[@]}" "$@"; printf '\n'
} > "$out/cmd"
: > "$out/stdout"; : > "$out/stderr"; : > "$out/console.log"

# qemu: TCG on both cores (KVM hangs on these machines); no default devices
# (no VGA, no network ROM); the serial console goes to a file, not stdio, so
# a killed qemu never leaves a terminal in raw mode. mitigations=off: TCG
# emulates every page-table switch, and KPTI doubles them. panic=-1 with
# -no-reboot turns a kernel panic into qemu exiting.
start=$(date +%s.%N)
timeout -k 10 "$timeout_s" qemu-system-x86_64 \
  -nodefaults -no-user-config -display none -no-reboot \
  -accel tcg,thread=multi -cpu max -smp 2 -m "$mem" \
  -serial "file:$out/console.log" "${nic[@]}" \
  -kernel "$CACHE/kernel/boot/vmlinuz-$kver" -initrd "$CACHE/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1 mitigations=off rbiovm_cache=$CACHE" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap \
  -virtfs "local,path=$out,mount_tag=out,security_model=none" \
  < /dev/null > "$out/qemu.log" 2>&1 &
qpid=$!

# Follow the script's output as the guest writes it; tail --pid reads once
# more after qemu has gone, so nothing written before power-off is lost.
tail -n +1 -f --pid="$qpid" "$out/stdout" & tails+=($!)
tail -n +1 -f --pid="$qpid" "$out/stderr" >&2 & tails+=($!)
if (( console )); then tail -n +1 -f --pid="$qpid" "$out/console.log" >&2 & tails+=($!); fi

qrc=0
wait "$qpid" || qrc=$?
qpid=""
for t in "${tails[@]}"; do wait "$t" 2>/dev/null || true; done
tails=()
end=$(date +%s.%N)

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
boot="?" script_s="?"
[[ -f $out/booted ]] && boot=$(secs "$start" "$(stat -c %.3Y "$out/booted")")
if [[ -f $out/exit-code ]]; then
  rc=$(cat "$out/exit-code")
  [[ $boot != "?" ]] && script_s=$(secs "$(stat -c %.3Y "$out/booted")" "$(stat -c %.3Y "$out/exit-code")")
  # Also kept with the run's files, where ctest leaves them.
  echo "vm: boot ${boot} s, script ${script_s} s, total $(secs "$start" "$end") s; exit code $rc" | tee "$out/summary" >&2
else
  if (( qrc == 124 || qrc == 137 )); then
    rc=124; why="timed out (--timeout $timeout_s)"
  else
    rc=125; why="guest ended without an exit code (qemu status $qrc)"
  fi
  [[ -s $out/init-error ]] && why="$why; init: $(cat "$out/init-error")"
  {
    echo "vm: $why after $(secs "$start" "$end") s (boot ${boot} s)"
    echo "--- guest console (last 40 lines) ---"; tail -n 40 "$out/console.log"
    [[ -s $out/qemu.log ]] && { echo "--- qemu ---"; cat "$out/qemu.log"; }
  } 2>&1 | tee "$out/summary" >&2
fi
exit "$rc"
