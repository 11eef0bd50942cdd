#!/usr/bin/env bash
# outbox.metrics() into a real Prometheus the way docs/operating.md,
# "Scraping with Prometheus", sets it up: the shipped feeder
# (monitoring/pg-outbox-metrics.sh, as its systemd unit runs it: as the OS
# user prometheus, connecting as a pg_monitor role) writes the node
# exporter's textfile, Debian's node exporter serves it, Debian's Prometheus
# scrapes it every second and evaluates monitoring/pg_outbox.rules.yml.
# Read back through Prometheus's HTTP API: the depth, a backfill's state and
# cursor, counters and a lag quantile equal what the database says, a new
# depth arrives, the rules are loaded and evaluate, and the alerts whose
# condition holds here (the worker off, a dead letter) are pending or firing.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }

work=$(mktemp -d /tmp/pg_outbox_prometheus.XXXXXX)
chmod 755 "$work" # the prometheus user reaches its textfile directory inside
pids=()
stop_all() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    cluster_stop
    rm -rf "$work"
}
trap stop_all EXIT

# The unit's User=: as root, the feeder and the node exporter run as
# prometheus.  A command prefix, not a function: setpriv execs, so the $! of
# a program started in the background is the program, which the trap ends.
as_prometheus=()
[[ $(id -u) == 0 ]] && as_prometheus=(setpriv --reuid=prometheus --regid=prometheus --init-groups)

redis_start
# The worker off: nothing drains or backfills behind the test's back, and
# pg_outbox_worker_up is 0, which PgOutboxWorkerDown watches.
cluster_start "outbox.worker_enabled = off"
q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
CREATE TABLE org (id bigint PRIMARY KEY);
SELECT outbox.register_table('org', 'ORGANIZATION_UPDATE');
CREATE FUNCTION accept(msg outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'accept(outbox.message)');
INSERT INTO org SELECT generate_series(1, 40);
SELECT outbox.drain();
INSERT INTO org SELECT generate_series(41, 45);
-- A backfill walking, its cursor in Redis.
SELECT outbox.set_option('outbox_replication.org.replication_version', '1');
SELECT outbox.process_backfill_batch('org', 10);
-- One dead letter.
SELECT outbox.skip_message('cell', shard_scope, shard_identifier, category, object_identifier)
  FROM outbox.cell_outbox WHERE object_identifier = 45 LIMIT 1;
-- The role of the unit's peer authentication (docs/operating.md).
CREATE ROLE prometheus LOGIN IN ROLE pg_monitor;
SQL
check "the database has rows waiting, a backfill walking, a dead letter" \
    [ "$(q -c "SELECT (SELECT count(*) > 0 FROM outbox.cell_outbox) AND
                      (SELECT state = 'in_progress' FROM outbox.backfill_status WHERE table_key = 'org') AND
                      (SELECT count(*) = 1 FROM outbox.dead_letters)")" = t ]

# The systemd units as shipped, the script where the unit expects it.
mkdir "$work/units"
sed "s|^ExecStart=.*|ExecStart=$root/monitoring/pg-outbox-metrics.sh|" \
    "$root/monitoring/pg-outbox-metrics.service" >"$work/units/pg-outbox-metrics.service"
cp "$root/monitoring/pg-outbox-metrics.timer" "$work/units/"
out=$(cd "$work/units" && systemd-analyze verify ./pg-outbox-metrics.service ./pg-outbox-metrics.timer 2>&1)
check "systemd-analyze verify: the service and the timer are valid" [ $? = 0 -a -z "$out" ] ||
    echo "$out" >&2

