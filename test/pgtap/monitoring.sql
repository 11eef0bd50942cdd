-- Monitoring: the views' columns, outbox.metrics() in the Prometheus text
-- format, and who may read (pg_monitor) and not change anything.
BEGIN;
SELECT plan(49);
\ir errors_with.psql

SELECT columns_are('outbox', 'shard_depth', ARRAY['silo', 'shard_scope', 'shard_identifier',
    'cell_name', 'depth', 'oldest_date_added', 'next_scheduled_for', 'last_error',
    'last_error_at', 'attempts', 'state', 'category', 'object_identifier', 'dead_letters',
    'claimed_by', 'claimed_until']);
SELECT columns_are('outbox', 'backfill_status', ARRAY['table_key', 'relation', 'silo',
    'coded_version', 'option_version', 'effective_version', 'cursor_lower_bound',
    'cursor_version', 'max_id', 'fraction_done', 'state', 'eta_at_budget']);
SELECT columns_are('outbox', 'stats', ARRAY['category', 'category_name', 'saved', 'backfilled',
    'backfill_batches', 'delivered', 'processed', 'handler_errors', 'lag_p50', 'lag_p99',
    'lag_max', 'last_delivery_at', 'stats_reset']);
SELECT columns_are('outbox', 'worker_status', ARRAY['state', 'pid', 'database',
    'last_cycle_start', 'last_cycle_end', 'shards_drained', 'messages_delivered',
    'rows_scheduled', 'rows_backfilled', 'backfill_budget_left', 'backfill_paused',
    'backfill_max_shard_depth',
    'last_error', 'last_error_at']);
SELECT function_returns('outbox', 'metrics', ARRAY[]::text[], 'text');
SELECT function_returns('outbox', 'stats_reset', ARRAY[]::text[], 'void');
SELECT col_type_is('outbox', 'stats', 'lag_p99', 'interval', 'stats.lag_p99 is an interval');
SELECT col_type_is('outbox', 'backfill_status', 'fraction_done', 'double precision',
                   'backfill_status.fraction_done is double precision');

-- The worker of this cluster serves the database "postgres" (the harness
-- default), and the status says which.
SELECT is((SELECT database FROM outbox.worker_status), 'postgres', 'worker_status names its database');
SELECT ok((SELECT state IN ('running', 'stopped', 'disabled') FROM outbox.worker_status),
          'worker_status has a state');

-- Some state to report: 3 shards, one with a quote and a backslash in its
-- cell name, and a registered table.
SELECT outbox.register_scope('TAP_SCOPE', 0);
SELECT outbox.register_category('TAP_UPDATE', 'TAP_SCOPE', 0);
CREATE TABLE tap_org (id bigint PRIMARY KEY);
SELECT outbox.register_table('tap_org', 'TAP_UPDATE');
INSERT INTO tap_org SELECT generate_series(1, 5);
TRUNCATE outbox.cell_outbox; -- what capture wrote
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier,
                                   cell_name, date_added)
SELECT 0, 9, 0, g, E'we"ird\\cell', now() - interval '10 minutes' FROM generate_series(1, 3) g;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
VALUES (0, 8, 0, 1);

CREATE TEMP TABLE scrape AS
SELECT n, line FROM regexp_split_to_table(outbox.metrics(), E'\n') WITH ORDINALITY AS l(line, n);

SELECT is((SELECT count(*) FROM scrape WHERE line !~ '^# (HELP|TYPE) '
             AND line !~ '^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+-]+$'
             AND line <> ''), 0::bigint, 'every sample line is name{labels} value');
SELECT is((SELECT count(*) FROM scrape WHERE line = ''), 1::bigint,
          'the text ends with one newline');
SELECT is((SELECT count(*) FROM (SELECT substring(line FROM '^# TYPE (\S+)') f FROM scrape
                                  WHERE line LIKE '# TYPE %' GROUP BY 1 HAVING count(*) > 1) d),
          0::bigint, 'each family is typed once');
SELECT ok(NOT EXISTS (SELECT FROM scrape s
                       WHERE s.line !~ '^#' AND s.line <> ''
                         AND NOT EXISTS (SELECT FROM scrape t WHERE t.n < s.n
                           AND t.line LIKE '# TYPE ' || substring(s.line FROM '^[a-z_]+') || ' %')),
          'every sample follows its TYPE line');
SELECT ok(EXISTS (SELECT FROM scrape WHERE line = '# TYPE pg_outbox_rows_saved_total counter'),
          'the counters are there (preloaded)');
SELECT is((SELECT line FROM scrape WHERE line LIKE 'pg_outbox_depth{silo="control"}%'),
          'pg_outbox_depth{silo="control"} 3', 'total depth, control silo');
SELECT is((SELECT line FROM scrape WHERE line LIKE 'pg_outbox_shards{silo="cell"}%'),
          'pg_outbox_shards{silo="cell"} 1', 'shards, cell silo');
