-- The change log and the fence of a move (src/relocation/move_trigger.cpp),
-- on one server: a move's row written by hand here stands for what
-- relocation_peer's prepare and fence write in a cell (SPEC section 12).
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP DATABASE IF EXISTS move_trigger_test;
CREATE DATABASE move_trigger_test;
ALTER DATABASE move_trigger_test SET outbox.redis_key_prefix = 'move_trigger_test:';
\c move_trigger_test
CREATE EXTENSION pg_outbox;
DROP ROLE IF EXISTS mt_app;
CREATE ROLE mt_app;
RESET client_min_messages;
\set VERBOSITY terse

CREATE TABLE org (id bigint PRIMARY KEY, slug text);
CREATE TABLE proj (id int PRIMARY KEY, org_id bigint REFERENCES org, name text);
CREATE TABLE tagged (tag text PRIMARY KEY, org_id bigint);
GRANT SELECT, INSERT, UPDATE, DELETE ON org, proj, tagged TO mt_app;
-- As _move_install_triggers puts them: table key, key column, references.
CREATE TRIGGER pg_outbox_move_insert AFTER INSERT ON org REFERENCING NEW TABLE AS pg_outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('org', 'id');
CREATE TRIGGER pg_outbox_move_update AFTER UPDATE ON org
    REFERENCING OLD TABLE AS pg_outbox_old NEW TABLE AS pg_outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('org', 'id');
CREATE TRIGGER pg_outbox_move_insert AFTER INSERT ON proj REFERENCING NEW TABLE AS pg_outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('proj', 'id', 'org_id', 'org');
CREATE TRIGGER pg_outbox_move_update AFTER UPDATE ON proj
    REFERENCING OLD TABLE AS pg_outbox_old NEW TABLE AS pg_outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('proj', 'id', 'org_id', 'org');
CREATE TRIGGER pg_outbox_move_delete AFTER DELETE ON proj REFERENCING OLD TABLE AS pg_outbox_old
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('proj', 'id', 'org_id', 'org');
CREATE TRIGGER pg_outbox_move_truncate BEFORE TRUNCATE ON proj
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('proj', 'id', 'org_id', 'org');

-- No move here: nothing logged, nothing refused.
INSERT INTO org VALUES (1, 'acme'), (2, 'globex');
INSERT INTO proj VALUES (10, 1, 'a'), (11, 2, 'b'), (12, 1, 'c');
SELECT count(*) AS logged FROM outbox.move_changes;

-- The source of a move of organization 1, its change log on: every key a
-- statement changed is logged, in the writing transaction, whoever writes.
INSERT INTO outbox.organization_moves (relocation, organization, side, from_cell, to_cell, step, plan)
VALUES ('00000000-0000-4000-8000-000000000001', 1, 'source', 'us', 'eu', 'prepared', '{"root": "org"}');
SET ROLE mt_app;
INSERT INTO proj VALUES (13, 1, 'd'), (14, 2, 'e');
UPDATE proj SET org_id = 1 WHERE id = 11;
DELETE FROM proj WHERE id = 12;
UPDATE org SET slug = 'acme2' WHERE id = 1;
UPDATE proj SET name = name WHERE false;        -- no row: nothing
BEGIN;
INSERT INTO proj VALUES (15, 1, 'rolled back');
ROLLBACK;
SELECT * FROM outbox.move_changes;              -- not the writer's to read
RESET ROLE;
SELECT model, pk FROM outbox.move_changes ORDER BY seq;
-- A table whose key is not an integer cannot be followed.
CREATE TRIGGER probe AFTER INSERT ON tagged REFERENCING NEW TABLE AS pg_outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('tagged', 'tag');
INSERT INTO tagged VALUES ('x', 1);
-- Nor one the arguments name wrongly.
DROP TRIGGER probe ON tagged;
CREATE TRIGGER probe AFTER INSERT ON tagged REFERENCING NEW TABLE AS pg_outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('tagged', 'missing');
INSERT INTO tagged VALUES ('y', 1);
DROP TRIGGER probe ON tagged;
-- The move's triggers stay while it runs.
DROP TRIGGER pg_outbox_move_delete ON proj;
-- TRUNCATE is refused while the move runs.
TRUNCATE proj;
\set VERBOSITY sqlstate
TRUNCATE proj;
\set VERBOSITY terse

-- Fenced: writes to the organization's rows, to rows that refer to them,
-- and to its root are refused with OBM01; the others' go through and are
-- no longer logged.
UPDATE outbox.organization_moves SET fenced = true, step = 'fenced';
INSERT INTO outbox.move_members (relocation, model, pk)
VALUES ('00000000-0000-4000-8000-000000000001', 'org', 1),
       ('00000000-0000-4000-8000-000000000001', 'proj', 10),
       ('00000000-0000-4000-8000-000000000001', 'proj', 11);
DELETE FROM outbox.move_changes;
SET ROLE mt_app;
\set VERBOSITY default
UPDATE proj SET name = 'moved?' WHERE id = 10;
\set VERBOSITY sqlstate
INSERT INTO proj VALUES (16, 1, 'new in organization 1');
UPDATE proj SET org_id = 1 WHERE id = 14;      -- into organization 1
DELETE FROM proj WHERE id = 11;
UPDATE org SET slug = slug WHERE id = 1;
INSERT INTO proj VALUES (17, 2, 'organization 2 writes on');
UPDATE proj SET name = 'still 2' WHERE id = 14;
\set VERBOSITY terse
RESET ROLE;
SELECT id, org_id, name FROM proj ORDER BY id;
SELECT count(*) AS logged FROM outbox.move_changes;

-- The target's fence, before the cutover: its own message.
UPDATE outbox.organization_moves SET side = 'target';
INSERT INTO proj VALUES (18, 1, 'too early');
-- Complete, a source holds nothing of the organization but its fence on
-- its root.
UPDATE outbox.organization_moves SET side = 'source', state = 'complete';
INSERT INTO proj VALUES (19, 1, 'not looked at: proj holds none of it now');
UPDATE org SET slug = 'back?' WHERE id = 1;
TRUNCATE proj;

-- Called any other way.
SELECT outbox._move_trigger();
CREATE TABLE other (id bigint PRIMARY KEY);
CREATE TRIGGER bad AFTER INSERT ON other FOR EACH ROW EXECUTE FUNCTION outbox._move_trigger('other', 'id');
INSERT INTO other VALUES (1);
DROP TRIGGER bad ON other;
CREATE TRIGGER bad AFTER INSERT ON other REFERENCING NEW TABLE AS pg_outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._move_trigger('other', 'id', 'dangling');
INSERT INTO other VALUES (2);

\c postgres
SET client_min_messages = warning;
DROP DATABASE move_trigger_test;
DROP ROLE mt_app;
