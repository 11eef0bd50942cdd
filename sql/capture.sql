-- Capture on a cell-silo table: every kind of write makes outbox rows in the
-- same transaction.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('ORGANIZATION_UPDATE', 'ORGANIZATION_SCOPE', 7);
SELECT outbox.register_category('PROJECT_UPDATE', 'ORGANIZATION_SCOPE', 8);

CREATE TABLE members (id bigint PRIMARY KEY, organization_id bigint NOT NULL,
                      email text UNIQUE, role text, tags text[], meta jsonb, seen timestamptz);
SELECT outbox.register_table('members', 'ORGANIZATION_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{email,role,tags,meta}');
-- No shard column: the id is the shard identifier; no payload columns: NULL.
CREATE TABLE projects (id int PRIMARY KEY, name text);
SELECT outbox.register_table('projects', 'PROJECT_UPDATE');

CREATE VIEW rows AS
SELECT shard_scope AS scope, shard_identifier AS shard, category AS cat,
       object_identifier AS object, payload,
       scheduled_for = date_added AND scheduled_from = date_added AS due_now
  FROM outbox.cell_outbox ORDER BY id;

-- Multi-row INSERT: one row each, payload from the new row, due at once.
INSERT INTO members VALUES (1, 100, 'a@x', 'admin', '{a,b}', '{"k": [1, 2]}', now()),
                           (2, 100, 'b@x', NULL, NULL, NULL, now()),
                           (3, 200, 'c@x', 'member', '{}', '"s"', now());
INSERT INTO projects VALUES (10, 'p10');
SELECT * FROM rows;
SELECT count(*) = 4 AS same_transaction_timestamps FROM outbox.cell_outbox
 WHERE date_added = (SELECT min(date_added) FROM outbox.cell_outbox) OR object_identifier = 10;
TRUNCATE outbox.cell_outbox;

