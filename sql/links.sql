-- Links between clusters (SPEC section 11): the receiving side's
-- outbox.receive() and its inbox, the configuration functions, bad
-- arguments and roles.  Three real clusters: test/integration/cells.sh.
-- This database plays both ends: control's peer for cell us (us logs in
-- as links_us) and cell us's peer for control (control logs in as
-- links_ctl).  The receiving functions know a sender by its login role
-- (session_user), never by its arguments.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
CREATE EXTENSION IF NOT EXISTS postgres_fdw;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('Org', 0);
SELECT outbox.register_scope('User', 1);
SELECT outbox.register_category('org_update', 'Org', 0);
SELECT outbox.register_category('user_update', 'User', 1);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('eu');
-- Control takes a cell's message only for an organization that lives in
-- that cell (issue 46): the shards of scope Org are organizations.
SELECT outbox.set_organization_scope('Org');
SELECT outbox.set_organization_cell(7, 'us'), outbox.set_organization_cell(71, 'us'),
       outbox.set_organization_cell(8, 'eu');
CREATE SERVER links_test FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname 'nowhere');
CREATE ROLE links_us LOGIN;
CREATE ROLE links_eu LOGIN;
CREATE ROLE links_ctl LOGIN;
CREATE ROLE links_app LOGIN;
CREATE ROLE links_monitor LOGIN IN ROLE pg_monitor;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO links_us, links_eu, links_ctl, links_app;
CREATE VIEW rows AS
SELECT 'control' AS silo, shard_scope, shard_identifier, category, object_identifier, payload,
       cell_name
  FROM outbox.control_outbox
UNION ALL
SELECT 'cell', shard_scope, shard_identifier, category, object_identifier, payload, NULL
  FROM outbox.cell_outbox
ORDER BY 1, 3, 5, 6;
GRANT SELECT ON rows TO PUBLIC;
CREATE FUNCTION pg_temp.err(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- The configuration: each peer is named with its own link role.
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_test')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_test', 'no_such_role')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_test', 'postgres')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', NULL, 'links_us')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'no_such_server', 'links_us')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('mars', 'links_test', 'links_us')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server(NULL, 'links_test', 'links_us')$$);
SELECT count(*) AS no_secret_yet FROM outbox.link_secret;
SELECT outbox.set_cell_server('us', 'links_test', 'links_us');
SELECT outbox.set_cell_server('eu', 'links_test', 'links_eu');
SELECT length(secret) AS secret_bytes FROM outbox.link_secret;
-- One role, one peer.
SELECT pg_temp.err($$SELECT outbox.set_cell_server('eu', 'links_test', 'links_us')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'us', 'links_eu')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('no_such_server', 'us', 'links_ctl')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'mars', 'links_ctl')$$);
SELECT pg_temp.err($$SELECT outbox.link_control(NULL, 'us', 'links_ctl')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'us', NULL)$$);
SELECT outbox.link_control('links_test', 'us', 'links_ctl');
SELECT name, server, link_role FROM outbox.cells ORDER BY name;
SELECT server, cell_name, link_role FROM outbox.control_link;
-- A server a non-superuser owns is refused at once: its owner could point
-- it at another host and receive the worker's credentials there.
CREATE ROLE links_server_owner;
CREATE SERVER links_rogue FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1');
ALTER SERVER links_rogue OWNER TO links_server_owner;
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_rogue', 'links_us')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_rogue', 'us', 'links_ctl')$$);
DROP SERVER links_rogue;
DROP ROLE links_server_owner;

-- Control (links_ctl) sends this cell its control messages.  A sender's
-- connection starts with outbox.received() and a new session token:
-- nothing received yet.
SET SESSION AUTHORIZATION links_ctl;
SELECT * FROM outbox.received(1, 1);
-- A batch: taken into the control outbox, in order, scopes and categories
-- by name, and recorded in the inbox with the sender's row ids and
-- receipt; the same batch again (a sender whose answer was lost): nothing.
SELECT outbox.receive(1, 1, 11, 'r11', '{1000,1001,2000,3000}', '{User,User,User}', '{5,5,6}',
                      '{us,us,us}', '{user_update,user_update,user_update}', '{50,51,60}',
                      ARRAY['{"v": 1}', '{"v": 2}', NULL]::jsonb[], '{NULL,NULL,NULL}');