SELECT is((SELECT line FROM scrape WHERE line LIKE 'pg_outbox_shard_depth{%' ORDER BY n LIMIT 1),
          'pg_outbox_shard_depth{silo="control",shard_scope="0",shard_identifier="9",cell_name="we\"ird\\cell"} 3',
          'the deepest shard first, its labels escaped');
SELECT ok((SELECT substring(line FROM ' (\S+)$')::float8 BETWEEN 600 AND 700 FROM scrape
            WHERE line LIKE 'pg_outbox_oldest_age_seconds{silo="control"}%'),
          'oldest age in seconds');
SELECT is((SELECT line FROM scrape WHERE line LIKE 'pg_outbox_backfill_state{%'),
          'pg_outbox_backfill_state{table_key="tap_org",state="awaiting_option"} 1',
          'backfill state as a labelled gauge');
SELECT is((SELECT count(*) FROM scrape WHERE line LIKE 'pg_outbox_backfill_low_bound{%'), 0::bigint,
          'no low bound before the table has a cursor');
SELECT outbox.set_option('outbox_replication.tap_org.replication_version', '1');
SELECT outbox.process_backfill_batch('tap_org', 2);
SELECT is((SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') line
            WHERE line LIKE 'pg_outbox_backfill_low_bound{%'),
          'pg_outbox_backfill_low_bound{table_key="tap_org"} 4', 'the cursor low bound');
SET LOCAL outbox.metrics_top_shards = 1;
SELECT is((SELECT count(*) FROM regexp_split_to_table(outbox.metrics(), E'\n') line
            WHERE line LIKE 'pg_outbox_shard_depth{%'), 1::bigint,
          'outbox.metrics_top_shards bounds the per-shard gauges');
SET LOCAL outbox.metrics_top_shards = 0;
SELECT is((SELECT count(*) FROM regexp_split_to_table(outbox.metrics(), E'\n') line
            WHERE line LIKE 'pg_outbox_shard_depth%'), 0::bigint,
          'no per-shard gauges (nor their header) with 0');
RESET outbox.metrics_top_shards;
SELECT is(outbox._prometheus_label(E'a\\b"c\nd'), E'"a\\\\b\\"c\\nd"', 'label escaping');
SELECT pg_temp.errors_with('SELECT * FROM outbox._shard_depth(-1, false)', '22023', '^top must be zero or positive');

-- pg_monitor reads everything and changes nothing.
CREATE ROLE tap_monitor IN ROLE pg_monitor;
CREATE ROLE tap_nobody;
SET ROLE tap_monitor;
SELECT is((SELECT count(*) FROM outbox.shard_depth), 5::bigint, 'pg_monitor reads shard_depth (2 shards + 3 backfilled)');
SELECT is((SELECT state FROM outbox.backfill_status), 'in_progress', 'pg_monitor reads backfill_status');
SELECT ok((SELECT count(*) > 0 FROM outbox.stats), 'pg_monitor reads stats');
SELECT is((SELECT database FROM outbox.worker_status), 'postgres', 'pg_monitor reads worker_status');
SELECT ok(outbox.metrics() LIKE '%pg_outbox_depth{silo="cell"} 4%', 'pg_monitor scrapes metrics()');
SELECT pg_temp.errors_with('SELECT outbox.stats_reset()', '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.tap_org.replication_version', '2')$$,
                   '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.unset_option('outbox_replication.tap_org.replication_version')$$,
                   '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.set_processing_state('tap_org', 0, 1)$$, '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('tap_org', 10)$$, '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.drain()$$, '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.drain_shard('cell', 0, 8)$$, '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.wake_worker()$$, '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.register_handler('TAP_UPDATE', 'pg_catalog.now()')$$, '42501',
                   'permission denied');
SELECT pg_temp.errors_with($$SELECT outbox.set_replication_version('tap_org', 5)$$, '42501', 'must be owner of table tap_org');
SELECT pg_temp.errors_with($$DELETE FROM outbox.cell_outbox$$, '42501', 'permission denied');
SELECT pg_temp.errors_with($$DELETE FROM outbox.shard_errors$$, '42501', 'permission denied');
SELECT pg_temp.errors_with($$SELECT * FROM outbox.get_processing_state('tap_org')$$, '42501',
                   'permission denied');
RESET ROLE;

-- Other roles read nothing.
SET ROLE tap_nobody;
SELECT pg_temp.errors_with('SELECT * FROM outbox.shard_depth', '42501', 'permission denied');
SELECT pg_temp.errors_with('SELECT * FROM outbox.backfill_status', '42501', 'permission denied');
SELECT pg_temp.errors_with('SELECT * FROM outbox.stats', '42501', 'permission denied');
SELECT pg_temp.errors_with('SELECT * FROM outbox.worker_status', '42501', 'permission denied');
SELECT pg_temp.errors_with('SELECT outbox.metrics()', '42501', 'permission denied');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
