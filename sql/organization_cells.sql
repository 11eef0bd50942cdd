-- Where each organization lives (SPEC section 12): control's record,
-- which an application routes by and a move flips.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP DATABASE IF EXISTS organization_cells_test;
CREATE DATABASE organization_cells_test;
ALTER DATABASE organization_cells_test SET outbox.redis_key_prefix = 'organization_cells_test:';
\c organization_cells_test
CREATE EXTENSION pg_outbox;
DROP ROLE IF EXISTS oc_app;
DROP ROLE IF EXISTS oc_monitor;
CREATE ROLE oc_app;
CREATE ROLE oc_monitor IN ROLE pg_monitor;
RESET client_min_messages;
\set VERBOSITY terse
SELECT outbox.register_cell('us');
SELECT outbox.register_cell('eu');

SELECT outbox.set_organization_cell(1, 'us');
SELECT outbox.set_organization_cell(2, 'us');
SELECT outbox.set_organization_cell(3, 'eu');
SELECT outbox.set_organization_cell(2, 'eu');   -- moved
SELECT organization, cell FROM outbox.organization_cells ORDER BY 1;
SELECT outbox.organization_cell(1) AS one, outbox.organization_cell(2) AS two,
       outbox.organization_cell(4) AS unknown;
SELECT outbox.set_organization_cell(3, NULL);   -- forgotten
SELECT outbox.organization_cell(3);

-- Bad input names the argument.
SELECT outbox.set_organization_cell(NULL, 'us');
SELECT outbox.set_organization_cell(1, 'mars');
SELECT outbox.organization_cell(NULL);
-- A cell that holds organizations stays registered.
SELECT outbox.unregister_cell('eu');
SELECT outbox.set_organization_cell(2, 'us');
SELECT outbox.unregister_cell('eu');

-- An application routes by it; it cannot change it, nor read the table.
-- A monitor reads the table.
SET ROLE oc_app;
SELECT outbox.organization_cell(1);
SELECT outbox.set_organization_cell(1, 'us');
SELECT count(*) FROM outbox.organization_cells;
SET ROLE oc_monitor;
SELECT count(*) FROM outbox.organization_cells;
SELECT outbox.set_organization_cell(1, 'us');
SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') AS line
 WHERE line LIKE 'pg_outbox_organizations%' ORDER BY 1;
RESET ROLE;

-- A cell is not where the record is kept.
ALTER SYSTEM SET outbox.silo_mode = 'cell';
SELECT pg_reload_conf();
SELECT pg_sleep(0.3);
SELECT outbox.set_organization_cell(1, 'us');
ALTER SYSTEM RESET outbox.silo_mode;
SELECT pg_reload_conf();
SELECT pg_sleep(0.3);
SHOW outbox.silo_mode;

\c regression
SET client_min_messages = warning;
DROP DATABASE organization_cells_test;
DROP ROLE oc_app, oc_monitor;