SELECT * FROM rows;
SELECT outbox.receive(1, 1, 11, 'r11', '{1000,1001,2000,3000}', '{User,User,User}', '{5,5,6}',
                      '{us,us,us}', '{user_update,user_update,user_update}', '{50,51,60}',
                      ARRAY['{"v": 1}', '{"v": 2}', NULL]::jsonb[], '{NULL,NULL,NULL}');
SELECT count(*) FROM rows;
-- What a sender that lost its answer asks for on its next connection:
-- batch 11, its rows and receipt.  The older connection's batches are
-- refused now.
SELECT * FROM outbox.received(1, 2);
\set VERBOSITY terse
SELECT outbox.receive(1, 1, 99, 'r99', '{5000}', '{User}', '{5}', '{us}', '{user_update}',
                      '{50}', ARRAY['{"v": 4}']::jsonb[], '{NULL}');
\set VERBOSITY default
-- The next batch acknowledges batch 11: the inbox forgets it.  A deleted
-- user's message brings its tombstone (auth_user, 9).
SELECT outbox.receive(1, 2, 12, 'r12', '{4000,4001}', '{User,User}', '{5,9}', '{us,us}',
                      '{user_update,user_update}', '{50,9}', ARRAY['{"v": 3}', NULL]::jsonb[],
                      '{NULL,auth_user}', acknowledged => '{11}');