-- UPDATE within a shard: one row with the new payload.  UPDATE that moves a
-- row to another shard: one for the old shard (old payload), one for the new.
UPDATE members SET role = 'owner' WHERE id = 1;
UPDATE members SET organization_id = 300, role = 'moved' WHERE id = 2;
-- An UPDATE of the id itself is the same: the old object and the new.
UPDATE projects SET id = 11 WHERE id = 10;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- DELETE: payload from the old row.
DELETE FROM members WHERE id = 3;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- INSERT ... ON CONFLICT DO UPDATE: the conflicting row is an update; DO
-- NOTHING writes nothing.
INSERT INTO members VALUES (1, 100, 'a@x', 'upserted') ON CONFLICT (id) DO UPDATE SET role = excluded.role;
INSERT INTO members VALUES (4, 100, 'd@x', 'new') ON CONFLICT (id) DO UPDATE SET role = excluded.role;
INSERT INTO members VALUES (5, 100, 'a@x', 'dup') ON CONFLICT DO NOTHING;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- COPY.
COPY members (id, organization_id, email, role) FROM stdin;
20	500	copy1@x	copied
21	500	copy2@x	copied
\.
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- MERGE: each action is captured as the write it performs.
CREATE TABLE merge_source (id bigint, organization_id bigint, email text);
INSERT INTO merge_source VALUES (1, 100, 'a@x'), (40, 700, 'merged@x');
MERGE INTO members m USING merge_source s ON m.id = s.id
WHEN MATCHED THEN UPDATE SET role = 'merged'
WHEN NOT MATCHED THEN INSERT (id, organization_id, email) VALUES (s.id, s.organization_id, s.email);
MERGE INTO members m USING merge_source s ON m.id = s.id AND s.id = 40
WHEN MATCHED THEN DELETE;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- Rollbacks and rolled-back savepoints leave no row; released ones do.
BEGIN;
INSERT INTO members VALUES (30, 600, 'r1@x');
ROLLBACK;
BEGIN;
INSERT INTO members VALUES (31, 600, 'kept1@x');
SAVEPOINT s1;
INSERT INTO members VALUES (32, 600, 'gone@x');
UPDATE members SET role = 'gone' WHERE id = 31;
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s2;
INSERT INTO members VALUES (33, 600, 'kept2@x');
RELEASE SAVEPOINT s2;
COMMIT;
-- A statement that fails half way leaves nothing either.
INSERT INTO members VALUES (34, 600, 'x1@x'), (35, 600, 'a@x');
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- TRUNCATE: one deletion row (old payload) per removed row, same transaction.
SELECT count(*) AS members_before_truncate FROM members;
BEGIN;
TRUNCATE members;
SELECT count(*) AS rows_inside FROM outbox.cell_outbox;
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM outbox.cell_outbox;
TRUNCATE members;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;
TRUNCATE projects;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- session_replication_role = replica does not switch capture off.
SET session_replication_role = replica;
INSERT INTO projects VALUES (12, 'replica');
RESET session_replication_role;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- Per-backend metadata is refreshed when the registration or the table
-- changes: new payload columns, a re-registration under another category,
-- a column added before use.
SELECT outbox.unregister_table('projects');
INSERT INTO projects VALUES (13, 'not captured');
SELECT outbox.register_table('projects', 'ORGANIZATION_UPDATE', payload_columns => '{name}');
INSERT INTO projects VALUES (14, 'captured again');
ALTER TABLE projects ADD COLUMN extra int DEFAULT 5;
SELECT outbox.unregister_table('projects');
SELECT outbox.register_table('projects', 'PROJECT_UPDATE', payload_columns => '{extra,name}');
UPDATE projects SET name = 'renamed' WHERE id = 14;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- Another session sees a registration change made here (cache invalidation
-- across backends).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT dblink_connect('other', 'dbname=' || current_database());
SELECT * FROM dblink('other', 'INSERT INTO projects VALUES (15, ''before'') RETURNING id') AS t(id int);
SELECT outbox.unregister_table('projects');
SELECT outbox.register_table('projects', 'ORGANIZATION_UPDATE');
SELECT * FROM dblink('other', 'INSERT INTO projects VALUES (16, ''after'') RETURNING id') AS t(id int);
SELECT dblink_disconnect('other');
SELECT * FROM rows;

-- Every outbox row sits in the hash partition PostgreSQL itself would route
-- it to (capture routes rows without the executor).
INSERT INTO members SELECT g, g % 97, 'bulk' || g || '@x' FROM generate_series(1000, 3000) g;
SELECT count(*) AS rows_written,
       count(*) FILTER (WHERE satisfies_hash_partition('outbox.cell_outbox'::regclass, 16,
            substring(tableoid::regclass::text FROM '_(\d+)$')::int, shard_identifier))
           AS rows_in_their_partition
  FROM outbox.cell_outbox WHERE object_identifier BETWEEN 1000 AND 3000;

-- Statements larger than work_mem: the transition tables spill to disk.
SET work_mem = '64kB';
TRUNCATE outbox.cell_outbox;
CREATE TABLE big (id int PRIMARY KEY, org int NOT NULL, label text);
SELECT outbox.register_table('big', 'PROJECT_UPDATE', shard_column => 'org',
                             payload_columns => '{label}');
INSERT INTO big SELECT g, g % 50, repeat('x', 50) || g FROM generate_series(1, 20000) g;
UPDATE big SET label = label || '!';
UPDATE big SET org = org + 1000 WHERE id % 2 = 0;
DELETE FROM big;
RESET work_mem;
SELECT count(*) AS rows, count(DISTINCT object_identifier) AS objects,
       count(*) FILTER (WHERE shard_identifier >= 1000) AS moved_to,
       count(*) FILTER (WHERE payload->>'label' LIKE '%!') AS after_update
  FROM outbox.cell_outbox WHERE category = 8;

