#!/usr/bin/env bash
# The newcomer's demo: builds and installs pg_outbox, starts a throwaway
# PostgreSQL (preloading pg_outbox) and Redis, registers a table, writes to
# it and shows the outbox rows capture wrote, lets the background worker
# replicate them through a handler into a replica table, then opens a version
# gate and the worker backfills existing rows (cursor in Redis); then stops
# everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/test/harness/cluster.sh"
trap cluster_stop EXIT
# NO_INSTALL=1: run against the pg_outbox already installed (test/package.sh:
# the Debian package's files).
if [[ ${NO_INSTALL:-} != 1 ]]; then
    echo "== building and installing pg_outbox"
    install_extension "$root"
fi
redis_start
cluster_start "outbox.database_name = postgres" "outbox.naptime = 200"
echo "== PostgreSQL on port $PGPORT, Redis on port $REDIS_PORT"
psql -X -v ON_ERROR_STOP=1 -e <<'SQL'
CREATE EXTENSION pg_outbox;
-- What the outbox is sharded by, and the kind of change.
SELECT outbox.register_scope('ORGANIZATION_SCOPE');
SELECT outbox.register_category('ORGANIZATION_MEMBER_UPDATE', 'ORGANIZATION_SCOPE');
CREATE TABLE organization_member (
    id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL,
    email text NOT NULL,
    role text NOT NULL DEFAULT 'member');
SELECT outbox.register_table('organization_member', 'ORGANIZATION_MEMBER_UPDATE',
                             shard_column => 'organization_id', payload_columns => '{email}');
SELECT * FROM outbox.tables;
-- Plain SQL, bulk statements, a rollback: capture sees all of it.
INSERT INTO organization_member (organization_id, email)
SELECT 1 + g % 3, 'user' || g || '@example.com' FROM generate_series(1, 6) g;
UPDATE organization_member SET role = 'admin' WHERE id = 1;
DELETE FROM organization_member WHERE id = 2;
BEGIN;
INSERT INTO organization_member (organization_id, email) VALUES (9, 'rolled@back');
ROLLBACK;
SELECT id, shard_scope, shard_identifier, category, object_identifier, payload
  FROM outbox.cell_outbox ORDER BY id;
-- Shard depth: what the drain will see, deepest first.
SELECT silo, shard_identifier, depth, oldest_date_added FROM outbox.shard_depth;
-- The background worker drains the outbox through a handler: here it
-- replicates organization_member into a replica table.
CREATE TABLE organization_member_replica (LIKE organization_member);
CREATE FUNCTION replicate_member(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- Idempotent, and reads current state: the row may have changed or be gone.
    DELETE FROM organization_member_replica WHERE id = msg.object_identifier;
    INSERT INTO organization_member_replica
    SELECT * FROM organization_member WHERE id = msg.object_identifier;
END $$;
SELECT outbox.register_handler('ORGANIZATION_MEMBER_UPDATE', 'replicate_member(outbox.message)');
SELECT pg_sleep(1.5);
SELECT * FROM organization_member_replica ORDER BY id;
SELECT count(*) AS left_in_outbox FROM outbox.cell_outbox;
SELECT pid, backend_type FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker';

-- A backfill: rows that predate capture (here: written while the table was
-- not registered, as after a replica was reset) reach the replica once the
-- coded version is raised and its gate (an option) opened.
SELECT outbox.unregister_table('organization_member');
INSERT INTO organization_member (organization_id, email)
SELECT 1 + g % 3, 'old' || g || '@example.com' FROM generate_series(1, 5) g;
SELECT outbox.register_table('organization_member', 'ORGANIZATION_MEMBER_UPDATE',
                             shard_column => 'organization_id', payload_columns => '{email}');
SELECT outbox.set_replication_version('organization_member', 2);   -- code first
SELECT outbox.find_replication_version('organization_member') AS effective_before_gate;
SELECT pg_sleep(1);
SELECT count(*) AS replica_rows_while_gate_closed FROM organization_member_replica;
SELECT outbox.set_option('outbox_replication.organization_member.replication_version', '2');
SELECT outbox.find_replication_version('organization_member') AS effective_after_gate;
SELECT pg_sleep(2);
SELECT count(*) AS replica_rows_after_backfill FROM organization_member_replica;
SELECT * FROM outbox.get_processing_state('organization_member');   -- complete: (0, coded + 1)

-- Monitoring (readable by pg_monitor): backfill status, counters, worker.
SELECT table_key, coded_version, option_version, cursor_lower_bound, cursor_version, state
  FROM outbox.backfill_status;
SELECT category_name, saved, backfilled, delivered, processed, handler_errors, lag_p50
  FROM outbox.stats;
SELECT state, shards_drained, messages_delivered, rows_backfilled FROM outbox.worker_status;
SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') AS line
 WHERE line LIKE 'pg_outbox_rows_saved_total%' OR line LIKE 'pg_outbox_depth%'
    OR line LIKE 'pg_outbox_backfill_state%';
SQL
echo "== the cursor in Redis: $(redis-cli -p "$REDIS_PORT" GET outbox_backfill.organization_member)"
echo "== done; the throwaway server and Redis are stopped"
