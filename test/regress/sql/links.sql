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
ORDER BY 1, 2, 4;

-- A batch from control for cell us: taken into the control outbox, in
-- order; the same batch again (a sender that crashed before completing):
-- nothing; a newer change of one object: that one only.
SELECT outbox.receive('control', 'control', '{0,0,0}', '{5,5,6}', '{us,us,us}',
                      '{user_update,user_update,user_update}', '{50,51,60}',
                      ARRAY['{"v": 1}', '{"v": 2}', NULL]::jsonb[], '{1000,2000,3000}');
SELECT * FROM rows;
SELECT outbox.receive('control', 'control', '{0,0,0}', '{5,5,6}', '{us,us,us}',
                      '{user_update,user_update,user_update}', '{50,51,60}',
                      ARRAY['{"v": 1}', '{"v": 2}', NULL]::jsonb[], '{1000,2000,3000}');
SELECT outbox.receive('control', 'control', '{0,0}', '{5,5}', '{us,us}',
                      '{user_update,user_update}', '{50,51}',
                      ARRAY['{"v": 3}', '{"v": 2}']::jsonb[], '{4000,2000}');
SELECT * FROM rows;
SELECT origin, silo, shard_identifier, cell_name, category, object_identifier, last_id
  FROM outbox.inbox ORDER BY object_identifier;
-- Another origin is another sender: cell messages from us, and tombstones.
SELECT outbox.receive('us', 'cell', '{0}', '{7}', '{""}', '{org_update}', '{70}',
                      ARRAY['{"name": "acme"}']::jsonb[], '{1000}',
                      '{organization}', '{71}');
SELECT outbox.receive('control', 'control', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
                      '{auth_user,auth_user}', '{9,9}');
SELECT * FROM rows;
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
SELECT pg_temp.err($$SELECT outbox.receive(NULL, 'cell', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'moon', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', '{0}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', NULL, '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', '{0}', '{1}', '{""}', '{nope}', '{1}', '{NULL}', '{1}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'control', '{0}', '{1}', '{NULL}', '{org_update}', '{1}', '{NULL}', '{1}')$$);
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{t}', '{}')$$);
SELECT count(*) FROM outbox.inbox WHERE origin = 'x';
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'no_such_server')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('mars', 'links_test')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server(NULL, 'links_test')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('no_such_server', 'us')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'mars')$$);
SELECT pg_temp.err($$SELECT outbox.link_control(NULL, 'us')$$);
SELECT outbox.set_cell_server('us', 'links_test');
SELECT name, server FROM outbox.cells;
SELECT outbox.link_control('links_test', 'us');
SELECT server, cell_name FROM outbox.control_link;
-- Linked as cell us, it takes control's messages for us only.
SELECT pg_temp.err($$SELECT outbox.receive('control', 'control', '{0}', '{9}', '{eu}', '{user_update}', '{90}', '{NULL}', '{1}')$$);
SELECT outbox.receive('control', 'control', '{0}', '{9}', '{us}', '{user_update}', '{90}', '{NULL}', '{1}');
SELECT outbox.unlink_control();
SELECT outbox.set_cell_server('us', NULL);

-- Roles: only the extension owner configures links; outbox.receive() is
-- granted to nobody until the owner grants it to the link's role.
CREATE ROLE links_app;
CREATE ROLE links_monitor IN ROLE pg_monitor;
CREATE ROLE links_peer;
GRANT EXECUTE ON FUNCTION outbox.receive(text, text, int[], bigint[], text[], text[], bigint[],
    jsonb[], bigint[], text[], bigint[]) TO links_peer;
SET ROLE links_app;
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_test')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'us')$$);
RESET ROLE;
SET ROLE links_monitor;
SELECT pg_temp.err($$SELECT outbox.receive('x', 'cell', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT count(*) FROM outbox.inbox$$);
SELECT count(*) >= 0 AS reads_link_status FROM outbox.link_status;
RESET ROLE;
SET ROLE links_peer;
SELECT outbox.receive('peer', 'cell', '{0}', '{8}', '{""}', '{org_update}', '{80}', '{NULL}', '{1}');
SELECT pg_temp.err($$SELECT count(*) FROM outbox.cell_outbox$$);
RESET ROLE;
SELECT * FROM rows WHERE shard_identifier = 8;
DROP VIEW rows;
DROP SERVER links_test;
REVOKE EXECUTE ON FUNCTION outbox.receive(text, text, int[], bigint[], text[], text[], bigint[],
    jsonb[], bigint[], text[], bigint[]) FROM links_peer;
DROP ROLE links_app, links_monitor, links_peer;
