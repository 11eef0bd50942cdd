#!/usr/bin/env bash
# outbox.metrics() read by a real Prometheus parser (the Python client's,
# as Debian ships it), scraped by a pg_monitor member: the text parses, the
# families have their types, and the values are those of known operations.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }

redis_start
cluster_start "outbox.worker_enabled = off"
q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_cell('us');
CREATE TABLE org (id bigint PRIMARY KEY);
SELECT outbox.register_table('org', 'ORGANIZATION_UPDATE');
CREATE FUNCTION accept(msg outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'accept(outbox.message)');
INSERT INTO org SELECT generate_series(1, 40);
SELECT outbox.drain();
INSERT INTO org SELECT generate_series(41, 45);
-- A hot shard with a label value that needs escaping.
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier, cell_name)
SELECT 0, 7, 1, g, E'we"ird\\cell\nname' FROM generate_series(1, 9) g;
SELECT outbox.set_option('outbox_replication.org.replication_version', '1');
SELECT outbox.process_backfill_batch('org', 10);
CREATE ROLE scraper LOGIN IN ROLE pg_monitor;
SQL
q -U scraper -c "SELECT outbox.metrics()" >"$CLUSTER_DIR/scrape.txt"
check "a pg_monitor member scrapes" grep -q '^# TYPE pg_outbox_depth gauge$' "$CLUSTER_DIR/scrape.txt"

/usr/bin/python3 - "$CLUSTER_DIR/scrape.txt" >"$CLUSTER_DIR/parsed.txt" 2>&1 <<'PY'
import sys
from prometheus_client.parser import text_string_to_metric_families
families = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
def value(family, **labels):
    for s in families[family].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None
print("types", ",".join(sorted(f"{n}:{f.type}" for n, f in families.items()
                               if n in ("pg_outbox_rows_saved", "pg_outbox_depth", "pg_outbox_shard_depth"))))
print("saved", value("pg_outbox_rows_saved", category="1", category_name="ORGANIZATION_UPDATE"))
print("delivered", value("pg_outbox_messages_delivered", category="1"))
print("backfilled", value("pg_outbox_rows_backfilled", category="1"))
print("depth", value("pg_outbox_depth", silo="cell"), value("pg_outbox_depth", silo="control"))
print("hot", value("pg_outbox_shard_depth", silo="control", shard_identifier="7", cell_name='we"ird\\cell\nname'))
print("first", families["pg_outbox_shard_depth"].samples[0].labels["shard_identifier"])
print("low_bound", value("pg_outbox_backfill_low_bound", table_key="org"))
print("state", value("pg_outbox_backfill_state", table_key="org", state="in_progress"))
print("lag", value("pg_outbox_delivery_lag_seconds", category="1", quantile="0.99") is not None)
PY
cat "$CLUSTER_DIR/parsed.txt"
p() { sed -n "s/^$1 //p" "$CLUSTER_DIR/parsed.txt"; }
check "the Prometheus parser reads it, types kept" [ "$(p types)" = "pg_outbox_depth:gauge,pg_outbox_rows_saved:counter,pg_outbox_shard_depth:gauge" ]
check "counters: 45 saved, 40 delivered, 11 backfilled" [ "$(p saved),$(p delivered),$(p backfilled)" = "45.0,40.0,11.0" ]
check "depth per silo: 5 + 11 cell, 9 control" [ "$(p depth)" = "16.0 9.0" ]
check "the hot shard first, its odd cell name round-trips" [ "$(p hot),$(p first)" = "9.0,7" ]
check "backfill cursor and state" [ "$(p low_bound),$(p state)" = "12.0,1.0" ]
check "lag quantiles present" [ "$(p lag)" = "True" ]

# Counters are per database: another database's capture leaves these alone.
q -c "CREATE DATABASE other" -c "ALTER DATABASE other SET outbox.redis_key_prefix = 'other:'" >/dev/null
q -d other >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 1);
CREATE TABLE t (id bigint PRIMARY KEY);
SELECT outbox.register_table('t', 'C');
INSERT INTO t SELECT generate_series(1, 7);
SQL
check "counters are per database" [ "$(q -c "SELECT saved FROM outbox.stats WHERE category = 1")|$(q -d other -c "SELECT saved FROM outbox.stats WHERE category = 1")" = "45|7" ]

# More (database, category) pairs than slots (512): the rest are dropped,
# and counted as dropped, never an error.
q -d other >/dev/null <<'SQL'
CREATE FUNCTION accept(msg outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_category('C' || g, 'S', g), outbox.register_handler('C' || g, 'accept(outbox.message)')
  FROM generate_series(2, 600) g;
-- One shard: delivered, and given slots, in category order.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
SELECT 0, 1, g, g FROM generate_series(2, 600) g ORDER BY g;
SELECT outbox.drain();
SQL
got=$(q -d other -c "SELECT count(*) FILTER (WHERE delivered = 1) || ',' || outbox._stats_untracked() FROM outbox.stats")
# 512 slots - 2 taken (category 1 in each database) = 510 counted; the other
# 89 categories' counts (delivered and processed: 2 each) are dropped.
check "slots full: 510 categories counted, 178 counts dropped ($got)" [ "$got" = "510,178" ]
check "and the scrape says so" bash -c "psql -X -tA -d other -c 'SELECT outbox.metrics()' | grep -qx 'pg_outbox_stats_untracked_total 178'"
q -d other >/dev/null <<'SQL'
SELECT outbox.unregister_handler('C' || g) FROM generate_series(300, 600) g;
DELETE FROM outbox.categories WHERE id >= 300;
SELECT outbox.stats_reset();
SELECT outbox.register_category('LATE', 'S', 700), outbox.register_handler('LATE', 'accept(outbox.message)');
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier) VALUES (0, 1, 700, 1);
SELECT outbox.drain();
SQL
got=$(q -d other -c "SELECT count(*) || ',' || sum(delivered) FROM outbox.stats WHERE stats_reset IS NOT NULL")
check "stats_reset() frees the slots of dropped categories: a new one is counted ($got)" [ "$got" = "300,1" ]
checks_done metrics