-- An UPDATE that sets no key column skips looking for moved rows, unless a
-- BEFORE UPDATE trigger may change the key behind the SET list.
TRUNCATE outbox.cell_outbox;
CREATE TABLE moved_by_trigger (id int PRIMARY KEY, org int NOT NULL, note text);
SELECT outbox.register_table('moved_by_trigger', 'PROJECT_UPDATE', shard_column => 'org');
INSERT INTO moved_by_trigger VALUES (1, 10, 'a'), (2, 20, 'b');
UPDATE moved_by_trigger SET note = 'plain update';
CREATE FUNCTION move_org() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.org := NEW.org + 100; RETURN NEW; END $$;
CREATE TRIGGER a_move BEFORE UPDATE ON moved_by_trigger FOR EACH ROW EXECUTE FUNCTION move_org();
UPDATE moved_by_trigger SET note = 'moved by a trigger';
SELECT shard_identifier AS shard, object_identifier AS object
  FROM outbox.cell_outbox WHERE category = 8 ORDER BY id;

-- Ids follow the order of changes to an object, also across sessions: a
-- statement that waited for another's row lock reserves its ids after the
-- other committed, even when it started first.
TRUNCATE outbox.cell_outbox;
SELECT dblink_connect('other', 'dbname=' || current_database());
BEGIN;
UPDATE moved_by_trigger SET note = 'first' WHERE id = 1;
SELECT dblink_send_query('other', 'UPDATE moved_by_trigger SET note = ''second'' WHERE id = 1');
SELECT pg_sleep(0.2);
COMMIT;
SELECT * FROM dblink_get_result('other') AS r(status text);
SELECT dblink_disconnect('other');
SELECT note FROM moved_by_trigger WHERE id = 1;
-- The newest outbox row of the object is the second session's.
SELECT object_identifier, shard_identifier,
       rank() OVER (PARTITION BY object_identifier, shard_identifier ORDER BY id) AS change
  FROM outbox.cell_outbox WHERE object_identifier = 1 ORDER BY id;

-- A writer's memory is one context kept for the session and reset between
-- writers (outbox_writer.cpp): after statements of 10,000 rows and of one
-- there is one, under TopMemoryContext.  A statement that fails while its
-- writer holds rows (here the outbox's id sequence runs out at the fourth
-- block of ids, 1,000 rows after the writer wrote its first 2,000) takes
-- the writer's context with it, and the next statement makes one again.
TRUNCATE outbox.cell_outbox;
CREATE TABLE writer_memory (id bigint PRIMARY KEY, org bigint NOT NULL);
SELECT outbox.register_table('writer_memory', 'PROJECT_UPDATE', shard_column => 'org');
INSERT INTO writer_memory SELECT g, g % 16 FROM generate_series(1, 10000) g;
UPDATE writer_memory SET org = org + 1 WHERE id = 1;
-- Kept at its first block: 2 MB (CHANGELOG), the rest given back.
SELECT c.parent, count(*), max(c.total_bytes) <= 2 * 1024 * 1024 AS at_most_2_mb
  FROM pg_backend_memory_contexts c
 WHERE c.name = 'pg_outbox writer' GROUP BY 1;
SELECT last_value AS id_seq_was FROM outbox.cell_outbox_id_seq \gset
SELECT setval('outbox.cell_outbox_id_seq', 9223372036854775807 - 3500) > 0 AS near_the_end;
INSERT INTO writer_memory SELECT g, g % 16 FROM generate_series(10001, 20000) g;
SELECT setval('outbox.cell_outbox_id_seq', :id_seq_was) > 0 AS restored;
SELECT count(*) FROM pg_backend_memory_contexts c WHERE c.name = 'pg_outbox writer';
INSERT INTO writer_memory VALUES (20001, 1);
SELECT c.parent, count(*) FROM pg_backend_memory_contexts c
 WHERE c.name = 'pg_outbox writer' GROUP BY 1;
SELECT count(*) AS outbox_rows, count(DISTINCT object_identifier) AS objects,
       max(object_identifier) AS last
  FROM outbox.cell_outbox WHERE category = 8;
