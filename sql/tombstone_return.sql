-- A deleted row written again with the same id is not taken for deleted
-- (issue 35, item 4): the drain removes the tombstone when the row's next
-- message finds it back, and the cascade does not act on a tombstone whose
-- row is back, and removes it; the children written for the new row stay.
-- (0.9.0 kept the tombstone for ever, ON CONFLICT DO NOTHING, and the
-- cascade deleted the new row's children.)  And a cascade step refuses a
-- REPEATABLE READ transaction, whose snapshot could pass over a child.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
DROP TABLE IF EXISTS auth_user, member;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SET outbox.cursor_store = 'table';
SELECT outbox.register_scope('User', 0);
SELECT outbox.register_category('user_update', 'User', 0);
SELECT outbox.register_cell('us');
CREATE TABLE auth_user (id bigint PRIMARY KEY);
SELECT outbox.register_table('auth_user', 'user_update', 'control', shard_column => 'id');
CREATE FUNCTION noop(m outbox.message) RETURNS void LANGUAGE sql AS '';
SELECT outbox.register_handler('user_update', 'noop(outbox.message)');
CREATE TABLE member (id bigserial PRIMARY KEY, user_id bigint NOT NULL, note text);
CREATE INDEX ON member (user_id);
SELECT outbox.register_foreign_key('member', 'user_id', 'auth_user', 'CASCADE');
INSERT INTO auth_user SELECT generate_series(1, 3);
INSERT INTO member (user_id, note) SELECT g % 3 + 1, 'old' FROM generate_series(1, 6) g;
SELECT outbox.drain() > 0 AS drained;
CREATE FUNCTION pg_temp.cascade() RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. 20 LOOP
        IF NOT outbox.process_foreign_key_cascade('member', 'user_id', 500) THEN
            RETURN i;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

-- 1. The drain: user 1 deleted, its message delivered, a tombstone; user 1
-- written again, its message delivered: the tombstone is gone.
DELETE FROM auth_user WHERE id = 1;
SELECT outbox.drain();
SELECT table_name, object_identifier FROM outbox.cell_tombstone;
INSERT INTO auth_user VALUES (1);
SELECT outbox.drain();
SELECT count(*) AS tombstones_of_1 FROM outbox.cell_tombstone WHERE object_identifier = 1;
INSERT INTO member (user_id, note) VALUES (1, 'new');
SELECT pg_temp.cascade() IS NOT NULL AS cascade_finished;
SELECT note, count(*) FROM member WHERE user_id = 1 GROUP BY 1 ORDER BY 1;

-- 2. The cascade before the drain has the new row's message: user 2
-- deleted, its tombstone recorded; user 2 written again, a child written
-- for it, and the cascade runs: it leaves them, and removes the tombstone.
DELETE FROM auth_user WHERE id = 2;
SELECT outbox.drain();
SELECT table_name, object_identifier FROM outbox.cell_tombstone;
INSERT INTO auth_user VALUES (2);
INSERT INTO member (user_id, note) VALUES (2, 'new');
SELECT pg_temp.cascade() IS NOT NULL AS cascade_finished;
SELECT note, count(*) FROM member WHERE user_id = 2 GROUP BY 1 ORDER BY 1;
SELECT count(*) AS tombstones_of_2 FROM outbox.cell_tombstone WHERE object_identifier = 2;
SELECT outbox.drain();
SELECT count(*) AS tombstones_of_2 FROM outbox.cell_tombstone WHERE object_identifier = 2;
-- The row walk too: a tombstone recorded by hand for a row that is there.
SELECT outbox.record_tombstone('cell', 'auth_user', 2);
DELETE FROM outbox.watermarks WHERE key = 'row.member.user_id';
SELECT pg_temp.cascade() IS NOT NULL AS cascade_finished;
SELECT note, count(*) FROM member WHERE user_id = 2 GROUP BY 1 ORDER BY 1;
SELECT count(*) AS tombstones_of_2 FROM outbox.cell_tombstone WHERE object_identifier = 2;

-- 3. Still gone: user 3's tombstone stays, its children go.
DELETE FROM auth_user WHERE id = 3;
SELECT outbox.drain();
SELECT pg_temp.cascade() IS NOT NULL AS cascade_finished;
SELECT count(*) AS children_of_3 FROM member WHERE user_id = 3;
SELECT table_name, object_identifier FROM outbox.cell_tombstone;
SELECT relation, pending_tombstones, state FROM outbox.foreign_keys;

-- 4. A cascade step in a REPEATABLE READ or SERIALIZABLE transaction.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT outbox.process_foreign_key_cascade('member', 'user_id', 500);
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT outbox.process_foreign_key_cascade('member', 'user_id', 500);
ROLLBACK;
