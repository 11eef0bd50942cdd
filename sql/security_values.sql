-- Values and objects that crashed, stalled or escalated in 0.4.0 (issue 9,
-- items 2, 7, 10 and 11), each from the role that can bring them.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
DROP ROLE IF EXISTS val_app;
DROP ROLE IF EXISTS val_handler_owner;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('VAL', 0);
SELECT outbox.register_category('VAL_UPDATE', 'VAL', 0);
SELECT outbox.register_category('VAL_WIDE', 'VAL', 1);
SELECT outbox.register_category('VAL_BIG', 'VAL', 2);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('eu-west-1');
CREATE ROLE val_app;

-- A control table whose cell column is of type name (item 2): an INSERT by
-- a role with only INSERT read it as a varlena, and crashed the server or
-- wrote the wrong cell.
CREATE TABLE tokens (id int PRIMARY KEY, user_id int NOT NULL, cell name NOT NULL);
CREATE TABLE tokens_v (id int PRIMARY KEY, user_id int NOT NULL, cell varchar(20) NOT NULL);
SELECT outbox.register_table('tokens', 'VAL_UPDATE', 'control', shard_column => 'user_id',
                             cell_column => 'cell');
SELECT outbox.register_table('tokens_v', 'VAL_UPDATE', 'control', shard_column => 'user_id',
                             cell_column => 'cell', table_key => 'tokens_varchar');
GRANT INSERT, UPDATE ON tokens, tokens_v TO val_app;
GRANT SELECT (id) ON tokens TO val_app;
SET ROLE val_app;
INSERT INTO tokens VALUES (1, 10, 'us'), (2, 20, 'eu-west-1'), (3, 30, repeat('c', 63)), (4, 40, 'dddd-cell');
INSERT INTO tokens_v VALUES (1, 10, 'eu-west-1');
UPDATE tokens SET cell = 'us' WHERE id = 2;
RESET ROLE;
SELECT object_identifier, shard_identifier, cell_name FROM outbox.control_outbox ORDER BY id;
-- And the backfill writes the same cells.
TRUNCATE outbox.control_outbox;
SELECT outbox.set_processing_state('tokens', 0, 1);   -- Redis outlives a test run
SELECT outbox.set_replication_version('tokens', 2);
SELECT rows_written FROM outbox.process_backfill_batch('tokens', 10, true);
SELECT object_identifier, cell_name FROM outbox.control_outbox ORDER BY id;
TRUNCATE outbox.control_outbox;

-- Ids at the ends of bigint (item 10): the walk ended never, and the views
-- failed with "bigint out of range".
CREATE TABLE extremes (id bigint PRIMARY KEY);
INSERT INTO extremes VALUES (1), (2), (9223372036854775807);
SELECT outbox.register_table('extremes', 'VAL_UPDATE');
TRUNCATE outbox.cell_outbox;
SELECT outbox.set_processing_state('extremes', 0, 1);
SELECT outbox.set_replication_version('extremes', 2);
SELECT low, up, has_more, count, rows_written FROM outbox.process_backfill_batch('extremes', 2, true);
SELECT low, up, has_more, count, rows_written FROM outbox.process_backfill_batch('extremes', 2, true);
SELECT * FROM outbox.get_processing_state('extremes');
SELECT count(*) AS backfilled FROM outbox.cell_outbox;
INSERT INTO extremes VALUES (-9223372036854775808);
SELECT outbox.set_replication_version('extremes', 3);
SELECT outbox.set_processing_state('extremes', 5, 3);
SELECT table_key, max_id, fraction_done, state FROM outbox.backfill_status WHERE table_key = 'extremes';
SELECT outbox.metrics() LIKE '%pg_outbox_backfill_fraction_done{table_key="extremes"}%' AS metrics_work;
SELECT outbox.set_processing_state('extremes', -9223372036854775808, 3);
SELECT low, up, has_more, count FROM outbox.process_backfill_batch('extremes', 1000, true);
SELECT outbox.backfill_outboxes_for('cell', force_synchronous => true);
SELECT outbox.run_replications_sync() >= 0 AS synchronous_path_ends;

-- More than 50 payload columns (item 11): jsonb_build_object's limit of 100
-- arguments failed the backfill of a table that capture handled.
SELECT format('CREATE TABLE wide (id int PRIMARY KEY, %s)',
              string_agg(format('c%s int DEFAULT %s', g, g), ', '))
  FROM generate_series(1, 60) g \gexec
SELECT outbox.register_table('wide', 'VAL_WIDE',
                             payload_columns => ARRAY(SELECT format('c%s', g) FROM generate_series(1, 60) g)::name[]);
