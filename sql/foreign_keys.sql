-- Cross-silo foreign keys (SPEC section 7), after Sentry's
-- tests/sentry/deletions/tasks/test_hybrid_cloud.py: registration, tombstones
-- and the cascade's two watermark walks, with the table cursor store, then
-- with Redis.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
CREATE EXTENSION IF NOT EXISTS pgcrypto;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 0);
SELECT outbox.register_category('monitor_update', 'User', 1);
SELECT outbox.register_cell('us');
CREATE TABLE auth_user (id bigint PRIMARY KEY);
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id');
CREATE TABLE monitor (id bigint PRIMARY KEY, user_id bigint, name text, owner_id int NOT NULL DEFAULT 0);
CREATE INDEX ON monitor (user_id);

-- Registration checks name the bad argument.
SELECT outbox.register_foreign_key('monitor', 'nope', 'auth_user', 'CASCADE');
SELECT outbox.register_foreign_key('monitor', 'name', 'auth_user', 'CASCADE');
SELECT outbox.register_foreign_key('monitor', 'owner_id', 'auth_user', 'CASCADE');
SELECT outbox.register_foreign_key('monitor', 'user_id', 'auth_user', 'EXPLODE');
SELECT outbox.register_foreign_key('monitor', 'user_id', 'Auth User', 'CASCADE');
SELECT outbox.register_foreign_key('monitor', 'user_id', 'nobody', 'CASCADE');
SELECT outbox.register_foreign_key('monitor', 'user_id', NULL, 'CASCADE');
CREATE INDEX ON monitor (owner_id);
SELECT outbox.register_foreign_key('monitor', 'owner_id', 'auth_user', 'SET_NULL');
-- on_delete is read as Sentry does: upper-cased.
SELECT outbox.register_foreign_key('monitor', 'user_id', 'auth_user', 'cascade');
SELECT relation, column_name, parent_table, on_delete, table_key, row_watermark,
       tombstone_watermark, pending_tombstones, state FROM outbox.foreign_keys;

-- Tombstones: recorded once, whatever the number of calls.
SELECT outbox.record_tombstone('cell', 'auth_user', 2);
SELECT outbox.record_tombstone('cell', 'auth_user', 2);
SELECT outbox.record_tombstone('moon', 'auth_user', 2);
SELECT outbox.record_tombstone('cell', 'auth_user', NULL);
SELECT table_name, object_identifier FROM outbox.cell_tombstone;
SELECT column_name, pending_tombstones, state, row_delta, tombstone_delta,
       processing_lag > interval '0' AS lagging FROM outbox.foreign_keys;

-- A batch of size 1 walks the rows one id at a time (over ids no row has:
-- 4, which an earlier test deleted), then the tombstones;
-- each advance stores sha1 of the previous transaction id.
INSERT INTO monitor (id, user_id) SELECT g, g % 3 + 1 FROM generate_series(1, 6) g;
CREATE TEMP TABLE steps (step int, more boolean, row_low bigint, row_tid text,
                         tomb_low bigint, tomb_tid text, monitors text);
DO $$
DECLARE
    i int := 0;
    more boolean;
BEGIN
    LOOP
        i := i + 1;
        more := outbox.process_foreign_key_cascade('monitor', 'user_id', 1);
        INSERT INTO steps
        SELECT i, more, r.low, r.transaction_id, t.low, t.transaction_id,
               (SELECT string_agg(m.id || ':' || m.user_id, ' ' ORDER BY m.id) FROM monitor m)
          FROM (SELECT) x
          LEFT JOIN outbox.watermarks r ON r.key = 'row.monitor.user_id'
          LEFT JOIN outbox.watermarks t ON t.key = 'tombstone.monitor.user_id';
        EXIT WHEN NOT more OR i > 20;
    END LOOP;
