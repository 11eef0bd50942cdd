-- Consumers outside the database: outbox.claim(), outbox.complete() and
-- outbox.fail() (docs/consumers.md), as the extension's owner and as the
-- other roles.  Real processes (a Python consumer, SIGKILL, LISTEN) are in
-- test/integration/consumers.sh.  Claim tokens are random: errors are
-- shown with long numbers replaced by N.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
SELECT outbox.register_cell('us');
CREATE TABLE org (id bigint PRIMARY KEY, name text);
SELECT outbox.register_table('org', 'org_update', 'cell', shard_column => 'id',
                             payload_columns => '{name}');
CREATE FUNCTION pg_temp.err(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(regexp_replace(SQLERRM, ' ended at .*', ' ended at T'),
                                              '[0-9]{6,}', 'N', 'g');
END $$;
-- What a consumer sees, without the tokens.
CREATE TABLE got AS SELECT * FROM outbox.claim(1, '1 second') LIMIT 0;
-- The claims held, or whose lease passed (complete() and fail() release
-- theirs: released rows only keep the shards' turns, "ended" below).  The
-- rows and messages a lease holds are its handed_out's first two bytes
-- (src/consumers/handed_out.hpp: varints, a byte each below 128).
CREATE VIEW claims AS
SELECT silo, shard_scope, shard_identifier, cell_name, lease_until > now() AS live,
       get_byte(handed_out, 0) AS rows_held, get_byte(handed_out, 1) AS messages_held
  FROM outbox.consumer_claims WHERE NOT released ORDER BY silo, shard_identifier, cell_name;
CREATE VIEW ended AS
SELECT silo, shard_scope, shard_identifier, cell_name, lease_until <= now() AS ended,
       length(handed_out) AS bytes_kept
  FROM outbox.consumer_claims WHERE released ORDER BY silo, shard_identifier, cell_name;
CREATE VIEW outbox_rows AS
SELECT shard_identifier, category, object_identifier, payload->>'name' AS name,
       scheduled_for > now() AS backed_off
  FROM outbox.cell_outbox ORDER BY id;

-- Coalesced messages of whole shards, in shard order: shard 1 holds object
-- 1 (written twice), then objects 7 and 8; shard 2 holds object 2.
-- max_messages 2 gives shard 1's first two messages (object 1's two rows
-- coalesced, then object 7); the claim holds only what was handed out, yet
-- the whole shard stays held: a second claim gets shard 2 only.
INSERT INTO org VALUES (1, 'a'), (2, 'b');
UPDATE org SET name = 'a2' WHERE id = 1;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 1, 0, 7, '{"name": "seven"}'), (0, 1, 0, 8, '{"name": "eight"}');
INSERT INTO got SELECT * FROM outbox.claim(2, '1 minute');
SELECT message_number, silo, shard_identifier, cell_name, category, object_identifier, payload,
       coalesced, last_id > first_id AS spans, claim > 0 AS token FROM got
 ORDER BY shard_identifier, message_number;
SELECT count(DISTINCT claim) FROM got;
SELECT * FROM claims;
SELECT shard_identifier, depth, state FROM outbox.shard_depth ORDER BY shard_identifier;
-- Who holds a claimed shard, and until when.
SELECT shard_identifier, state, claimed_by,
       claimed_until BETWEEN now() + interval '50 s' AND now() + interval '1 minute' AS lease
  FROM outbox.shard_depth ORDER BY shard_identifier;
SELECT outbox.metrics() ~ 'pg_outbox_shards_claimed\{silo="cell"\} 1' AS claimed_counted;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT shard_identifier, message_number, object_identifier, payload FROM got ORDER BY shard_identifier, message_number;
SELECT count(*) FROM outbox.claim(10, '1 minute');
-- The drain leaves claimed shards alone, even with a handler.
CREATE TABLE seen (n serial, object_identifier bigint);
CREATE FUNCTION h(m outbox.message) RETURNS void LANGUAGE sql AS
    $$ INSERT INTO seen (object_identifier) VALUES (m.object_identifier) $$;
SELECT outbox.register_handler('org_update', 'h(outbox.message)');
SELECT outbox.drain('cell');
SELECT outbox.unregister_handler('org_update');

