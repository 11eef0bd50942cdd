-- Operating control (SPEC section 10): paused shards, retries, skipped
-- messages, dead letters and max_attempts, as the extension's owner, then
-- bad arguments and other roles.  The worker-side races are in
-- test/integration/operating_control.sh.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
SELECT outbox.register_cell('us');
CREATE TABLE org (id bigint PRIMARY KEY, name text);
SELECT outbox.register_table('org', 'org_update', 'cell', shard_column => 'id',
                             payload_columns => '{name}');
CREATE TABLE member (id bigint PRIMARY KEY, org_id bigint NOT NULL);
SELECT outbox.register_table('member', 'user_update', 'control', shard_column => 'org_id');
-- The handler fails for names starting with 'bad'.
CREATE TABLE seen (n serial, category int, object_identifier bigint, name text);
CREATE FUNCTION h(m outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF m.payload->>'name' LIKE 'bad%' THEN
        RAISE EXCEPTION 'handler failed on %', m.payload->>'name';
    END IF;
    INSERT INTO seen (category, object_identifier, name) VALUES (m.category, m.object_identifier, m.payload->>'name');
END $$;
SELECT outbox.register_handler('org_update', 'h(outbox.message)');
SELECT outbox.register_handler('user_update', 'h(outbox.message)');
CREATE VIEW depth AS
SELECT silo, shard_scope, shard_identifier, cell_name, depth, state, attempts, category,
       object_identifier, dead_letters FROM outbox.shard_depth;

-- A paused shard keeps its rows and the rows written later; other shards go
-- on; resuming delivers them.  A shard may be paused before it has rows.
INSERT INTO org VALUES (1, 'one'), (2, 'two');
SELECT outbox.pause_shard('cell', 0, 1);
SELECT outbox.pause_shard('cell', 0, 1);
SELECT outbox.pause_shard('cell', 0, 3);
INSERT INTO org VALUES (3, 'three');
UPDATE org SET name = 'one again' WHERE id = 1;
SELECT outbox.drain('cell');
SELECT object_identifier, name FROM seen ORDER BY n;
SELECT * FROM depth;
SELECT outbox.drain_shard('cell', 0, 1);
SELECT outbox.resume_shard('cell', 0, 1);
SELECT outbox.resume_shard('cell', 0, 3);
SELECT outbox.drain('cell');
SELECT object_identifier, name FROM seen ORDER BY n;
SELECT * FROM depth;
TRUNCATE seen;

-- A failing message backs its shard off; retry_shard makes it due now (and
-- says how many rows), and the failure count goes on.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 10, 0, 10, '{"name": "bad ten"}'), (0, 10, 0, 11, '{"name": "eleven"}');
SELECT outbox.drain('cell');
SELECT * FROM depth;
SELECT outbox.retry_shard('cell', 0, 10);
SELECT outbox.retry_shard('cell', 0, 11);
SELECT * FROM depth;
SELECT outbox.drain('cell');
SELECT * FROM depth;

-- skip_message moves the failing message's rows to the dead letters, clears
-- the shard's error and makes the rest of the shard due.
SELECT outbox.skip_message('cell', 0, 10, 0, 10);
SELECT * FROM depth;
SELECT silo, shard_identifier, cell_name, category, object_identifier, payload, attempts,
       last_error FROM outbox.dead_letters ORDER BY id;
SELECT outbox.drain('cell');
SELECT object_identifier, name FROM seen ORDER BY n;
TRUNCATE seen;

-- max_attempts moves exactly the failing message, after that many failures
-- in a row, and the shard goes on with the next message: here message 21
-- (rows 'bad a' and 'bad b', coalesced) fails, 20 before it was delivered,
-- 22 after it is delivered after the move.
SELECT outbox.set_max_attempts('org_update', 2);
SELECT name, max_attempts FROM outbox.categories ORDER BY id;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 20, 0, 20, '{"name": "twenty"}'), (0, 20, 0, 21, '{"name": "bad a"}'),
       (0, 20, 0, 21, '{"name": "bad b"}'), (0, 20, 0, 22, '{"name": "twenty-two"}');
SELECT outbox.drain('cell');
SELECT * FROM depth WHERE shard_identifier = 20;
SELECT outbox.retry_shard('cell', 0, 20);
SELECT outbox.drain('cell');
SELECT * FROM depth WHERE shard_identifier = 20;
SELECT outbox.drain('cell');
SELECT object_identifier, name FROM seen ORDER BY n;
SELECT shard_identifier, object_identifier, payload, attempts, last_error
  FROM outbox.dead_letters WHERE shard_identifier = 20 ORDER BY id;
SELECT outbox.set_max_attempts('org_update', 0);

-- requeue_dead_letters puts rows back in their shard after the rows there
-- now, in their original order; only the ids asked for.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 20, 0, 23, '{"name": "twenty-three"}');
SELECT outbox.requeue_dead_letters(ARRAY(SELECT id FROM outbox.dead_letters WHERE shard_identifier = 20));
SELECT object_identifier, payload FROM outbox.cell_outbox WHERE shard_identifier = 20 ORDER BY id;
SELECT count(*) AS left_dead FROM outbox.dead_letters;
SELECT outbox.requeue_dead_letters();
SELECT count(*) AS left_dead FROM outbox.dead_letters;
DELETE FROM outbox.cell_outbox;

