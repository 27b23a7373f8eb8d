# shellcheck shell=bash
# Sourced first by the iSER VM tests, in place of guest.sh, with the same
# arguments (the guest's timeout in seconds, then the test's own):
#
#   source "$(dirname "${BASH_SOURCE[0]}")/iser-guest.sh" 780 "$@"
#
# In the guest: soft-RoCE up (before tgtd, whose iSER driver listens only
# if a device exists), lib.sh's set-up, PORTAL on the rxe address and
# iadm, iscsiadm's node mode through the iser iface.
source "$(dirname "${BASH_SOURCE[0]}")/guest.sh" "$@"
source "$HERE/lib-rxe.sh"
must_rxe
source "$HERE/lib.sh"
PORTAL=$RXE_ADDR:3260
iadm() { iscsiadm -m node -T "$1" -p "$PORTAL" -I iser "${@:2}"; }
