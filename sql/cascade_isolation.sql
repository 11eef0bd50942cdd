-- One table cannot starve or corrupt another's cascade (issue 24, item 3):
-- a walk jumps over empty id ranges, so a sparse child finishes in a few
-- steps; watermark keys are unique per table, so own.monitor and
-- public.monitor walk apart.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
DROP SCHEMA IF EXISTS own CASCADE;
DROP TABLE IF EXISTS auth_user, monitor, sparse;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 0);
SELECT outbox.register_cell('us');
CREATE TABLE auth_user (id bigint PRIMARY KEY);
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id');

-- A sparse child: ids 1 and 10^15.  (0.9.0 walked it 500 ids a step:
-- 2 * 10^12 steps.)
CREATE TABLE sparse (id bigint PRIMARY KEY, user_id bigint);
CREATE INDEX ON sparse (user_id);
INSERT INTO sparse VALUES (1, 7), (1000000000000000, 7), (1000000000000001, 8);
SELECT outbox.register_foreign_key('sparse', 'user_id', 'auth_user', 'CASCADE');
SELECT outbox.record_tombstone('cell', 'auth_user', 7);
CREATE FUNCTION pg_temp.steps_to_finish(tbl regclass, col name, most int) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. most LOOP
        IF NOT outbox.process_foreign_key_cascade(tbl, col, 500) THEN
            RETURN i;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;
SELECT pg_temp.steps_to_finish('sparse', 'user_id', 20) <= 10 AS finished_in_a_few_steps;
SELECT id, user_id FROM sparse ORDER BY id;
SELECT table_key, row_watermark, tombstone_watermark, state FROM outbox.foreign_keys;

-- Two children of the same name in two schemas: a key each.
CREATE SCHEMA own;
CREATE TABLE own.monitor (id bigint PRIMARY KEY, user_id bigint);
CREATE INDEX ON own.monitor (user_id);
CREATE TABLE monitor (id bigint PRIMARY KEY, user_id bigint);
CREATE INDEX ON monitor (user_id);
INSERT INTO own.monitor SELECT g, g FROM generate_series(1, 100) g;
INSERT INTO monitor SELECT g, g FROM generate_series(1, 100) g;
SELECT outbox.register_foreign_key('own.monitor', 'user_id', 'auth_user', 'CASCADE');
SELECT outbox.register_foreign_key('monitor', 'user_id', 'auth_user', 'CASCADE');
SELECT relation, table_key FROM outbox.foreign_keys ORDER BY 1;
-- own.monitor walks to its end; public.monitor's walk has not moved.
SELECT pg_temp.steps_to_finish('own.monitor', 'user_id', 20) IS NOT NULL AS own_finished;
SELECT relation, row_watermark FROM outbox.foreign_keys WHERE table_key LIKE '%monitor' ORDER BY 1;
SELECT outbox.record_tombstone('cell', 'auth_user', 50);
SELECT pg_temp.steps_to_finish('monitor', 'user_id', 20) IS NOT NULL AS public_finished;
SELECT count(*) AS public_children_of_7_and_50 FROM monitor WHERE user_id IN (7, 50);
SELECT pg_temp.steps_to_finish('own.monitor', 'user_id', 20) IS NOT NULL AS own_finished;
SELECT count(*) AS own_children_of_7_and_50 FROM own.monitor WHERE user_id IN (7, 50);

SET client_min_messages = warning;
SELECT outbox._unregister_foreign_key('own.monitor', 'user_id');
SELECT outbox._unregister_foreign_key('monitor', 'user_id');
SELECT outbox._unregister_foreign_key('sparse', 'user_id');
SELECT outbox.unregister_table('auth_user');
DROP SCHEMA own CASCADE;
DROP TABLE auth_user, monitor, sparse;
