-- Scopes, categories, cells and registered tables.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;

-- Scopes: ids assigned from 0, or given; the same name again is idempotent.
SELECT outbox.register_scope('ORGANIZATION_SCOPE');
SELECT outbox.register_scope('USER_SCOPE', 5);
SELECT outbox.register_scope('ORGANIZATION_SCOPE');
SELECT outbox.register_scope('USER_SCOPE', 5);
SELECT outbox.register_scope('NEXT_SCOPE');
SELECT outbox.register_scope('USER_SCOPE', 6);     -- another id
SELECT outbox.register_scope('OTHER_SCOPE', 5);    -- id taken
SELECT * FROM outbox.scopes ORDER BY id;

-- Categories belong to exactly one scope.
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE');
SELECT outbox.register_category('USER_UPDATE', 'USER_SCOPE', 10);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE');
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'USER_SCOPE');
SELECT outbox.register_category('USER_UPDATE', 'USER_SCOPE', 11);
SELECT outbox.register_category('NEW_ONE', 'NO_SUCH_SCOPE');
SELECT outbox.register_category('API_TOKEN_UPDATE', 'USER_SCOPE');
SELECT * FROM outbox.categories ORDER BY id;

-- Cells.
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('de');
SELECT outbox.unregister_cell('de');
SELECT outbox.unregister_cell('de');
SELECT * FROM outbox.cells;

-- register_table checks everything.
CREATE TABLE orgs (id bigint PRIMARY KEY, organization_id bigint NOT NULL, name text,
                   slug varchar(20), cell text NOT NULL DEFAULT 'us');
SELECT outbox.register_table('orgs', 'ORGANIZATION_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{name,slug}');
SELECT * FROM outbox.tables;
SELECT outbox.register_table('orgs', 'ORGANIZATION_UPDATE');                 -- twice

CREATE TABLE other (id int PRIMARY KEY, org bigint, owner_id int NOT NULL, label text NOT NULL,
                    flag float8 NOT NULL, region text);
SELECT outbox.register_table('other', 'NO_SUCH_CATEGORY');
SELECT outbox.register_table('other', 'USER_UPDATE', silo => 'region');
SELECT outbox.register_table('other', 'USER_UPDATE', shard_column => 'nope');
SELECT outbox.register_table('other', 'USER_UPDATE', shard_column => 'org');      -- nullable
SELECT outbox.register_table('other', 'USER_UPDATE', shard_column => 'label');    -- text
SELECT outbox.register_table('other', 'USER_UPDATE', cell_column => 'region');    -- cell silo
SELECT outbox.register_table('other', 'USER_UPDATE', 'control', cell_column => 'flag');
SELECT outbox.register_table('other', 'USER_UPDATE', 'control', cell_column => 'region');
SELECT outbox.register_table('other', 'USER_UPDATE', payload_columns => '{label,missing}');
SELECT outbox.register_table('other', 'USER_UPDATE', payload_columns => '{}');
SELECT outbox.register_table('other', 'USER_UPDATE', payload_columns => '{label,label}');
SELECT outbox.register_table('other', 'USER_UPDATE', payload_columns => '{label,NULL}');
SELECT outbox.register_table('other', 'USER_UPDATE', replication_version => 0);
SELECT outbox.register_table('other', 'USER_UPDATE', table_key => 'orgs');
SELECT outbox.register_table('other', 'USER_UPDATE', table_key => 'Bad Key');
SELECT outbox.register_table('other', 'USER_UPDATE', table_key => 'x"; DROP TABLE orgs; --');
SELECT count(*) AS nothing_registered FROM outbox.registered_tables WHERE relid = 'other'::regclass;
SELECT count(*) AS no_trigger_left FROM pg_trigger WHERE tgrelid = 'other'::regclass;

-- The id column: present, integer, NOT NULL, unique on its own.
CREATE TABLE no_id (key int PRIMARY KEY);
CREATE TABLE text_id (id text PRIMARY KEY);
CREATE TABLE not_unique_id (id int NOT NULL);
CREATE TABLE composite_id (id int NOT NULL, k int NOT NULL, PRIMARY KEY (id, k));
SELECT outbox.register_table('no_id', 'USER_UPDATE');
SELECT outbox.register_table('text_id', 'USER_UPDATE');
SELECT outbox.register_table('not_unique_id', 'USER_UPDATE');
SELECT outbox.register_table('composite_id', 'USER_UPDATE');
CREATE UNIQUE INDEX ON not_unique_id (id);
SELECT outbox.register_table('not_unique_id', 'USER_UPDATE');

-- Not a table, a partition, a temporary table.
CREATE VIEW a_view AS SELECT 1 AS id;
CREATE SEQUENCE a_seq;
SELECT outbox.register_table('a_view', 'USER_UPDATE');
SELECT outbox.register_table('a_seq', 'USER_UPDATE');
CREATE TABLE parted (id int NOT NULL PRIMARY KEY) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10);
SELECT outbox.register_table('parted_1', 'USER_UPDATE');
CREATE TEMP TABLE temp_t (id int PRIMARY KEY);
SELECT outbox.register_table('temp_t', 'USER_UPDATE');

-- A table name that needs quoting, and an explicit key.
CREATE SCHEMA "Odd Schema";
CREATE TABLE "Odd Schema"."Mixed; Name" (id int PRIMARY KEY, owner_id int NOT NULL);
SELECT outbox.register_table('"Odd Schema"."Mixed; Name"', 'USER_UPDATE');
SELECT outbox.register_table('"Odd Schema"."Mixed; Name"', 'USER_UPDATE', 'control',
                             shard_column => 'owner_id', table_key => 'mixed_name');
SELECT table_key, relation, silo, category, scope, shard_column FROM outbox.tables ORDER BY 1;

-- set_replication_version never goes down.
SELECT outbox.set_replication_version('orgs', 3);
SELECT outbox.set_replication_version('orgs', 3);
SELECT outbox.set_replication_version('orgs', 2);
SELECT outbox.set_replication_version('other', 2);
SELECT table_key, replication_version FROM outbox.tables ORDER BY 1;

-- unregister_table removes the triggers and the registration.
SELECT outbox.unregister_table('not_unique_id');
SELECT outbox.unregister_table('not_unique_id');
SELECT count(*) AS triggers_left FROM pg_trigger WHERE tgrelid = 'not_unique_id'::regclass;

-- Dropping a registered table drops its registration.
DROP TABLE "Odd Schema"."Mixed; Name";
SELECT table_key FROM outbox.tables ORDER BY 1;