END
$$;
SELECT step, more, row_low, tomb_low, monitors FROM steps ORDER BY step;
-- Every advance rotated the transaction id to sha1(previous); a step
-- without work left it as it was.
SELECT s.step, CASE WHEN s.row_tid = p.row_tid THEN 'same'
                    WHEN s.row_tid = encode(digest(p.row_tid, 'sha1'), 'hex') THEN 'sha1'
                    ELSE 'other' END AS row_tid,
               CASE WHEN p.tomb_tid IS NULL AND s.tomb_tid IS NOT NULL THEN 'created'
                    WHEN s.tomb_tid = p.tomb_tid THEN 'same'
                    WHEN s.tomb_tid = encode(digest(p.tomb_tid, 'sha1'), 'hex') THEN 'sha1'
                    ELSE coalesce(s.tomb_tid, 'none') END AS tomb_tid
  FROM steps s JOIN steps p ON p.step = s.step - 1 ORDER BY s.step;
SELECT length(transaction_id) FROM outbox.watermarks ORDER BY key;
SELECT column_name, row_watermark, tombstone_watermark, pending_tombstones, state
  FROM outbox.foreign_keys ORDER BY column_name;

-- No work: the watermarks and transaction ids stay as they are.
CREATE TEMP TABLE before AS SELECT * FROM outbox.watermarks;
SELECT outbox.process_foreign_key_cascade('monitor', 'user_id');
SELECT count(*) AS unchanged FROM outbox.watermarks w JOIN before b USING (key, low, transaction_id);

-- What the cascade shows in metrics(), per reference and walk.
SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') AS line
 WHERE line LIKE 'pg_outbox_cascade%';

-- A child row written after its parent's tombstone was processed: the row
-- walk catches it.
INSERT INTO monitor (id, user_id) VALUES (7, 2), (8, 3);
SELECT outbox.process_foreign_key_cascade('monitor', 'user_id');
SELECT id, user_id FROM monitor ORDER BY id;

-- SET_NULL and DO_NOTHING.
CREATE TABLE team_member (id int PRIMARY KEY, user_id int);
CREATE INDEX ON team_member (user_id);
INSERT INTO team_member VALUES (1, 2), (2, 3), (3, 2);
SELECT outbox.register_foreign_key('team_member', 'user_id', 'auth_user', 'SET_NULL');
CREATE TABLE audit (id int PRIMARY KEY, user_id bigint);
CREATE INDEX ON audit (user_id);
INSERT INTO audit VALUES (1, 2), (2, 3);
SELECT outbox.register_foreign_key('audit', 'user_id', 'auth_user', 'DO_NOTHING');
SELECT outbox.process_foreign_key_cascade('team_member', 'user_id');
SELECT outbox.process_foreign_key_cascade('audit', 'user_id');
SELECT * FROM team_member ORDER BY id;
SELECT * FROM audit ORDER BY id;
SELECT relation, column_name, row_watermark, tombstone_watermark, state
  FROM outbox.foreign_keys ORDER BY relation::text, column_name;

-- A replicated child: the cascade deletes through capture, so its own
-- outbox rows follow.
CREATE TABLE cell_member (id int PRIMARY KEY, user_id bigint, org int NOT NULL);
CREATE INDEX ON cell_member (user_id);
SELECT outbox.register_table('cell_member', 'monitor_update', 'cell', shard_column => 'org');
INSERT INTO cell_member VALUES (1, 2, 10), (2, 3, 10), (3, 2, 11);
SELECT outbox.register_foreign_key('cell_member', 'user_id', 'auth_user', 'CASCADE');
TRUNCATE outbox.cell_outbox;
SELECT outbox.process_foreign_key_cascade('cell_member', 'user_id');
SELECT * FROM cell_member ORDER BY id;
SELECT category, shard_identifier, object_identifier FROM outbox.cell_outbox ORDER BY object_identifier;

