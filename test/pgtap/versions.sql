-- What PostgreSQL 17 does differently from 15 and pg_outbox must meet
-- (issue 48; docs/development.md), run on both, the parts of 17 skipped on
-- 15: MERGE (with RETURNING and WHEN NOT MATCHED BY SOURCE on 17) captured
-- row by row; the MAINTAIN privilege and pg_maintain (17) giving no way
-- into the outbox or around capture; maintenance of the outbox's tables
-- under a hostile search_path (17 runs it with a safe one).
BEGIN;
SELECT plan(16);
\ir errors_with.psql

SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_outbox CASCADE;
CREATE EXTENSION pg_outbox;
RESET client_min_messages;

CREATE TEMP VIEW v17 AS SELECT current_setting('server_version_num')::int >= 170000 AS yes;
CREATE TABLE item (id bigint PRIMARY KEY, org bigint NOT NULL, label text);
DO $$
BEGIN
    PERFORM outbox.register_scope('S', 0);
    PERFORM outbox.register_category('C', 'S', 0);
    PERFORM outbox.register_table('item', 'C', shard_column => 'org');
END
$$;
INSERT INTO item VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 2, 'c');
CREATE TABLE incoming (id bigint, org bigint, label text);
INSERT INTO incoming VALUES (2, 1, 'B'), (4, 2, 'd');
DELETE FROM outbox.cell_outbox;

-- MERGE, on both: one outbox row per row it changed, with the new values.
MERGE INTO item t USING incoming s ON t.id = s.id
 WHEN MATCHED THEN UPDATE SET label = s.label
 WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.org, s.label);
SELECT set_eq($$SELECT object_identifier, shard_identifier FROM outbox.cell_outbox$$,
              $$VALUES (2::bigint, 1::bigint), (4, 2)$$,
              'MERGE: an outbox row for the updated row and one for the inserted row');
SAVEPOINT merge_rolled_back;
MERGE INTO item t USING incoming s ON t.id = s.id WHEN MATCHED THEN DELETE;
ROLLBACK TO merge_rolled_back;
SELECT is((SELECT count(*) FROM outbox.cell_outbox), 2::bigint,
          'a MERGE rolled back leaves no outbox row');

-- 17: WHEN NOT MATCHED BY SOURCE and RETURNING merge_action().  What the
-- MERGE returns and what the outbox holds agree.
DELETE FROM outbox.cell_outbox;
CREATE TEMP TABLE merged (action text, id bigint);
DO $$
DECLARE
    r record;
BEGIN
    IF (SELECT yes FROM v17) THEN
        FOR r IN EXECUTE $m$
            MERGE INTO item t USING incoming s ON t.id = s.id
             WHEN MATCHED THEN UPDATE SET label = s.label || '!'
             WHEN NOT MATCHED BY SOURCE THEN DELETE
             RETURNING merge_action(), t.id $m$ LOOP
            INSERT INTO merged VALUES (r.merge_action, r.id);
        END LOOP;
    END IF;
END
$$;
SELECT CASE WHEN (SELECT yes FROM v17)
    THEN set_eq($$SELECT action, id FROM merged$$,
                $$VALUES ('UPDATE', 2::bigint), ('UPDATE', 4), ('DELETE', 1), ('DELETE', 3)$$,
                'MERGE ... RETURNING merge_action(): two updated, two deleted by source')
    ELSE skip('MERGE ... RETURNING: PostgreSQL 17', 1) END;
SELECT CASE WHEN (SELECT yes FROM v17)
    THEN set_eq($$SELECT object_identifier FROM outbox.cell_outbox$$, ARRAY[1, 2, 3, 4]::bigint[],
                'an outbox row for each row the MERGE returned, the deleted ones included')
    ELSE skip('MERGE ... WHEN NOT MATCHED BY SOURCE: PostgreSQL 17', 1) END;
SELECT CASE WHEN (SELECT yes FROM v17)
    THEN is((SELECT count(*) FROM item), 2::bigint, 'the rows not in the source are gone')
    ELSE skip('MERGE ... WHEN NOT MATCHED BY SOURCE: PostgreSQL 17', 1) END;