-- Completing: only the rows handed out go, never a row committed after the
-- claim (object 1 written again), even in the same shard.
UPDATE org SET name = 'a3' WHERE id = 1;
SELECT outbox.complete(array_agg(claim ORDER BY shard_identifier), '{1,1}')
  FROM (SELECT DISTINCT claim, shard_identifier FROM got) c;
SELECT * FROM outbox_rows;
SELECT * FROM claims;
-- Their rows stay, released and without the rows they held, as the shards'
-- turns (docs/consumers.md, "Turns").
SELECT * FROM ended;
SELECT pg_temp.err(format('SELECT outbox.complete(%L)', array_agg(DISTINCT claim))) FROM got;
-- The rest of shard 1, in order: objects 7 and 8, then the row of object 1
-- written after the claim.
TRUNCATE got;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT shard_identifier, message_number, object_identifier, payload FROM got ORDER BY shard_identifier, message_number;
SELECT outbox.complete(array_agg(DISTINCT claim)) FROM got;
SELECT * FROM outbox_rows;
SELECT category_name, delivered, processed, handler_errors FROM outbox.stats WHERE category = 0;
TRUNCATE got;

-- complete(claims, '{0}') gives a claim back: its shard is due at once.
INSERT INTO org VALUES (3, 'c');
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT outbox.complete(array_agg(claim), '{0}') FROM got;
SELECT * FROM claims;
TRUNCATE got;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT shard_identifier, object_identifier FROM got;
SELECT outbox.complete(array_agg(claim)) FROM got;
TRUNCATE got;

-- Failing: the messages before the failing one are delivered, the failing
-- one and the rest of the shard back off, and shard_depth shows the error.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 20, 0, 21, '{"name": "ok"}'), (0, 20, 0, 22, '{"name": "poison"}'),
       (0, 20, 0, 23, '{"name": "after"}');
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT outbox.fail(claim, 2, 'receiver said 500') FROM got WHERE message_number = 1;
SELECT * FROM outbox_rows;
SELECT shard_identifier, depth, state, category, object_identifier, attempts, last_error
  FROM outbox.shard_depth;
SELECT count(*) FROM outbox.claim(10, '1 minute');
SELECT handler_errors FROM outbox.stats WHERE category = 0;
-- max_attempts: the second failure in a row moves exactly that message to
-- the dead letters; the rest of the shard is due.
SELECT outbox.set_max_attempts('org_update', 2);
SELECT outbox.retry_shard('cell', 0, 20);
TRUNCATE got;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT message_number, object_identifier FROM got ORDER BY message_number;
SELECT outbox.fail(claim, 1, 'receiver said 500 again') FROM got WHERE message_number = 1;
SELECT shard_identifier, object_identifier, attempts, last_error FROM outbox.dead_letters;
SELECT * FROM outbox_rows;
SELECT shard_identifier, depth, state, dead_letters FROM outbox.shard_depth;
TRUNCATE got;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT object_identifier FROM got;
SELECT outbox.complete(array_agg(claim)) FROM got;
SELECT shard_identifier, depth, state FROM outbox.shard_depth;
TRUNCATE got;

-- A lease that has passed: the completion is refused and the shard is due
-- again; once someone else claimed it, the old token is not held at all.
INSERT INTO org VALUES (4, 'd');
INSERT INTO got SELECT * FROM outbox.claim(10, '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT pg_temp.err(format('SELECT outbox.complete(%L)', array_agg(claim))) FROM got;
SELECT pg_temp.err(format('SELECT outbox.fail(%s, 1, %L)', claim, 'late')) FROM got;
SELECT * FROM outbox_rows;
CREATE TABLE again AS SELECT * FROM outbox.claim(10, '1 minute');
SELECT object_identifier, claim <> (SELECT claim FROM got) AS new_token FROM again;
SELECT pg_temp.err(format('SELECT outbox.complete(%L)', array_agg(claim))) FROM got;
SELECT outbox.complete(array_agg(claim)) FROM again;
SELECT * FROM outbox_rows;
TRUNCATE got;

-- Categories: a filter, and the control silo with its cell.
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier, cell_name)
VALUES (0, 30, 1, 31, 'us');
INSERT INTO org VALUES (5, 'e');
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute', '{user_update}');
SELECT silo, shard_identifier, cell_name, category, object_identifier FROM got;
SELECT * FROM claims;
SELECT outbox.complete(array_agg(claim)) FROM got;
TRUNCATE got;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute', NULL, 'control');
SELECT count(*) FROM got;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute', NULL, 'cell');
SELECT silo, object_identifier FROM got;
SELECT outbox.complete(array_agg(claim)) FROM got;
TRUNCATE got;

