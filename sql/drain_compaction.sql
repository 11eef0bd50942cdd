-- Compaction: an outbox partition full of dead tuples that a held snapshot
-- keeps from VACUUM is rewritten with its live rows, unchanged; a drain pass
-- that read it before skips it rather than trust its old ctids; a partition
-- someone holds a lock on is left alone, without waiting.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
CREATE TABLE compact_seen (n serial, object bigint, payload jsonb);
CREATE FUNCTION compact_record(msg outbox.message) RETURNS void LANGUAGE sql AS
    'INSERT INTO compact_seen (object, payload) VALUES (msg.object_identifier, msg.payload)';
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'compact_record(outbox.message)');

-- Shards 218 and 228 live in partition 1.  5,000 rows of 228 are written
-- and deleted while another session holds a snapshot: VACUUM cannot remove
-- them.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload,
                                scheduled_for)
SELECT 0, 218, 1, g, jsonb_build_object('v', g), now() + g * interval '1 minute'
  FROM generate_series(1, 3) g;
UPDATE outbox.cell_outbox SET scheduled_for = now() - interval '1 second';
SELECT dblink_connect('holder', 'dbname=' || current_database());
SELECT dblink_exec('holder', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT * FROM dblink('holder', 'SELECT 1') AS t(one int);
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
SELECT 0, 228, 1, g FROM generate_series(1, 5000) g;
DELETE FROM outbox.cell_outbox WHERE shard_identifier = 228;
VACUUM outbox.cell_outbox_1;
SELECT pg_relation_size('outbox.cell_outbox_1') > 8192 * 10 AS bloated;
CREATE TEMP TABLE before_compaction AS SELECT * FROM outbox.cell_outbox;

-- Nothing is due by size yet (the threshold is 1 MB): the worker's rule.
SELECT outbox.compact_outbox('cell');
-- A session holding a lock on the partition keeps it as it is, at once.
SELECT dblink_exec('holder', 'LOCK TABLE outbox.cell_outbox_1 IN ACCESS SHARE MODE');
SELECT outbox.compact_outbox('cell', force => true) AS compacted_while_locked;
SELECT dblink_exec('holder', 'ROLLBACK');
SELECT dblink_exec('holder', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT * FROM dblink('holder', 'SELECT 1') AS t(one int);

-- A pass reads partition 1 and delivers object 1 (one row per batch)...
SET outbox.drain_batch_size = 1;
SELECT outbox.drain('cell') AS delivered;
SELECT pg_relation_filenode('outbox.cell_outbox_1') AS filenode_before \gset
-- ... the partition is compacted under the held snapshot ...
SELECT outbox.compact_outbox('cell', force => true) AS compacted;
SELECT pg_relation_filenode('outbox.cell_outbox_1') <> :filenode_before AS rewritten,
       pg_relation_size('outbox.cell_outbox_1') <= 8192 AS shrunk;
-- ... the live rows are the same rows, ids, payloads, schedules and all ...
SELECT (SELECT count(*) FROM outbox.cell_outbox) AS live,
       (SELECT count(*) FROM (SELECT * FROM before_compaction WHERE object_identifier <> 1
                              EXCEPT SELECT * FROM outbox.cell_outbox) d) AS changed;
-- ... and the pass does not trust what it read before: the next calls read
-- again, and objects 2 and 3 come in order, once each.
SELECT outbox.drain('cell') AS delivered;
SELECT outbox.drain('cell') AS delivered;
SELECT outbox.drain('cell') AS delivered;
SELECT object, payload FROM compact_seen ORDER BY n;
RESET outbox.drain_batch_size;
SELECT dblink_exec('holder', 'ROLLBACK');
SELECT dblink_disconnect('holder');

-- Bad input; only the extension's owner (or a superuser) compacts.
SELECT outbox.compact_outbox('region');
SELECT outbox.compact_outbox('cell', NULL);
CREATE ROLE compact_app;
SET ROLE compact_app;
SELECT outbox.compact_outbox();
RESET ROLE;
DROP ROLE compact_app;

-- A compaction in a REPEATABLE READ transaction (issue 35, item 2): rows
-- committed by another session after the transaction's snapshot and before
-- the compaction's lock are copied back too (0.9.0 read the live rows with
-- the transaction's snapshot, and the TRUNCATE lost all 20).
SELECT outbox.unregister_handler('ORGANIZATION_UPDATE');
DELETE FROM outbox.cell_outbox;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
SELECT 0, 218, 1, g FROM generate_series(1, 20) g;
SELECT dblink_connect('writer', 'dbname=' || current_database());
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS before FROM outbox.cell_outbox;
SELECT dblink_exec('writer', 'INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier,'
                             ' category, object_identifier)'
                             ' SELECT 0, 218, 1, g FROM generate_series(21, 40) g');
SELECT outbox.compact_outbox('cell', true) > 0 AS compacted;
COMMIT;
SELECT count(*) AS after, count(DISTINCT object_identifier) AS objects FROM outbox.cell_outbox;
SELECT dblink_disconnect('writer');
DELETE FROM outbox.cell_outbox;
