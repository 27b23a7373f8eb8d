#!/usr/bin/env bash
# rbio's Prometheus alerting rules (packaging/rbio-tgt/rbio-alerts.yml).
# promtool checks them and runs their tests (rbio-alerts.test.yml: each
# alert on made-up series, firing where it must and nowhere else). Then the
# set-up docs/metrics.md describes, for real: tgtd with rbio's module writes
# its metrics file into node_exporter's textfile folder, Debian's
# node_exporter serves it, and Prometheus loads the rules and scrapes it
# every second. rbio's metrics arrive with rbio's version; the file's age
# that RbioMetricsStale reads is found by its matcher and stays fresh; no
# rbio alert is pending while tgtd serves; once tgtd stops (and removes the
# file), RbioMetricsMissing is pending for this gateway. In between, the
# gateway (ALUA on, alone in its groups file) is made standby, then given
# a bad groups file: RbioAluaNoActivePort, then RbioAluaGroupsFileBad go
# pending, and both go away once the file is good again.
source "$(dirname "$0")/../lib/tgt-test.sh"
tgt_test_init 95
HERE="$(cd "$(dirname "$0")" && pwd)"
RULES="$RBIO_SOURCE_DIR/packaging/rbio-tgt/rbio-alerts.yml"
TEXTFILES="$WORK/node-exporter"   # node_exporter's --collector.textfile.directory
NODE_PORT=$((PORT + 6000)) PROM_PORT=$((PORT + 6001))

for tool in promtool prometheus prometheus-node-exporter curl; do
  command -v "$tool" >/dev/null ||
    skip_test "$tool is not installed (scripts/setup.sh installs prometheus, prometheus-node-exporter and curl)"
done

NODE_PID="" PROM_PID=""
# Stops the two daemons this test started (by PID). A daemon ended by our
# SIGTERM reports 143 (node_exporter) or 0 (Prometheus); anything else is
# shown, as it is no verdict on rbio.
stop_exporters() {
  local p st
  for p in "$PROM_PID" "$NODE_PID"; do
    [[ -n $p ]] && kill "$p" 2>/dev/null || continue
    st=0
    wait "$p" 2>/dev/null || st=$?
    (( st == 0 || st == 143 )) || echo "note: pid $p ended with status $st after SIGTERM"
  done
  PROM_PID="" NODE_PID=""
}
trap 'rc=$?; stop_exporters; tgt_test_cleanup $rc' EXIT

echo "== the rules, by promtool"
check "promtool check rules: the file is valid" promtool check rules "$RULES"
rule_tests() { (cd "$HERE" && promtool test rules rbio-alerts.test.yml); }
check "promtool test rules: each alert fires where it must, and only there" rule_tests

echo "== tgtd, node_exporter and Prometheus"
mkdir -p "$TEXTFILES"
ALUA_FILE="$WORK/alua-groups"
# alua_groups LINE...: the groups file, replaced atomically as docs/several-gateways.md says.
alua_groups() { printf '%s\n' "$@" > "$ALUA_FILE.new" && mv "$ALUA_FILE.new" "$ALUA_FILE"; }
alua_groups "1 active/optimized"
RBIO_METRICS_FILE="$TEXTFILES/rbio.prom" RBIO_PORT_GROUP=1 RBIO_ALUA_GROUPS="$ALUA_FILE" tgtd_start >/dev/null
new_target 1 alerts
truncate -s 64M "$WORK/lun1.img"
new_lun 1 1 "$WORK/lun1.img" rbio

prometheus-node-exporter --web.listen-address="127.0.0.1:$NODE_PORT" --collector.disable-defaults \
  --collector.textfile --collector.textfile.directory="$TEXTFILES" > "$WORK/node-exporter.log" 2>&1 &
NODE_PID=$!
cat > "$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $RULES
scrape_configs:
  - job_name: rbio-gateway
    static_configs:
      - targets: ['127.0.0.1:$NODE_PORT']
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

