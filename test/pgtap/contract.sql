-- The SQL contract of SPEC section 8 (the parts that exist so far): names,
-- signatures and columns that tests outside the project call.
BEGIN;
SELECT plan(62);

SELECT has_schema('outbox');
SELECT has_function('outbox', 'register_scope', ARRAY['text', 'integer']);
SELECT has_function('outbox', 'register_category', ARRAY['text', 'text', 'integer']);
SELECT has_function('outbox', 'register_cell', ARRAY['text']);
SELECT has_function('outbox', 'unregister_cell', ARRAY['text']);
SELECT has_function('outbox', 'register_table',
    ARRAY['regclass', 'text', 'text', 'name', 'name[]', 'name', 'integer', 'text', 'text']);
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

SELECT has_function('outbox', 'get_processing_state', ARRAY['text']);
SELECT has_function('outbox', 'set_processing_state', ARRAY['text', 'bigint', 'integer']);
SELECT has_function('outbox', 'process_backfill_batch', ARRAY['regclass', 'integer', 'boolean']);
SELECT has_function('outbox', 'backfill_outboxes_for', ARRAY['text', 'integer', 'integer', 'boolean']);
SELECT has_function('outbox', 'run_replications_sync', ARRAY[]::text[]);
SELECT function_returns('outbox', 'run_replications_sync', ARRAY[]::text[], 'bigint');
SELECT has_function('outbox', 'register_handler', ARRAY['text', 'regprocedure']);
SELECT has_function('outbox', 'drain_shard', ARRAY['text', 'integer', 'bigint', 'text']);
SELECT has_function('outbox', 'drain', ARRAY['text']);
SELECT function_returns('outbox', 'drain', ARRAY['text'], 'bigint');
SELECT is((SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
             FROM pg_attribute WHERE attrelid = 'outbox.message'::regclass AND attnum > 0),
          'silo text, shard_scope integer, shard_identifier bigint, category integer, object_identifier bigint, payload jsonb, cell_name text, first_id bigint, last_id bigint, coalesced integer',
          'outbox.message is the contract type');
SELECT is((SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
             FROM pg_attribute WHERE attrelid = 'outbox.backfill_batch'::regclass AND attnum > 0),
          'low bigint, up bigint, version integer, has_more boolean, count bigint, rows_written bigint',
          'outbox.backfill_batch is Sentry''s BackfillBatch plus rows_written');
SELECT is((SELECT pg_get_function_arguments('outbox.backfill_outboxes_for(text,integer,integer,boolean)'::regprocedure)),
          'silo_mode text DEFAULT NULL::text, scheduled_count integer DEFAULT 0, max_batch_rate integer DEFAULT 10000, force_synchronous boolean DEFAULT false',
          'backfill_outboxes_for arguments and defaults');

-- GUCs.
SELECT is(current_setting('outbox.silo_mode'), 'monolith', 'outbox.silo_mode defaults to monolith');
SELECT is((SELECT context FROM pg_settings WHERE name = 'outbox.silo_mode'), 'sighup',
          'outbox.silo_mode is applied on reload');
-- Defaults of the registration API.
SELECT is((SELECT pg_get_function_arguments('outbox.register_table(regclass,text,text,name,name[],name,integer,text,text)'::regprocedure)),
          'tbl regclass, category text, silo text DEFAULT ''cell''::text, shard_column name DEFAULT NULL::name, payload_columns name[] DEFAULT NULL::name[], cell_column name DEFAULT NULL::name, replication_version integer DEFAULT 1, table_key text DEFAULT NULL::text, relocation_scope text DEFAULT NULL::text',
          'register_table arguments and defaults');
SELECT is(outbox.get_option('outbox_replication.anything.replication_version'), '0'::jsonb,
          'the gate defaults to 0');

