-- A table owner's code never runs with more privilege than the owner has
-- (issue 9, item 1).  The owner plants code wherever a read of its table can
-- reach: an index predicate (planning folds IMMUTABLE functions), an index
-- expression, an operator, a cast to json of a payload column, a column
-- default, a row-level security policy, a trigger, a domain check.  Every
-- piece calls sec.spy(), which records who it runs as and, when that is a
-- superuser, makes the owner one.  pg_outbox then reads the table every way
-- it can: batches as the superuser, the synchronous path, the budgeted walk,
-- and backfill_status and metrics() as a pg_monitor member.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP EXTENSION pg_outbox CASCADE;
DROP ROLE IF EXISTS sec_owner;
DROP ROLE IF EXISTS sec_app;
DROP ROLE IF EXISTS sec_monitor;
RESET client_min_messages;
CREATE EXTENSION pg_outbox;
SELECT outbox.register_scope('SEC', 0);
SELECT outbox.register_category('SEC_UPDATE', 'SEC', 0);
SELECT outbox.register_cell('us');
CREATE ROLE sec_owner;
CREATE ROLE sec_app;
CREATE ROLE sec_monitor IN ROLE pg_monitor;
SELECT outbox.grant_category('SEC_UPDATE', 'sec_owner');
CREATE SCHEMA sec AUTHORIZATION sec_owner;
GRANT USAGE ON SCHEMA sec TO sec_app, sec_monitor;

