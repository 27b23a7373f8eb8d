#!/usr/bin/env bash
# Idempotent setup: installs the Debian packages rbio needs and fetches the
# tgt headers of exactly the installed tgt version from Debian's source
# package into .cache/tgt-src/<version>/ (ignored by git; never committed).
#
# Usage: scripts/setup.sh [--no-apt]
#   --no-apt   only fetch tgt headers (packages must already be installed)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
source "$ROOT/scripts/lib/debian-source.sh"

PACKAGES=(
  build-essential cmake pkg-config dpkg-dev   # the build; dpkg-source for tgt's headers
  tgt                                         # the target rbio plugs into
  libiscsi-bin libiscsi-dev                   # test and bench clients
  liburing-dev                                # the backing store's io_uring
  librbd-dev                                  # LUs on Ceph RBD images (tgt-backend/rbd/)
  ceph-mon ceph-osd ceph-common               # the single-node cluster of scripts/ceph-dev.sh (tests, benches)
  python3-rbd                                 # tests/integration/rbd_lock_holder.py: another client holding an image
  tgt-rbd                                     # stock tgt's bs_rbd, the baseline of bench/rbd-compare.sh
  libgtest-dev googletest                     # unit tests
  valgrind util-linux strace                  # leak test, namespaces, syscall counts
  clang                                       # the libFuzzer targets (scripts/fuzz.sh)
  iperf3                                      # loopback TCP ceiling in bench/transport-compare.sh, bench/paper.sh
  linux-perf                                  # bench/paper.sh: system calls, wake-ups, io_uring submits per I/O
  python3-matplotlib                          # bench/paper.sh's plots (bench/paper-report.py)
  libssl-dev                                  # the initiator's CHAP MD5 (libcrypto)
  libboost-log-dev                            # the rbio CLI's logging
  libfuse3-dev fuse3                          # rbio login --mount: LUNs as files (FUSE)
  open-iscsi libopeniscsiusr-dev              # rbio discover's node records (iscsiadm), reading them back
  fio                                         # the rbio fio engine (initiator/fio/) and its tests
  libibverbs-dev librdmacm-dev rdma-core      # the iSER (RDMA) backend of iser-opt
  ibverbs-utils rdmacm-utils                  # soft-RoCE checks in the VM tests (ibv_devices, rping)
  istgt                                       # a second, independent target (tests/integration/istgt.sh);
                                              # it ships no /etc/istgt/istgt.conf, so its init script starts nothing
  multipath-tools sg3-utils                   # dm-multipath over several gateways (tests/vm/multipath.sh):
                                              # multipath/multipathd, sg_inq/sg_vpd/sg_rtpg
  debootstrap                                 # the clean Debian 12 root the packages are installed into
                                              # (tests/package/, scripts/package-root.sh)
  python3-prometheus-client                   # Prometheus' own parser reads the metrics file
                                              # (tests/integration/target-metrics.sh, /usr/bin/python3)
  prometheus prometheus-node-exporter curl    # the alerting rules, by promtool and a real scrape
                                              # (tests/integration/prometheus-alerts.sh runs its own
                                              # on loopback; the packages' services are not used)
  clang-format clang-tidy shellcheck          # scripts/lint.sh: the lint.* tests (Debian 12: version 14)
)

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

want_apt=1
[[ ${1:-} == --no-apt ]] && want_apt=0
(( want_apt == 0 )) || [[ $(id -u) -eq 0 ]] || die "run as root (apt-get needs it), or pass --no-apt"

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# deb-src entries mirroring the existing deb entries, so `apt-get source tgt`
# works. Written once; a later run finds them and does nothing.
ensure_deb_src() {
  if grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    return 1
  fi
  local src=/etc/apt/sources.list.d/debian.sources
  [[ -f $src ]] || die "no $src to mirror deb-src entries from"
  log "enabling deb-src entries in /etc/apt/sources.list.d/rbio-deb-src.sources"
  sed -e 's/^Types: deb$/Types: deb-src/' "$src" > /etc/apt/sources.list.d/rbio-deb-src.sources
  return 0
}

if (( want_apt )); then
  need_update=0
  ensure_deb_src && need_update=1
  mapfile -t missing < <(missing_packages)
  if (( ${#missing[@]} )); then need_update=1; fi
  if (( need_update )); then
    log "apt-get update"
    apt-get update -q >/dev/null || die "apt-get update failed"
  fi
  if (( ${#missing[@]} )); then
    log "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed"
  fi
  # The tgt package starts no daemon here (no systemd), and tests never use
  # the system tgtd: they run their own in a private mount namespace.
fi

# fio's headers for the fio engine, from fio's Debian source package.
if (( want_apt )) || dpkg-query -W fio >/dev/null 2>&1; then
  bash "$ROOT/scripts/fio-headers.sh"
fi

tgt_version=$(installed_version tgt) || die "tgt is not installed"
dest=$(version_dir "$CACHE/tgt-src" "$tgt_version")
if cache_complete "$dest"; then
  log "tgt $tgt_version headers present in $dest"
  exit 0
fi

log "fetching Debian source of tgt $tgt_version"
mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/tgt-XXXXXX")
trap 'rm -rf "$work"' EXIT
unpack_debian_source tgt "$tgt_version" "$work" || die "cannot fetch the source of tgt $tgt_version"
[[ -f $work/src/usr/tgtd.h ]] || die "tgt source of $tgt_version has no usr/tgtd.h"
mkdir -p "$dest"
# Only the headers the C glue needs: they stay outside the repository.
cp "$work"/src/usr/*.h "$dest/"
mkdir -p "$dest/iscsi"
cp "$work"/src/usr/iscsi/*.h "$dest/iscsi/"
mark_complete "$dest" "$tgt_version"
log "tgt $tgt_version headers in $dest"
