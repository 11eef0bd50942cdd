-- outbox.claim_json(): the same claim as outbox.claim() (consumers.sql),
-- its messages as one JSON array of arrays of outbox.claimed_message's
-- columns, in their order.  Claim tokens are random: shown as whether
-- they match the lease recorded.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
SELECT outbox.register_cell('us');
CREATE FUNCTION pg_temp.err(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
-- Shard 1: object 5 written twice (one message of two rows, the newest
-- payload), object 6 with no payload; shard 2: object 7, whose payload
-- holds what JSON must escape.  A control row of cell us, and a row of
-- another category, which a claim of org_update leaves alone.
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier, payload)
VALUES (0, 1, 0, 5, '{"v": 1}'), (0, 1, 0, 5, '{"v": 2}'), (0, 1, 0, 6, NULL),
       (0, 2, 0, 7, '{"s": "a \"quoted\" \\ line\nbreak", "n": [1, 2.5, null]}'),
       (0, 3, 1, 8, '{}');
INSERT INTO outbox.control_outbox (shard_scope, shard_identifier, category, object_identifier,
                                   cell_name, payload)
VALUES (0, 40, 0, 41, 'us', '{"c": true}');
-- DateStyle does not change lease_until: ISO 8601, as to_json writes it.
SET DateStyle = 'German';
CREATE TEMP TABLE j AS SELECT outbox.claim_json(10, '1 minute', '{org_update}') AS messages;
RESET DateStyle;
SELECT json_typeof(messages), json_array_length(messages) FROM j;
SELECT bool_and(json_array_length(e) = 13) AS thirteen_columns FROM j, json_array_elements(messages) e;
SELECT e->>1 AS message_number, e->>2 AS silo, e->>3 AS shard_scope, e->>4 AS shard_identifier,
       e->5 AS cell_name, e->>6 AS category, e->>7 AS object_identifier, e->8 AS payload,
       (e->>10)::bigint - (e->>9)::bigint AS id_span, e->>11 AS coalesced,
       (e->>0)::bigint = c.claim AS token_is_the_lease,
       (e->>12)::timestamptz = c.lease_until AS lease_until_is_the_lease,
       e->>12 ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?[+-]\d\d:\d\d$' AS iso_8601
  FROM j, json_array_elements(messages) WITH ORDINALITY AS m(e, k)
  JOIN outbox.consumer_claims c
    ON (c.silo, c.shard_identifier, c.cell_name) = (e->>2, (e->>4)::bigint, coalesce(e->>5, ''))
 ORDER BY e->>2, (e->>4)::bigint, (e->>1)::int;
-- The payload round-trips as JSON: the same jsonb once parsed.
SELECT (e->8)::jsonb = '{"s": "a \"quoted\" \\ line\nbreak", "n": [1, 2.5, null]}'::jsonb AS escaped
  FROM j, json_array_elements(messages) e WHERE e->>7 = '7';
-- Its tokens complete the claims, as outbox.claim()'s do.
SELECT outbox.complete(array_agg(DISTINCT (e->>0)::bigint)) AS rows_done
  FROM j, json_array_elements(messages) e;
SELECT count(*) AS left_in_cell FROM outbox.cell_outbox;
SELECT count(*) AS left_in_control FROM outbox.control_outbox;
-- Nothing due: an empty array, not NULL.
SELECT outbox.claim_json(10, '1 minute', '{org_update}')::text AS nothing;
-- Bad arguments: outbox.claim()'s errors.
SELECT pg_temp.err('SELECT outbox.claim_json(NULL, ''1 minute'')');
SELECT pg_temp.err('SELECT outbox.claim_json(0, ''1 minute'')');
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''25 hours'')');
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''1 minute'', ''{nope}'')');
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''1 minute'', NULL, ''moon'')');
-- Roles: CONSUME, as for outbox.claim().  An application role with DML
-- on a registered table, the table's owner, a pg_monitor member and a link
-- role (granted what a peer's link role is) hold none and are refused; the
-- consumer role claims its category only.
CREATE ROLE claim_json_consumer;
CREATE ROLE claim_json_app;
CREATE ROLE claim_json_owner;
CREATE ROLE claim_json_monitor IN ROLE pg_monitor;
CREATE ROLE claim_json_link;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO claim_json_link;
CREATE TABLE claim_json_org (id bigint PRIMARY KEY);
SELECT outbox.register_table('claim_json_org', 'user_update', 'cell', shard_column => 'id');
ALTER TABLE claim_json_org OWNER TO claim_json_owner;
GRANT INSERT, UPDATE, DELETE ON claim_json_org TO claim_json_app;
SELECT outbox.grant_category('user_update', 'claim_json_consumer', 'CONSUME');
SET ROLE claim_json_app;
INSERT INTO claim_json_org VALUES (9);
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''1 minute'')');
RESET ROLE;
SET ROLE claim_json_owner;
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''1 minute'', ''{user_update}'')');
RESET ROLE;
SET ROLE claim_json_monitor;
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''1 minute'')');
RESET ROLE;
SET ROLE claim_json_link;
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''1 minute'')');
RESET ROLE;
SET ROLE claim_json_consumer;
SELECT pg_temp.err('SELECT outbox.claim_json(10, ''1 minute'', ''{org_update}'')');
SELECT e->>6 AS category, e->>7 AS object_identifier
  FROM json_array_elements(outbox.claim_json(10, '1 minute')) e ORDER BY 2;
RESET ROLE;
DELETE FROM outbox.consumer_claims;
DELETE FROM outbox.cell_outbox;
SELECT outbox.revoke_category('user_update', 'claim_json_consumer', 'CONSUME');
SELECT outbox.unregister_table('claim_json_org');
DROP TABLE claim_json_org;
REVOKE EXECUTE ON FUNCTION outbox.receive, outbox.received FROM claim_json_link;
DROP ROLE claim_json_consumer, claim_json_app, claim_json_owner, claim_json_monitor,
          claim_json_link;
-- Its deliveries leave outbox.stats as the next test expects it.
SELECT outbox.stats_reset();
