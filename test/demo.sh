#!/usr/bin/env bash
# The newcomer's demo: builds and installs pg_outbox, starts a throwaway
# PostgreSQL (preloading pg_outbox) and Redis, registers a table, writes to
# it and shows the outbox rows capture wrote, then opens a version gate and
# backfills the existing rows with the cursor in Redis; then stops
# everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/test/cluster.sh"
trap cluster_stop EXIT
echo "== building and installing pg_outbox"
install_extension "$root"
redis_start
cluster_start
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
-- Shard depth: what the drain will see.
SELECT shard_identifier, count(*) AS depth FROM outbox.cell_outbox
 GROUP BY 1 ORDER BY 2 DESC;
-- A backfill: existing rows get outbox rows too.  Code first (coded
-- version 2): nothing runs while the gate (an option) is closed.
TRUNCATE outbox.cell_outbox;
SELECT outbox.set_replication_version('organization_member', 2);
SELECT outbox.find_replication_version('organization_member') AS effective_before_gate;
SELECT outbox.backfill_outboxes_for('cell') AS backfilled_while_closed;
-- Open the gate; batches walk the table by id, the cursor lives in Redis.
SELECT outbox.set_option('outbox_replication.organization_member.replication_version', '2');
SELECT outbox.find_replication_version('organization_member') AS effective_after_gate;
SELECT * FROM outbox.process_backfill_batch('organization_member', 2);
SELECT * FROM outbox.get_processing_state('organization_member');
-- What the worker does each cycle, until there is nothing left:
DO $$ BEGIN WHILE outbox.backfill_outboxes_for('cell') LOOP END LOOP; END $$;
SELECT * FROM outbox.get_processing_state('organization_member');   -- complete: (0, coded + 1)
SELECT object_identifier, payload FROM outbox.cell_outbox ORDER BY id;
SQL
echo "== the cursor in Redis: $(redis-cli -p "$REDIS_PORT" GET outbox_backfill.organization_member)"
echo "== done; the throwaway server and Redis are stopped"
