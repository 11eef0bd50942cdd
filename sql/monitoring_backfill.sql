-- outbox.backfill_status through a backfill's life, with the cursor in
-- Redis, then with Redis unreachable.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
CREATE SCHEMA monitoring_backfill;
SET search_path = monitoring_backfill, public;
SET outbox.cursor_store = 'redis';
SELECT set_config('outbox.redis_key_prefix', 'regress:' || txid_current() || ':', false) <> '' AS prefixed;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_category('PROJECT_UPDATE', 'ORGANIZATION_SCOPE', 2);
CREATE TABLE org (id bigint PRIMARY KEY, name text);
CREATE TABLE project (id int PRIMARY KEY, org_id bigint NOT NULL);
SELECT outbox.register_table('org', 'ORGANIZATION_UPDATE');
SELECT outbox.register_table('project', 'PROJECT_UPDATE', shard_column => 'org_id',
                             replication_version => 3);
INSERT INTO org SELECT g, 'org' || g FROM generate_series(11, 30) g;

-- Gates closed (options default to 0): awaiting the option; no cursor yet,
-- and reading the view does not create one.
SELECT * FROM outbox.backfill_status;
SELECT * FROM outbox.backfill_status;
-- The view reads in a read-only transaction.
BEGIN READ ONLY;
SELECT table_key, state FROM outbox.backfill_status;
COMMIT;

-- Gate open: pending, then in progress batch by batch, then complete.
SELECT outbox.set_option('outbox_replication.org.replication_version', '1');
SELECT table_key, option_version, effective_version, cursor_lower_bound, state
  FROM outbox.backfill_status WHERE table_key = 'org';
SELECT (b).low, (b).up FROM outbox.process_backfill_batch('org', 5) b;
SELECT table_key, cursor_lower_bound, cursor_version, max_id, fraction_done, state
  FROM outbox.backfill_status WHERE table_key = 'org';
SELECT (b).low, (b).up FROM outbox.process_backfill_batch('org', 9) b;
SELECT table_key, cursor_lower_bound, max_id, fraction_done, state
  FROM outbox.backfill_status WHERE table_key = 'org';
-- Rolling the gate back stops it where it is: awaiting the option.
SELECT outbox.set_option('outbox_replication.org.replication_version', '0');
SELECT table_key, option_version, effective_version, cursor_lower_bound, fraction_done, state
  FROM outbox.backfill_status WHERE table_key = 'org';
SELECT outbox.process_backfill_batch('org', 100) IS NULL AS nothing_runs;
-- Reopened, it resumes from the cursor; Sentry's walk completes with a
-- batch past the last id.
SELECT outbox.set_option('outbox_replication.org.replication_version', '1');
SELECT (b).low, (b).up, (b).has_more FROM outbox.process_backfill_batch('org', 100) b;
SELECT table_key, cursor_lower_bound, cursor_version, fraction_done, state
  FROM outbox.backfill_status WHERE table_key = 'org';
SELECT (b).low, (b).up, (b).has_more FROM outbox.process_backfill_batch('org', 100) b;
SELECT table_key, cursor_lower_bound, cursor_version, fraction_done, state
  FROM outbox.backfill_status WHERE table_key = 'org';
-- A new coded version: pending again (the walk restarts at 0).
SELECT outbox.set_replication_version('org', 2);
SELECT outbox.set_option('outbox_replication.org.replication_version', '2');
SELECT table_key, coded_version, effective_version, cursor_version, fraction_done, state
  FROM outbox.backfill_status WHERE table_key = 'org';

-- A gate opened only part of the way (1 of 3): Sentry backfills at version
-- 1 and then marks the table complete.
INSERT INTO project SELECT g, g FROM generate_series(1, 3) g;
SELECT outbox.set_option('outbox_replication.project.replication_version', '1');
SELECT table_key, coded_version, option_version, effective_version, state
  FROM outbox.backfill_status WHERE table_key = 'project';
SELECT (b).has_more FROM outbox.process_backfill_batch('project', 100) b;
SELECT (b).has_more FROM outbox.process_backfill_batch('project', 100) b;
SELECT table_key, cursor_version, fraction_done, state
  FROM outbox.backfill_status WHERE table_key = 'project';

-- Redis unreachable: every table still has a row, none raises an error.
-- (The Redis address is a reload setting: a session cannot redirect it.)
ALTER SYSTEM SET outbox.redis_port = 1;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT current_setting('outbox.redis_port') AS redis_port;
SELECT table_key, coded_version, effective_version, cursor_lower_bound, cursor_version, max_id,
       fraction_done, state FROM outbox.backfill_status;
ALTER SYSTEM RESET outbox.redis_port;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT table_key, state FROM outbox.backfill_status;

-- A Redis value that is not a cursor: that table only is unavailable.
SELECT current_setting('outbox.redis_key_prefix') || 'outbox_backfill.org' AS org_key \gset
\setenv ORG_KEY :org_key
\! redis-cli -p "$REDIS_PORT" SET "$ORG_KEY" 'not a cursor' >/dev/null
SELECT table_key, cursor_lower_bound, state FROM outbox.backfill_status;

-- The table store: the same states.
SET outbox.cursor_store = 'table';
SELECT table_key, cursor_lower_bound, cursor_version, state FROM outbox.backfill_status;
SELECT (b).up FROM outbox.process_backfill_batch('org', 5) b;
SELECT table_key, cursor_lower_bound, cursor_version, state FROM outbox.backfill_status;
