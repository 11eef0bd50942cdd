-- An application role with only INSERT/UPDATE/DELETE on a registered table
-- can write it, and its outbox rows appear; it can neither read nor write
-- the outbox, the registry or the options, nor call the admin functions.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
SELECT outbox.register_cell('us');
CREATE TABLE app_data (id int PRIMARY KEY, tenant int NOT NULL, secret text);
CREATE TABLE app_control (id int PRIMARY KEY);
SELECT outbox.register_table('app_data', 'C', shard_column => 'tenant', payload_columns => '{secret}');
SELECT outbox.register_table('app_control', 'C', 'control');

DROP ROLE IF EXISTS outbox_app;
DROP ROLE IF EXISTS outbox_owner;
CREATE ROLE outbox_app;
GRANT INSERT, UPDATE, DELETE ON app_data, app_control TO outbox_app;
GRANT SELECT (id) ON app_data TO outbox_app;   -- for the WHERE clauses below
GRANT TRUNCATE ON app_data TO outbox_app;

SET ROLE outbox_app;
INSERT INTO app_data VALUES (1, 10, 's1'), (2, 10, 's2');
UPDATE app_data SET secret = 's1b' WHERE id = 1;
DELETE FROM app_data WHERE id = 2;
INSERT INTO app_control VALUES (1);
TRUNCATE app_data;
-- Everything of pg_outbox's is out of reach: the schema is visible to every
-- role, its objects are not.
SELECT count(*) FROM outbox.cell_outbox;
INSERT INTO outbox.cell_outbox (shard_scope, shard_identifier, category, object_identifier)
VALUES (0, 0, 0, 0);
DELETE FROM outbox.cell_outbox;
SELECT * FROM outbox.registered_tables;
SELECT * FROM outbox.tables;
SELECT * FROM outbox.options;
SELECT outbox.get_option('outbox_replication.app_data.replication_version');
SELECT outbox.set_option('outbox_replication.app_data.replication_version', '2');
SELECT outbox.register_cell('evil');
SELECT outbox.register_table('app_data', 'C');
SELECT outbox.unregister_table('app_data');
-- Not with USAGE granted again either.
RESET ROLE;
GRANT USAGE ON SCHEMA outbox TO outbox_app;
SET ROLE outbox_app;
SELECT count(*) FROM outbox.cell_outbox;
DELETE FROM outbox.control_outbox;
UPDATE outbox.registered_tables SET silo = 'control';
INSERT INTO outbox.cells VALUES ('evil');
SELECT outbox.get_option('outbox_replication.app_data.replication_version');
SELECT outbox.set_option('outbox_replication.app_data.replication_version', '2');
SELECT outbox.register_cell('evil');
SELECT outbox.register_table('app_data', 'C');
RESET ROLE;

SELECT shard_identifier AS shard, object_identifier AS object, payload
  FROM outbox.cell_outbox ORDER BY id;
SELECT object_identifier AS object, cell_name FROM outbox.control_outbox ORDER BY id;

-- A table owner registers only its own tables, and only under a category
-- the extension owner granted it.
CREATE ROLE outbox_owner;
CREATE TABLE owned (id int PRIMARY KEY);
ALTER TABLE owned OWNER TO outbox_owner;
SET ROLE outbox_owner;
SELECT outbox.register_table('owned', 'C');               -- no grant yet
SELECT outbox.grant_category('C', 'outbox_owner');         -- not for it to give
RESET ROLE;
SELECT outbox.grant_category('C', 'outbox_owner');
SET ROLE outbox_owner;
SELECT outbox.register_table('app_data', 'C');            -- not its table
SELECT outbox.unregister_table('app_data');
SELECT outbox.set_replication_version('app_data', 5);
SELECT outbox.register_table('owned', 'C');
SELECT outbox.set_replication_version('owned', 2);
INSERT INTO owned VALUES (1);
RESET ROLE;
SELECT table_key, replication_version FROM outbox.tables ORDER BY 1;
SELECT count(*) AS owned_rows FROM outbox.cell_outbox WHERE object_identifier = 1 AND shard_identifier = 1;
SELECT outbox.revoke_category('C', 'outbox_owner');      -- it owns a registered table
DROP TABLE owned;
SELECT outbox.revoke_category('C', 'outbox_owner');
REVOKE ALL ON SCHEMA outbox FROM outbox_app;
DROP TABLE app_data, app_control;
DROP ROLE outbox_app;
DROP ROLE outbox_owner;

TRUNCATE outbox.cell_outbox;
-- search_path tricks do not redirect capture's own SQL: an operator that
-- would match the registry lookup's = exactly, earlier in the path.
CREATE SCHEMA evil;
CREATE FUNCTION evil.never_equal(oid, oid) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.never_equal);
CREATE TABLE tricked (id int PRIMARY KEY);
SELECT outbox.register_table('tricked', 'C');
SET search_path = evil, pg_catalog, public;
SELECT 1::oid = 1::oid AS evil_operator_in_effect;
INSERT INTO tricked VALUES (1);
RESET search_path;
SELECT count(*) AS tricked_rows FROM outbox.cell_outbox WHERE object_identifier = 1 AND shard_identifier = 1 AND category = 0;