# The feeder, with what /etc/default/pg-outbox-metrics would set; TCP, since
# the cluster's socket directory is the postgres user's alone.
textfiles=$work/textfiles
mkdir "$textfiles"
# A copy the prometheus user can read wherever the tree is (a clone in a
# directory of mode 700 is not).
cp "$root/monitoring/pg-outbox-metrics.sh" "$work/"
chmod 755 "$work/pg-outbox-metrics.sh"
[[ $(id -u) == 0 ]] && chown prometheus: "$textfiles"
feed() {
    "${as_prometheus[@]}" env PGHOST=127.0.0.1 PGPORT="$PGPORT" PGDATABASE=postgres PGUSER="${1:-prometheus}" \
        OUTBOX_TEXTFILE_DIR="$textfiles" bash "$work/pg-outbox-metrics.sh"
}
prom_file=$textfiles/pg_outbox.prom
check "the feeder writes pg_outbox.prom" feed
check "with every family of outbox.metrics()" \
    [ "$(grep '^# TYPE' "$prom_file" 2>/dev/null)" = "$(q -c 'SELECT outbox.metrics()' | grep '^# TYPE')" ]
cp "$prom_file" "$work/before.prom"
feed_fails() { ! feed "$1" 2>/dev/null; }
check "a failing run (a role that does not exist) exits non-zero" feed_fails no_such_role
check "and leaves the last file as it was, no temporary file" \
    bash -c 'cmp -s "$1" "$2" && [ "$(ls -A "$3")" = pg_outbox.prom ]' _ "$work/before.prom" "$prom_file" "$textfiles"

# As the timer would, every second instead of 15.
(while :; do feed >/dev/null 2>&1; sleep 1; done) &
pids+=($!)

ne_port=$(_free_port)
"${as_prometheus[@]}" prometheus-node-exporter --web.listen-address="127.0.0.1:$ne_port" \
    --collector.disable-defaults --collector.textfile --collector.textfile.directory="$textfiles" \
    >"$work/node-exporter.log" 2>&1 &
pids+=($!)

prom_port=$(_free_port)
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $root/monitoring/pg_outbox.rules.yml
scrape_configs:
  - job_name: node
    static_configs:
      - targets: ['127.0.0.1:$ne_port']
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)