-- A CASCADE step changes at most outbox.cascade_chunk_size rows; one that
-- reached it leaves its watermark where it was, and the next step does the
-- batch again.
CREATE TABLE device (id int PRIMARY KEY, user_id bigint);
CREATE INDEX ON device (user_id);
INSERT INTO device VALUES (1, 2), (2, 2), (3, 1);
SELECT outbox.register_foreign_key('device', 'user_id', 'auth_user', 'CASCADE');
SET outbox.cascade_chunk_size = 1;
SELECT outbox.process_foreign_key_cascade('device', 'user_id');
SELECT count(*) AS devices, (SELECT low FROM outbox.watermarks WHERE key = 'row.device.user_id') AS row_low FROM device;
SELECT outbox.process_foreign_key_cascade('device', 'user_id');
SELECT count(*) AS devices, (SELECT low FROM outbox.watermarks WHERE key = 'row.device.user_id') AS row_low FROM device;
SELECT outbox.process_foreign_key_cascade('device', 'user_id');
SELECT count(*) AS devices, (SELECT low FROM outbox.watermarks WHERE key = 'row.device.user_id') AS row_low FROM device;
RESET outbox.cascade_chunk_size;
SELECT id FROM device;

-- A big batch: after a dense first chunk, the steps change ranges of pages,
-- about a chunk each; a pass from the first page then decides, and finds a
-- row that an update moved behind them (fillfactor 50: the update stays on
-- its page, the first).
CREATE TABLE badge (id int PRIMARY KEY, user_id bigint) WITH (fillfactor = 50);
CREATE INDEX ON badge (user_id);
INSERT INTO badge SELECT g, g % 20 + 1000 FROM generate_series(1, 4000) g;
ANALYZE badge;
SELECT outbox.register_foreign_key('badge', 'user_id', 'auth_user', 'CASCADE');
-- The row walk catches up first: the tombstone walk alone then finds them.
DO $$ BEGIN
    WHILE outbox.process_foreign_key_cascade('badge', 'user_id') LOOP END LOOP;
END $$;
SELECT outbox.record_tombstone('cell', 'auth_user', g) FROM generate_series(1000, 1009) g;
SET outbox.cascade_chunk_size = 100;
CREATE TEMP TABLE badge_steps (step int, changed bigint, moved tid, moved_left boolean);
DO $$
DECLARE
    i int := 0;
    more boolean := true;
    before bigint;
BEGIN
    WHILE more AND i < 1000 LOOP
        i := i + 1;
        SELECT count(*) INTO before FROM badge;
        more := outbox.process_foreign_key_cascade('badge', 'user_id');
        IF i = 3 THEN
            UPDATE badge SET user_id = 1000 WHERE id = 11;
        END IF;
        INSERT INTO badge_steps
        SELECT i, before - count(*), (SELECT b.ctid FROM badge b WHERE b.id = 11 AND i = 3),
               EXISTS (SELECT FROM badge b WHERE b.id = 11 AND b.user_id = 1000)
          FROM badge;
        COMMIT;
    END LOOP;
END $$;
SELECT max(moved) < '(1,0)' AS moved_on_the_first_page,
       count(*) FILTER (WHERE moved_left) > 1 AS passed_over_at_first,
       count(*) > 15 AS many_steps, max(changed) <= 2 * 100 AS about_a_chunk,
       sum(changed) AS changed FROM badge_steps;
SELECT count(*) FILTER (WHERE user_id < 1010) AS tombstoned, count(*) AS left,
       count(*) FILTER (WHERE id = 11) AS moved_row FROM badge;
-- SET_NULL by ranges of pages.
CREATE TABLE sticker (id int PRIMARY KEY, user_id bigint);
CREATE INDEX ON sticker (user_id);
INSERT INTO sticker SELECT g, g % 20 + 1000 FROM generate_series(1, 4000) g;
ANALYZE sticker;
SELECT outbox.register_foreign_key('sticker', 'user_id', 'auth_user', 'SET_NULL');
DO $$ BEGIN
    WHILE outbox.process_foreign_key_cascade('sticker', 'user_id') LOOP COMMIT; END LOOP;
END $$;
SELECT count(*) FILTER (WHERE user_id IS NULL) AS cleared,
       count(*) FILTER (WHERE user_id < 1010) AS tombstoned, count(*) AS left FROM sticker;
