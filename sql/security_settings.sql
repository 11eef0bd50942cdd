-- Settings never outlive an owner-run scope (SPEC section 9, issue 24 item
-- 1).  A table owner's IMMUTABLE index predicate calls set_config(...,
-- false) on search_path and on a setting of its own; pg_outbox then runs
-- every owner-run scope a session can reach, each in a fresh backend (\c:
-- the predicate is folded once per backend, when the index is first
-- planned), as the role that would run it: a superuser, a pg_monitor member,
-- a CONSUME role.  After each, the session's settings must be as they were.
-- (0.9.0 kept them: the owner chose the search_path of whoever ran next.)
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
DROP SCHEMA IF EXISTS st CASCADE;
DROP ROLE IF EXISTS st_owner;
DROP ROLE IF EXISTS st_monitor;
DROP ROLE IF EXISTS st_consumer;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
ALTER DATABASE regression SET outbox.cursor_store = 'table';
SELECT outbox.register_scope('ST', 0);
SELECT outbox.register_category('ST_PARENT', 'ST', 0);
SELECT outbox.register_category('ST_CHILD', 'ST', 1);
SELECT outbox.register_cell('us');
CREATE ROLE st_owner;
CREATE ROLE st_monitor IN ROLE pg_monitor;
CREATE ROLE st_consumer;
SELECT outbox.grant_category('ST_PARENT', 'st_owner');
SELECT outbox.grant_category('ST_CHILD', 'st_owner');
SELECT outbox.grant_category('ST_CHILD', 'st_consumer', 'CONSUME');
CREATE SCHEMA st AUTHORIZATION st_owner;
CREATE SCHEMA attacker;

SET ROLE st_owner;
CREATE FUNCTION st.leak() RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM set_config('search_path', 'attacker, pg_catalog', false);
    PERFORM set_config('st.leaked', 'yes', false);
    RETURN true;
END $$;
CREATE TABLE st.p (id bigint PRIMARY KEY);
CREATE INDEX p_leak ON st.p (id) WHERE st.leak();
CREATE TABLE st.c (id bigint PRIMARY KEY, org int NOT NULL, p_id bigint);
CREATE INDEX c_leak ON st.c (p_id) WHERE st.leak();
CREATE INDEX ON st.c (p_id);
SELECT outbox.register_table('st.p', 'ST_PARENT', 'control', shard_column => 'id');
SELECT outbox.register_table('st.c', 'ST_CHILD', shard_column => 'org');
INSERT INTO st.p SELECT g FROM generate_series(1, 4) g;
INSERT INTO st.c SELECT g, 1, g FROM generate_series(1, 4) g;
RESET ROLE;
SELECT outbox.register_foreign_key('st.c', 'p_id', 'p', 'CASCADE');
CREATE FUNCTION public.st_take(m outbox.message) RETURNS void LANGUAGE sql AS $$ SELECT $$;
SELECT outbox.register_handler('ST_PARENT', 'public.st_take(outbox.message)');
SELECT outbox.set_processing_state('c', 0, 1);
SELECT outbox.set_replication_version('st.c', 2);
SELECT outbox.set_option('outbox_replication.c.replication_version', '2');

-- What a session's settings are after a scope: as before it, or the owner's.
CREATE FUNCTION public.st_settings(OUT search_path text, OUT leaked text) LANGUAGE sql AS
    $$ SELECT current_setting('search_path'), current_setting('st.leaked', true) $$;
GRANT EXECUTE ON FUNCTION public.st_settings() TO PUBLIC;

-- A backfill batch (as a superuser).
\c
SET st.leaked = 'no';
SELECT up > 0 AS batch FROM outbox.process_backfill_batch('st.c', 10);
SELECT * FROM public.st_settings();
-- backfill_status, metrics() and foreign_keys (as a pg_monitor member).
\c
SET ROLE st_monitor;
SET st.leaked = 'no';
SELECT count(*) AS status_rows FROM outbox.backfill_status;
SELECT * FROM public.st_settings();
\c
SET ROLE st_monitor;
SET st.leaked = 'no';
SELECT length(outbox.metrics()) > 0 AS scraped;
SELECT * FROM public.st_settings();
\c
SET ROLE st_monitor;
SET st.leaked = 'no';
SELECT count(*) AS foreign_keys FROM outbox.foreign_keys;
SELECT * FROM public.st_settings();
-- plan_backfill (as a superuser).
\c
SET st.leaked = 'no';
SELECT rows FROM outbox.plan_backfill('st.c');
SELECT * FROM public.st_settings();
-- The tombstone check of a delivered deletion, then a cascade step.
DELETE FROM st.p WHERE id = 1;
\c
SET st.leaked = 'no';
SELECT outbox.drain_shard('control', 0, 1, 'us') AS delivered;
SELECT * FROM public.st_settings();
SELECT table_name, object_identifier FROM outbox.cell_tombstone;
\c
SET st.leaked = 'no';
SELECT outbox.process_foreign_key_cascade('st.c', 'p_id', 100) AS more;
SELECT * FROM public.st_settings();
SELECT outbox.process_foreign_key_cascade('st.c', 'p_id', 100) AS more;
SELECT * FROM public.st_settings();
-- (This session's own read of st.c runs the predicate too.)
SELECT id FROM st.c ORDER BY id;
-- complete() of a consumer (CONSUME role), which records tombstones.
TRUNCATE outbox.cell_outbox;
DELETE FROM st.c WHERE id = 2;
\c
SET ROLE st_consumer;
SET st.leaked = 'no';
SELECT outbox.complete(array_agg(claim)) AS completed FROM outbox.claim(10, '1 minute');
SELECT * FROM public.st_settings();
RESET ROLE;
SELECT table_name, object_identifier FROM outbox.control_tombstone;

SET client_min_messages = warning;
\c
SELECT outbox._unregister_foreign_key('st.c', 'p_id');
SELECT outbox.unregister_table('st.c');
SELECT outbox.unregister_table('st.p');
DROP SCHEMA st CASCADE;
DROP SCHEMA attacker;
DROP FUNCTION public.st_settings();
DROP EXTENSION pg_outbox CASCADE;
ALTER DATABASE regression RESET outbox.cursor_store;
DROP ROLE st_owner;
DROP ROLE st_monitor;
DROP ROLE st_consumer;
CREATE EXTENSION pg_outbox;