# api query PROMQL: an instant query's values, space-separated, the series
# sorted by their labels; api rules: each group as name:rules:healths; api
# alerts: each active alert as alertname:state.
api() {
    python3 - "http://127.0.0.1:$prom_port" "$@" <<'PY'
import json, sys, urllib.parse, urllib.request
base, kind = sys.argv[1], sys.argv[2]
path = {"query": "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[3:] and sys.argv[3]}),
        "rules": "/api/v1/rules", "alerts": "/api/v1/alerts"}[kind]
data = json.load(urllib.request.urlopen(base + path, timeout=5))["data"]
if kind == "query":
    series = sorted(data["result"], key=lambda s: sorted(s["metric"].items()))
    print(" ".join(s["value"][1] for s in series))
elif kind == "rules":
    print(" ".join("%s:%d:%s" % (g["name"], len(g["rules"]), ",".join(sorted({r["health"] for r in g["rules"]})))
                   for g in data["groups"]))
else:
    print(" ".join(sorted(a["labels"]["alertname"] + ":" + a["state"] for a in data["alerts"])))
PY
}
promq() { api query "$1" 2>/dev/null; }
# wait_prom SECONDS QUERY EXPECTED
wait_prom() {
    local deadline=$((SECONDS + $1)) got
    while ((SECONDS < deadline)); do
        got=$(promq "$2")
        [[ $got == "$3" ]] && return 0
        sleep 0.5
    done
    echo "  waited $1 s for $2 = '$3', last saw '$got'" >&2
    return 1
}
wait_http() {
    local deadline=$((SECONDS + $1))
    while ((SECONDS < deadline)); do
        python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$2" \
            2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
ne_serves_depth() {
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
            "http://127.0.0.1:$ne_port/metrics" 2>/dev/null | grep -q '^pg_outbox_depth{silo="cell"}' && return 0
        sleep 0.2
    done
    return 1
}
check "the node exporter serves pg_outbox_depth" ne_serves_depth || tail -5 "$work/node-exporter.log" >&2
check "Prometheus is ready" wait_http 60 "http://127.0.0.1:$prom_port/-/ready" ||
    tail -20 "$work/prometheus.log" >&2
check "Prometheus scrapes the node exporter" wait_prom 30 "up{job=\"node\"}" 1

depth=$(q -c "SELECT count(*) FROM outbox.cell_outbox")
check "pg_outbox_depth{silo=\"cell\"} is the database's $depth rows" \
    wait_prom 10 'pg_outbox_depth{silo="cell"}' "$depth"
read -r saved delivered lag <<<"$(q -c "SELECT saved, delivered, extract(epoch FROM lag_p99)
                                         FROM outbox.stats WHERE category = 1" | tr '|' ' ')"
check "counters: rows saved $saved, messages delivered $delivered" [ \
    "$(promq 'pg_outbox_rows_saved_total{category_name="ORGANIZATION_UPDATE"}'),$(promq 'pg_outbox_messages_delivered_total{category="1"}')" \
    = "$saved,$delivered" ]
got=$(promq 'pg_outbox_delivery_lag_seconds{category="1",quantile="0.99"}')
check "the p99 delivery lag, $lag s, kept with its quantile label" \
    awk -v a="$got" -v b="$lag" 'BEGIN { exit !(a != "" && a + 0 == b + 0) }'
IFS='|' read -r state low_bound <<<"$(q -c "SELECT state, cursor_lower_bound FROM outbox.backfill_status WHERE table_key = 'org'")"
check "the backfill: state $state (the only one), low bound $low_bound" [ \
    "$(promq "pg_outbox_backfill_state{table_key=\"org\",state=\"$state\"}"),$(promq 'count(pg_outbox_backfill_state{table_key="org"})'),$(promq 'pg_outbox_backfill_low_bound{table_key="org"}')" \
    = "1,1,$low_bound" ]
# The scrape's own job label wins: outbox.metrics()'s job arrives as
# exported_job (docs/operating.md).
check "pg_outbox_tables_failing's job label arrives as exported_job" \
    [ "$(promq 'pg_outbox_tables_failing{exported_job="backfill"}')" = 0 ]
stale_selector=$(sed -n 's/.*\(node_textfile_mtime_seconds{[^}]*}\).*/\1/p' "$root/monitoring/pg_outbox.rules.yml")
check "PgOutboxMetricsStale's selector finds the feeder's file, fresh" \
    [ "$(promq "count(time() - $stale_selector < 10)")" = 1 ]

q -c "INSERT INTO org SELECT generate_series(46, 52)" >/dev/null
depth=$(q -c "SELECT count(*) FROM outbox.cell_outbox")
check "7 rows more: Prometheus has the new depth, $depth, within 20 s" \
    wait_prom 20 'pg_outbox_depth{silo="cell"}' "$depth"

# The rules: loaded, and every one evaluated without an error.
rules_state() { api rules 2>/dev/null; }
deadline=$((SECONDS + 20))
until [[ $(rules_state) == pg_outbox:19:ok ]] || ((SECONDS > deadline)); do sleep 0.5; done
check "Prometheus loaded the group pg_outbox, 19 rules, all evaluating (health ok)" \
    [ "$(rules_state)" = pg_outbox:19:ok ] || rules_state >&2

alerts() { api alerts 2>/dev/null; }
deadline=$((SECONDS + 20))
until [[ $(alerts) == "PgOutboxBackfillNotMoving:pending PgOutboxDeadLetters:firing PgOutboxModelFindings:pending PgOutboxWorkerDown:pending" ]] || ((SECONDS > deadline)); do
    sleep 0.5
done
check "the alerts whose condition holds: dead letters firing; worker down, backfill not moving, model findings pending (their for:); no other" \
    [ "$(alerts)" = "PgOutboxBackfillNotMoving:pending PgOutboxDeadLetters:firing PgOutboxModelFindings:pending PgOutboxWorkerDown:pending" ] || echo "  alerts: $(alerts)" >&2

checks_done prometheus.sh