-- Operating control (SPEC section 10): signatures, defaults and return types.
SELECT is((SELECT string_agg(p.oid::regprocedure || ' ' || pg_get_function_arguments(p.oid)
                             || ' -> ' || format_type(p.prorettype, NULL), E'\n' ORDER BY p.proname)
             FROM pg_proc p
            WHERE p.pronamespace = 'outbox'::regnamespace
              AND p.proname IN ('retry_shard', 'pause_shard', 'resume_shard', 'skip_message',
                                'requeue_dead_letters', 'set_max_attempts')),
          $$outbox.pause_shard(text,integer,bigint,text) silo text, shard_scope integer, shard_identifier bigint, cell_name text DEFAULT NULL::text -> void
outbox.requeue_dead_letters(bigint[]) ids bigint[] DEFAULT NULL::bigint[] -> bigint
outbox.resume_shard(text,integer,bigint,text) silo text, shard_scope integer, shard_identifier bigint, cell_name text DEFAULT NULL::text -> void
outbox.retry_shard(text,integer,bigint,text) silo text, shard_scope integer, shard_identifier bigint, cell_name text DEFAULT NULL::text -> bigint
outbox.set_max_attempts(text,integer) category text, max_attempts integer -> void
outbox.skip_message(text,integer,bigint,integer,bigint,text) silo text, shard_scope integer, shard_identifier bigint, category integer, object_identifier bigint, cell_name text DEFAULT NULL::text -> bigint$$,
          'the operating control functions of SPEC section 10');
SELECT has_table('outbox', 'dead_letters', 'outbox.dead_letters');
SELECT is(pg_get_function_arguments('outbox.plan_backfill(regclass, float8)'::regprocedure),
          'tbl regclass, sample_percent double precision DEFAULT NULL::double precision, OUT method text, OUT rows bigint, OUT shards bigint, OUT hottest_shards jsonb, OUT id_span bigint, OUT batches bigint, OUT eta_at_budget interval, OUT peak_shard_depth bigint, OUT peak_shard_depth_guarded bigint, OUT eta_at_worker_rate interval',
          'outbox.plan_backfill arguments (issue 16)');
SELECT is(current_setting('outbox.backfill_max_shard_depth'), '0',
          'outbox.backfill_max_shard_depth defaults to 0 (off)');
SELECT is(current_setting('outbox.backfill_min_rate_per_minute'), '0',
          'outbox.backfill_min_rate_per_minute defaults to 0');

-- Consumers (issue 15): signatures, defaults, return types; what a claim
-- returns; everyone may call them (CONSUME is checked inside).
SELECT is((SELECT string_agg(p.oid::regprocedure || ' ' || pg_get_function_arguments(p.oid)
                             || ' -> ' || pg_get_function_result(p.oid), E'\n' ORDER BY p.proname)
             FROM pg_proc p
            WHERE p.pronamespace = 'outbox'::regnamespace
              AND p.proname IN ('claim', 'complete', 'fail')),
          $$outbox.claim(integer,interval,text[],text,text) max_messages integer, lease interval, categories text[] DEFAULT NULL::text[], silo text DEFAULT NULL::text, cell_name text DEFAULT NULL::text -> SETOF outbox.claimed_message
outbox.complete(bigint[],integer[]) claims bigint[], through integer[] DEFAULT NULL::integer[] -> bigint
outbox.fail(bigint,integer,text) claim bigint, message_number integer, error text -> void$$,
          'the consumer functions');
SELECT is((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
             FROM pg_attribute a WHERE a.attrelid = 'outbox.claimed_message'::regclass AND a.attnum > 0),
          'claim bigint, message_number integer, silo text, shard_scope integer, shard_identifier bigint, cell_name text, category text, object_identifier bigint, payload jsonb, first_id bigint, last_id bigint, coalesced integer, lease_until timestamp with time zone',
          'outbox.claimed_message');
SELECT ok(has_function_privilege('public', 'outbox.claim(int, interval, text[], text, text)', 'EXECUTE')
          AND has_function_privilege('public', 'outbox.complete(bigint[], int[])', 'EXECUTE')
          AND has_function_privilege('public', 'outbox.fail(bigint, int, text)', 'EXECUTE'),
          'every role may call the consumer functions (CONSUME is checked in C)');
