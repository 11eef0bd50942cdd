-- The DDL of pg_outbox's triggers on an application's table, built in C++
-- (src/registry/trigger_statements.cpp: outbox._trigger_statement), its
-- names quoted there: each kind's text on a table whose schema and name
-- need quotes, the statements run, and bad arguments each named.  The
-- registry, the DDL guard and the move run them (registry.sql,
-- partitions.sql, the integration tests relocation_*.sh).
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE SCHEMA "Trigger Schema";
CREATE TABLE "Trigger Schema"."Select" (id bigint PRIMARY KEY, org bigint);
SELECT outbox._trigger_statement('outbox_capture_apply', '"Trigger Schema"."Select"');
SELECT outbox._trigger_statement('outbox_capture_update', '"Trigger Schema"."Select"');
SELECT outbox._trigger_statement('outbox_capture_truncate', '"Trigger Schema"."Select"');
SELECT outbox._trigger_statement('pg_outbox_move', '"Trigger Schema"."Select"',
    '{public.select,id,org,public.o''rg}');
SELECT outbox._trigger_statement('pg_outbox_move_row', '"Trigger Schema"."Select"', '{t,id}');
SELECT outbox._trigger_statement('drop_trigger', '"Trigger Schema"."Select"', '{"A Trigger"}');
SELECT outbox._trigger_statement('lock', '"Trigger Schema"."Select"', '{"share row exclusive"}');
-- They run: each capture trigger made, enabled ALWAYS, then dropped.
DO $$
DECLARE
    k text;
BEGIN
    FOREACH k IN ARRAY ARRAY['outbox_capture_apply', 'outbox_capture_insert',
                             'outbox_capture_update', 'outbox_capture_delete',
                             'outbox_capture_truncate'] LOOP
        EXECUTE outbox._trigger_statement(k, '"Trigger Schema"."Select"');
    END LOOP;
END $$;
SELECT tgname, tgenabled FROM pg_trigger
 WHERE tgrelid = '"Trigger Schema"."Select"'::regclass ORDER BY tgname;
DO $$
DECLARE
    g name;
BEGIN
    FOR g IN SELECT tgname FROM pg_trigger WHERE tgrelid = '"Trigger Schema"."Select"'::regclass LOOP
        EXECUTE outbox._trigger_statement('drop_trigger', '"Trigger Schema"."Select"', ARRAY[g::text]);
    END LOOP;
END $$;
SELECT count(*) AS left_behind FROM pg_trigger WHERE tgrelid = '"Trigger Schema"."Select"'::regclass;
-- Bad arguments: each named.
SELECT outbox._trigger_statement(NULL, '"Trigger Schema"."Select"');
SELECT outbox._trigger_statement('outbox_capture_insert', NULL);
SELECT outbox._trigger_statement('outbox_capture_insert', '"Trigger Schema"."Select"', NULL);
SELECT outbox._trigger_statement('no_such_kind', '"Trigger Schema"."Select"');
SELECT outbox._trigger_statement('outbox_capture_insert', 4000000000::oid::regclass);
SELECT outbox._trigger_statement('outbox_capture_insert', '"Trigger Schema"."Select"', '{x}');
SELECT outbox._trigger_statement('pg_outbox_move', '"Trigger Schema"."Select"', '{}');
SELECT outbox._trigger_statement('pg_outbox_move', '"Trigger Schema"."Select"', '{a,b,c}');
SELECT outbox._trigger_statement('drop_trigger', '"Trigger Schema"."Select"');
SELECT outbox._trigger_statement('drop_trigger', '"Trigger Schema"."Select"', '{NULL}');
SELECT outbox._trigger_statement('lock', '"Trigger Schema"."Select"', '{"share; DROP TABLE x"}');
SELECT outbox._trigger_statement('lock', '"Trigger Schema"."Select"', '{{share}}');
-- Only the extension's owner runs it.
CREATE ROLE trigger_statement_nobody;
SET ROLE trigger_statement_nobody;
SELECT outbox._trigger_statement('outbox_capture_insert', 'pg_class');
RESET ROLE;
DROP ROLE trigger_statement_nobody;
DROP SCHEMA "Trigger Schema" CASCADE;
