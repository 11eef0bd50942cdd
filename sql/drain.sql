-- Draining, after Sentry's test_outbox.py: coalescing, order, backoff,
-- handlers, concurrent sessions.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 1);
SELECT outbox.register_category('PROJECT_UPDATE', 'ORGANIZATION_SCOPE', 2);
SELECT outbox.register_category('NO_HANDLER_UPDATE', 'ORGANIZATION_SCOPE', 3);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('de');

-- What the handlers saw, in order.
CREATE TABLE delivered (n serial, msg outbox.message);
CREATE FUNCTION record_message(msg outbox.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF msg.payload->>'fail' = 'yes' THEN
        RAISE EXCEPTION 'handler refused object %', msg.object_identifier;
    END IF;
    IF msg.payload->>'sleep' IS NOT NULL THEN
        PERFORM pg_sleep((msg.payload->>'sleep')::float8);
    END IF;
    INSERT INTO delivered (msg) VALUES (msg);
END $$;
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'record_message(outbox.message)');
SELECT outbox.register_handler('PROJECT_UPDATE', 'record_message(outbox.message)');
CREATE VIEW seen AS
SELECT (msg).silo, (msg).shard_identifier AS shard, (msg).category AS cat,
       (msg).object_identifier AS object, (msg).payload, (msg).cell_name,
       (msg).last_id - (msg).first_id AS id_span, (msg).coalesced
  FROM delivered ORDER BY n;
CREATE FUNCTION put(shard bigint, cat int, object bigint, payload jsonb,
                    due interval DEFAULT '0', cell text DEFAULT NULL) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier,
                                    payload, scheduled_for)
    SELECT 0, shard, cat, object, payload, now() + due WHERE cell IS NULL;
    INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier,
                                       payload, scheduled_for, cell_name)
    SELECT 0, shard, cat, object, payload, now() + due, cell WHERE cell IS NOT NULL;
$$;

-- Handlers must take outbox.message and return void.
CREATE FUNCTION wrong_args(int) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION wrong_return(outbox.message) RETURNS int LANGUAGE sql AS 'SELECT 1';
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'wrong_args(int)');
SELECT outbox.register_handler('ORGANIZATION_UPDATE', 'wrong_return(outbox.message)');
SELECT outbox.register_handler('NOPE', 'record_message(outbox.message)');
SELECT outbox.register_handler('ORGANIZATION_UPDATE', NULL);

-- Coalescing: the same object written many times is delivered once, with
-- the newest payload, in the order of first appearance.
SELECT put(10, 1, 100, '{"v": 1}');
SELECT put(10, 1, 200, '{"v": 1}');
SELECT put(10, 1, 100, '{"v": 2}');
SELECT put(10, 2, 100, '{"v": 1}');
SELECT put(10, 1, 100, '{"v": 3}');
SELECT outbox.drain_shard('cell', 0, 10);
SELECT * FROM seen;
SELECT count(*) AS left_in_outbox FROM outbox.cell_outbox;
TRUNCATE delivered;

-- Future rows wait; a shard with one past row drains whole, future rows too.
SELECT put(20, 1, 1, '{"v": "future"}', '1 hour');
SELECT outbox.drain_shard('cell', 0, 20);
SELECT outbox.drain();
SELECT put(20, 1, 2, '{"v": "past"}', '-1 second');
SELECT outbox.drain();
SELECT * FROM seen;
SELECT count(*) AS left_in_outbox FROM outbox.cell_outbox;
TRUNCATE delivered;

-- Messages of a category without a handler stay, visible; the others go.
SELECT put(30, 3, 1, '{}');
SELECT put(30, 1, 2, '{}');
SELECT outbox.drain();
SELECT * FROM seen;
SELECT shard_identifier, category, object_identifier FROM outbox.cell_outbox;
DELETE FROM outbox.cell_outbox;
TRUNCATE delivered;

-- A handler error stops the shard: earlier messages stay delivered, the
-- failing one and every later one stay; the shard backs off and the error is
-- recorded.
SELECT put(40, 1, 1, '{"v": "first"}');
SELECT put(40, 1, 2, '{"fail": "yes"}');
SELECT put(40, 1, 3, '{"v": "after"}');
SELECT put(41, 1, 9, '{"v": "other shard"}');
SELECT outbox.drain();
SELECT * FROM seen;
SELECT object_identifier, scheduled_for - scheduled_from AS backoff,
       scheduled_for > now() AS waits
  FROM outbox.cell_outbox ORDER BY id;