SET ROLE sec_owner;
CREATE TABLE sec.seen (what text, who name, super boolean);
GRANT INSERT ON sec.seen TO PUBLIC;
CREATE FUNCTION sec.spy(what text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sec.seen SELECT what, current_user, rolsuper FROM pg_roles WHERE rolname = current_user;
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        EXECUTE 'ALTER ROLE sec_owner SUPERUSER';
    END IF;
    RETURN true;
END $$;
GRANT EXECUTE ON FUNCTION sec.spy(text) TO PUBLIC;
-- IMMUTABLE wrappers: the planner folds them, with constant arguments.
CREATE FUNCTION sec.predicate(int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
    $$ BEGIN RETURN sec.spy('index predicate'); END $$;
CREATE FUNCTION sec.expression(int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS
    $$ BEGIN PERFORM sec.spy('index expression'); RETURN $1; END $$;
CREATE FUNCTION sec.same(int, int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
    $$ BEGIN PERFORM sec.spy('operator'); RETURN $1 = $2; END $$;
CREATE OPERATOR sec.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = sec.same);
-- A payload type whose cast to json is the owner's.
CREATE TYPE sec.mood AS ENUM ('calm', 'angry');
CREATE FUNCTION sec.mood_json(sec.mood) RETURNS json LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('cast to json'); RETURN to_json($1::text); END $$;
CREATE CAST (sec.mood AS json) WITH FUNCTION sec.mood_json(sec.mood);
CREATE FUNCTION sec.checked(text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
    $$ BEGIN RETURN sec.spy('domain check'); END $$;
CREATE DOMAIN sec.note AS text CHECK (sec.checked(VALUE));
CREATE FUNCTION sec.fill() RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('column default'); RETURN 'default'; END $$;
CREATE TABLE sec.t (id int PRIMARY KEY, org int NOT NULL, mood sec.mood NOT NULL DEFAULT 'calm',
                    note sec.note DEFAULT sec.fill());
CREATE INDEX ON sec.t (id) WHERE sec.predicate(1);
CREATE INDEX ON sec.t (sec.expression(id));
CREATE INDEX ON sec.t (id) WHERE id OPERATOR(sec.===) 1;
CREATE FUNCTION sec.on_write() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('trigger'); RETURN NULL; END $$;
CREATE TRIGGER spy AFTER INSERT ON sec.t FOR EACH STATEMENT EXECUTE FUNCTION sec.on_write();
ALTER TABLE sec.t ENABLE ROW LEVEL SECURITY;
CREATE POLICY spy ON sec.t USING (sec.spy('policy'));
GRANT INSERT, UPDATE, DELETE ON sec.t TO sec_app;
GRANT SELECT ON sec.t TO sec_app;
-- A view over the registered table, for the application to write through.
CREATE VIEW sec.v AS SELECT id, org FROM sec.t;
GRANT INSERT ON sec.v TO sec_app;
SELECT outbox.register_table('sec.t', 'SEC_UPDATE', shard_column => 'org',
                             payload_columns => '{mood,note}');
-- Forcing row-level security on the owner is refused: a backfill, which
-- reads as the owner, would silently skip what the policy hides.
ALTER TABLE sec.t FORCE ROW LEVEL SECURITY;
RESET ROLE;

-- The application writes: its own privileges, nothing more.
SET ROLE sec_app;
INSERT INTO sec.t (id, org) SELECT g, g % 3 FROM generate_series(1, 10) g;
INSERT INTO sec.v VALUES (11, 1);
RESET ROLE;
SELECT count(*) AS captured_writes FROM outbox.cell_outbox;
SELECT what, who, super, count(*) > 0 AS ran FROM sec.seen GROUP BY 1, 2, 3 ORDER BY 1, 2;
TRUNCATE sec.seen;
TRUNCATE outbox.cell_outbox;

-- pg_outbox reads the table every way it can (the cursor reset first: Redis
-- outlives a test run).
SELECT outbox.set_processing_state('t', 0, 1);
SELECT outbox.set_replication_version('sec.t', 2);
SELECT outbox.set_option('outbox_replication.t.replication_version', '2');
SELECT low, up, has_more, rows_written FROM outbox.process_backfill_batch('sec.t', 4);
SELECT outbox.backfill_outboxes_for('cell');
SELECT outbox.run_replications_sync();
SET ROLE sec_monitor;
SELECT table_key, max_id, state FROM outbox.backfill_status;
SELECT outbox.metrics() LIKE '%pg_outbox_backfill_state{table_key="t",state="complete"} 1%' AS scraped;
RESET ROLE;

SELECT rolsuper AS owner_became_superuser FROM pg_roles WHERE rolname = 'sec_owner';
SELECT what, who, super, count(*) > 0 AS ran FROM sec.seen GROUP BY 1, 2, 3 ORDER BY 1, 2;
-- Nothing lost: every row was backfilled, with the owner's cast in its payload.
SELECT count(DISTINCT object_identifier) AS backfilled_objects,
       count(*) FILTER (WHERE payload = '{"mood": "calm", "note": "default"}') AS with_payload
  FROM outbox.cell_outbox;

-- SECURITY DEFINER functions under a hostile search_path: the owner puts
-- look-alikes of what they call first in its path.
SET ROLE sec_owner;
CREATE FUNCTION sec.quote_literal(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('search_path: quote_literal'); RETURN 'x'; END $$;
CREATE FUNCTION sec.format(text, text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('search_path: format'); RETURN 'x'; END $$;
CREATE FUNCTION sec.format(text, regclass, text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('search_path: format'); RETURN 'x'; END $$;
CREATE FUNCTION sec.pg_has_role(oid, oid, text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('search_path: pg_has_role'); RETURN true; END $$;
CREATE FUNCTION sec.oideq(oid, oid) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec.spy('search_path: ='); RETURN true; END $$;
CREATE OPERATOR sec.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = sec.oideq);
CREATE TABLE sec.registered_tables (relid oid);
SET search_path = sec, pg_temp, pg_catalog;
CREATE TABLE sec.u (id int PRIMARY KEY);
SELECT outbox.register_table('sec.u', 'SEC_UPDATE');
SELECT outbox.set_replication_version('sec.u', 3);
SELECT outbox.unregister_table('sec.u');
SELECT outbox.register_table('sec.u', 'SEC_UPDATE', table_key => 'other_u');
INSERT INTO sec.u VALUES (1);
RESET search_path;
RESET ROLE;
SET ROLE sec_monitor;
SET search_path = sec, pg_temp, pg_catalog;
SELECT count(*) AS status_rows FROM outbox.backfill_status;
SELECT length(outbox.metrics()) > 0 AS scraped;
RESET search_path;
RESET ROLE;
SELECT rolsuper AS owner_became_superuser FROM pg_roles WHERE rolname = 'sec_owner';
SELECT count(*) AS look_alikes_that_ran FROM sec.seen WHERE what LIKE 'search_path:%';
SELECT table_key, replication_version FROM outbox.tables ORDER BY 1;
SELECT count(*) AS u_captured FROM outbox.cell_outbox WHERE category = 0 AND object_identifier = 1
   AND shard_identifier = 1 AND payload IS NULL;

SET client_min_messages = warning;
DROP SCHEMA sec CASCADE;
SELECT outbox.revoke_category('SEC_UPDATE', 'sec_owner');
DROP ROLE sec_owner;
DROP ROLE sec_app;
DROP ROLE sec_monitor;
RESET client_min_messages;