SELECT is(current_setting('outbox.notify_consumers'), 'on', 'outbox.notify_consumers defaults to on');
SELECT is(current_setting('outbox.inbox_retention'), '7d', 'outbox.inbox_retention defaults to 7 days');

-- Links (issue 14): the receiving side's functions, granted to nobody
-- until the owner grants them to the link's role; the link's GUCs.
SELECT is((SELECT string_agg(p.oid::regprocedure || ' ' || pg_get_function_arguments(p.oid)
                             || ' -> ' || pg_get_function_result(p.oid), E'\n' ORDER BY p.proname)
             FROM pg_proc p
            WHERE p.pronamespace = 'outbox'::regnamespace
              AND p.proname IN ('receive', 'received')),
          $$outbox.receive(integer,bigint,bigint,text,bigint[],text[],bigint[],text[],text[],bigint[],jsonb[],text[],bigint[],text[]) protocol integer, session bigint, batch bigint, receipt text, row_ids bigint[], shard_scopes text[], shard_identifiers bigint[], cell_names text[], categories text[], object_identifiers bigint[], payloads jsonb[], tombstones text[], acknowledged bigint[] DEFAULT '{}'::bigint[], present text[] DEFAULT NULL::text[] -> integer
outbox.received(integer,bigint) protocol integer, session bigint -> TABLE(batch bigint, row_ids bigint[], messages integer, receipt text)$$,
          'the receiving side of a link (link protocol 1)');
SELECT ok(NOT has_function_privilege('public', 'outbox.receive(int, bigint, bigint, text, bigint[], text[], bigint[], text[], text[], bigint[], jsonb[], text[], bigint[], text[])', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.received(int, bigint)', 'EXECUTE'),
          'nobody may call them by default');
SELECT is(current_setting('outbox.link_batch_size'), '5000', 'outbox.link_batch_size defaults to 5000');
SELECT is(current_setting('outbox.link_timeout'), '30s', 'outbox.link_timeout defaults to 30 s');

-- Relocation (SPEC section 12): signatures; only set_relocation_scope is
-- everyone's (the table's owner is checked in C), check_models pg_monitor's.
SELECT is((SELECT string_agg(p.oid::regprocedure || ' ' || pg_get_function_arguments(p.oid)
                             || ' -> ' || pg_get_function_result(p.oid), E'\n' ORDER BY p.proname)
             FROM pg_proc p
            WHERE p.pronamespace = 'outbox'::regnamespace
              AND p.proname IN ('set_relocation_scope', 'set_relocation_root', 'check_models',
                                'export_organizations', 'export_users')),
          $$outbox.check_models()  -> TABLE(relation regclass, finding text, detail text)
outbox.export_organizations(bigint[]) root_ids bigint[] -> TABLE(ordinal bigint, model text, pk bigint, fields jsonb)
outbox.export_users(bigint[]) user_ids bigint[] -> TABLE(ordinal bigint, model text, pk bigint, fields jsonb)
outbox.set_relocation_root(text,regclass) scope text, tbl regclass -> void
outbox.set_relocation_scope(regclass,text[],regprocedure,name[]) tbl regclass, scopes text[], scope_function regprocedure DEFAULT NULL::regprocedure, plain_columns name[] DEFAULT NULL::name[] -> void$$,
          'the relocation functions');
