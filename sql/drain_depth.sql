-- Draining at depth: bounded batches, a hot shard in order across them,
-- a failure in the middle of a batch, a bounded number of subtransactions,
-- a bounded drainer memory, and rows committed behind a pass's back.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
CREATE TABLE depth_delivered (n serial, shard bigint, object bigint, coalesced int);
CREATE FUNCTION depth_record(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO depth_delivered (shard, object, coalesced)
    VALUES (msg.shard_identifier, msg.object_identifier, msg.coalesced);
    IF msg.payload->>'fail' = 'yes' THEN
        RAISE EXCEPTION 'object % refused', msg.object_identifier;
    END IF;
END $$;
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'depth_record(outbox.message)');
CREATE FUNCTION depth_put(shard bigint, objects int[], fail int DEFAULT NULL) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
    SELECT 0, shard, 1, o, CASE WHEN o = fail THEN '{"fail": "yes"}'::jsonb END
      FROM unnest(objects) WITH ORDINALITY u (o, i) ORDER BY i;
$$;
-- Calls drain() until it returns 0, each call in a transaction of its own;
-- the messages each call delivered.
CREATE PROCEDURE depth_drain_all(INOUT messages_per_call int[] DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    got bigint;
BEGIN
    messages_per_call := '{}';
    LOOP
        got := outbox.drain('cell');
        EXIT WHEN got = 0;
        messages_per_call := messages_per_call || got::int;
        COMMIT;
    END LOOP;
END $$;

-- A hot shard drains in batches of outbox.drain_batch_size rows, in id
-- order; an object written twice in one batch is one message.
SET outbox.drain_batch_size = 7;
SELECT depth_put(218, ARRAY(SELECT g FROM generate_series(1, 50) g));
SELECT depth_put(218, '{50, 49}');
CALL depth_drain_all();
-- Objects 1-49 in order; 50 and 49 were written again, after the others:
-- 50 coalesces its two rows (they share the last batch), 49 comes again.
SELECT count(*) AS messages, bool_and(object = n) FILTER (WHERE n <= 49) AS in_order,
       string_agg(object || 'x' || coalesced, ',' ORDER BY n) FILTER (WHERE n > 47) AS last
  FROM (SELECT object, coalesced, row_number() OVER (ORDER BY n) AS n FROM depth_delivered) d;
SELECT count(*) AS left_in_outbox FROM outbox.cell_outbox;
TRUNCATE depth_delivered;

-- A failure in the middle of a batch: the messages before it are delivered
-- once (their first run was rolled back with the failing one), the failing
-- one and the rest of its shard stay and back off, the other shard of the
-- batch (the same partition) goes on.
SET outbox.drain_batch_size = 100;
SELECT depth_put(218, '{1, 2, 3, 4, 5}', fail => 3);
SELECT depth_put(228, '{1, 2, 3}');
SELECT tableoid::regclass AS partition, count(DISTINCT shard_identifier) AS shards
  FROM outbox.cell_outbox GROUP BY 1;
SELECT outbox.drain('cell');
-- The handler's own record of the failing run was rolled back with it.
SELECT shard, object FROM depth_delivered ORDER BY n;
SELECT shard_identifier, object_identifier, scheduled_for > now() AS backed_off
  FROM outbox.cell_outbox ORDER BY id;
SELECT shard_identifier, attempts, last_error FROM outbox.shard_errors;
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.shard_errors;
TRUNCATE depth_delivered;

-- A hot shard that fails in its second batch: the first batch stays
-- delivered, and every later row backs off with the failing one, batch
-- after batch.
SET outbox.drain_batch_size = 3;
SELECT depth_put(218, ARRAY(SELECT g FROM generate_series(1, 10) g), fail => 5);
CALL depth_drain_all();
SELECT string_agg(object::text, ',' ORDER BY n) AS delivered FROM depth_delivered;
SELECT string_agg(object_identifier::text, ',' ORDER BY id) AS waiting,
       bool_and(scheduled_for > now()) AS all_backed_off
  FROM outbox.cell_outbox;
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.shard_errors;
TRUNCATE depth_delivered;

-- Subtransactions: 60 shards whose first message succeeds (a write, so its
-- savepoint takes an XID) and whose second fails.  One call stops taking
-- failures before the transaction's 64-entry subtransaction cache would
-- overflow; the shards it did not reach are untouched, and the next calls
-- (new transactions) take them.
SET outbox.drain_batch_size = 10000;
SELECT depth_put(s, '{1, 2}', fail => 2) FROM generate_series(1001, 1060) s;
BEGIN;
SELECT outbox.drain('cell') BETWEEN 20 AND 56 AS delivered_first_call;
SELECT count(*) BETWEEN 20 AND 56 AS failures_bounded FROM outbox.shard_errors;
-- Out of subtransactions: a second call in the same transaction does nothing.
SELECT outbox.drain('cell') AS second_call_same_transaction;
COMMIT;
SELECT count(*) > 0 AS some_untouched FROM outbox.cell_outbox
 WHERE scheduled_for <= now() AND object_identifier = 1;
CALL depth_drain_all();
SELECT count(*) AS failed_shards FROM outbox.shard_errors;
SELECT count(*) AS delivered_once FROM depth_delivered;
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.shard_errors;
TRUNCATE depth_delivered;

-- Bounded memory: a drainer holds one batch, whatever the depth of the
-- shard.  300,000 rows of one shard, at the default batch size: the pass's
-- tuplestore spills to a temporary file, and batches go on reading it in
-- later transactions.  The handler samples the drainer's own memory
-- contexts, and checks the order.
CREATE TABLE depth_memory (bytes bigint);
CREATE TABLE depth_order (n serial, object bigint);
CREATE FUNCTION depth_sample(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO depth_order (object) VALUES (msg.object_identifier);
    IF msg.object_identifier % 30000 = 0 THEN
        INSERT INTO depth_memory SELECT sum(total_bytes) FROM pg_backend_memory_contexts;
    END IF;
END $$;
SELECT outbox.register_category('MEMORY', 'ORGANIZATION_SCOPE', 2);
SELECT outbox.register_handler('MEMORY', 'depth_sample(outbox.message)');
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
SELECT 0, 218, 2, g, jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, 300000) g;
RESET outbox.drain_batch_size;
DO $$
DECLARE
    calls int[];
BEGIN
    CALL depth_drain_all(calls);
    RAISE NOTICE 'delivered % messages in % calls', (SELECT sum(n) FROM unnest(calls) n),
        cardinality(calls);
END $$;
SELECT count(*) AS delivered, count(*) FILTER (WHERE object <> n) AS out_of_order FROM depth_order;
-- The shard read whole is ~100 MB; a 10,000-row batch plus the pass's 4 MB
-- tuplestore buffer stays far below 32 MB.
SELECT count(*) AS samples, max(bytes) < 32 * 1024 * 1024 AS memory_bounded FROM depth_memory;
SELECT count(*) AS left_in_outbox FROM outbox.cell_outbox;
SELECT outbox.unregister_handler('MEMORY');
RESET outbox.drain_batch_size;

-- A row committed behind a pass's back: a pass read the shard, another
-- session commits a new row of the same object, the pass goes on; the new
-- row is not deleted unseen, and the next pass delivers it.
SET outbox.drain_batch_size = 1;
SELECT depth_put(218, '{1, 2}');
SELECT outbox.drain('cell') AS first_of_two;
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT dblink_exec('dbname=' || current_database(),
    'INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)'
    ' VALUES (0, 218, 1, 2, ''{"v": "late"}'')');
SELECT outbox.drain('cell') AS second_of_two;
SELECT object_identifier, payload FROM outbox.cell_outbox;
RESET outbox.drain_batch_size;
CALL depth_drain_all();
SELECT object, coalesced FROM depth_delivered ORDER BY n;
SELECT count(*) AS left_in_outbox FROM outbox.cell_outbox;

-- A batch whose second shard is claimed by another session: the first is
-- delivered, the claimed one is left as it is, and delivered once free.
SELECT dblink_connect('claimer', 'dbname=' || current_database());
SELECT dblink_exec('claimer', 'BEGIN');
SELECT * FROM dblink('claimer', 'SELECT outbox.drain_shard(''cell'', 0, 228)') AS t(delivered int);
SELECT depth_put(218, '{1, 2}');
SELECT depth_put(228, '{1, 2}');
TRUNCATE depth_delivered;
SELECT outbox.drain('cell') AS delivered;
SELECT shard_identifier, object_identifier FROM outbox.cell_outbox ORDER BY id;
SELECT dblink_exec('claimer', 'COMMIT');
SELECT dblink_disconnect('claimer');
SELECT outbox.drain('cell') AS delivered;
SELECT shard, object FROM depth_delivered ORDER BY n;

-- A call rolled back to a savepoint: its deletions are undone, so the pass
-- does not go on with the rest of that shard; it reads it again.
SET outbox.drain_batch_size = 1;
SELECT depth_put(218, '{1, 2, 3}');
TRUNCATE depth_delivered;
BEGIN;
SAVEPOINT a;
SELECT outbox.drain('cell') AS delivered_then_rolled_back;
ROLLBACK TO a;
SELECT outbox.drain('cell') AS delivered;
COMMIT;
SELECT outbox.drain('cell') AS delivered;
SELECT outbox.drain('cell') AS delivered;
SELECT outbox.drain('cell') AS delivered;
SELECT string_agg(object::text, ',' ORDER BY n) AS committed_deliveries FROM depth_delivered;
RESET outbox.drain_batch_size;

-- A control shard across calls, one row per batch: its cell name outlives
-- the call that read the partition (the next call compares it).
SELECT outbox.register_cell('us');
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier, cell_name)
SELECT 0, 218, 1, g, 'us' FROM generate_series(1, 3) g;
TRUNCATE depth_delivered;
SET outbox.drain_batch_size = 1;
SELECT outbox.drain('control') AS delivered;
SELECT outbox.drain('control') AS delivered;
SELECT outbox.drain('control') AS delivered;
SELECT outbox.drain('control') AS delivered;
SELECT string_agg(object::text, ',' ORDER BY n) AS delivered FROM depth_delivered;
RESET outbox.drain_batch_size;

-- Bad settings.
SET outbox.drain_batch_size = 0;
SET outbox.drain_batch_size = 1000001;
