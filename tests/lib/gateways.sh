# shellcheck shell=bash
# Several tgtd+bs_rbio.so gateways exporting one LU (same target, tid, LUN,
# scsi_id and scsi_sn), gateway G being ALUA target port group G, the states
# shared through one groups file. Source after tgt-test.sh and
# tgt_test_init; then gateways_init. Gateway G uses control port CTL+G and
# portal 127.0.0.1:PORT+G (a test at offset N keeps N+1..N+3 free for
# them; initiator-fence.sh, at the highest offset, also N+4); its sandbox
# is $WORK/gwG.

# gateways_init [SIZE]: the LU file (64M by default) and the names below.
gateways_init() {
  LU_FILE="$WORK/lu.img"
  GROUPS_FILE="$WORK/alua-groups"
  SCSI_ID=6001405abcdef0123
  SCSI_SN=RBIOMP0001
  GW_TARGET=iqn.2026-11.io.rbio:mp
  truncate -s "${1:-64M}" "$LU_FILE"
}

gw_state() { echo "$WORK/gw$1"; }
gw_ctl() { echo $((CTL + $1)); }
gw_port() { echo $((PORT + $1)); }
gw_portal() { echo "127.0.0.1:$(gw_port "$1")"; }
gw_url() { echo "iscsi://127.0.0.1:$(gw_port "$1")/$GW_TARGET/1"; }
gw_adm() { local g=$1; shift; tgtadm -C "$(gw_ctl "$g")" --lld iscsi "$@"; }
gw_log_has() { grep -q -- "$2" "$(gw_state "$1")/tgtd.log"; }
gw_pid() { cat "$(gw_state "$1")/tgtd.pid"; }

# set_groups "ID STATE"...: the shared groups file, replaced atomically.
set_groups() {
  printf '%s\n' "$@" > "$GROUPS_FILE.new" && mv "$GROUPS_FILE.new" "$GROUPS_FILE"
}

# gw_start G [VAR=VALUE...]: gateway G (port group G) serving the LU.
gw_start() {
  local g=$1; shift
  env RBIO_PORT_GROUP="$g" RBIO_ALUA_GROUPS="$GROUPS_FILE" "$@" \
    "$SANDBOX" start "$(gw_state "$g")" --modules "$MODULES" --control-port "$(gw_ctl "$g")" \
    --portal "$(gw_portal "$g")" >/dev/null
}
# gw_export G: the target and the LU with the shared identity, by tgtadm.
gw_export() {
  local g=$1
  gw_adm "$g" --op new --mode target --tid 1 -T "$GW_TARGET" &&
    gw_adm "$g" --op bind --mode target --tid 1 -I ALL &&
    gw_adm "$g" --op new --mode logicalunit --tid 1 --lun 1 -b "$LU_FILE" --bstype rbio &&
    gw_adm "$g" --op update --mode logicalunit --tid 1 --lun 1 --params "scsi_id=$SCSI_ID,scsi_sn=$SCSI_SN"
}

# gateways_stop RC: stops gateways 1-3; when RC is not 0, shows their logs.
# Fails if one of them crashed, hung or exited non-zero at shutdown (a
# gateway the test killed on purpose left no PID file: nothing to stop).
gateways_stop() {
  local rc=$1 g bad=0
  for g in 1 2 3; do
    if (( rc != 0 )) && [[ -f $(gw_state "$g")/tgtd.log ]]; then
      echo "--- gateway $g: tgtd log (last 25 lines) ---"; tail -25 "$(gw_state "$g")/tgtd.log"
    fi
    if ! "$SANDBOX" stop "$(gw_state "$g")"; then
      echo "FAIL: gateway $g did not shut down cleanly (see above)"
      bad=1
    fi
  done
  return "$bad"
}

# must_start DESCRIPTION COMMAND...: a check the rest depends on.
must_start() {
  # shellcheck disable=SC2154  # tgt-test.sh's count, sourced before this file
  local before=$checks_failed
  check "$@"
  (( checks_failed == before )) || { echo "stopping: the remaining checks depend on this one"; finish; exit 1; }
}