-- Control sends this cell nothing of another cell, nor a NULL cell.
SELECT pg_temp.err($$SELECT outbox.receive(1, 2, 20, 'r', '{1}', '{User}', '{9}', '{eu}', '{user_update}', '{90}', '{NULL}', '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 2, 21, 'r', '{1}', '{User}', '{9}', '{NULL}', '{user_update}', '{90}', '{NULL}', '{NULL}')$$);
RESET SESSION AUTHORIZATION;
SELECT * FROM rows;
SELECT origin, batch, row_ids, messages, receipt FROM outbox.inbox ORDER BY batch;
SELECT table_name, object_identifier FROM outbox.cell_tombstone;

-- Cell us (links_us) sends control its cell messages, with tombstones.
SET SESSION AUTHORIZATION links_us;
SELECT * FROM outbox.received(1, 5);
SELECT outbox.receive(1, 5, 12, 'u12', '{7,8}', '{Org,Org}', '{7,71}', '{us,us}',
                      '{org_update,org_update}', '{70,71}',
                      ARRAY['{"name": "acme"}', NULL]::jsonb[], '{NULL,organization}');
-- Its own name only: not eu's, not control's messages, not a NULL one.
SELECT pg_temp.err($$SELECT outbox.receive(1, 5, 13, 'r', '{1}', '{Org}', '{7}', '{eu}', '{org_update}', '{70}', '{NULL}', '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 5, 13, 'r', '{1}', '{Org}', '{7}', '{""}', '{org_update}', '{70}', '{NULL}', '{NULL}')$$);
-- It sees its own batches only: control's batch 12 is not us's.
SELECT batch, row_ids, receipt FROM outbox.received(1, 6);
SELECT outbox.receive(1, 6, 14, 'u14', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
                      acknowledged => '{12}');
RESET SESSION AUTHORIZATION;
SELECT * FROM rows WHERE silo = 'cell';
SELECT origin, batch, row_ids, messages FROM outbox.inbox ORDER BY origin, batch;
SELECT table_name, object_identifier FROM outbox.control_tombstone;
-- Organization 71 written again on us with the same id: its next message
-- says its row is there (present), and control forgets its tombstone, so
-- that the cascade leaves the new row's children alone (issue 35).  A
-- message cannot be both gone and there, and present has one element per
-- message.
SET SESSION AUTHORIZATION links_us;
SELECT outbox.receive(1, 6, 15, 'u15', '{9}', '{Org}', '{71}', '{us}', '{org_update}', '{71}',
                      ARRAY['{"name": "again"}']::jsonb[], '{NULL}', present => '{organization}');
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 16, 'r', '{1}', '{Org}', '{7}', '{us}', '{org_update}', '{70}', '{NULL}', '{organization}', '{}', '{organization}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 16, 'r', '{1}', '{Org}', '{7}', '{us}', '{org_update}', '{70}', '{NULL}', '{NULL}', '{}', '{}')$$);
RESET SESSION AUTHORIZATION;
SELECT table_name, object_identifier FROM outbox.control_tombstone;

-- Bad arguments (as cell us): nothing is taken.
SET SESSION AUTHORIZATION links_us;
SELECT pg_temp.err($$SELECT outbox.receive(2, 6, 1, 'r', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT * FROM outbox.received(0, 6)$$);
SELECT pg_temp.err($$SELECT * FROM outbox.received(NULL, 6)$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, NULL, 1, 'r', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, NULL, 'r', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, NULL, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, 'r', NULL, '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, 'r', '{}', '{Org}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, 'r', '{}', NULL, '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, 'r', '{1}', '{Org}', '{1}', '{us}', '{nope}', '{1}', '{NULL}', '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, 'r', '{1}', '{Moon}', '{1}', '{us}', '{org_update}', '{1}', '{NULL}', '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, 'r', '{1}', '{Org}', '{1}', '{us}', '{org_update}', '{1}', '{NULL}', '{}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 1, 'r', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', acknowledged => NULL)$$);
-- A session that is not the current one: refused.
SELECT pg_temp.err($$SELECT outbox.receive(1, 5, 1, 'r', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')$$);
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, NULL)$$);
RESET SESSION AUTHORIZATION;
SELECT count(*) FROM outbox.inbox WHERE batch = 1;

-- Who may speak: a peer's link role only.  A role granted the functions
-- but named for no peer, a superuser, and cell eu before it has sent
-- anything (no session) are refused; eu cannot take over us's session or
-- read its batches.
SET SESSION AUTHORIZATION links_app;
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, 7)$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 30, 'r', '{1}', '{Org}', '{8}', '{us}', '{org_update}', '{80}', '{NULL}', '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.set_cell_server('us', 'links_test', 'links_app')$$);
SELECT pg_temp.err($$SELECT outbox.link_control('links_test', 'us', 'links_app')$$);
RESET SESSION AUTHORIZATION;
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, 7)$$);
SET SESSION AUTHORIZATION links_eu;
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 31, 'r', '{1}', '{Org}', '{8}', '{eu}', '{org_update}', '{80}', '{NULL}', '{NULL}')$$);
SELECT * FROM outbox.received(1, 8);
SELECT pg_temp.err($$SELECT outbox.receive(1, 6, 32, 'r', '{1}', '{Org}', '{8}', '{us}', '{org_update}', '{80}', '{NULL}', '{NULL}')$$);
SELECT outbox.receive(1, 8, 33, 'e33', '{1}', '{Org}', '{8}', '{eu}', '{org_update}', '{80}', '{NULL}', '{NULL}');
RESET SESSION AUTHORIZATION;
SELECT origin, session FROM outbox.inbox_sessions ORDER BY origin;
SET SESSION AUTHORIZATION links_monitor;
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, 9)$$);
SELECT pg_temp.err($$SELECT count(*) FROM outbox.inbox$$);
SELECT pg_temp.err($$SELECT count(*) FROM outbox.link_secret$$);
SELECT count(*) >= 0 AS reads_link_status FROM outbox.link_status;
RESET SESSION AUTHORIZATION;
-- Issue 46: a cell speaks only for its own organizations' objects.  The
-- organization root (its category's objects are organizations) and the
-- placements: 1 and 5 in us, 3 in eu, 6 moving from us to eu; a third cell,
-- ap, linked with its own role.
SELECT outbox.set_organization_root('org_update', 'organization');
SELECT outbox.register_category('project_update', 'Org', 2);
SELECT outbox.register_category('member_update', 'Org', 3);
SELECT outbox.register_cell('ap');
CREATE ROLE links_ap LOGIN;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO links_ap;
SELECT outbox.set_cell_server('ap', 'links_test', 'links_ap');
SELECT outbox.set_organization_cell(o, c) FROM (VALUES (1, 'us'), (5, 'us'), (3, 'eu'), (6, 'us')) v(o, c);
INSERT INTO outbox.organization_moves (relocation, organization, side, from_cell, to_cell, step)
VALUES ('00000000-0000-0000-0000-000000000046', 6, 'control', 'us', 'eu', 'copy');
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM outbox.cell_outbox) || ' rows, '
        || (SELECT count(*) FROM outbox.inbox) || ' batches, tombstones '
        || coalesce((SELECT string_agg(table_name || ':' || object_identifier, ','
                                       ORDER BY table_name, object_identifier)
                       FROM outbox.control_tombstone), '-') $$;