-- A delivered message whose row is gone leaves a tombstone, as after a
-- handler (org is the only table of org_update in the cell silo): object
-- 2 now; objects 7, 8, 21 and 23 earlier (never rows of org); not object 1.
DELETE FROM org WHERE id = 2;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT outbox.complete(array_agg(claim)) FROM got;
SELECT table_name, object_identifier FROM outbox.control_tombstone ORDER BY object_identifier;
TRUNCATE got;

-- Bad arguments.
SELECT pg_temp.err('SELECT * FROM outbox.claim(NULL, ''1 minute'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(0, ''1 minute'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10001, ''1 minute'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, NULL)');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''0 seconds'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''-1 second'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''25 hours'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 month'')');
-- A lease has a ceiling, outbox.max_lease (5 minutes by default): a claim
-- of one category holds every category's messages of the shard.
SELECT current_setting('outbox.max_lease') AS max_lease;
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''5 minutes 1 second'')');
BEGIN;
SELECT count(*) >= 0 AS five_minutes_granted FROM outbox.claim(1, '5 minutes');
ROLLBACK;
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'', ''{}'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'', ''{org_update,NULL}'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'', ''{nope}'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'', ''{{org_update}}'')');
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'', NULL, ''moon'')');
SELECT pg_temp.err('SELECT outbox.complete(NULL)');
SELECT outbox.complete('{}');
SELECT pg_temp.err('SELECT outbox.complete(''{1,NULL}'')');
SELECT pg_temp.err('SELECT outbox.complete(''{5,5}'')');
SELECT pg_temp.err('SELECT outbox.complete(''{12345678}'')');
SELECT pg_temp.err('SELECT outbox.complete(''{1,2}'', ''{1}'')');
SELECT pg_temp.err('SELECT outbox.complete(''{1}'', ''{NULL}'')');
SELECT pg_temp.err('SELECT outbox.complete(''{1}'', ''{-1}'')');
SELECT pg_temp.err('SELECT outbox.fail(NULL, 1, ''e'')');
SELECT pg_temp.err('SELECT outbox.fail(1, NULL, ''e'')');
SELECT pg_temp.err('SELECT outbox.fail(1, 1, NULL)');
SELECT pg_temp.err('SELECT outbox.fail(1, 0, ''e'')');
SELECT pg_temp.err('SELECT outbox.fail(1, 1, '''')');
SELECT pg_temp.err('SELECT outbox.fail(12345678, 1, ''e'')');
INSERT INTO org VALUES (6, 'f');
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT pg_temp.err(format('SELECT outbox.complete(%L, %L)', array_agg(claim), '{2}')) FROM got;
SELECT pg_temp.err(format('SELECT outbox.fail(%s, 2, %L)', claim, 'e')) FROM got;
-- Nothing moved: the claim still holds.
SELECT * FROM claims;
SELECT outbox.complete(array_agg(claim)) FROM got;
TRUNCATE got;

-- Roles.  A consumer granted CONSUME on org_update claims its messages
-- only; it cannot read the outbox, nor complete a claim of another
-- category; the application role, the table owner and a pg_monitor member
-- hold no CONSUME and are refused; revoking CONSUME fences live claims.
CREATE ROLE consumer_org;
CREATE ROLE consumer_app;
CREATE ROLE consumer_owner;
CREATE ROLE consumer_monitor IN ROLE pg_monitor;
CREATE ROLE consumer_member IN ROLE consumer_org;
GRANT INSERT, UPDATE, DELETE ON org TO consumer_app;
GRANT ALL ON got TO consumer_org, consumer_member;
SELECT outbox.grant_category('org_update', 'consumer_org', 'CONSUME');
INSERT INTO org VALUES (7, 'g');
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier, cell_name)
VALUES (0, 40, 1, 41, 'us');
SET ROLE consumer_app;
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'')');
SELECT pg_temp.err('SELECT outbox.complete(''{1}'')');
RESET ROLE;
SET ROLE consumer_monitor;
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'')');
-- It sees how many shards are held, never a claim token.
SELECT outbox.metrics() ~ 'pg_outbox_shards_claimed\{silo="cell"\} 0' AS claimed_counted;
SELECT pg_temp.err('SELECT claim FROM outbox.consumer_claims');
RESET ROLE;
ALTER TABLE org OWNER TO consumer_owner;
SET ROLE consumer_owner;
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'', ''{org_update}'')');
RESET ROLE;
SET ROLE consumer_org;
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'', ''{user_update}'')');
SELECT pg_temp.err('SELECT count(*) FROM outbox.cell_outbox');
SELECT pg_temp.err('SELECT count(*) FROM outbox.consumer_claims');
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
SELECT category, object_identifier FROM got;
RESET ROLE;
-- Its claim cannot be completed by a role without CONSUME; a member of the
-- consumer role can.
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute', '{user_update}');
SET ROLE consumer_org;
SELECT pg_temp.err(format('SELECT outbox.complete(%L)', array_agg(claim))) FROM got WHERE category = 'user_update';
RESET ROLE;
SELECT outbox.complete(array_agg(claim)) FROM got WHERE category = 'user_update';
DELETE FROM got WHERE category = 'user_update';
SET ROLE consumer_member;
SELECT outbox.complete(array_agg(claim)) FROM got;
RESET ROLE;
TRUNCATE got;
-- Revoking CONSUME ends the role's live claims: the shard is due again and
-- the token completes nothing.
INSERT INTO org VALUES (8, 'h');
SET ROLE consumer_org;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute');
RESET ROLE;
SELECT outbox.revoke_category('org_update', 'consumer_org', 'CONSUME');
SELECT * FROM claims;
SET ROLE consumer_org;
SELECT pg_temp.err(format('SELECT outbox.complete(%L)', array_agg(claim))) FROM got;
SELECT pg_temp.err('SELECT * FROM outbox.claim(10, ''1 minute'')');
RESET ROLE;
SELECT object_identifier FROM outbox.claim(10, '1 minute');
ALTER TABLE org OWNER TO CURRENT_USER;
REVOKE ALL ON org FROM consumer_app;
-- A lease whose handed_out is not one (written by hand) is an ERROR naming
-- the claim, with nothing delivered and the claim still held; never a
-- crash, never rows deleted by a guess.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 7, 1, 70, NULL), (0, 7, 1, 71, NULL);
TRUNCATE got;
INSERT INTO got SELECT * FROM outbox.claim(10, '1 minute', '{user_update}');
SELECT count(*) AS messages FROM got;
UPDATE outbox.consumer_claims SET handed_out = substr(handed_out, 1, length(handed_out) - 1)
 WHERE claim IN (SELECT claim FROM got);
SELECT pg_temp.err(format('SELECT outbox.complete(%L)', array_agg(DISTINCT claim))) FROM got;
UPDATE outbox.consumer_claims SET handed_out = '\x02010000' WHERE claim IN (SELECT claim FROM got);
SELECT pg_temp.err(format('SELECT outbox.complete(%L)', array_agg(DISTINCT claim))) FROM got;
SELECT pg_temp.err(format('SELECT outbox.fail(%s, 1, %L)', min(claim), 'e')) FROM got;
SELECT count(*) AS rows_left FROM outbox.cell_outbox WHERE shard_identifier = 7;
SELECT count(*) AS held FROM outbox.consumer_claims WHERE claim IN (SELECT claim FROM got)
   AND NOT released AND lease_until > now();

DROP TABLE got, again, org, seen;
DROP VIEW claims, outbox_rows;
DROP FUNCTION h(outbox.message);
DROP ROLE consumer_org, consumer_app, consumer_owner, consumer_monitor, consumer_member;

-- A claim reads and coalesces as the drain does (issue 26, item 1): one
-- object written 100 times in one shard is one message of 100 rows with
-- the newest payload, and max_messages counts messages.
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.control_outbox;
DELETE FROM outbox.consumer_claims;
CREATE TABLE hot (id bigint PRIMARY KEY, name text);
SELECT outbox.register_table('hot', 'user_update', 'cell', shard_column => 'id',
                             payload_columns => '{name}');
INSERT INTO hot VALUES (500, 'v0');
DO $$ BEGIN FOR i IN 1..99 LOOP UPDATE hot SET name = 'v' || i WHERE id = 500; END LOOP; END $$;
CREATE TABLE hot_got AS SELECT * FROM outbox.claim(1, '1 minute', '{user_update}');
SELECT message_number, shard_identifier, object_identifier, coalesced, payload->>'name' AS name
  FROM hot_got;
SELECT outbox.complete(array_agg(claim)) FROM hot_got;
SELECT shard_identifier, count(*) FROM outbox.cell_outbox GROUP BY 1 ORDER BY 1;
-- Reads of outbox.drain_batch_size rows: 30 at a time, so the object's
-- first message coalesces 30 rows, as drain_shard() would deliver them.
INSERT INTO hot VALUES (501, 'w0');
DO $$ BEGIN FOR i IN 1..40 LOOP UPDATE hot SET name = 'w' || i WHERE id = 501; END LOOP; END $$;
SET outbox.drain_batch_size = 30;
SELECT message_number, object_identifier, coalesced, payload->>'name' AS name
  FROM outbox.claim(5, '1 minute', '{user_update}');
RESET outbox.drain_batch_size;
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.consumer_claims;

-- A claim leaves alone the messages a link carries to another cluster
-- (item 2): cell us is linked, eu is not.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS postgres_fdw;
RESET client_min_messages;
SELECT outbox.register_cell('eu');
CREATE SERVER consumers_link FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname 'nowhere');
CREATE ROLE consumers_link_us;
SELECT outbox.set_cell_server('us', 'consumers_link', 'consumers_link_us');
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier,
                                   payload, cell_name)
VALUES (0, 600, 0, 600, NULL, 'us'), (0, 601, 0, 601, NULL, 'eu');
SELECT shard_identifier, cell_name FROM outbox.claim(10, '1 minute', '{org_update}', 'control');
SELECT shard_identifier, cell_name FROM outbox.claim(10, '1 minute', '{org_update}', 'control', 'us');
SELECT outbox.set_cell_server('us', NULL);
DROP SERVER consumers_link;
DROP ROLE consumers_link_us;
DELETE FROM outbox.control_outbox;
DELETE FROM outbox.consumer_claims;

-- A claim without categories never takes a category that has a handler
-- here, not even a superuser's (item 3); naming it takes it.
CREATE FUNCTION h(m outbox.message) RETURNS void LANGUAGE sql AS $$ SELECT $$;
SELECT outbox.register_handler('org_update', 'h(outbox.message)');
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 700, 0, 700, NULL), (0, 701, 1, 701, NULL);
SELECT category, object_identifier FROM outbox.claim(10, '1 minute');
SELECT category, object_identifier FROM outbox.claim(10, '1 minute', '{org_update}');
SELECT outbox.unregister_handler('org_update');
DROP FUNCTION h(outbox.message);
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.consumer_claims;
DROP TABLE hot, hot_got;

-- A claim's batch holds the shards of its messages and no more.  Sized by
-- a guess (a message a shard at first, then the messages a shard of the
-- last batch), a claim read shards past its messages for nothing and left
-- them for the next pass: the next claim went on to the next partition
-- while they waited.  Here the first 200 shards hold a message each, the
-- next 200 twenty each.
\c -
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
SELECT 0, s, 1, s * 1000 + r, NULL FROM generate_series(1, 400) s,
       generate_series(1, CASE WHEN s <= 200 THEN 1 ELSE 20 END) r;
CREATE TEMP TABLE partitions AS
SELECT DISTINCT o.shard_identifier, o.tableoid AS partition FROM outbox.cell_outbox o;
CREATE TEMP TABLE claimed AS
SELECT 1 AS call, * FROM outbox.claim(1, '1 minute', '{user_update}');
INSERT INTO claimed SELECT 2, * FROM outbox.claim(30, '1 minute', '{user_update}');
INSERT INTO claimed SELECT 3, * FROM outbox.claim(100, '1 minute', '{user_update}');
SELECT c.call, count(*) AS messages, count(DISTINCT c.shard_identifier) AS shards,
       bool_and(p.partition = (SELECT DISTINCT q.partition FROM claimed f
                                 JOIN partitions q USING (shard_identifier)
                                WHERE f.call = 1)) AS in_the_first_partition
  FROM claimed c JOIN partitions p USING (shard_identifier) GROUP BY c.call ORDER BY c.call;
DELETE FROM outbox.cell_outbox;
DELETE FROM outbox.consumer_claims;
