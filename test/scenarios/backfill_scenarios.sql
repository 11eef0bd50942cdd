-- Backfill scenarios after Sentry's test_backfill_outboxes.py, run once per
-- cursor store (sql/backfill_redis.sql, sql/backfill_table.sql).
\set SHOW_CONTEXT never
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_scope('USER_SCOPE', 1);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 10);
SELECT outbox.register_category('AUTH_IDENTITY_UPDATE', 'USER_SCOPE', 11);
SELECT outbox.register_category('API_TOKEN_UPDATE', 'USER_SCOPE', 12);
SELECT outbox.register_category('AUTH_PROVIDER_UPDATE', 'ORGANIZATION_SCOPE', 13);

-- Cell table: organisations (shard = id).  Control tables: auth identities
-- (fan-out to every cell) and API tokens (fan-out too, for target_cells).
CREATE TABLE sentry_organization (id bigint PRIMARY KEY, slug text NOT NULL);
CREATE TABLE sentry_authidentity (id bigint PRIMARY KEY, user_id bigint NOT NULL, ident text);
CREATE TABLE sentry_apitoken (id bigint PRIMARY KEY, user_id bigint NOT NULL);
CREATE TABLE sentry_authprovider (id int PRIMARY KEY, organization_id bigint NOT NULL,
                                  cell text NOT NULL);
SELECT outbox.register_table('sentry_organization', 'ORGANIZATION_UPDATE',
                             payload_columns => '{slug}');
SELECT outbox.register_table('sentry_authidentity', 'AUTH_IDENTITY_UPDATE', 'control',
                             shard_column => 'user_id');
SELECT outbox.register_table('sentry_apitoken', 'API_TOKEN_UPDATE', 'control',
                             shard_column => 'user_id');
SELECT outbox.register_table('sentry_authprovider', 'AUTH_PROVIDER_UPDATE', 'control',
                             shard_column => 'organization_id', cell_column => 'cell');
SELECT outbox.register_cell('us');
INSERT INTO sentry_organization SELECT g, 'org-' || g FROM generate_series(1, 5) g;
INSERT INTO sentry_authidentity SELECT g, 100 + g % 2, 'ident' || g FROM generate_series(1, 10) g;
TRUNCATE outbox.cell_outbox, outbox.control_outbox;

CREATE VIEW cell_rows AS
SELECT shard_identifier AS shard, category AS cat, object_identifier AS object, payload
  FROM outbox.cell_outbox ORDER BY id;

-- The gate: with no option nothing runs and the call returns false.
SELECT outbox.backfill_outboxes_for('cell');
SELECT count(*) AS rows_without_gate FROM outbox.cell_outbox;
SELECT * FROM outbox.process_backfill_batch('sentry_organization', 10);
-- Option at the coded version: it runs.
SELECT outbox.set_option('outbox_replication.sentry_organization.replication_version', '1');
SELECT outbox.backfill_outboxes_for('cell');
SELECT * FROM cell_rows;
SELECT * FROM outbox.get_processing_state('sentry_organization');
SELECT outbox.backfill_outboxes_for('cell');
TRUNCATE outbox.cell_outbox;

-- Cell processing, synchronous: raise the coded version, loop until done.
SELECT outbox.set_replication_version('sentry_organization', 2);
SELECT outbox.backfill_outboxes_for('cell');
SELECT outbox.backfill_outboxes_for('cell', force_synchronous => true);
SELECT outbox.backfill_outboxes_for('cell', force_synchronous => true);
SELECT count(*) AS organization_rows FROM outbox.cell_outbox WHERE category = 10;
SELECT * FROM outbox.get_processing_state('sentry_organization');
TRUNCATE outbox.cell_outbox;

-- Control processing with batch size 1: the cursor walks and ends at coded
-- + 1; a second run writes nothing; raising the coded version to 10000
-- re-replicates every row and leaves 10001.
SELECT outbox.register_cell('de');
SELECT * FROM outbox.process_backfill_batch('sentry_authidentity', 1, true);
SELECT * FROM outbox.get_processing_state('sentry_authidentity');
DO $$
BEGIN
    WHILE outbox.process_backfill_batch('sentry_authidentity', 1, true) IS NOT NULL LOOP
    END LOOP;
