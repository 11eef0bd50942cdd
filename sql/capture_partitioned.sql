-- Partitioned tables: register the parent; every partition is captured, also
-- one attached or created later, written directly, or truncated on its own.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('ORGANIZATION_SCOPE', 0);
SELECT outbox.register_category('EVENT_UPDATE', 'ORGANIZATION_SCOPE', 3);

CREATE TABLE events (id bigint NOT NULL, organization_id bigint NOT NULL, note text,
                     PRIMARY KEY (id)) PARTITION BY RANGE (id);
CREATE TABLE events_0 PARTITION OF events FOR VALUES FROM (0) TO (100);
-- A partition with another column order (other attribute numbers).
CREATE TABLE events_1 (note text, dropped int, organization_id bigint NOT NULL, id bigint NOT NULL);
ALTER TABLE events_1 DROP COLUMN dropped;
ALTER TABLE events ATTACH PARTITION events_1 FOR VALUES FROM (100) TO (200);
-- A sub-partitioned branch.
CREATE TABLE events_2 PARTITION OF events FOR VALUES FROM (200) TO (400) PARTITION BY RANGE (id);
CREATE TABLE events_2a PARTITION OF events_2 FOR VALUES FROM (200) TO (300);
SELECT outbox.register_table('events', 'EVENT_UPDATE', shard_column => 'organization_id',
                             payload_columns => '{note}');
-- Created and attached after registration.
CREATE TABLE events_2b PARTITION OF events_2 FOR VALUES FROM (300) TO (400);
CREATE TABLE events_3 (id bigint NOT NULL, organization_id bigint NOT NULL, note text);
ALTER TABLE events ATTACH PARTITION events_3 FOR VALUES FROM (400) TO (500);
SELECT tgrelid::regclass AS relation, tgname, tgenabled
  FROM pg_trigger WHERE tgname LIKE 'outbox%' ORDER BY 1, 2;

CREATE VIEW rows AS
SELECT shard_identifier AS shard, category AS cat, object_identifier AS object, payload
  FROM outbox.cell_outbox ORDER BY id;

INSERT INTO events VALUES (1, 10, 'p0'), (150, 11, 'p1'), (250, 12, 'p2a'), (350, 13, 'p2b'),
                          (450, 14, 'p3');
INSERT INTO events_1 VALUES ('direct', 15, 160);
INSERT INTO events_2b VALUES (360, 16, 'direct 2b');
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- An UPDATE that moves a row to another partition and another shard.
UPDATE events SET id = 120, organization_id = 20 WHERE id = 1;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- TRUNCATE one partition, then the whole table.
TRUNCATE events_2b;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;
TRUNCATE events;
SELECT * FROM rows;
TRUNCATE outbox.cell_outbox;

-- A detached partition is no longer captured.
ALTER TABLE events DETACH PARTITION events_3;
INSERT INTO events_3 VALUES (470, 1, 'detached');
TRUNCATE events_3;
SELECT count(*) AS rows_from_detached FROM outbox.cell_outbox;
