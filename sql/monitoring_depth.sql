-- outbox.shard_depth, after Sentry's OutboxAggregationTest: shards of 7, 4
-- and 1 rows in two cells come back deepest first, with their oldest row,
-- next schedule and errors.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
CREATE SCHEMA monitoring_depth;
SET search_path = monitoring_depth, public;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('de');

-- Empty outboxes: no rows.
SELECT count(*) AS shards FROM outbox.shard_depth;

-- Shard 1 in cell us: 7 rows, shard 2 in cell de: 4, shard 3 in us: 1; the
-- cell silo gets shard 5 with 2 rows.  date_added and scheduled_for are set
-- so that the oldest and next rows are known.
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier,
                                   date_added, scheduled_for, cell_name)
SELECT 0, s.shard, 1, g, timestamptz '2026-01-01' + g * interval '1 minute',
       timestamptz '2026-02-01' + g * interval '1 hour', s.cell
  FROM (VALUES (1, 7, 'us'), (2, 4, 'de'), (3, 1, 'us')) AS s(shard, n, cell)
 CROSS JOIN LATERAL generate_series(1, s.n) g;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier,
                                date_added, scheduled_for)
VALUES (0, 5, 1, 50, '2025-12-31', '2026-03-01'), (0, 5, 1, 51, '2025-12-30', '2026-03-02');
-- The same shard identifier in another cell is another shard.
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier,
                                   date_added, scheduled_for, cell_name)
VALUES (0, 1, 1, 99, '2026-01-05', '2026-01-05', 'de');
SELECT * FROM outbox.shard_depth;

-- A handler error shows on its shard: attempts, message, time.
CREATE FUNCTION refuse(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'cannot deliver object %', msg.object_identifier;
END $$;
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'refuse(outbox.message)');
SELECT outbox.drain_shard('control', 0, 2, 'de');
SELECT silo, shard_identifier, cell_name, depth, attempts, last_error,
       last_error_at > now() - interval '1 minute' AS error_recent,
       next_scheduled_for > now() AS backed_off
  FROM outbox.shard_depth WHERE attempts > 0;
SELECT outbox.drain_shard('control', 0, 2, 'de'); -- not due: backed off
UPDATE outbox.control_outbox SET scheduled_for = now() WHERE shard_identifier = 2;
SELECT outbox.drain_shard('control', 0, 2, 'de');
SELECT shard_identifier, depth, attempts FROM outbox.shard_depth WHERE attempts > 0;

-- Delivered: the shard leaves the view, and its error with it.
CREATE FUNCTION accept(msg outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'accept(outbox.message)');
UPDATE outbox.control_outbox SET scheduled_for = now() WHERE shard_identifier = 2;
SELECT outbox.drain_shard('control', 0, 2, 'de');
SELECT silo, shard_identifier, cell_name, depth, attempts FROM outbox.shard_depth;
SELECT count(*) AS errors_left FROM outbox.shard_errors;