-- Honest traffic: us sends its organization 1 and project 100, eu its
-- organization 3 and project 300, then project 300's deletion (a
-- tombstone).  Control records each object's organization.
SET SESSION AUTHORIZATION links_us;
SELECT * FROM outbox.received(1, 40);
SELECT outbox.receive(1, 40, 401, 'r', '{1,2}', '{Org,Org}', '{1,1}', '{us,us}',
                      '{org_update,project_update}', '{1,100}', ARRAY['{}', '{}']::jsonb[],
                      '{NULL,NULL}', present => '{organization,project}');
SET SESSION AUTHORIZATION links_eu;
SELECT * FROM outbox.received(1, 41);
SELECT outbox.receive(1, 41, 411, 'r', '{1,2}', '{Org,Org}', '{3,3}', '{eu,eu}',
                      '{org_update,project_update}', '{3,300}', ARRAY['{}', '{}']::jsonb[],
                      '{NULL,NULL}', present => '{organization,project}');
SELECT outbox.receive(1, 41, 412, 'r', '{3}', '{Org}', '{3}', '{eu}', '{project_update}', '{300}',
                      ARRAY[NULL]::jsonb[], '{project}');
RESET SESSION AUTHORIZATION;
SELECT k.name, c.object_identifier, c.organization FROM outbox.cell_objects c
  JOIN outbox.categories k ON k.id = c.category ORDER BY 1, 2;
SELECT t.table_key, k.name FROM outbox.cell_object_tables t JOIN outbox.categories k ON k.id = t.category
 ORDER BY 1;
SELECT pg_temp.state();
-- The attacks, as us's link role: each one refused whole (42501, naming the
-- message and why), nothing taken, no tombstone recorded or forgotten.
SET SESSION AUTHORIZATION links_us;
-- A forged tombstone of eu's organization 3, in us's own shard ...
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 450, 'r', '{3}', '{Org}', '{1}', '{us}', '{org_update}', '{3}', ARRAY[NULL]::jsonb[], '{organization}')$$);
-- ... in its own shard 3 ...
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 451, 'r', '{3}', '{Org}', '{3}', '{us}', '{org_update}', '{3}', ARRAY[NULL]::jsonb[], '{organization}')$$);
-- ... on a message of another category, naming the root's table ...
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 452, 'r', '{3}', '{Org}', '{1}', '{us}', '{project_update}', '{3}', ARRAY[NULL]::jsonb[], '{organization}')$$);
-- ... or a message of the root's category naming another table.
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 453, 'r', '{3}', '{Org}', '{1}', '{us}', '{org_update}', '{1}', ARRAY[NULL]::jsonb[], '{project}')$$);
-- A forged present of eu's deleted project 300 (its tombstone would go)
-- and a forged message for it, under us's organization 1.
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 454, 'r', '{3}', '{Org}', '{1}', '{us}', '{project_update}', '{300}', ARRAY['{}']::jsonb[], '{NULL}', '{}', '{project}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 455, 'r', '{3}', '{Org}', '{1}', '{us}', '{project_update}', '{300}', ARRAY['{"forged": true}']::jsonb[], '{NULL}')$$);
-- A tombstone under the table of another category, or two categories
-- naming one table in a batch.
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 456, 'r', '{3}', '{Org}', '{1}', '{us}', '{member_update}', '{300}', ARRAY[NULL]::jsonb[], '{project}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 457, 'r', '{3,4}', '{Org,Org}', '{1,1}', '{us,us}', '{project_update,org_update}', '{102,1}', ARRAY['{}', '{}']::jsonb[], '{NULL,NULL}', '{}', '{gadget,gadget}')$$);
-- An organization control places nowhere, and a scope that does not name
-- organizations; one bad message among good ones refuses the batch.
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 458, 'r', '{3}', '{Org}', '{999}', '{us}', '{project_update}', '{9}', ARRAY['{}']::jsonb[], '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 459, 'r', '{3}', '{User}', '{1}', '{us}', '{user_update}', '{1}', ARRAY['{}']::jsonb[], '{NULL}')$$);
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 460, 'r', '{3,4}', '{Org,Org}', '{1,3}', '{us,us}', '{project_update,project_update}', '{103,301}', ARRAY['{}', '{}']::jsonb[], '{NULL,NULL}')$$);
RESET SESSION AUTHORIZATION;
SELECT pg_temp.state();
SELECT count(*) AS forged_objects FROM outbox.cell_objects WHERE object_identifier IN (9, 101, 102, 103, 301);
-- Organization 6 moves from us to eu: both may speak for it, ap may not.
SET SESSION AUTHORIZATION links_ap;
SELECT * FROM outbox.received(1, 42);
SELECT pg_temp.err($$SELECT outbox.receive(1, 42, 421, 'r', '{1}', '{Org}', '{6}', '{ap}', '{project_update}', '{600}', ARRAY['{}']::jsonb[], '{NULL}')$$);
SET SESSION AUTHORIZATION links_us;
SELECT outbox.receive(1, 40, 403, 'r', '{5}', '{Org}', '{6}', '{us}', '{project_update}', '{600}',
                      ARRAY['{"from": "us"}']::jsonb[], '{NULL}', present => '{project}');
