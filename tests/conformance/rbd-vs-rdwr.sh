#!/usr/bin/env bash
# libiscsi's iscsi-test-cu against an rbio LUN on a Ceph RBD image and a
# stock rdwr LUN on a file, served by one tgtd: run-conformance.sh in
# backing-store mode with --candidate-rbd, on a single-node cluster that
# scripts/ceph-dev.sh starts here and stops at exit. A cluster that cannot
# start fails the test with ceph-dev's reason.
#
#   rbd-vs-rdwr.sh --ceph-dir DIR --ceph-port N [run-conformance.sh options]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
ceph_dir="" ceph_port=""
args=()
while (( $# )); do
  case $1 in
    --ceph-dir) ceph_dir=$2; shift 2 ;;
    --ceph-port) ceph_port=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -n $ceph_dir && -n $ceph_port ]] || { echo "usage: rbd-vs-rdwr.sh --ceph-dir DIR --ceph-port N [run-conformance.sh options]" >&2; exit 2; }
# RBIO_TEST_PORT_SHIFT moves the monitor's port too (run-conformance.sh
# moves tgtd's).
[[ ${RBIO_TEST_PORT_SHIFT:-0} =~ ^[0-9]+$ ]] || { echo "RBIO_TEST_PORT_SHIFT must be a number" >&2; exit 2; }
ceph_port=$((ceph_port + ${RBIO_TEST_PORT_SHIFT:-0}))

stop_cluster() {
  local rc=$?
  bash "$repo/scripts/ceph-dev.sh" stop --dir "$ceph_dir" >/dev/null || rc=1
  exit "$rc"
}
trap stop_cluster EXIT
bash "$repo/scripts/ceph-dev.sh" start --dir "$ceph_dir" --port "$ceph_port"
bash "$here/run-conformance.sh" --candidate-rbd "$ceph_dir/ceph.conf" "${args[@]}"
