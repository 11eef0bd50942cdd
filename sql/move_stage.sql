-- The copy step's staging in the target (outbox._move_stage): a chunk is
-- written as new; a chunk sent again (its step's answer lost) adds
-- nothing, and one that overlaps what is staged adds only the rest.  A
-- move's row written by hand here stands for what prepare writes.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DROP DATABASE IF EXISTS move_stage_test;
CREATE DATABASE move_stage_test;
ALTER DATABASE move_stage_test SET outbox.redis_key_prefix = 'move_stage_test:';
\c move_stage_test
CREATE EXTENSION pg_outbox;
RESET client_min_messages;
\set VERBOSITY terse

INSERT INTO outbox.organization_moves (relocation, organization, side, from_cell, to_cell, step)
VALUES ('00000000-0000-4000-8000-000000000002', 1, 'target', 'us', 'eu', 'prepared');
-- Rows first to last of the export as a source's chunk gives them: model
-- t, key 100 + ordinal (none for ordinal 4: a table without one).
CREATE FUNCTION chunk(first int, last int) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_agg(jsonb_build_array(o, 't', CASE WHEN o <> 4 THEN 100 + o END,
                                       jsonb_build_object('n', o)) ORDER BY o)
      FROM generate_series(first, last) o
$$;
CREATE FUNCTION stage(first int, last int) RETURNS jsonb LANGUAGE sql AS $$
    SELECT outbox._move_stage(o, chunk(first, last)) FROM outbox.organization_moves o
$$;
CREATE VIEW staged AS
    SELECT (SELECT count(*) FROM outbox.relocation_rows) AS "rows",
           (SELECT count(DISTINCT ordinal) FROM outbox.relocation_rows) AS ordinals,
           (SELECT count(*) FROM outbox.move_members) AS members,
           (SELECT string_agg(pk::text, ',' ORDER BY pk) FROM outbox.move_members) AS keys;

SELECT stage(1, 3);
SELECT * FROM staged;
-- Sent again, as after a step whose answer control lost.
SELECT stage(1, 3);
SELECT * FROM staged;
-- Overlapping (the chunk size changed between the two): only 4 and 5.
SELECT stage(2, 5);
SELECT * FROM staged;
SELECT ordinal, pk, fields FROM outbox.relocation_rows ORDER BY ordinal;
-- A chunk that holds a row twice is refused (a source's mistake, where
-- ON CONFLICT took the first); one whose rows are all staged adds nothing.
\set VERBOSITY default
SELECT outbox._move_stage(o, chunk(6, 6) || chunk(6, 6)) FROM outbox.organization_moves o;
\set VERBOSITY terse
SELECT outbox._move_stage(o, chunk(5, 5) || chunk(5, 5)) FROM outbox.organization_moves o;
SELECT * FROM staged;
-- A fork keeps no members.
UPDATE outbox.organization_moves SET mode = 'fork';
SELECT stage(6, 7);
SELECT * FROM staged;
SELECT outbox._move_stage(o, '{"rows": []}') FROM outbox.organization_moves o;

\c postgres
DROP DATABASE move_stage_test;
