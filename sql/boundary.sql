-- The C++/PostgreSQL boundary: a C++ exception becomes an ERROR (the backend
-- survives), a PostgreSQL error crossing C++ frames keeps its SQLSTATE and
-- runs the destructors of those frames.
\set SHOW_CONTEXT never
SELECT outbox._boundary_selftest('cpp_exception');
SELECT outbox._boundary_selftest('pg_error');
-- The session is still usable, and no destructor was skipped.
SELECT outbox._boundary_selftest('live_probes') AS live_probes;
DO $$
DECLARE
    state text;
BEGIN
    FOR i IN 1..200 LOOP
        BEGIN
            PERFORM outbox._boundary_selftest(CASE WHEN i % 2 = 0 THEN 'pg_error'
                                                   ELSE 'cpp_exception' END);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE;
            IF state NOT IN ('22P02', 'XX000') THEN
                RAISE EXCEPTION 'unexpected SQLSTATE %', state;
            END IF;
        END;
    END LOOP;
END
$$;
SELECT outbox._boundary_selftest('live_probes') AS live_probes_after_200_errors;
SELECT outbox._boundary_selftest(NULL);
SELECT outbox._boundary_selftest('x''; DROP TABLE y; --');
SELECT 1 AS still_alive;