END
$$;
SELECT * FROM outbox.get_processing_state('sentry_authidentity');
SELECT cell_name, count(*), count(DISTINCT object_identifier) AS objects
  FROM outbox.control_outbox GROUP BY 1 ORDER BY 1;
TRUNCATE outbox.control_outbox;
SELECT * FROM outbox.process_backfill_batch('sentry_authidentity', 1, true);
SELECT count(*) AS rows_after_second_run FROM outbox.control_outbox;
SELECT outbox.set_replication_version('sentry_authidentity', 10000);
SELECT * FROM outbox.process_backfill_batch('sentry_authidentity', 100, true);
SELECT * FROM outbox.get_processing_state('sentry_authidentity');
SELECT count(*) AS re_replicated, count(DISTINCT object_identifier) AS objects
  FROM outbox.control_outbox;
TRUNCATE outbox.control_outbox;

-- Target cells: two cells, option ["us"]: only "us" rows.
INSERT INTO sentry_apitoken VALUES (1, 7), (2, 8);
INSERT INTO sentry_authprovider VALUES (1, 70, 'us'), (2, 71, 'de');
TRUNCATE outbox.control_outbox;
SELECT outbox.set_option('outbox_replication.sentry_apitoken.backfill.target_cells', '["us"]');
SELECT outbox.set_option('outbox_replication.sentry_authprovider.backfill.target_cells', '["us"]');
SELECT * FROM outbox.process_backfill_batch('sentry_apitoken', 10, true);
SELECT * FROM outbox.process_backfill_batch('sentry_authprovider', 10, true);
SELECT category, object_identifier, cell_name FROM outbox.control_outbox ORDER BY id;
TRUNCATE outbox.control_outbox;
SELECT outbox.unset_option('outbox_replication.sentry_apitoken.backfill.target_cells');
SELECT outbox.unset_option('outbox_replication.sentry_authprovider.backfill.target_cells');

-- The budget: two cell tables and a budget of 2 per call.  The walk stops
-- when the budget is spent, no table is marked complete before all its rows
-- are written, and repeated calls finish both.
CREATE TABLE budget_a (id int PRIMARY KEY);
CREATE TABLE budget_b (id int PRIMARY KEY);
INSERT INTO budget_a SELECT generate_series(1, 5);
INSERT INTO budget_b SELECT generate_series(1, 3);
SELECT outbox.register_table('budget_a', 'ORGANIZATION_UPDATE', replication_version => 1);
SELECT outbox.register_category('BUDGET_B_UPDATE', 'ORGANIZATION_SCOPE', 14);
SELECT outbox.register_table('budget_b', 'BUDGET_B_UPDATE', replication_version => 1);
SELECT outbox.set_replication_version('sentry_organization', 2);
SELECT outbox.set_option('outbox_replication.sentry_organization.replication_version', '1');
TRUNCATE outbox.cell_outbox;
CREATE TABLE walk (call int, result boolean, a_cursor text, b_cursor text);
DO $$
DECLARE
    r boolean;
BEGIN
    FOR i IN 1..8 LOOP
        r := outbox.backfill_outboxes_for('cell', scheduled_count => 8, max_batch_rate => 10,
                                          force_synchronous => true);
        INSERT INTO walk SELECT i, r,
            (SELECT format('[%s, %s]', lower_bound, version) FROM outbox.get_processing_state('budget_a')),
            (SELECT format('[%s, %s]', lower_bound, version) FROM outbox.get_processing_state('budget_b'));
        EXIT WHEN NOT r;
    END LOOP;
END
$$;
SELECT call, result, a_cursor, b_cursor FROM walk ORDER BY call;
-- Complete means every row was written: 5 objects of a, 3 of b.
SELECT category, count(DISTINCT object_identifier) AS objects
  FROM outbox.cell_outbox GROUP BY 1 ORDER BY 1;
TRUNCATE outbox.cell_outbox;