SELECT silo, shard_scope, shard_identifier, cell_name, attempts, last_error,
       last_error_at IS NOT NULL AS has_time, category, object_identifier
  FROM outbox.shard_errors;
-- No retry before its time.
SELECT outbox.drain_shard('cell', 0, 40);
-- Each failure doubles the wait: 1 s, 2 s, 4 s, ... capped at an hour.
UPDATE outbox.cell_outbox SET scheduled_for = now() - interval '1 ms', scheduled_from = now() - interval '2 s';
SELECT outbox.drain_shard('cell', 0, 40);
SELECT DISTINCT scheduled_for - scheduled_from AS backoff FROM outbox.cell_outbox;
UPDATE outbox.cell_outbox SET scheduled_for = now() - interval '1 ms', scheduled_from = now() - interval '50 minutes';
SELECT outbox.drain_shard('cell', 0, 40);
SELECT DISTINCT scheduled_for - scheduled_from AS backoff FROM outbox.cell_outbox;
SELECT attempts FROM outbox.shard_errors;
-- Once the handler accepts, order is kept: 2 before 3, and the error clears.
UPDATE outbox.cell_outbox SET payload = '{"v": "fixed"}', scheduled_for = now() - interval '1 ms'
 WHERE object_identifier = 2;
SELECT outbox.drain_shard('cell', 0, 40);
SELECT * FROM seen;
SELECT count(*) AS errors_left FROM outbox.shard_errors;
TRUNCATE delivered;

-- A handler running past outbox.handler_timeout fails its message.
SET outbox.handler_timeout = '100ms';
SELECT put(50, 1, 1, '{"sleep": 2}');
SELECT outbox.drain_shard('cell', 0, 50);
SELECT last_error FROM outbox.shard_errors;
RESET outbox.handler_timeout;
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.shard_errors;

-- Control shards are per cell.
SELECT put(60, 1, 1, '{"v": 1}', cell => 'us');
SELECT put(60, 1, 1, '{"v": 2}', cell => 'de');
SELECT outbox.drain_shard('control', 0, 60, 'us');
SELECT * FROM seen;
SELECT outbox.drain('control');
SELECT * FROM seen;
TRUNCATE delivered;

-- One call drains every due shard of a shallow outbox, whatever partition
-- holds it (a pass walks the partitions in turn; order holds within a shard,
-- not across shards).
SELECT put(72, 1, 1, '{}', '-1 minute');
SELECT put(71, 1, 1, '{}', '-3 minutes');
SELECT put(73, 1, 1, '{}', '-2 minutes');
SELECT outbox.drain('cell');
SELECT shard FROM seen ORDER BY shard;
TRUNCATE delivered;

-- A row committed by another session while a shard is being drained is not
-- deleted unseen: the handler sleeps, the other session commits meanwhile.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT dblink_connect('drainer', 'dbname=' || current_database());
SELECT put(80, 1, 1, '{"sleep": 1}');
SELECT dblink_send_query('drainer', 'SELECT outbox.drain_shard(''cell'', 0, 80)');
SELECT pg_sleep(0.3);
SELECT put(80, 1, 1, '{"v": "committed during the drain"}');
-- Meanwhile the shard is claimed: another drain skips it at once.
SELECT outbox.drain_shard('cell', 0, 80) AS skipped;
SELECT * FROM dblink_get_result('drainer') AS r(delivered int);
SELECT payload FROM outbox.cell_outbox WHERE shard_identifier = 80;
SELECT outbox.drain_shard('cell', 0, 80);
SELECT object, payload FROM seen;
SELECT dblink_disconnect('drainer');

-- Bad input.
SELECT outbox.drain_shard(NULL, 0, 1);
SELECT outbox.drain_shard('region', 0, 1);
SELECT outbox.drain_shard('cell', NULL, 1);
SELECT outbox.drain_shard('cell', 0, NULL);
SELECT outbox.drain_shard('control', 0, 1);
SELECT outbox.drain_shard('cell', 0, 1, 'us');
SELECT outbox.drain('nowhere');
SELECT outbox.unregister_handler('NO_HANDLER_UPDATE');
