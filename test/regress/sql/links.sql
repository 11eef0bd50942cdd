-- Links between clusters (SPEC section 11): the receiving side's
-- outbox.receive() and its inbox, the configuration functions, bad
-- arguments and roles.  Three real clusters: test/integration/cells.sh.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
CREATE EXTENSION IF NOT EXISTS postgres_fdw;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'Org', 1);
SELECT outbox.register_cell('us');
CREATE SERVER links_test FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname 'nowhere');
CREATE VIEW rows AS
SELECT 'control' AS silo, shard_identifier, category, object_identifier, payload, cell_name
  FROM outbox.control_outbox
UNION ALL
SELECT 'cell', shard_identifier, category, object_identifier, payload, NULL FROM outbox.cell_outbox
ORDER BY 1, 2, 4, 5;

-- A sender's connection starts with outbox.received() and a new session
-- token: nothing received yet.
SELECT * FROM outbox.received('control', 1);
-- A batch from control for cell us: taken into the control outbox, in
-- order, and recorded in the inbox with the sender's row ids; the same
-- batch again (a sender whose answer was lost): nothing.
SELECT outbox.receive('control', 'control', 1, 11, '{1000,1001,2000,3000}', '{0,0,0}', '{5,5,6}',
                      '{us,us,us}', '{user_update,user_update,user_update}', '{50,51,60}',
                      ARRAY['{"v": 1}', '{"v": 2}', NULL]::jsonb[]);
SELECT * FROM rows;
SELECT outbox.receive('control', 'control', 1, 11, '{1000,1001,2000,3000}', '{0,0,0}', '{5,5,6}',
                      '{us,us,us}', '{user_update,user_update,user_update}', '{50,51,60}',
                      ARRAY['{"v": 1}', '{"v": 2}', NULL]::jsonb[]);
SELECT count(*) FROM rows;
-- What a sender that lost its answer asks for on its next connection:
-- batch 11, its rows.  The older connection's batches are refused now.
SELECT * FROM outbox.received('control', 2);
SELECT origin, session FROM outbox.inbox_sessions;
\set VERBOSITY terse
SELECT outbox.receive('control', 'control', 1, 99, '{5000}', '{0}', '{5}', '{us}', '{user_update}',
                      '{50}', ARRAY['{"v": 4}']::jsonb[]);
\set VERBOSITY default
-- The next batch acknowledges batch 11: the inbox forgets it.
SELECT outbox.receive('control', 'control', 2, 12, '{4000}', '{0}', '{5}', '{us}', '{user_update}',
                      '{50}', ARRAY['{"v": 3}']::jsonb[], acknowledged => '{11}');
SELECT * FROM rows;
SELECT origin, batch, row_ids, messages FROM outbox.inbox ORDER BY batch;
-- Another origin is another sender, with batches of its own: cell
-- messages from us, and tombstones; another origin's acknowledgement
-- forgets nothing of control's.
SELECT * FROM outbox.received('us', 5);
SELECT outbox.receive('us', 'cell', 5, 12, '{7}', '{0}', '{7}', '{""}', '{org_update}', '{70}',
                      ARRAY['{"name": "acme"}']::jsonb[], '{organization}', '{71}');
SELECT outbox.receive('control', 'control', 2, 13, '{}', '{}', '{}', '{}', '{}', '{}', '{}',
                      '{auth_user,auth_user}', '{9,9}');
SELECT outbox.receive('us', 'cell', 5, 14, '{}', '{}', '{}', '{}', '{}', '{}', '{}',
                      acknowledged => '{12,13}');
SELECT * FROM rows;
SELECT origin, batch, row_ids, messages FROM outbox.inbox ORDER BY origin, batch;
SELECT * FROM outbox.received('us', 6);
SELECT table_name, object_identifier FROM outbox.control_tombstone;
SELECT table_name, object_identifier FROM outbox.cell_tombstone;

-- Bad arguments: nothing is taken.
CREATE FUNCTION pg_temp.err(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT pg_temp.err($$SELECT outbox.receive(NULL, 'cell', 1, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'moon', 1, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', NULL, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, NULL, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, NULL, '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{}', '{0}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{}', NULL, '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{1}', '{0}', '{1}', '{""}', '{nope}', '{1}', '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'control', 1, 1, '{1}', '{0}', '{1}', '{NULL}', '{org_update}', '{1}', '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{t}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}', acknowledged => NULL)$$);
-- A sender that never called outbox.received(): refused.
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT * FROM outbox.received('x', NULL)$$);
SELECT count(*) FROM outbox.inbox WHERE origin = 'x';
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'no_such_server')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('mars', 'links_test')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server(NULL, 'links_test')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('no_such_server', 'us')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'mars')$$);
SELECT pg_temp.err($$SELECT outbox.link_control(NULL, 'us')$$);
-- A server a non-superuser owns is refused at once: its owner could point
-- it at another host and receive the worker's credentials there.
CREATE ROLE links_server_owner;
CREATE SERVER links_rogue FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1');
ALTER SERVER links_rogue OWNER TO links_server_owner;
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_rogue')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_rogue', 'us')$$);
DROP SERVER links_rogue;
DROP ROLE links_server_owner;
SELECT outbox.set_cell_server('us', 'links_test');
SELECT name, server FROM outbox.cells;
SELECT outbox.link_control('links_test', 'us');
SELECT server, cell_name FROM outbox.control_link;
-- Linked as cell us, it takes control's messages for us only.
SELECT pg_temp.err($$SELECT outbox.receive('control', 'control', 2, 20, '{1}', '{0}', '{9}', '{eu}', '{user_update}', '{90}', '{NULL}')$$);
SELECT outbox.receive('control', 'control', 2, 21, '{1}', '{0}', '{9}', '{us}', '{user_update}', '{90}', '{NULL}');
SELECT outbox.unlink_control();
SELECT outbox.set_cell_server('us', NULL);

-- Roles: only the extension owner configures links; outbox.receive() and
-- outbox.received() are granted to nobody until the owner grants them to
-- the link's role.
CREATE ROLE links_app;
CREATE ROLE links_monitor IN ROLE pg_monitor;
CREATE ROLE links_peer;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO links_peer;
SET ROLE links_app;
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT * FROM outbox.received('control', 1)$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_test')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'us')$$);
RESET ROLE;
SET ROLE links_monitor;
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', 1, 1, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT * FROM outbox.received('control', 1)$$);
SELECT pg_temp.err($$SELECT count(*) FROM outbox.inbox$$);
SELECT count(*) >= 0 AS reads_link_status FROM outbox.link_status;
RESET ROLE;
SET ROLE links_peer;
SELECT * FROM outbox.received('peer', 7);
SELECT outbox.receive('peer', 'cell', 7, 30, '{1}', '{0}', '{8}', '{""}', '{org_update}', '{80}', '{NULL}');
SELECT batch, row_ids FROM outbox.received('peer', 8);
SELECT pg_temp.err($$SELECT count(*) FROM outbox.cell_outbox$$);
RESET ROLE;
SELECT * FROM rows WHERE shard_identifier = 8;
DROP VIEW rows;
DROP SERVER links_test;
REVOKE EXECUTE ON FUNCTION outbox.receive, outbox.received FROM links_peer;
DROP ROLE links_app, links_monitor, links_peer;
