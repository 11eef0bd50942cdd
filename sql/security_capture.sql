-- A table owner cannot bypass capture (issue 9, item 8), and ordinary DDL
-- keeps working for it (item 4).  Every attempt runs as the owner, a role
-- with no other privilege; each either fails with a clear error or is
-- captured, and nothing is lost.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
DROP ROLE IF EXISTS cap_owner;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('CAP', 0);
SELECT outbox.register_category('CAP_UPDATE', 'CAP', 0);
CREATE ROLE cap_owner;
SELECT outbox.grant_category('CAP_UPDATE', 'cap_owner');
CREATE SCHEMA cap AUTHORIZATION cap_owner;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO cap_owner', current_database()); END $$;
SET ROLE cap_owner;
SET search_path = cap;

-- A whole schema life cycle as an ordinary role, with the extension there.
CREATE TABLE scratch (id int PRIMARY KEY, label text);
ALTER TABLE scratch ADD COLUMN extra int DEFAULT 1;
ALTER TABLE scratch ALTER COLUMN label TYPE varchar(50);
ALTER TABLE scratch RENAME COLUMN extra TO more;
CREATE INDEX ON scratch (label);
CREATE TEMP TABLE scratch_temp (id int);
ALTER TABLE scratch_temp ADD COLUMN b int;
CREATE TABLE scratch_parts (id int NOT NULL, at date NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE scratch_parts_1 PARTITION OF scratch_parts FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
CREATE TABLE scratch_parts_2 (id int NOT NULL, at date NOT NULL);
ALTER TABLE scratch_parts ATTACH PARTITION scratch_parts_2 FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
ALTER TABLE scratch_parts DETACH PARTITION scratch_parts_2;
CREATE VIEW scratch_view AS SELECT id FROM scratch;
CREATE FUNCTION scratch_function() RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE TRIGGER t BEFORE INSERT ON scratch FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
ALTER TRIGGER t ON scratch RENAME TO t2;
DROP TRIGGER t2 ON scratch;
DROP VIEW scratch_view;
DROP FUNCTION scratch_function();
DROP INDEX scratch_label_idx;
DROP TABLE scratch, scratch_temp, scratch_parts, scratch_parts_2;

-- The registered table, partitioned, with rows in a partition.
CREATE TABLE events (id int NOT NULL, org int NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
CREATE TABLE events_a PARTITION OF events FOR VALUES FROM (0) TO (100);
INSERT INTO events VALUES (1, 1), (2, 2);
SELECT outbox.register_table('events', 'CAP_UPDATE', shard_column => 'org');
RESET ROLE;
CREATE VIEW cap.outbox_rows AS
SELECT object_identifier AS object, shard_identifier AS shard FROM outbox.cell_outbox ORDER BY id;
SET ROLE cap_owner;

-- Triggers: not disabled, not put in another mode, not renamed, not dropped.
ALTER TABLE events DISABLE TRIGGER USER;
ALTER TABLE events_a DISABLE TRIGGER outbox_capture_insert;
ALTER TABLE events_a ENABLE TRIGGER outbox_capture_insert;
ALTER TABLE events_a ENABLE REPLICA TRIGGER outbox_capture_insert;
ALTER TRIGGER outbox_capture_insert ON events_a RENAME TO mine;
DROP TRIGGER outbox_capture_insert ON events_a;

-- Legacy inheritance: rows of a child are read with the table but would
-- never be captured.
CREATE TABLE plain (id int NOT NULL, org int NOT NULL);
CREATE UNIQUE INDEX plain_id ON plain (id);
SELECT outbox.register_table('plain', 'CAP_UPDATE', shard_column => 'org');
CREATE TABLE child () INHERITS (plain);
CREATE TABLE loose (id int NOT NULL, org int NOT NULL);
ALTER TABLE loose INHERIT plain;
DROP TABLE loose;

-- Partitions by every DDL form.
CREATE SCHEMA side CREATE TABLE events_b PARTITION OF cap.events FOR VALUES FROM (100) TO (200);
INSERT INTO events VALUES (150, 15);
CREATE TABLE events_c (id int NOT NULL, org int NOT NULL);
INSERT INTO events_c VALUES (250, 25), (260, 26);
ALTER TABLE events ATTACH PARTITION events_c FOR VALUES FROM (200) TO (300);
RESET ROLE;
SELECT * FROM cap.outbox_rows;
TRUNCATE outbox.cell_outbox;
SET ROLE cap_owner;
DROP TABLE events_c;
DROP SCHEMA side CASCADE;
ALTER TABLE events DETACH PARTITION events_c;
INSERT INTO events_c VALUES (270, 27);
DROP TABLE events_c;
RESET ROLE;
SELECT * FROM cap.outbox_rows;
TRUNCATE outbox.cell_outbox;
SET ROLE cap_owner;

-- The unique index on id, row-level security on the owner, becoming a
-- partition of something else.
ALTER TABLE events DROP CONSTRAINT events_pkey;
DROP INDEX plain_id;
DROP INDEX CONCURRENTLY plain_id;
SELECT indisvalid AS id_index_still_valid FROM pg_index WHERE indexrelid = 'plain_id'::regclass;
CREATE UNIQUE INDEX CONCURRENTLY plain_id_2 ON plain (id);
DROP INDEX CONCURRENTLY plain_id;
ALTER TABLE plain ENABLE ROW LEVEL SECURITY;
ALTER TABLE plain FORCE ROW LEVEL SECURITY;
ALTER TABLE plain DISABLE ROW LEVEL SECURITY;
CREATE TABLE holder (id int NOT NULL, org int NOT NULL) PARTITION BY RANGE (id);
ALTER TABLE holder ATTACH PARTITION plain FOR VALUES FROM (0) TO (1000);
-- Still captured, all of it.
INSERT INTO plain VALUES (7, 70);
INSERT INTO events VALUES (3, 3);
RESET ROLE;
SELECT * FROM cap.outbox_rows;
SELECT c.relname, g.tgname, g.tgenabled FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
 WHERE c.relnamespace = 'cap'::regnamespace ORDER BY 1, 2;

-- A registered table dropped whole drops its registration.
SET ROLE cap_owner;
DROP TABLE holder;
DROP TABLE plain;
DROP TABLE events;
RESET ROLE;
SELECT count(*) AS registered FROM outbox.tables;

RESET search_path;
SET client_min_messages = warning;
DROP SCHEMA cap CASCADE;
SELECT outbox.revoke_category('CAP_UPDATE', 'cap_owner');
DO $$ BEGIN EXECUTE format('REVOKE CREATE ON DATABASE %I FROM cap_owner', current_database()); END $$;
DROP ROLE cap_owner;
RESET client_min_messages;
