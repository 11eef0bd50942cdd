-- outbox.stats and outbox.stats_reset(): counters after known operations.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
CREATE SCHEMA monitoring_stats;
SET search_path = monitoring_stats, public;
SET outbox.cursor_store = 'table';
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_category('PROJECT_UPDATE', 'ORGANIZATION_SCOPE', 2);
SELECT outbox.register_category('TEAM_UPDATE', 'ORGANIZATION_SCOPE', 3);
CREATE TABLE org (id bigint PRIMARY KEY, name text);
CREATE TABLE project (id bigint PRIMARY KEY, org_id bigint NOT NULL, name text);
SELECT outbox.register_table('org', 'ORGANIZATION_UPDATE');
SELECT outbox.register_table('project', 'PROJECT_UPDATE', shard_column => 'org_id');
SELECT outbox.stats_reset();
CREATE VIEW counters AS
SELECT category, category_name, saved, backfilled, backfill_batches, delivered, processed,
       handler_errors, lag_p50 IS NOT NULL AS has_lag, last_delivery_at IS NOT NULL AS delivered_once
  FROM outbox.stats;
-- Every category has a row, zero before anything happened.
SELECT * FROM counters;

-- Capture: committed rows count, rolled-back ones do not (nor a rolled-back
-- savepoint's).
INSERT INTO org SELECT g, 'org' || g FROM generate_series(1, 10) g;
UPDATE org SET name = name || '!' WHERE id <= 3;
BEGIN;
INSERT INTO org VALUES (100, 'gone');
ROLLBACK;
BEGIN;
INSERT INTO project VALUES (1, 1, 'kept');
SAVEPOINT s;
INSERT INTO project SELECT g, 1, 'gone' FROM generate_series(2, 50) g;
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
INSERT INTO project VALUES (2, 2, 'kept too');
RELEASE SAVEPOINT t;
COMMIT;
SELECT category, saved FROM counters;
SELECT category, count(*) FROM outbox.cell_outbox GROUP BY 1 ORDER BY 1;
-- Many subtransactions (an exception block per row), every other one
-- rolled back: 500 of 1,000 count.
CREATE TABLE team (id bigint PRIMARY KEY);
SELECT outbox.register_table('team', 'TEAM_UPDATE');
DO $$
BEGIN
    FOR i IN 1..1000 LOOP
        BEGIN
            INSERT INTO team VALUES (i);
            IF i % 2 = 0 THEN
                RAISE EXCEPTION 'undo %', i;
            END IF;
        EXCEPTION WHEN raise_exception THEN
            NULL;
        END;
    END LOOP;
END $$;
SELECT category, saved FROM counters WHERE category = 3;
SELECT count(*) AS team_rows FROM outbox.cell_outbox WHERE category = 3;

-- Counters are shared memory: another session sees them.
\c
SET search_path = monitoring_stats, public;
SELECT category, saved FROM outbox.stats;
SET outbox.cursor_store = 'table';

-- Backfill: rows written and batches committed; a rolled-back batch is not.
SELECT outbox.set_option('outbox_replication.org.replication_version', '1');
SELECT (b).count, (b).rows_written FROM outbox.process_backfill_batch('org', 4) b;
BEGIN;
SELECT (b).rows_written FROM outbox.process_backfill_batch('org', 4) b;
ROLLBACK;
SELECT (b).count, (b).rows_written FROM outbox.process_backfill_batch('org', 100) b;
SELECT category, saved, backfilled, backfill_batches FROM counters WHERE category = 1;

-- Draining: delivered counts messages, processed counts rows (coalesced
-- repeats of an object are one message); lags are measured.
CREATE FUNCTION accept(msg outbox.message) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION refuse(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refused';
END $$;
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'accept(outbox.message)');
SELECT outbox.register_handler('PROJECT_UPDATE', 'refuse(outbox.message)');
SELECT count(*) AS org_rows, count(DISTINCT object_identifier) AS org_objects
  FROM outbox.cell_outbox WHERE category = 1;
SELECT outbox.drain('cell');
SELECT * FROM counters;
SELECT category, lag_p50 <= lag_p99 AND lag_p99 <= lag_max AS ordered,
       lag_max < interval '1 hour' AS plausible, last_delivery_at <= clock_timestamp() AS past
  FROM outbox.stats WHERE delivered > 0;
-- A known lag: a row added an hour ago.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier,
                                date_added)
VALUES (0, 7, 1, 7, now() - interval '1 hour');
SELECT outbox.drain_shard('cell', 0, 7);
SELECT lag_max >= interval '1 hour' AND lag_max < interval '1 hour 1 minute' AS lag_max_hour
  FROM outbox.stats WHERE category = 1;

-- A counted category no longer registered keeps its row, without a name.
SELECT outbox.unregister_handler('PROJECT_UPDATE');
SELECT outbox.unregister_table('project');
DELETE FROM outbox.cell_outbox WHERE category = 2;
DELETE FROM outbox.categories WHERE id = 2;
SELECT category, category_name, saved, handler_errors FROM outbox.stats WHERE category = 2;

-- Reset: zeroes, and stats_reset moves.
SELECT stats_reset AS before_reset FROM outbox.stats WHERE category = 1 \gset
SELECT pg_sleep(0.01);
SELECT outbox.stats_reset();
SELECT * FROM counters;
SELECT bool_and(stats_reset > :'before_reset') AS reset_moved FROM outbox.stats
 WHERE stats_reset IS NOT NULL;