SET SESSION AUTHORIZATION links_eu;
SELECT outbox.receive(1, 41, 413, 'r', '{5}', '{Org}', '{6}', '{eu}', '{project_update}', '{600}',
                      ARRAY['{"from": "eu"}']::jsonb[], '{NULL}', present => '{project}');
RESET SESSION AUTHORIZATION;
-- Once the move is complete, only eu (organization_cells names it).
UPDATE outbox.organization_moves SET state = 'complete' WHERE organization = 6;
SELECT outbox.set_organization_cell(6, 'eu');
SET SESSION AUTHORIZATION links_us;
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 404, 'r', '{6}', '{Org}', '{6}', '{us}', '{project_update}', '{600}', ARRAY['{}']::jsonb[], '{NULL}')$$);
-- A project moved between two organizations of us: taken, recorded anew.
SELECT outbox.receive(1, 40, 405, 'r', '{7}', '{Org}', '{5}', '{us}', '{project_update}', '{100}',
                      ARRAY['{}']::jsonb[], '{NULL}', present => '{project}');
RESET SESSION AUTHORIZATION;
SELECT c.object_identifier, c.organization FROM outbox.cell_objects c
 WHERE c.object_identifier IN (100, 600) ORDER BY 1;
SELECT pg_temp.state();
-- The configuration's bad arguments, and only the extension owner's.
SELECT pg_temp.err($$SELECT outbox.set_organization_scope('Moon')$$);
SELECT pg_temp.err($$SELECT outbox.set_organization_scope(NULL)$$);
SELECT pg_temp.err($$SELECT outbox.unset_organization_scope('User')$$);
SELECT pg_temp.err($$SELECT outbox.set_organization_root('nope', 'organization')$$);
SELECT pg_temp.err($$SELECT outbox.set_organization_root('org_update', '')$$);
SELECT pg_temp.err($$SELECT outbox.set_organization_root(NULL, 'organization')$$);
SET SESSION AUTHORIZATION links_us;
SELECT pg_temp.err($$SELECT outbox.set_organization_scope('User')$$);
SELECT pg_temp.err($$SELECT outbox.set_organization_root('project_update', 'project')$$);
SELECT pg_temp.err($$SELECT count(*) FROM outbox.cell_objects$$);
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION links_monitor;
SELECT pg_temp.err($$SELECT count(*) FROM outbox.cell_objects$$);
RESET SESSION AUTHORIZATION;
-- Without the scope, us's messages of it are refused.
SELECT outbox.unset_organization_scope('Org');
SET SESSION AUTHORIZATION links_us;
SELECT pg_temp.err($$SELECT outbox.receive(1, 40, 406, 'r', '{8}', '{Org}', '{1}', '{us}', '{project_update}', '{100}', ARRAY['{}']::jsonb[], '{NULL}')$$);
RESET SESSION AUTHORIZATION;
SELECT outbox.set_organization_scope('Org');

