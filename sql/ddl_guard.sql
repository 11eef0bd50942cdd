-- DDL cannot bypass or break capture.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('S', 0);
SELECT outbox.register_category('C', 'S', 0);
CREATE TABLE guarded (id int PRIMARY KEY, org int NOT NULL, label text, other text);
SELECT outbox.register_table('guarded', 'C', shard_column => 'org', payload_columns => '{label}');

ALTER TABLE guarded DISABLE TRIGGER outbox_capture_insert;
ALTER TABLE guarded DISABLE TRIGGER ALL;
ALTER TABLE guarded ENABLE REPLICA TRIGGER outbox_capture_update;
ALTER TABLE guarded DISABLE TRIGGER outbox_capture_apply;
DROP TRIGGER outbox_capture_delete ON guarded;
DROP TRIGGER outbox_capture_truncate ON guarded;
DROP TRIGGER outbox_capture_apply ON guarded;
ALTER TABLE guarded RENAME COLUMN org TO organization;
ALTER TABLE guarded DROP COLUMN label;
ALTER TABLE guarded ALTER COLUMN org TYPE text;
ALTER TABLE guarded ALTER COLUMN org DROP NOT NULL;
ALTER TABLE guarded DROP CONSTRAINT guarded_pkey;
-- Harmless DDL still works.
ALTER TABLE guarded DROP COLUMN other;
ALTER TABLE guarded ADD COLUMN added int;
ALTER TABLE guarded ALTER COLUMN label TYPE varchar(100);
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'guarded'::regclass ORDER BY 1;
INSERT INTO guarded VALUES (1, 5, 'still captured');
SELECT shard_identifier, object_identifier, payload FROM outbox.cell_outbox;

-- Unregistering lets the columns go.
SELECT outbox.unregister_table('guarded');
ALTER TABLE guarded DROP COLUMN label;
DROP TABLE guarded;
-- DDL on unrelated tables is untouched.
CREATE TABLE unrelated (id int);
ALTER TABLE unrelated ADD COLUMN x int;
DROP TABLE unrelated;
