#!/usr/bin/env bash
# The background worker against a real server and a real Redis: it replicates
# live changes through a handler into a replica table; opening a version gate
# backfills existing rows into the replica; the same while the worker is
# SIGKILLed once and Redis is stopped and restarted once: nothing missing;
# pg_terminate_backend ends it within a second and it comes back.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/test/harness/cluster.sh"
ROWS=${ROWS:-200000}
trap 'kill -CONT $REDIS_PID 2>/dev/null; cluster_stop' EXIT
redis_start
cluster_start "outbox.naptime = 100" "outbox.backfill_rate_per_minute = 100000000" \
    "outbox.database_name = postgres"

source "$root/test/harness/check.sh"
q() { psql -X -q -tA -v ON_ERROR_STOP=1 "$@" 2>&1; }
worker_pid() { q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }

q >/dev/null <<'SQL'
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 1);
CREATE TABLE member (id bigint PRIMARY KEY, organization_id bigint NOT NULL, email text NOT NULL);
CREATE TABLE member_replica (id bigint PRIMARY KEY, organization_id bigint, email text);
-- Idempotent, reads current state: the row may be gone.
CREATE FUNCTION replicate_member(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM member_replica WHERE id = msg.object_identifier;
    INSERT INTO member_replica SELECT * FROM member WHERE id = msg.object_identifier;
END $$;
SELECT outbox.register_handler('MEMBER_UPDATE', 'replicate_member(outbox.message)');
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id');
SQL

check "the worker shows in pg_stat_activity" wait_for 10 \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND datname = 'postgres'" 1

# Live changes reach the replica through the handler.
q -c "INSERT INTO member SELECT g, g % 100, 'm' || g FROM generate_series(1, 1000) g" \
  -c "UPDATE member SET email = 'changed' WHERE id <= 10" \
  -c "DELETE FROM member WHERE id > 990" >/dev/null
same="SELECT (SELECT md5(string_agg(m::text, ',' ORDER BY id)) FROM member m) IS NOT DISTINCT FROM (SELECT md5(string_agg(r::text, ',' ORDER BY id)) FROM member_replica r)"
check "live changes are replicated" wait_for 30 "$same" t
check "and the outbox is empty" wait_for 10 "SELECT count(*) FROM outbox.cell_outbox" 0

# A cluster whose default isolation is repeatable read (issue 35, item 2):
# the worker's transactions stay READ COMMITTED, and its handlers see it.
q >/dev/null <<'SQL'
ALTER SYSTEM SET default_transaction_isolation = 'repeatable read';
SELECT pg_reload_conf();
SELECT outbox.register_category('ISOLATION_PROBE', 'ORGANIZATION_SCOPE', 2);
CREATE TABLE isolation_seen (level text);
CREATE FUNCTION record_isolation(msg outbox.message) RETURNS void LANGUAGE sql AS
    $$ INSERT INTO isolation_seen VALUES (current_setting('transaction_isolation')) $$;
SELECT outbox.register_handler('ISOLATION_PROBE', 'record_isolation(outbox.message)');
SQL
sleep 0.5
q -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
      VALUES (0, 1, 2, 1)" >/dev/null
check "under a repeatable read default, the worker's transactions are read committed" wait_for 30 \
    "SELECT string_agg(level, ',') FROM isolation_seen" "read committed"
q -c "ALTER SYSTEM RESET default_transaction_isolation" -c "SELECT pg_reload_conf()" >/dev/null

# What the monitoring shows after that: 1,020 rows saved (1,000 inserts, 10
# updates, 10 deletes), all processed; the worker's own totals.
check "stats: 1020 saved and processed, lag measured" [ "$(q -c "SELECT saved || ',' || processed || ',' || (delivered BETWEEN 1000 AND 1020) || ',' || (lag_p50 <= lag_p99 AND lag_max < interval '30 seconds') FROM outbox.stats WHERE category_name = 'MEMBER_UPDATE'")" = "1020,1020,true,true" ]
check "worker_status: running, with totals" [ "$(q -c "SELECT state || ',' || (pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker')) || ',' || (shards_drained >= 100) || ',' || (messages_delivered BETWEEN 1000 AND 1020) || ',' || (rows_scheduled >= 1020) || ',' || (last_cycle_end > now() - interval '10 seconds') || ',' || backfill_paused FROM outbox.worker_status")" = "running,true,true,true,true,true,false" ]
check "metrics: the worker is up" bash -c "psql -X -tA -c 'SELECT outbox.metrics()' | grep -qx 'pg_outbox_worker_up 1'"

# Existing rows that never went through capture (as after a replica reset),
# then a new coded version and the gate opened: the worker backfills them.
q -c "TRUNCATE member_replica" >/dev/null
q -c "SELECT outbox.unregister_table('member')" \
  -c "INSERT INTO member SELECT g, g % 1000, 'b' || g FROM generate_series(10001, 10000 + $ROWS) g" \
  -c "SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id')" \
  -c "SELECT outbox.set_replication_version('member', 2)" >/dev/null
sleep 1
check "with the gate closed nothing is backfilled" [ "$(q -c "SELECT count(*) FROM member_replica")" = 0 ]
start=$SECONDS
q -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '2')" >/dev/null
check "opening the gate backfills $ROWS rows into the replica" wait_for 300 "$same" t
echo "  backfill of $((ROWS + 990)) rows took $((SECONDS - start)) s"
check "the cursor is complete" wait_for 10 \
    "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('member')" "0,3"
check "backfill_status: complete" [ "$(q -c "SELECT state || ',' || fraction_done FROM outbox.backfill_status")" = "complete,1" ]
check "stats: every row backfilled once, in batches" [ "$(q -c "SELECT (backfilled = $ROWS + 990) || ',' || (backfill_batches > 1) FROM outbox.stats WHERE category = 1")" = "true,true" ]
check "worker_status: ids backfilled, budget, cycle times" [ "$(q -c "SELECT (rows_backfilled >= $ROWS + 990) || ',' || (backfill_budget_left BETWEEN 0 AND 100000000) || ',' || (last_cycle_end > now() - interval '10 seconds') || ',' || (last_cycle_start > now() - interval '10 seconds') FROM outbox.worker_status")" = "true,true,true,true" ]

# SIGHUP reloads its settings: switched off, it leaves new rows alone;
# switched on again, it drains them.
q -c "ALTER SYSTEM SET outbox.worker_enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
check "worker_status: disabled once the worker has taken the reload" \
    wait_for 30 "SELECT state FROM outbox.worker_status" disabled
q -c "UPDATE member SET email = 'while off' WHERE id = 5" >/dev/null
sleep 1
check "reloaded worker_enabled = off: rows wait" [ "$(q -c "SELECT count(*) FROM outbox.cell_outbox")" = 1 ]
q -c "ALTER SYSTEM RESET outbox.worker_enabled" -c "SELECT pg_reload_conf()" >/dev/null
check "reloaded worker_enabled = on: drained" wait_for 10 "SELECT count(*) FROM outbox.cell_outbox" 0
check "worker_status: running again" [ "$(q -c "SELECT state FROM outbox.worker_status")" = running ]

# A hot shard: 100,000 rows of one shard, ten batches, more than a pass
# keeps in memory (its tuplestore spills to a file read across the batches'
# transactions).  The worker delivers them in order, each once.
q >/dev/null <<'SQL'
SELECT outbox.register_category('HOT', 'ORGANIZATION_SCOPE', 7);
CREATE TABLE hot_seen (n serial, object bigint);
CREATE FUNCTION hot(msg outbox.message) RETURNS void LANGUAGE sql AS
    'INSERT INTO hot_seen (object) VALUES (msg.object_identifier)';
SELECT outbox.register_handler('HOT', 'hot(outbox.message)');
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
SELECT 0, 77, 7, g FROM generate_series(1, 100000) g;
SQL
check "a hot shard of 100,000 rows drains through the worker, in order, once" \
    wait_for 60 "SELECT count(*) || ',' || count(*) FILTER (WHERE object <> n) FROM hot_seen" "100000,0"

# Compaction: while another session holds a snapshot, VACUUM cannot remove
# the rows the worker delivered; the worker rewrites the partitions that are
# mostly dead instead, and the outbox does not stay bloated.
q >/dev/null <<'SQL'
SELECT outbox.register_category('SPREAD', 'ORGANIZATION_SCOPE', 8);
CREATE FUNCTION accept(msg outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('SPREAD', 'accept(outbox.message)');
ALTER SYSTEM SET outbox.compact_min_size = '64kB';
SELECT pg_reload_conf();
SQL
outbox_bytes="SELECT sum(pg_relation_size(i.inhrelid)) FROM pg_inherits i WHERE i.inhparent = 'outbox.cell_outbox'::regclass"
psql -X -q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT 1" -c "SELECT pg_sleep(120)" >/dev/null 2>&1 &
holder=$!
sleep 0.5
q -c "INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
      SELECT 0, g % 64, 8, g, jsonb_build_object('pad', repeat('x', 100)) FROM generate_series(1, 40000) g" >/dev/null
check "40,000 rows drained under a held snapshot" wait_for 60 "SELECT count(*) FROM outbox.cell_outbox" 0
bytes=$(q -c "$outbox_bytes")
check "the worker compacted the outbox meanwhile (from $bytes bytes)" \
    wait_for 30 "SELECT ($outbox_bytes) < 1024 * 1024" t
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
q -c "ALTER SYSTEM RESET outbox.compact_min_size" -c "SELECT pg_reload_conf()" >/dev/null

# SIGTERM mid-backfill: a large batch is running when pg_terminate_backend
# arrives; the worker is gone within a second and comes back.
q -c "SELECT outbox.set_replication_version('member', 3)" \
  -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '3')" >/dev/null
for _ in $(seq 50); do
    [[ $(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND query = 'pg_outbox: backfilling' AND state = 'active'") == 1 ]] && break
    sleep 0.05
done
pid=$(worker_pid)
start_ns=$(date +%s%N)
q -c "SELECT pg_terminate_backend($pid)" >/dev/null
until [[ $(q -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") == 0 ]]; do sleep 0.02; done
ms=$((($(date +%s%N) - start_ns) / 1000000))
check "SIGTERM mid-backfill: gone in $ms ms" [ "$ms" -lt 1000 ]
check "and back" wait_for 10 "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" 1

# Again, at version 4, while the worker is SIGKILLed once and Redis is
# stopped and restarted once.  Nothing may be missing at the end.
check "the version-3 backfill completes" wait_for 120 \
    "SELECT lower_bound || ',' || version FROM outbox.get_processing_state('member')" "0,4"
q -c "TRUNCATE member_replica" -c "SELECT outbox.set_replication_version('member', 4)" >/dev/null
pid=$(worker_pid)
kill -KILL "$pid"
kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null
check "a killed worker is restarted (the postmaster reinitializes)" wait_for 30 \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND pid <> $pid" 1
q -c "SELECT outbox.set_option('outbox_replication.member.replication_version', '4')" \
  -c "INSERT INTO member VALUES (995, 1, 'written while Redis was down')" >/dev/null
check "capture works with Redis down" [ "$(q -c "SELECT count(*) FROM member WHERE id = 995")" = 1 ]
sleep 6
paused=$(grep -c 'backfill paused' "$CLUSTER_DIR/server.log")
check "the outage is logged once, not every cycle ($paused)" [ "$paused" = 1 ]
check "worker_status: backfill paused, the error shown" [ "$(q -c "SELECT backfill_paused || ',' || (last_error LIKE 'backfill paused: %Redis%') || ',' || (last_error_at > now() - interval '1 minute') FROM outbox.worker_status")" = "true,true,true" ]
check "backfill_status: cursor unavailable, no error" [ "$(q -c "SELECT state FROM outbox.backfill_status")" = cursor_unavailable ]
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
REDIS_PID=$!
check "after all that, nothing is missing" wait_for 300 "$same" t
check "and the resumption is logged" grep -q 'backfill resumed' "$CLUSTER_DIR/server.log"
check "worker_status: no longer paused" wait_for 10 "SELECT backfill_paused FROM outbox.worker_status" f
q -c "SELECT outbox.stats_reset()" >/dev/null
check "stats_reset() zeroes the counters and the worker's totals" [ "$(q -c "SELECT (SELECT saved + processed FROM outbox.stats WHERE category = 1) || ',' || (SELECT rows_backfilled + shards_drained FROM outbox.worker_status) || ',' || (SELECT last_error IS NULL FROM outbox.worker_status)")" = "0,0,true" ]

# pg_terminate_backend: gone within a second, back soon after.
pid=$(worker_pid)
q -c "SELECT pg_terminate_backend($pid)" >/dev/null
check "a terminated worker is gone within a second" wait_for 1 \
    "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid" 0
check "and comes back" wait_for 10 \
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'" 1
check "wake_worker() wakes it" [ "$(q -c "SELECT outbox.wake_worker()")" = t ]

checks_done worker