SELECT ok(has_function_privilege('public', 'outbox.set_relocation_scope(regclass, text[], regprocedure, name[])', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.export_organizations(bigint[])', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.export_users(bigint[])', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.set_relocation_root(text, regclass)', 'EXECUTE')
          AND has_function_privilege('pg_monitor', 'outbox.check_models()', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.check_models()', 'EXECUTE'),
          'who may call the relocation functions');

-- Relocation, part 2: the import's procedures and functions, the extension
-- owner's but for the collision hook (the table's owner, checked in C); the
-- state view pg_monitor's; the chunk setting.
SELECT is((SELECT string_agg(p.oid::regprocedure || ' ' || p.prokind::text || ' ' || pg_get_function_arguments(p.oid)
                             || ' -> ' || coalesce(pg_get_function_result(p.oid), 'none'), E'\n' ORDER BY p.proname)
             FROM pg_proc p
            WHERE p.pronamespace = 'outbox'::regnamespace
              AND p.proname IN ('import_organizations', 'import_users', 'compare_relocation',
                                'cancel_relocation', 'set_relocation_collision_hook')),
          $$outbox.cancel_relocation(uuid) f relocation uuid -> bigint
outbox.compare_relocation(uuid) f relocation uuid -> TABLE(table_key text, pk bigint, finding text, column_name text, expected jsonb, actual jsonb)
outbox.import_organizations(uuid,uuid) p IN relocation uuid, IN users_relocation uuid DEFAULT NULL::uuid -> none
outbox.import_users(uuid) p IN relocation uuid -> none
outbox.set_relocation_collision_hook(regclass,regprocedure) f tbl regclass, hook regprocedure -> void$$,
          'the import''s procedures and functions');
SELECT ok(has_function_privilege('public', 'outbox.set_relocation_collision_hook(regclass, regprocedure)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.import_organizations(uuid, uuid)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.import_users(uuid)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.compare_relocation(uuid)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.cancel_relocation(uuid)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.pause_relocation(uuid)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox._run_as_table_owner(regclass, text, jsonb[])', 'EXECUTE')
          AND has_table_privilege('pg_monitor', 'outbox.relocations', 'SELECT')
          AND NOT has_table_privilege('pg_monitor', 'outbox.relocation_rows', 'SELECT')
          AND NOT has_table_privilege('pg_monitor', 'outbox.relocation_pk_map', 'SELECT'),
          'who may import, compare and cancel');
SELECT is(current_setting('outbox.relocation_chunk_rows'), '1000',
          'outbox.relocation_chunk_rows defaults to 1,000');
-- Where organizations live: control's record, which everyone may look up
-- and only the extension owner change.
SELECT ok(has_function_privilege('public', 'outbox.organization_cell(bigint)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.set_organization_cell(bigint, text)', 'EXECUTE')
          AND NOT has_table_privilege('public', 'outbox.organization_cells', 'SELECT')
          AND has_table_privilege('pg_monitor', 'outbox.organization_cells', 'SELECT'),
          'who may look up and change where organizations live');
-- Whose a cell's messages are, and the link secret (issue 46): the
-- extension owner's; pg_monitor reads the batches no key recognises.
SELECT ok(NOT has_function_privilege('public', 'outbox.set_organization_scope(text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.unset_organization_scope(text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.set_organization_root(text, text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.rotate_link_secret(interval)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'outbox.give_up_link_batch(text, bigint)', 'EXECUTE')
          AND NOT has_table_privilege('public', 'outbox.cell_objects', 'SELECT')
          AND NOT has_table_privilege('pg_monitor', 'outbox.cell_objects', 'SELECT')
          AND NOT has_table_privilege('pg_monitor', 'outbox.link_secret', 'SELECT')
          AND has_table_privilege('pg_monitor', 'outbox.link_unrecognised', 'SELECT'),
          'who may configure whose cell messages are, rotate the link secret and give up on a batch');

-- From SQL to C: a C function's symbol is its SQL name, schema included, with
-- the dot made an underscore (src/released_symbols.cpp keeps the old ones).
SELECT is_empty($$
    SELECT p.oid::regprocedure, p.prosrc FROM pg_proc p
     WHERE p.pronamespace = 'outbox'::regnamespace
       AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
       AND p.prosrc <> 'outbox_' || p.proname $$,
    'every C function''s symbol is outbox_ followed by its SQL name');

SELECT * FROM finish();
ROLLBACK;
