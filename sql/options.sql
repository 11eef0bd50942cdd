-- Options and the version gate: GUC > options table > default.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('de');
CREATE TABLE sentry_authprovider (id int PRIMARY KEY);
SELECT outbox.register_table('sentry_authprovider', 'C', 'control', replication_version => 3);

-- Defaults: the gate is 0, target cells unset.
SELECT outbox.get_option('outbox_replication.sentry_authprovider.replication_version');
SELECT outbox.get_option('outbox_replication.sentry_authprovider.backfill.target_cells');
SELECT outbox.find_replication_version('sentry_authprovider');
SELECT outbox.find_replication_version('sentry_authprovider', force_synchronous => true);
SELECT outbox.target_cells('sentry_authprovider');

-- The table: effective version is min(option, coded).
SELECT outbox.set_option('outbox_replication.sentry_authprovider.replication_version', '2');
SELECT outbox.find_replication_version('sentry_authprovider');
SELECT outbox.set_option('outbox_replication.sentry_authprovider.replication_version', '10');
SELECT outbox.find_replication_version('sentry_authprovider');
SELECT outbox.find_replication_version('sentry_authprovider', true);
SELECT outbox.set_option('outbox_replication.sentry_authprovider.backfill.target_cells', '["us", "fr"]');
-- Only registered cells: fr is not one (what a backfill writes to).
SELECT outbox.target_cells('sentry_authprovider');
SELECT outbox.set_option('outbox_replication.sentry_authprovider.backfill.target_cells', '["us"]');
SELECT outbox.target_cells('sentry_authprovider');
SELECT * FROM outbox.options ORDER BY key;

-- A GUC of the same name overrides the table; RESET falls back to it.
SET outbox_replication.sentry_authprovider.replication_version = 1;
SELECT outbox.get_option('outbox_replication.sentry_authprovider.replication_version');
SELECT outbox.find_replication_version('sentry_authprovider');
RESET outbox_replication.sentry_authprovider.replication_version;
SELECT outbox.get_option('outbox_replication.sentry_authprovider.replication_version');
SET outbox_replication.sentry_authprovider.backfill.target_cells = '["de"]';
SELECT outbox.target_cells('sentry_authprovider');
-- A bad GUC value is an error that names the setting.
SET outbox_replication.sentry_authprovider.replication_version = 'two';
SELECT outbox.get_option('outbox_replication.sentry_authprovider.replication_version');
SET outbox_replication.sentry_authprovider.replication_version = '-1';
SELECT outbox.find_replication_version('sentry_authprovider');
RESET ALL;
-- ALTER ROLE / DATABASE settings are GUCs too (seen by new sessions).
ALTER DATABASE :"DBNAME" SET outbox_replication.sentry_authprovider.replication_version = 2;
\c
SELECT outbox.find_replication_version('sentry_authprovider');
ALTER DATABASE :"DBNAME" RESET outbox_replication.sentry_authprovider.replication_version;
\c
\set SHOW_CONTEXT never
SELECT outbox.find_replication_version('sentry_authprovider');

-- unset_option: back to the default (rolling the gate back).
SELECT outbox.unset_option('outbox_replication.sentry_authprovider.replication_version');
SELECT outbox.unset_option('outbox_replication.sentry_authprovider.replication_version');
SELECT outbox.find_replication_version('sentry_authprovider');

-- Keys and values are checked.
SELECT outbox.set_option('outbox_replication.sentry_authprovider', '1');
SELECT outbox.set_option('some.other.key', '1');
SELECT outbox.set_option('outbox_replication.Sentry.replication_version', '1');
SELECT outbox.set_option('outbox_replication.x''; drop table y; --.replication_version', '1');
SELECT outbox.set_option('outbox_replication.t.replication_version', '"2"');
SELECT outbox.set_option('outbox_replication.t.replication_version', '1.5');
SELECT outbox.set_option('outbox_replication.t.replication_version', '-1');
SELECT outbox.set_option('outbox_replication.t.replication_version', '99999999999');
SELECT outbox.set_option('outbox_replication.t.replication_version', NULL);
SELECT outbox.set_option('outbox_replication.t.backfill.target_cells', '"us"');
SELECT outbox.set_option('outbox_replication.t.backfill.target_cells', '["us", 1]');
SELECT outbox.set_option(NULL, '1');
SELECT outbox.get_option('nope');
SELECT outbox.unset_option('nope');
SELECT outbox.find_replication_version('pg_class');
SELECT outbox.find_replication_version(NULL);
SELECT outbox.find_replication_version('sentry_authprovider', NULL);
-- An option for a table not registered yet is allowed (code first, or
-- options first: either order works).
SELECT outbox.set_option('outbox_replication.future_table.replication_version', '4');
SELECT key, value FROM outbox.options ORDER BY key;