-- 17: a member of pg_maintain (VACUUM, ANALYZE, REINDEX, CLUSTER, LOCK on
-- every table) maintains a registered table and the outbox, and that is
-- all: no outbox row written, the outbox neither read nor changed, the
-- table's rows neither changed nor truncated around capture.
DO $$
BEGIN
    IF (SELECT yes FROM v17) THEN
        CREATE ROLE outbox_versions_maintainer;
        EXECUTE 'GRANT pg_maintain TO outbox_versions_maintainer';
    END IF;
END
$$;
DELETE FROM outbox.cell_outbox;
CREATE FUNCTION pg_temp.as_maintainer(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    SET LOCAL ROLE outbox_versions_maintainer;
    EXECUTE sql;
    RESET ROLE;
    RETURN 'done';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
SELECT CASE WHEN (SELECT yes FROM v17)
    THEN is(pg_temp.as_maintainer('ANALYZE item; REINDEX TABLE item; CLUSTER item USING item_pkey;'
                                  || ' ANALYZE outbox.cell_outbox; REINDEX TABLE outbox.registered_tables'),
            'done', 'pg_maintain: ANALYZE, REINDEX, CLUSTER of a registered table and of the outbox')
    ELSE skip('pg_maintain: PostgreSQL 17', 1) END;
SELECT is((SELECT count(*) FROM outbox.cell_outbox), 0::bigint, 'maintenance writes no outbox row');
-- On 17: sql as the maintainer fails with 42501.
CREATE FUNCTION pg_temp.maintainer_refused(sql text, description text) RETURNS text
LANGUAGE sql AS $$
SELECT CASE WHEN (SELECT yes FROM v17)
    THEN is(pg_temp.as_maintainer(sql), '42501', 'pg_maintain: ' || description)
    ELSE skip('pg_maintain: PostgreSQL 17', 1) END
$$;
SELECT pg_temp.maintainer_refused('SELECT count(*) FROM outbox.cell_outbox',
                                  'the outbox cannot be read');
SELECT pg_temp.maintainer_refused('DELETE FROM outbox.cell_outbox', 'nor changed');
SELECT pg_temp.maintainer_refused('TRUNCATE item', 'a registered table cannot be truncated');
SELECT pg_temp.maintainer_refused('UPDATE item SET label = label', 'nor its rows changed');
SELECT pg_temp.maintainer_refused('SELECT outbox.drain(''cell'')', 'nor the outbox drained');

-- Maintenance of the outbox's own tables with a search_path that puts a
-- schema of look-alikes first: it uses none of them (17 runs it with
-- pg_catalog, pg_temp; on both, nothing of the outbox's tables resolves a
-- name through the search_path).
CREATE SCHEMA versions_evil;
CREATE FUNCTION versions_evil.nextval(regclass) RETURNS bigint LANGUAGE sql AS 'SELECT -1::bigint';
CREATE FUNCTION versions_evil.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT 'epoch'::timestamptz$$;
SET LOCAL search_path = versions_evil, public, pg_catalog;
CREATE TEMP TABLE lookalike AS SELECT nextval('outbox.cell_outbox_id_seq') AS value;
ANALYZE outbox.cell_outbox;
REINDEX TABLE outbox.registered_tables;
CLUSTER outbox.registered_tables USING registered_tables_pkey;
INSERT INTO item VALUES (10, 3, 'after maintenance');
RESET search_path;
SELECT is((SELECT value FROM lookalike), -1::bigint,
          'on that search_path an unqualified nextval was the look-alike');
SELECT is((SELECT count(*) FROM outbox.cell_outbox WHERE object_identifier = 10), 1::bigint,
          'after maintenance under a hostile search_path, capture writes its row');
SELECT ok((SELECT id > 0 FROM outbox.cell_outbox WHERE object_identifier = 10),
          'with the outbox''s own sequence, not a look-alike');
SELECT ok((SELECT date_added > 'epoch' FROM outbox.cell_outbox WHERE object_identifier = 10),
          'and the real now()');

SELECT * FROM finish();
ROLLBACK;