-- Issue 46, item 4: a link role by identity.  Renamed, dropped and created
-- again under its name, or made a superuser since it was named: refused,
-- with the reason.  Configured again, it speaks again.
ALTER ROLE links_ap RENAME TO links_ap2;
SET SESSION AUTHORIZATION links_ap2;
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, 43)$$);
RESET SESSION AUTHORIZATION;
ALTER ROLE links_ap2 RENAME TO links_ap;
REVOKE EXECUTE ON FUNCTION outbox.receive, outbox.received FROM links_ap;
DROP ROLE links_ap;
CREATE ROLE links_ap LOGIN;
GRANT EXECUTE ON FUNCTION outbox.receive, outbox.received TO links_ap;
SET SESSION AUTHORIZATION links_ap;
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, 44)$$);
RESET SESSION AUTHORIZATION;
SELECT outbox.set_cell_server('ap', 'links_test', 'links_ap');
SET SESSION AUTHORIZATION links_ap;
SELECT count(*) FROM outbox.received(1, 45);
RESET SESSION AUTHORIZATION;
ALTER ROLE links_ap SUPERUSER;
SET SESSION AUTHORIZATION links_ap;
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, 46)$$);
RESET SESSION AUTHORIZATION;
ALTER ROLE links_ap NOSUPERUSER;
SELECT outbox.set_cell_server('ap', NULL);
SELECT outbox.unregister_cell('ap');
REVOKE EXECUTE ON FUNCTION outbox.receive, outbox.received FROM links_ap;
DROP ROLE links_ap;

-- Issue 46, item 3: the receipt key rotates; the key before it counts for
-- a bounded overlap; one rotation at a time.
SELECT pg_temp.err($$SELECT outbox.rotate_link_secret(NULL)$$);
SELECT pg_temp.err($$SELECT outbox.rotate_link_secret('-1 second')$$);
SELECT pg_temp.err($$SELECT outbox.rotate_link_secret('31 days')$$);
CREATE TEMP TABLE old_secret AS SELECT secret FROM outbox.link_secret;
WITH r AS MATERIALIZED (SELECT outbox.rotate_link_secret('1 hour') AS until)
SELECT r.until = now() + interval '1 hour' AS until FROM r;
SELECT s.previous = o.secret AS kept, s.secret <> o.secret AS new_key, length(s.secret)
  FROM outbox.link_secret s, old_secret o;
SELECT regexp_replace(pg_temp.err($$SELECT outbox.rotate_link_secret()$$), 'until .*', 'until <an hour from now>');
UPDATE outbox.link_secret SET previous_until = now() - interval '1 second';
SELECT outbox.rotate_link_secret('0') = now() AS no_overlap;
SELECT pg_temp.err($$SELECT outbox.give_up_link_batch('us', 1)$$);
SELECT pg_temp.err($$SELECT outbox.give_up_link_batch(NULL, 1)$$);
SET SESSION AUTHORIZATION links_us;
SELECT pg_temp.err($$SELECT outbox.rotate_link_secret()$$);
SELECT pg_temp.err($$SELECT outbox.give_up_link_batch('us', 1)$$);
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION links_monitor;
SELECT count(*) AS monitor_reads_unrecognised FROM outbox.link_unrecognised;
SELECT pg_temp.err($$SELECT outbox.give_up_link_batch('us', 1)$$);
RESET SESSION AUTHORIZATION;

-- A peer is a peer only while it is linked: unlinked, control's role is
-- refused (a cell that never called outbox.link_control() takes nothing).
SELECT outbox.unlink_control();
SET SESSION AUTHORIZATION links_ctl;
SELECT pg_temp.err($$SELECT * FROM outbox.received(1, 3)$$);
RESET SESSION AUTHORIZATION;
SELECT outbox.set_cell_server('us', NULL);
SELECT outbox.set_cell_server('eu', NULL);
SELECT name, server, link_role FROM outbox.cells ORDER BY name;
DROP VIEW rows;
DROP SERVER links_test;
REVOKE EXECUTE ON FUNCTION outbox.receive, outbox.received FROM links_us, links_eu, links_ctl, links_app;
DROP ROLE links_us, links_eu, links_ctl, links_app, links_monitor;
