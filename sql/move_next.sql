-- The step machine of a move (src/relocation/move/move_machine.hpp) through
-- its SQL entry, outbox._move_next, as control's move step calls it: the
-- answers a cell may send, well-formed or not, and bad arguments.  The
-- transitions themselves are unit-tested (test/unit/move_machine_test.cpp).
\set VERBOSITY terse
\set SHOW_CONTEXT never
SELECT * FROM outbox._move_next('prepare', 'move', 10, 0, 0, 0, '{}');
SELECT * FROM outbox._move_next('export', 'move', 10, 0, 0, 0, '{"rows": 25}');
SELECT * FROM outbox._move_next('export', 'fork', 10, 0, 0, 0, '{"rows": 25}');
-- in_flight and export count what they wait for; a boolean is taken too.
SELECT * FROM outbox._move_next('in_flight', 'move', 10, 25, 25, 30, '{"waiting": 2}');
SELECT * FROM outbox._move_next('in_flight', 'move', 10, 25, 25, 30, '{"waiting": 0}');
SELECT * FROM outbox._move_next('export', 'move', 10, 0, 0, 0, '{"waiting": true}');
-- A chunk: where the target's staging ends, and not elsewhere.
SELECT * FROM outbox._move_next('copy', 'move', 10, 10, 25, 100, '{"first_row": 11, "row_count": 10}');
SELECT * FROM outbox._move_next('copy', 'move', 10, 20, 25, 100, '{"first_row": 21, "row_count": 5}');
SELECT outcome FROM outbox._move_next('copy', 'move', 10, 10, 25, 100, '{"first_row": 1, "row_count": 10}');
SELECT outcome FROM outbox._move_next('copy', 'move', 10, 10, 25, 100, '{"first_row": null, "row_count": 0}');
-- Counts that are no counts: a string, a fraction, a negative number, one
-- beyond 2^53, an array, or an answer that is no object.
SELECT outcome FROM outbox._move_next('delete', 'move', 10, 0, 25, 100, '{"deleted": "5"}');
SELECT outcome FROM outbox._move_next('delete', 'move', 10, 0, 25, 100, '{"deleted": 5.5}');
SELECT outcome FROM outbox._move_next('delete', 'move', 10, 0, 25, 100, '{"deleted": -1}');
SELECT outcome FROM outbox._move_next('delete', 'move', 10, 0, 25, 100, '{"deleted": 9007199254740993}');
SELECT outcome FROM outbox._move_next('delete', 'move', 10, 0, 25, 100, '{"deleted": 1e400}');
SELECT outcome FROM outbox._move_next('drain', 'move', 10, 0, 25, 100, '{"left": [0]}');
SELECT outcome FROM outbox._move_next('drain', 'move', 10, 0, 25, 100, '[{"left": 0}]');
SELECT outcome FROM outbox._move_next('drain', 'move', 10, 0, 25, 100, '0');
SELECT * FROM outbox._move_next('delete', 'move', 10, 20, 25, 100, '{"deleted": 5, "done": true}');
-- A taken key fails the check where it is.
SELECT * FROM outbox._move_next('check', 'move', 10, 0, 250, 100, '{"taken": true}');
-- Bad arguments: named, with their SQLSTATE.
CREATE FUNCTION pg_temp.fails(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT pg_temp.fails($$SELECT outbox._move_next('deleted', 'move', 10, 0, 0, 0, '{}')$$);
SELECT pg_temp.fails($$SELECT outbox._move_next('export', 'copy', 10, 0, 0, 0, '{}')$$);
SELECT pg_temp.fails($$SELECT outbox._move_next('copy', 'move', 0, 0, 0, 0, '{}')$$);
SELECT pg_temp.fails($$SELECT outbox._move_next('copy', 'move', 10, -1, 0, 0, '{}')$$);
SELECT pg_temp.fails($$SELECT outbox._move_next('copy', 'move', 10, 0, 9007199254740993, 0, '{}')$$);
SELECT outbox._move_next(NULL, 'move', 10, 0, 0, 0, '{}') IS NULL AS strict;
-- Not for PUBLIC.
CREATE ROLE move_next_nobody;
GRANT USAGE ON SCHEMA outbox TO move_next_nobody;
SET ROLE move_next_nobody;
SELECT pg_temp.fails($$SELECT outbox._move_next('prepare', 'move', 10, 0, 0, 0, '{}')$$);
RESET ROLE;
REVOKE USAGE ON SCHEMA outbox FROM move_next_nobody;
DROP ROLE move_next_nobody;