-- A partitioned child: its partitions' ctids overlap, so it is never
-- changed by ranges of pages; the rows that still refer to the parents are.
CREATE TABLE pin (id int PRIMARY KEY, user_id bigint) PARTITION BY RANGE (id);
CREATE TABLE pin_low PARTITION OF pin FOR VALUES FROM (1) TO (2001);
CREATE TABLE pin_high PARTITION OF pin FOR VALUES FROM (2001) TO (4001);
CREATE INDEX ON pin (user_id);
INSERT INTO pin SELECT g, g % 20 + 1000 FROM generate_series(1, 4000) g;
ANALYZE pin;
SELECT outbox.register_foreign_key('pin', 'user_id', 'auth_user', 'CASCADE');
DO $$ BEGIN
    WHILE outbox.process_foreign_key_cascade('pin', 'user_id') LOOP COMMIT; END LOOP;
END $$;
SELECT count(*) FILTER (WHERE user_id < 1010) AS tombstoned, count(*) AS left FROM pin;
RESET outbox.cascade_chunk_size;
SELECT outbox.unregister_foreign_key('badge', 'user_id');
SELECT outbox.unregister_foreign_key('sticker', 'user_id');
SELECT outbox.unregister_foreign_key('pin', 'user_id');
DROP TABLE badge, sticker, pin;
DELETE FROM outbox.cell_tombstone WHERE object_identifier >= 1000;

