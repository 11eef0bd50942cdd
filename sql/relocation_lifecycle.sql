-- The one state machine of pause, resume and cancel, for imports, moves
-- and forks (src/relocation/lifecycle.hpp), through its SQL entry: a
-- decision each way, and bad arguments, each named.  Every state and step
-- is unit-tested (test/unit/lifecycle_test.cpp); the public functions run
-- it in relocation_import.sql and the integration tests relocation_*.sh.
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT outbox._relocation_decide('import', '11111111-1111-1111-1111-111111111111', 'importing',
                                 NULL, NULL, NULL, 'pause') AS import_paused;
SELECT outbox._relocation_decide('move', '11111111-1111-1111-1111-111111111111', 'failed',
                                 'check', 7, 'eu', 'resume') AS move_resumed;
SELECT outbox._relocation_decide('fork', '11111111-1111-1111-1111-111111111111', 'moving',
                                 'import', 7, 'eu', 'cancel') AS fork_cancelled;
-- Refusals: 55000 with the state, 22023 for an import's resume.
SELECT outbox._relocation_decide('move', '11111111-1111-1111-1111-111111111111', 'moving',
                                 'in_flight', 7, 'eu', 'pause');
SELECT outbox._relocation_decide('move', '11111111-1111-1111-1111-111111111111', 'moving',
                                 'drain', 7, 'eu', 'cancel');
SELECT outbox._relocation_decide('import', '11111111-1111-1111-1111-111111111111', 'paused',
                                 NULL, NULL, NULL, 'resume');
SELECT outbox._relocation_decide('import', '11111111-1111-1111-1111-111111111111', 'cancelled',
                                 NULL, NULL, NULL, 'cancel');
-- Their SQLSTATEs.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM (VALUES ('move', 'moving', 'fence', 'pause'),
                                   ('fork', 'complete', 'done', 'cancel'),
                                   ('move', 'complete', 'done', 'resume'),
                                   ('import', 'failed', NULL, 'pause'),
                                   ('import', 'failed', NULL, 'resume')) v(kind, state, step, op) LOOP
        BEGIN
            PERFORM outbox._relocation_decide(c.kind, '11111111-1111-1111-1111-111111111111',
                                              c.state, c.step, 7, 'eu', c.op);
            RAISE NOTICE '% % % %: taken', c.kind, c.state, c.step, c.op;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE '% % % %: %', c.kind, c.state, c.step, c.op, SQLSTATE;
        END;
    END LOOP;
END
$$;
-- Bad arguments.
\set VERBOSITY terse
SELECT outbox._relocation_decide(NULL, '11111111-1111-1111-1111-111111111111', 'paused', NULL,
                                 NULL, NULL, 'resume');
SELECT outbox._relocation_decide('import', NULL, 'paused', NULL, NULL, NULL, 'resume');
SELECT outbox._relocation_decide('import', '11111111-1111-1111-1111-111111111111', NULL, NULL,
                                 NULL, NULL, 'resume');
SELECT outbox._relocation_decide('import', '11111111-1111-1111-1111-111111111111', 'paused', NULL,
                                 NULL, NULL, NULL);
SELECT outbox._relocation_decide('export', '11111111-1111-1111-1111-111111111111', 'paused', NULL,
                                 NULL, NULL, 'resume');
SELECT outbox._relocation_decide('move', '11111111-1111-1111-1111-111111111111', 'paused', NULL,
                                 NULL, NULL, 'stop');
-- The public functions: a relocation neither imported nor moved here.
SELECT outbox.pause_relocation('22222222-2222-2222-2222-222222222222');
SELECT outbox.resume_relocation('22222222-2222-2222-2222-222222222222');
SELECT outbox.cancel_relocation('22222222-2222-2222-2222-222222222222');
SELECT outbox.pause_relocation(NULL);