-- A message requeued while newer rows of its object wait in the shard: the
-- requeued rows come after them, and a message's payload is its newest
-- row's, so they take the newest waiting payload (0.9.0 before issue 34
-- delivered the dead letter's older one and the newer state was lost).
TRUNCATE seen;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 30, 0, 31, '{"name": "old"}'), (0, 30, 0, 32, '{"name": "other old"}');
SELECT outbox.skip_message('cell', 0, 30, 0, 31), outbox.skip_message('cell', 0, 30, 0, 32);
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 30, 0, 31, '{"name": "new"}');
SELECT outbox.requeue_dead_letters();
SELECT outbox.drain('cell');
SELECT object_identifier, name FROM seen ORDER BY n;
TRUNCATE seen;

-- The control silo: shards per cell.
INSERT INTO member VALUES (1, 5);
SELECT outbox.pause_shard('control', 0, 5, 'us');
SELECT silo, shard_identifier, cell_name, depth, state FROM depth;
SELECT outbox.skip_message('control', 0, 5, 1, 1, 'us');
SELECT silo, shard_identifier, cell_name, category, object_identifier, attempts FROM outbox.dead_letters;
-- Newer rows of the object wait, for its cell and for another: the requeued
-- row takes its own cell's newest payload.
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier,
                                   payload, cell_name)
VALUES (0, 5, 1, 1, '{"state": "newer"}', 'us'), (0, 5, 1, 1, '{"state": "other cell"}', 'eu');
SELECT outbox.requeue_dead_letters();
SELECT shard_identifier, cell_name, category, object_identifier, payload
  FROM outbox.control_outbox ORDER BY id;
DELETE FROM outbox.control_outbox WHERE cell_name = 'eu';
SELECT outbox.resume_shard('control', 0, 5, 'us');
SELECT outbox.drain('control');
SELECT * FROM depth;

-- Bad arguments name the argument.
SELECT outbox.pause_shard(NULL, 0, 1);
SELECT outbox.pause_shard('moon', 0, 1);
SELECT outbox.pause_shard('cell', NULL, 1);
SELECT outbox.pause_shard('cell', 0, NULL);
SELECT outbox.pause_shard('cell', 9, 1);
SELECT outbox.pause_shard('cell', 0, 1, 'us');
SELECT outbox.pause_shard('control', 0, 1);
SELECT outbox.pause_shard('control', 0, 1, 'mars');
SELECT outbox.resume_shard('cell', 0, 1);
SELECT outbox.resume_shard('control', 0, 1, 'us');
SELECT outbox.retry_shard('moon', 0, 1);
SELECT outbox.retry_shard('cell', 9, 1);
SELECT outbox.skip_message('cell', 0, 1, NULL, 1);
SELECT outbox.skip_message('cell', 0, 1, 0, NULL);
SELECT outbox.skip_message('cell', 0, 1, 99, 1);
SELECT outbox.skip_message('cell', 9, 1, 0, 1);
SELECT outbox.requeue_dead_letters('{999}');
SELECT outbox.requeue_dead_letters('{NULL}');
SELECT outbox.set_max_attempts(NULL, 1);
SELECT outbox.set_max_attempts('org_update', NULL);
SELECT outbox.set_max_attempts('nope', 1);
SELECT outbox.set_max_attempts('org_update', -1);

-- Only the extension's owner: a table owner, an application role and a
-- pg_monitor member are refused; pg_monitor sees the state and the counts.
CREATE ROLE oc_owner;
CREATE ROLE oc_app;
CREATE ROLE oc_monitor IN ROLE pg_monitor;
GRANT SELECT, INSERT ON org TO oc_app;
SELECT outbox.pause_shard('cell', 0, 42);
SET ROLE oc_owner;
SELECT outbox.resume_shard('cell', 0, 42);
SELECT outbox.retry_shard('cell', 0, 42);
SELECT outbox.set_max_attempts('org_update', 1);
SET ROLE oc_app;
SELECT outbox.pause_shard('cell', 0, 1);
SELECT outbox.skip_message('cell', 0, 1, 0, 1);
SELECT outbox.requeue_dead_letters();
SELECT * FROM outbox.dead_letters;
SET ROLE oc_monitor;
SELECT outbox.pause_shard('cell', 0, 1);
SELECT payload FROM outbox.dead_letters;
SELECT shard_identifier, state FROM outbox.shard_depth;
SELECT outbox.metrics() ~ 'pg_outbox_shards_paused\{silo="cell"\} 1' AS paused_counted;
RESET ROLE;
SELECT outbox.resume_shard('cell', 0, 42);
DROP ROLE oc_owner, oc_monitor;
REVOKE ALL ON org FROM oc_app;
DROP ROLE oc_app;