-- The same walk with the watermarks in Redis (Sentry's keys and values).
SET outbox.cursor_store = 'redis';
SELECT set_config('outbox.redis_key_prefix', 'regress:' || txid_current() || ':', false) <> '' AS prefixed;
CREATE TABLE redis_child (id int PRIMARY KEY, user_id bigint);
CREATE INDEX ON redis_child (user_id);
INSERT INTO redis_child VALUES (1, 2), (2, 3), (3, 2);
SELECT outbox.register_foreign_key('redis_child', 'user_id', 'auth_user', 'CASCADE');
SELECT outbox.process_foreign_key_cascade('redis_child', 'user_id', 2);
SELECT outbox.process_foreign_key_cascade('redis_child', 'user_id', 2);
SELECT id FROM redis_child;
SELECT w.low, length(w.transaction_id) FROM outbox._watermark_peek('row.redis_child.user_id') w;
SELECT w.low, length(w.transaction_id) FROM outbox._watermark_peek('tombstone.redis_child.user_id') w;
SELECT column_name, row_watermark, tombstone_watermark, state FROM outbox.foreign_keys
 WHERE relation = 'redis_child'::regclass;
SELECT count(*) AS rows_in_the_table_store FROM outbox.watermarks WHERE key LIKE '%redis_child%';
SET outbox.cursor_store = 'table';

-- A dropped column or table takes its references with it.
ALTER TABLE audit DROP COLUMN user_id;
DROP TABLE team_member;
SELECT relation, column_name FROM outbox.foreign_keys ORDER BY relation::text, column_name;

-- Bad input.
SELECT outbox.process_foreign_key_cascade('monitor', 'name');
SELECT outbox.process_foreign_key_cascade('monitor', 'user_id', 0);
SELECT outbox.process_foreign_key_cascade(NULL, 'user_id');
SELECT outbox.unregister_foreign_key('monitor', 'name');
SELECT outbox.unregister_foreign_key('monitor', 'owner_id');
SELECT count(*) FROM outbox.registered_foreign_keys;

-- Tombstones from the drain (Sentry's maybe_process_tombstone): a delivered
-- message whose row is gone from the only table registered under its
-- category leaves a tombstone, in the table of the other silo.  Then a
-- nested cascade: a deleted control user takes its cell members (through
-- capture), whose deletions leave control tombstones, which take the
-- control notes about those members.
CREATE FUNCTION noop_handler(m outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('user_update', 'noop_handler(outbox.message)');
SELECT outbox.register_handler('monitor_update', 'noop_handler(outbox.message)');
CREATE TABLE member_note (id int PRIMARY KEY, member_id bigint);
CREATE INDEX ON member_note (member_id);
SELECT outbox.register_foreign_key('member_note', 'member_id', 'cell_member', 'CASCADE');
INSERT INTO auth_user VALUES (10), (11), (12);
INSERT INTO cell_member VALUES (20, 12, 10), (21, 12, 11), (22, 11, 10);
INSERT INTO member_note VALUES (1, 20), (2, 21), (3, 22);
CREATE FUNCTION pg_temp.drain_all() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    total bigint := 0;
    n bigint;
BEGIN
    LOOP
        n := outbox.drain();
        total := total + n;
        EXIT WHEN n = 0;
    END LOOP;
    RETURN total;
END
$$;
SELECT pg_temp.drain_all() > 0 AS drained;
SELECT count(*) AS tombstones_of_live_rows FROM outbox.cell_tombstone WHERE object_identifier IN (10, 11, 12);
DELETE FROM auth_user WHERE id IN (10, 12);
SELECT pg_temp.drain_all() > 0 AS drained;
SELECT table_name, object_identifier FROM outbox.cell_tombstone WHERE object_identifier >= 10 ORDER BY 2;
SELECT outbox.process_foreign_key_cascade('cell_member', 'user_id');
SELECT id, user_id FROM cell_member ORDER BY id;
SELECT pg_temp.drain_all() > 0 AS drained;
SELECT table_name, object_identifier FROM outbox.control_tombstone ORDER BY 2;
SELECT outbox.process_foreign_key_cascade('member_note', 'member_id');
SELECT id, member_id FROM member_note ORDER BY id;

-- The drain reads a deleted row's table as its owner: an owner who made
-- its own table unreadable (here: no SELECT for itself) loses its own
-- tombstones, with a WARNING, and stops nobody else's delivery.
CREATE ROLE fk_guest;
SELECT outbox.register_category('guest_update', 'User', 2);
SELECT outbox.register_handler('guest_update', 'noop_handler(outbox.message)');
CREATE TABLE guest (id bigint PRIMARY KEY);
ALTER TABLE guest OWNER TO fk_guest;
SELECT outbox.register_table('guest', 'guest_update', 'control', shard_column => 'id');
INSERT INTO guest VALUES (1);
INSERT INTO auth_user VALUES (13);
SELECT pg_temp.drain_all() > 0 AS drained;
REVOKE ALL ON guest FROM fk_guest;
DELETE FROM guest;
DELETE FROM auth_user WHERE id = 13;
SET client_min_messages = error;
SELECT pg_temp.drain_all() > 0 AS drained;
RESET client_min_messages;
SELECT count(*) AS left_in_outbox FROM outbox.control_outbox;
SELECT table_name, object_identifier FROM outbox.cell_tombstone
 WHERE table_name = 'guest' OR object_identifier = 13 ORDER BY 1;
SELECT outbox.unregister_table('guest');
DROP TABLE guest;
DROP ROLE fk_guest;

-- Roles: the table's owner registers its own references; nobody else can,
-- and only the extension's owner records tombstones or runs the cascade.
-- pg_monitor reads the view.
CREATE ROLE fk_owner;
CREATE ROLE fk_other;
CREATE ROLE fk_monitor IN ROLE pg_monitor;
CREATE TABLE owned (id int PRIMARY KEY, user_id bigint);
CREATE INDEX ON owned (user_id);
ALTER TABLE owned OWNER TO fk_owner;
SET ROLE fk_other;
SELECT outbox.register_foreign_key('owned', 'user_id', 'auth_user', 'CASCADE');
SELECT outbox.record_tombstone('cell', 'auth_user', 1);
SET ROLE fk_owner;
SELECT outbox.register_foreign_key('owned', 'user_id', 'auth_user', 'CASCADE');
SELECT outbox.process_foreign_key_cascade('owned', 'user_id');
SET ROLE fk_monitor;
SELECT relation, state FROM outbox.foreign_keys WHERE relation = 'owned'::regclass;
SELECT count(*) FROM outbox.cell_tombstone;
RESET ROLE;
SELECT outbox.unregister_foreign_key('owned', 'user_id');
DROP TABLE owned;
DROP ROLE fk_owner, fk_other, fk_monitor;
