#!/usr/bin/env bash
# The standard configuration path: a targets.conf with bs-type rbio, bsopts
# and bsoflags, brought up by tgt-admin -e, gives an rbio LU with those
# settings that serves data.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 4

tgtd_start
truncate -s 64M "$WORK/conf.img"
cat > "$WORK/targets.conf" <<CONF
default-driver iscsi
<target iqn.2026-11.io.rbio:conf>
    <backing-store $WORK/conf.img>
        bs-type rbio
        bsopts "queue_depth=64:coalesce_max_kib=256:inline_io=off"
        bsoflags sync
    </backing-store>
    initiator-address ALL
</target>
CONF
check "tgt-admin -e brings the configuration up" \
  tgt-admin -C "$CTL" -c "$WORK/targets.conf" -e
show=$(tgtadm -C "$CTL" --lld iscsi --op show --mode target)
check "the LU uses the rbio backing store" grep -q "Backing store type: rbio" <<<"$show"
check "bsoflags sync reached the LU" grep -q "Backing store flags: sync" <<<"$show"
check "every bsopts item reached the module" \
  log_has "queue_depth=64:batch=on:coalesce=on:coalesce_max_kib=256:inline_reap=on:inline_io=off"
check "data reads back through the configured LU" \
  "$RW_CHECK" "$(url conf)" --inflight 32 --rounds 1
check "tgt-admin --delete ALL removes it again" \
  tgt-admin -C "$CTL" -c "$WORK/targets.conf" --delete ALL
check "the removed LU logged its counters" log_has "rbio: tid:1 lun:1: removed; commands="
finish