-- An advancing batch moves the cursor to (up + 1, version); a finished
-- version gives NULL and writes nothing.
SELECT outbox.set_processing_state('budget_a', 0, 1);
SELECT * FROM outbox.process_backfill_batch('budget_a', 2, true);
SELECT * FROM outbox.get_processing_state('budget_a');
SELECT outbox.set_processing_state('budget_a', 0, 2);
SELECT * FROM outbox.process_backfill_batch('budget_a', 2, true);
SELECT count(*) AS rows_after_finished FROM outbox.cell_outbox WHERE object_identifier > 3;

-- A newer version resets a cursor that was ahead.
SELECT outbox.set_replication_version('budget_a', 3);
SELECT outbox.set_processing_state('budget_a', 4, 2);
SELECT * FROM outbox.process_backfill_batch('budget_a', 2, true);
SELECT * FROM outbox.get_processing_state('budget_a');
TRUNCATE outbox.cell_outbox;

-- An empty table completes at once.
CREATE TABLE empty_t (id int PRIMARY KEY);
SELECT outbox.register_table('empty_t', 'ORGANIZATION_UPDATE');
SELECT * FROM outbox.process_backfill_batch('empty_t', 10, true);
SELECT * FROM outbox.get_processing_state('empty_t');

-- Sparse ids: count is the id span; every row is written, none twice.
CREATE TABLE sparse (id bigint PRIMARY KEY);
INSERT INTO sparse VALUES (5), (1000), (1001), (50000), (9000000000);
SELECT outbox.register_table('sparse', 'ORGANIZATION_UPDATE');
SELECT * FROM outbox.process_backfill_batch('sparse', 1, true);
SELECT * FROM outbox.process_backfill_batch('sparse', 1, true);
SELECT * FROM outbox.process_backfill_batch('sparse', 1, true);
SELECT * FROM outbox.process_backfill_batch('sparse', 1, true);
SELECT * FROM outbox.get_processing_state('sparse');
SELECT object_identifier, count(*) FROM outbox.cell_outbox GROUP BY 1 ORDER BY 1;
TRUNCATE outbox.cell_outbox;

-- A rollback mid-backfill leaves no outbox row and no cursor move.
SELECT outbox.set_processing_state('sparse', 0, 1);
BEGIN;
SELECT * FROM outbox.process_backfill_batch('sparse', 1, true);
ROLLBACK;
SELECT * FROM outbox.get_processing_state('sparse');
SELECT count(*) AS rows_after_rollback FROM outbox.cell_outbox;
-- So does a rolled-back savepoint; a released one keeps its move.
BEGIN;
SAVEPOINT s;
SELECT (outbox.process_backfill_batch('sparse', 1, true)).up;
ROLLBACK TO SAVEPOINT s;
SELECT * FROM outbox.get_processing_state('sparse');
SAVEPOINT t;
SELECT (outbox.process_backfill_batch('sparse', 1, true)).up;
RELEASE SAVEPOINT t;
COMMIT;
SELECT * FROM outbox.get_processing_state('sparse');
SELECT object_identifier FROM outbox.cell_outbox ORDER BY id;
TRUNCATE outbox.cell_outbox;

-- Two batches in one transaction: the second starts where the first ended.
SELECT outbox.set_processing_state('sparse', 0, 1);
BEGIN;
SELECT low, up FROM outbox.process_backfill_batch('sparse', 1, true);
SELECT low, up FROM outbox.process_backfill_batch('sparse', 1, true);
SELECT * FROM outbox.get_processing_state('sparse');
COMMIT;
SELECT * FROM outbox.get_processing_state('sparse');
TRUNCATE outbox.cell_outbox;

-- The synchronous path: every local table to its coded version, options
-- bypassed; returns the outbox rows written.
SELECT outbox.set_replication_version('sentry_organization', 3);
SELECT outbox.set_replication_version('sparse', 2);
SELECT outbox.run_replications_sync();
SELECT category, count(*) FROM outbox.cell_outbox GROUP BY 1 ORDER BY 1;
SELECT outbox.run_replications_sync();
SELECT table_key, (outbox.get_processing_state(table_key)).*
  FROM outbox.tables ORDER BY 1;
