-- outbox.silo_mode: writes to a table of the other silo fail; monolith allows
-- all.  Set in postgresql.conf or ALTER SYSTEM, applied on reload.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
SELECT outbox.register_cell('us');
CREATE TABLE cell_t (id int PRIMARY KEY);
CREATE TABLE control_t (id int PRIMARY KEY);
SELECT outbox.register_table('cell_t', 'C', 'cell');
SELECT outbox.register_table('control_t', 'C', 'control');

SHOW outbox.silo_mode;
INSERT INTO cell_t VALUES (1);
INSERT INTO control_t VALUES (1);
SET outbox.silo_mode = 'cell';  -- not a session setting


ALTER SYSTEM SET outbox.silo_mode = 'cell';
SELECT pg_reload_conf();
SELECT pg_sleep(0.3);
SHOW outbox.silo_mode;
INSERT INTO cell_t VALUES (2);
INSERT INTO control_t VALUES (2);
UPDATE control_t SET id = 3;
DELETE FROM control_t;
TRUNCATE control_t;

ALTER SYSTEM SET outbox.silo_mode = 'control';
SELECT pg_reload_conf();
SELECT pg_sleep(0.3);
SHOW outbox.silo_mode;
INSERT INTO cell_t VALUES (3);
INSERT INTO control_t VALUES (3);

ALTER SYSTEM SET outbox.silo_mode = 'nonsense';
ALTER SYSTEM RESET outbox.silo_mode;
SELECT pg_reload_conf();
SELECT pg_sleep(0.3);
SHOW outbox.silo_mode;
SELECT (SELECT array_agg(id ORDER BY id) FROM cell_t) AS cell_rows,
       (SELECT array_agg(id ORDER BY id) FROM control_t) AS control_rows;
SELECT count(*) AS cell_outbox, (SELECT count(*) FROM outbox.control_outbox) AS control_outbox
  FROM outbox.cell_outbox;
