-- Targeted re-sync (issue 49, first step): a table's rows by ids or by an
-- id range sent again as ordinary messages, without a version bump, a
-- batch at a time through outbox.process_resync_batch.
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
SELECT set_config('outbox.redis_key_prefix', 'regress:' || txid_current() || ':', false) <> '' AS prefixed;
CREATE SCHEMA resync;
SET search_path = resync, public;
\set SHOW_CONTEXT never
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 10);
SELECT outbox.register_category('MEMBER_UPDATE', 'ORGANIZATION_SCOPE', 11);
CREATE TABLE org (id bigint PRIMARY KEY, slug text NOT NULL);
CREATE TABLE member (id int PRIMARY KEY, organization_id bigint NOT NULL, name text);
SELECT outbox.register_table('org', 'ORGANIZATION_UPDATE', payload_columns => '{slug}');
SELECT outbox.register_table('member', 'MEMBER_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{name}');
INSERT INTO org SELECT g, 'org-' || g FROM generate_series(1, 10) g;
INSERT INTO member SELECT g, g % 3, 'm' || g FROM generate_series(1, 20) g;
UPDATE org SET slug = 'renamed' WHERE id = 4;
TRUNCATE outbox.cell_outbox;
CREATE VIEW cell_rows AS
SELECT shard_identifier AS shard, category AS cat, object_identifier AS object, payload
  FROM outbox.cell_outbox ORDER BY id;

-- Ids: each row among them that exists, once, with its current payload
-- (99 does not exist; 4 is named twice).
SELECT outbox.resync('org', '{7, 4, 99, 4, 2}') AS job \gset
SELECT target, ids, low, up, state, outbox_rows FROM outbox.resyncs WHERE job = :job;
SELECT outbox.process_resync_batch(:job, 2) AS written;
SELECT * FROM cell_rows;
SELECT lower_bound, version FROM outbox.cursors WHERE table_key = 'resync.' || :job;
SELECT outbox.process_resync_batch(:job, 2) AS written;
SELECT * FROM cell_rows;
SELECT state, outbox_rows, finished_at IS NOT NULL AS finished FROM outbox.resyncs WHERE job = :job;
SELECT outbox.process_resync_batch(:job, 2) IS NULL AS nothing_left;
-- No version bump, and no backfill cursor.
SELECT replication_version FROM outbox.tables WHERE table_key = 'org';
SELECT count(*) AS backfill_cursors FROM outbox.cursors WHERE table_key = 'org';

-- A range, in batches of 3, of a table sharded by organization_id.
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('member', 5, 11) AS job \gset
SELECT outbox.process_resync_batch(:job, 3) AS written FROM generate_series(1, 4);
SELECT shard, object, payload FROM cell_rows;
SELECT target, low, up, state, outbox_rows FROM outbox.resyncs WHERE job = :job;

-- A rolled-back batch leaves no outbox row and no cursor.
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('org', 1, 10) AS job \gset
BEGIN;
SELECT outbox.process_resync_batch(:job, 4) AS written;
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM outbox.cell_outbox;
SELECT count(*) AS cursors_after_rollback FROM outbox.cursors WHERE table_key = 'resync.' || :job;
SELECT outbox_rows FROM outbox.resyncs WHERE job = :job;
-- Pause, resume, cancel.
SELECT outbox.pause_resync(:job);
SELECT outbox.process_resync_batch(:job, 4) IS NULL AS paused_writes_nothing;
SELECT outbox.pause_resync(:job);
SELECT outbox.resume_resync(:job);
SELECT outbox.process_resync_batch(:job, 4) AS written;
SELECT outbox.cancel_resync(:job);
SELECT outbox.process_resync_batch(:job, 4) IS NULL AS cancelled_writes_nothing;
SELECT state, outbox_rows, finished_at IS NOT NULL AS finished FROM outbox.resyncs WHERE job = :job;
SELECT outbox.resume_resync(:job);
SELECT outbox.cancel_resync(12345);

-- The table unregistered meanwhile: the job fails, saying so.
SELECT outbox.resync('member', '{1}') AS job \gset
SELECT outbox.unregister_table('member');
SELECT outbox.process_resync_batch(:job, 10) AS written;
SELECT state, last_error LIKE 'table with OID % is no longer registered' AS says_so
  FROM outbox.resyncs WHERE job = :job;

-- Redis as the cursor store: the same, and no row in outbox.cursors.
SET outbox.cursor_store = 'redis';
TRUNCATE outbox.cell_outbox;
SELECT outbox.resync('org', '{3, 5}') AS job \gset
SELECT outbox.process_resync_batch(:job, 1) AS written;
SELECT outbox.process_resync_batch(:job, 1) AS written;
SELECT outbox.process_resync_batch(:job, 1) IS NULL AS done;
SELECT object, payload FROM cell_rows;
SELECT count(*) AS table_cursors FROM outbox.cursors WHERE table_key = 'resync.' || :job;
RESET outbox.cursor_store;

-- Bad input: each refused, naming the argument.
SELECT outbox.resync(NULL, '{1}');
SELECT outbox.resync('org', NULL::bigint[]);
SELECT outbox.resync('org', '{}');
SELECT outbox.resync('org', '{1,NULL}');
SELECT outbox.resync('org', ARRAY(SELECT generate_series(1, 1000001)::bigint));
SELECT outbox.resync('pg_class', '{1}');
SELECT outbox.resync('org', 5, 1);
SELECT outbox.resync('org', NULL, 1);
SELECT outbox.process_resync_batch(NULL, 1);
SELECT outbox.process_resync_batch(1, 0);
SELECT outbox.process_resync_batch(123456, 1);
SELECT count(*) AS jobs FROM outbox.resyncs;

-- Roles: an application role may neither start a re-sync nor read the
-- jobs; a pg_monitor member reads them.
CREATE ROLE resync_app;
CREATE ROLE resync_monitor IN ROLE pg_monitor;
GRANT USAGE ON SCHEMA resync TO resync_app;
SET ROLE resync_app;
SELECT outbox.resync('org', '{1}');
SELECT outbox.process_resync_batch(1, 1);
SELECT count(*) FROM outbox.resyncs;
RESET ROLE;
SET ROLE resync_monitor;
SELECT count(*) AS jobs_seen FROM outbox.resyncs;
RESET ROLE;
DROP SCHEMA resync CASCADE;
DROP ROLE resync_app;
DROP ROLE resync_monitor;