INSERT INTO wide (id) VALUES (1);
SELECT outbox.set_processing_state('wide', 0, 1);
SELECT outbox.set_replication_version('wide', 2);
SELECT rows_written FROM outbox.process_backfill_batch('wide', 10, true);
SELECT count(*) AS rows, count(DISTINCT payload) AS same_payload, max((SELECT count(*) FROM jsonb_object_keys(payload))) AS keys
  FROM outbox.cell_outbox WHERE category = 1;
-- A batch read in several chunks (the fuzzer found each chunk deformed with
-- the freed descriptor of the first).
INSERT INTO wide (id, c1, c60) SELECT g, g, -g FROM generate_series(2, 2600) g;
TRUNCATE outbox.cell_outbox;
SELECT outbox.set_replication_version('wide', 3);
SELECT rows_written FROM outbox.process_backfill_batch('wide', 3000, true);
SELECT count(*) FILTER (WHERE (payload->>'c1')::int = object_identifier
                          AND (payload->>'c60')::int IN (-object_identifier, 60)
                          AND (payload->>'c30')::int = 30) AS right_payloads
  FROM outbox.cell_outbox WHERE category = 1;
DELETE FROM wide WHERE id > 1;

-- Handlers run as the owner of their function (item 7), not as the worker's
-- or the caller's superuser; the owner may change the body, never the rights.
CREATE ROLE val_handler_owner;
CREATE SCHEMA val AUTHORIZATION val_handler_owner;
CREATE TABLE handled (who name, super boolean, object bigint);
GRANT INSERT ON handled TO val_handler_owner;
SET ROLE val_handler_owner;
CREATE FUNCTION val.handle(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO handled SELECT current_user, rolsuper, m.object_identifier
      FROM pg_roles WHERE rolname = current_user;
END $$;
RESET ROLE;
SELECT outbox.register_handler('VAL_BIG', 'val.handle(outbox.message)');
CREATE TABLE val_big (id int PRIMARY KEY);
SELECT outbox.register_table('val_big', 'VAL_BIG');
INSERT INTO val_big VALUES (1);
SELECT outbox.drain('cell');
SET ROLE val_handler_owner;
CREATE OR REPLACE FUNCTION val.handle(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO handled SELECT current_user, rolsuper, -m.object_identifier
      FROM pg_roles WHERE rolname = current_user;
    EXECUTE 'ALTER ROLE val_handler_owner SUPERUSER';
END $$;
RESET ROLE;
INSERT INTO val_big VALUES (2);
SELECT outbox.drain('cell');
SELECT who, super, object FROM handled ORDER BY object;
SELECT rolsuper AS handler_owner_became_superuser FROM pg_roles WHERE rolname = 'val_handler_owner';
-- Refused: "must be superuser to alter superuser roles..." on 15, "permission
-- denied to alter role" from 16.
SELECT last_error ~ '^(must be superuser to alter superuser roles|permission denied to alter role)'
       AS refused, attempts
  FROM outbox.shard_depth WHERE shard_identifier = 2;

-- A handler that drains would nest drains without end: refused, and the
-- message waits, visibly.
SELECT outbox.register_category('VAL_NEST', 'VAL', 3);
CREATE FUNCTION val_nested(m outbox.message) RETURNS void LANGUAGE plpgsql AS
    $$ BEGIN PERFORM outbox.drain(); END $$;
SELECT outbox.register_handler('VAL_NEST', 'val_nested(outbox.message)');
CREATE TABLE val_nest (id int PRIMARY KEY);
SELECT outbox.register_table('val_nest', 'VAL_NEST');
INSERT INTO val_nest VALUES (7);
SELECT outbox.drain_shard('cell', 0, 7);
SELECT depth, last_error FROM outbox.shard_depth WHERE shard_identifier = 7;

-- Dropping a handler function is refused; writes go on either way.
SET ROLE val_handler_owner;
DROP FUNCTION val.handle(outbox.message);
RESET ROLE;
-- Dropped all the same (event triggers off, as a superuser can): writes to
-- every registered table go on, and the category's messages wait, visibly.
SET session_replication_role = replica;
DROP FUNCTION val.handle(outbox.message);
RESET session_replication_role;
INSERT INTO val_big VALUES (3);
INSERT INTO wide (id) VALUES (2);
UPDATE outbox.cell_outbox SET scheduled_for = now() - interval '1 second', scheduled_from = now() - interval '1 second';
SELECT outbox.drain('cell') >= 0 AS drained;
SELECT shard_identifier, depth, regexp_replace(last_error, 'OID \d+', 'OID n') AS last_error
  FROM outbox.shard_depth WHERE shard_identifier IN (2, 3) ORDER BY 1;

SET client_min_messages = warning;
DROP TABLE tokens, tokens_v, extremes, wide, val_big, val_nest, handled;
SELECT outbox.unregister_handler('VAL_NEST');
DROP FUNCTION val_nested(outbox.message);
DROP SCHEMA val CASCADE;
DROP ROLE val_handler_owner;
DROP ROLE val_app;
RESET client_min_messages;