api() { curl -sf --max-time 5 "http://127.0.0.1:$PROM_PORT/api/v1/$1" "${@:2}"; }
# results QUERY: how many series the instant query returns.
results() {
  api query -G --data-urlencode "query=$1" |
    /usr/bin/python3 -c 'import json, sys; print(len(json.load(sys.stdin)["data"]["result"]))'
}
has() { [[ $(results "$1" 2>/dev/null) -ge 1 ]]; }
none() { [[ $(results "$1") == 0 ]]; }
# Every rule of the group rbio loaded and evaluated without error.
rules_healthy() {
  api rules | /usr/bin/python3 -c '
import json, sys
groups = [g for g in json.load(sys.stdin)["data"]["groups"] if g["name"] == "rbio"]
rules = groups[0]["rules"] if groups else []
bad = [r["name"] for r in rules if r["health"] != "ok"]
sys.exit(0 if len(rules) == int(sys.argv[1]) and not bad else 1)' "$RULE_COUNT"
}
ready() { curl -sf --max-time 2 "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null; }
show_logs() { tail -5 "$WORK/node-exporter.log" "$WORK/prometheus.log"; }

check "Prometheus is ready" wait_for 60 ready
check "rbio_build_info arrives through node_exporter, with rbio's version ($RBIO_VERSION)" \
  wait_for 30 has "rbio_build_info{job=\"rbio-gateway\",version=\"$RBIO_VERSION\"}"
check "the LU's size arrives" wait_for 10 has 'rbio_lu_size_bytes{lun="1"} == 67108864'
RULE_COUNT=$(grep -c '^ *- alert: ' "$RULES")
check "the $RULE_COUNT rules are loaded and evaluate without error" wait_for 20 rules_healthy
# The selector RbioMetricsStale reads, as the rules file has it.
STALE_SELECTOR=$(grep -o 'node_textfile_mtime_seconds{[^}]*}' "$RULES")
check "RbioMetricsStale's matcher finds the file node_exporter reports ($STALE_SELECTOR)" has "$STALE_SELECTOR"
check "... and the file is rewritten: its age stays under 5 s" has "time() - $STALE_SELECTOR < 5"
# Three scrapes of the LU's metrics later, every rule has been evaluated on them.
check "three scrapes of the metrics" wait_for 20 has 'count_over_time(rbio_build_info[1m]) >= 3'
check "no rbio alert is pending or firing while tgtd serves" none 'ALERTS{alertname=~"Rbio.*"}'

echo "== ALUA"
check "the gateway's ALUA state arrives" \
  has "rbio_alua_port_state{port_group=\"1\",state=\"active/optimized\",groups_file=\"$ALUA_FILE\"}"
alua_groups "1 standby"
check "made standby, the only gateway of its groups file: RbioAluaNoActivePort is pending" wait_for 20 \
  has "ALERTS{alertname=\"RbioAluaNoActivePort\",alertstate=\"pending\",groups_file=\"$ALUA_FILE\"}"
alua_groups "1 sleeping"
check "a bad groups file: RbioAluaGroupsFileBad is pending" wait_for 20 \
  has "ALERTS{alertname=\"RbioAluaGroupsFileBad\",alertstate=\"pending\",groups_file=\"$ALUA_FILE\"}"
alua_groups "1 active/optimized"
check "the file good and the gateway active again: no rbio alert is left" \
  wait_for 20 none 'ALERTS{alertname=~"Rbio.*"}'

echo "== tgtd stops"
tgtd_stop
check "tgtd removed its metrics file" test ! -e "$TEXTFILES/rbio.prom"
check "RbioMetricsMissing is pending for this gateway" wait_for 20 \
  has "ALERTS{alertname=\"RbioMetricsMissing\",alertstate=\"pending\",instance=\"127.0.0.1:$NODE_PORT\"}"
check "... and no other rbio alert is" none 'ALERTS{alertname=~"Rbio.*",alertname!="RbioMetricsMissing"}'

(( checks_failed == 0 )) || show_logs
stop_exporters
finish
