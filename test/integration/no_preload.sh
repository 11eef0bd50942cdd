#!/usr/bin/env bash
# Without shared_preload_libraries the SQL functions still work and the
# worker-only ones fail with a hint; with too few max_worker_processes the
# log says so.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
source "$root/test/harness/check.sh"
q() { psql -X -q -tA "$@" 2>&1; }

redis_start
cluster_start "shared_preload_libraries = ''"
q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
CREATE TABLE t (id int PRIMARY KEY);
SELECT outbox.register_table('t', 'C');
CREATE TABLE seen (id bigint);
CREATE FUNCTION h(m outbox.message) RETURNS void LANGUAGE sql AS 'INSERT INTO seen VALUES (m.object_identifier)';
SELECT outbox.register_handler('C', 'h(outbox.message)');
INSERT INTO t VALUES (1), (2);
SQL
check "capture works without preload" [ "$(q -c "SELECT count(*) FROM outbox.cell_outbox")" = 2 ]
got=$(q -c "SELECT outbox.drain()")
check "drain works without preload ($got)" [ "$got" = 2 ]
q -c "SELECT outbox.set_replication_version('t', 2)" >/dev/null
check "backfill works without preload" [ "$(q -c "SELECT rows_written FROM outbox.process_backfill_batch('t', 10, true)")" = 2 ]
out=$(q -c "SELECT outbox.wake_worker()")
check "worker-only functions fail with a hint" bash -c "grep -q 'the pg_outbox worker is not available' <<<'$out' && grep -q 'HINT:  Add pg_outbox to shared_preload_libraries' <<<'$out'"
check "worker_status says not_preloaded" [ "$(q -c "SELECT state FROM outbox.worker_status")" = not_preloaded ]
out=$(q -c "SELECT * FROM outbox.stats")
check "stats need the preload, and say so" bash -c "grep -q 'statistics need pg_outbox in shared_preload_libraries' <<<'$out'"
q -c "SELECT outbox.metrics()" >"$CLUSTER_DIR/metrics.txt"
check "metrics() works without the counters" bash -c "grep -q '^pg_outbox_depth{silo=\"cell\"} 2$' $CLUSTER_DIR/metrics.txt && grep -q '^pg_outbox_worker_up 0$' $CLUSTER_DIR/metrics.txt && ! grep -q pg_outbox_rows_saved_total $CLUSTER_DIR/metrics.txt"
got=$(q -c "SELECT (SELECT count(*) FROM outbox.shard_depth) || ' ' || (SELECT state FROM outbox.backfill_status)")
check "shard_depth and backfill_status work ($got)" [ "$got" = "2 awaiting_option" ]
check "no worker runs" [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'")" = 0 ]
cluster_stop

cluster_start "max_worker_processes = 0"
sleep 0.5
check "too few max_worker_processes: the log says so" grep -q "too many background workers" "$CLUSTER_DIR/server.log"
check "and that is fixed by raising max_worker_processes" grep -q "max_worker_processes" "$CLUSTER_DIR/server.log"
checks_done no_preload
