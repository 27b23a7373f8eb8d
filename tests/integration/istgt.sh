#!/usr/bin/env bash
# Interoperability with a second, independent target: istgt (Debian's
# package), started by this test on 127.0.0.1:13739 (its unit-control portal
# on 13738) with its own configuration in a scratch folder, and stopped by
# its PID; never as a system service. `rbio discover` finds its target,
# `rbio bench --verify` passes (4 KiB x 32 random writes and reads, 1 MiB x 8
# sequential writes and reads), and so do fio verify jobs through rbio's
# engine.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 39   # scratch folder, check/finish; no tgtd is started
source "$(dirname "$0")/../lib/fio-rbio.sh"
RBIO="$RBIO_BUILD_DIR/initiator/rbio"
ISTGT=$(command -v istgt) || skip_test "istgt is not installed (scripts/setup.sh installs it)"
P="127.0.0.1:$PORT"
UCTL_PORT=$((PORT - 1))
IQN=iqn.2026-11.io.rbio.istgt:disk1
ISTGT_PID=""

stop_istgt() {
  [[ -n $ISTGT_PID ]] || return 0
  kill "$ISTGT_PID" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$ISTGT_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$ISTGT_PID" 2>/dev/null || true
  wait "$ISTGT_PID" 2>/dev/null || true
  ISTGT_PID=""
}
cleanup() {
  local rc=$?
  stop_istgt
  if (( rc != 0 )) && [[ -f $WORK/istgt.log ]]; then
    echo "--- istgt log (last 30 lines) ---"; tail -30 "$WORK/istgt.log"
  fi
  tgt_test_cleanup "$rc"
}
trap cleanup EXIT

port_busy() { ss -Hltn "sport = :$1" | grep -q .; }
for p in "$PORT" "$UCTL_PORT"; do
  if port_busy "$p"; then echo "port $p is in use; cannot start istgt" >&2; exit 1; fi
done

truncate -s 128M "$WORK/disk1.img"
: > "$WORK/auth.conf"
cat > "$WORK/istgt.conf" <<CONF
[Global]
  NodeBase "iqn.2026-11.io.rbio.istgt"
  PidFile $WORK/istgt.pid
  AuthFile $WORK/auth.conf
  MediaDirectory $WORK
  Timeout 30
  NopInInterval 20
  DiscoveryAuthMethod None
  MaxSessions 16
  MaxConnections 1
  MaxR2T 32
  MaxOutstandingR2T 16
  FirstBurstLength 262144
  MaxBurstLength 1048576
  MaxRecvDataSegmentLength 262144
  InitialR2T Yes
  ImmediateData Yes
  DataPDUInOrder Yes
  DataSequenceInOrder Yes
  ErrorRecoveryLevel 0
[UnitControl]
  AuthMethod None
  Portal UC1 127.0.0.1:$UCTL_PORT
  Netmask 127.0.0.1
[PortalGroup1]
  Portal DA1 $P
[InitiatorGroup1]
  InitiatorName "ALL"
  Netmask 127.0.0.1
[LogicalUnit1]
  TargetName disk1
  Mapping PortalGroup1 InitiatorGroup1
  AuthMethod None
  UseDigest Auto
  UnitType Disk
  QueueDepth 32
  LUN0 Storage $WORK/disk1.img Auto
CONF

"$ISTGT" -c "$WORK/istgt.conf" -p "$WORK/istgt.pid" -D > "$WORK/istgt.log" 2>&1 &
ISTGT_PID=$!
for _ in $(seq 50); do port_busy "$PORT" && break; kill -0 "$ISTGT_PID" 2>/dev/null || break; sleep 0.1; done
check "istgt listens on $P" port_busy "$PORT"

check "rbio discover finds istgt's target" \
  bash -c "'$RBIO' discover --no-store -p '$P' | grep -qx '$P,1 $IQN'"
bench() { timeout 120 "$RBIO" bench -T "$IQN" -p "$P" --lun 0 --time 2 --verify "$@" > "$WORK/bench.out" 2>&1 \
          || { tail -3 "$WORK/bench.out"; return 1; }; }
check "bench: 4 KiB random writes, 32 in flight, read back" bench --rw randwrite --bs 4k --iodepth 32
check "bench: 4 KiB random reads, 32 in flight, verified" bench --rw randread --bs 4k --iodepth 32
check "bench: 1 MiB sequential writes, 8 in flight, read back" bench --rw write --bs 1M --iodepth 8
check "bench: 1 MiB sequential reads, 8 in flight, verified" bench --rw read --bs 1M --iodepth 8

check "fio: 4 KiB random writes, 32 in flight, verify=crc32c" \
  fio_verify_ok rand4k "$P" "$IQN" 0 randwrite 4k 32 32M
check "fio: 1 MiB sequential writes, 8 in flight, verify=crc32c" \
  fio_verify_ok seq1m "$P" "$IQN" 0 write 1M 8 64M
check "istgt is alive" kill -0 "$ISTGT_PID"
finish
