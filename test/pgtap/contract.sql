-- The SQL contract of SPEC section 8 (the parts that exist so far): names,
-- signatures and columns that tests outside the project call.
BEGIN;
SELECT plan(27);

SELECT has_schema('outbox');
SELECT has_function('outbox', 'register_scope', ARRAY['text', 'integer']);
SELECT has_function('outbox', 'register_category', ARRAY['text', 'text', 'integer']);
SELECT has_function('outbox', 'register_cell', ARRAY['text']);
SELECT has_function('outbox', 'unregister_cell', ARRAY['text']);
SELECT has_function('outbox', 'register_table',
    ARRAY['regclass', 'text', 'text', 'name', 'name[]', 'name', 'integer', 'text']);
SELECT has_function('outbox', 'unregister_table', ARRAY['regclass']);
SELECT has_function('outbox', 'set_replication_version', ARRAY['regclass', 'integer']);
SELECT has_function('outbox', 'set_option', ARRAY['text', 'jsonb']);
SELECT has_function('outbox', 'get_option', ARRAY['text']);
SELECT has_function('outbox', 'unset_option', ARRAY['text']);
SELECT has_function('outbox', 'find_replication_version', ARRAY['regclass', 'boolean']);
SELECT function_returns('outbox', 'register_scope', ARRAY['text', 'integer'], 'integer');
SELECT function_returns('outbox', 'find_replication_version', ARRAY['regclass', 'boolean'], 'integer');
SELECT function_returns('outbox', 'get_option', ARRAY['text'], 'jsonb');

SELECT columns_are('outbox', 'cell_outbox', ARRAY['id', 'shard_scope', 'shard_identifier',
    'category', 'object_identifier', 'payload', 'scheduled_from', 'scheduled_for', 'date_added']);
SELECT columns_are('outbox', 'control_outbox', ARRAY['id', 'shard_scope', 'shard_identifier',
    'category', 'object_identifier', 'payload', 'scheduled_from', 'scheduled_for', 'date_added',
    'cell_name']);
SELECT col_type_is('outbox', 'cell_outbox', 'shard_identifier', 'bigint', 'cell_outbox.shard_identifier is bigint');
SELECT col_type_is('outbox', 'cell_outbox', 'object_identifier', 'bigint', 'cell_outbox.object_identifier is bigint');
SELECT col_type_is('outbox', 'cell_outbox', 'shard_scope', 'integer', 'cell_outbox.shard_scope is integer');
SELECT col_type_is('outbox', 'cell_outbox', 'payload', 'jsonb', 'cell_outbox.payload is jsonb');
SELECT columns_are('outbox', 'tables', ARRAY['table_key', 'relation', 'silo', 'category',
    'scope', 'shard_column', 'cell_column', 'payload_columns', 'replication_version']);
SELECT has_table('outbox', 'options', 'the options table exists');

-- GUCs.
SELECT is(current_setting('outbox.silo_mode'), 'monolith', 'outbox.silo_mode defaults to monolith');
SELECT is((SELECT context FROM pg_settings WHERE name = 'outbox.silo_mode'), 'sighup',
          'outbox.silo_mode is applied on reload');
-- Defaults of the registration API.
SELECT is((SELECT pg_get_function_arguments('outbox.register_table(regclass,text,text,name,name[],name,integer,text)'::regprocedure)),
          'tbl regclass, category text, silo text DEFAULT ''cell''::text, shard_column name DEFAULT NULL::name, payload_columns name[] DEFAULT NULL::name[], cell_column name DEFAULT NULL::name, replication_version integer DEFAULT 1, table_key text DEFAULT NULL::text',
          'register_table arguments and defaults');
SELECT is(outbox.get_option('outbox_replication.anything.replication_version'), '0'::jsonb,
          'the gate defaults to 0');

SELECT * FROM finish();
ROLLBACK;
