# shellcheck shell=bash
# Sourced first by each VM test, with the guest's timeout in seconds and
# the test's arguments:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/guest.sh" 780 "$@"
#
# On the host it runs the test again inside a qemu guest (scripts/vm/run.sh;
# the host kernel has no SCSI, iSCSI or RDMA) and does not return; in the
# guest it returns, with HERE set to this folder.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z ${RBIO_VM_GUEST:-} ]]; then
  exec "$HERE/../../scripts/vm/run.sh" --timeout "${1:?guest.sh: the guest timeout in seconds}" \
    "$(realpath -s "${BASH_SOURCE[-1]}")" "${@:2}"
fi
