-- Bad input to the backfill, cursor, handler and drain functions: clear
-- errors with specific SQLSTATEs, nothing changed.
BEGIN;
SELECT plan(37);

SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_outbox CASCADE;
CREATE EXTENSION pg_outbox;
RESET client_min_messages;
SET outbox.cursor_store = 'table';

\ir errors_with.psql

CREATE TABLE good (id int PRIMARY KEY);
CREATE TABLE unregistered (id int PRIMARY KEY);
INSERT INTO good SELECT generate_series(1, 3);
DO $$
BEGIN
    PERFORM outbox.register_scope('S', 0);
    PERFORM outbox.register_category('C', 'S', 0);
    PERFORM outbox.register_table('good', 'C');
END
$$;
TRUNCATE outbox.cell_outbox;

SELECT pg_temp.errors_with($$SELECT * FROM outbox.get_processing_state(NULL)$$, '22004', '^table_key must not be NULL');
SELECT pg_temp.errors_with($$SELECT * FROM outbox.get_processing_state('nope')$$, '42704', '^table_key .nope. is not registered');
SELECT pg_temp.errors_with($$SELECT * FROM outbox.get_processing_state('good''; DEL *; --')$$, '42704', 'is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.set_processing_state(NULL, 0, 1)$$, '22004', '^table_key must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.set_processing_state('nope', 0, 1)$$, '42704', '^table_key .nope. is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.set_processing_state('good', NULL, 1)$$, '22004', '^lower_bound must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.set_processing_state('good', 0, NULL)$$, '22004', '^version must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.set_processing_state('good', 0, -1)$$, '22023', '^version must be zero or positive');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch(NULL, 10)$$, '22004', '^tbl must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('unregistered', 10)$$, '42704', '^table public.unregistered is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('no_such', 10)$$, '42P01', 'no_such');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('good', NULL)$$, '22004', '^batch_size must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('good', 0)$$, '22023', '^batch_size must be positive, not 0');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('good', -5)$$, '22023', '^batch_size must be positive, not -5');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('good', 10, NULL)$$, '22004', '^force_synchronous must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.process_backfill_batch('good', 99999999999)$$, '42883', 'does not exist');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('region')$$, '22023', '^silo_mode must be monolith, cell or control');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('cell''; --')$$, '22023', '^silo_mode must be');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('cell', NULL)$$, '22004', '^scheduled_count must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('cell', -1)$$, '22023', '^scheduled_count must be zero or positive');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('cell', 0, NULL)$$, '22004', '^max_batch_rate must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('cell', 0, 0)$$, '22023', '^max_batch_rate must be positive, not 0');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('cell', 0, -10)$$, '22023', '^max_batch_rate must be positive');
SELECT pg_temp.errors_with($$SELECT outbox.backfill_outboxes_for('cell', 0, 10, NULL)$$, '22004', '^force_synchronous must not be NULL');

CREATE FUNCTION two_args(outbox.message, int) RETURNS void LANGUAGE sql AS '';
CREATE PROCEDURE a_procedure(outbox.message) LANGUAGE sql AS '';
SELECT pg_temp.errors_with($$SELECT outbox.register_handler(NULL, 'two_args(outbox.message,int)')$$, '22004', '^category must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_handler('C', NULL)$$, '22004', '^handler must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_handler('nope', 'two_args(outbox.message,int)')$$, '42704', '^category .nope. is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.register_handler('C', 'two_args(outbox.message,int)')$$, '42P13', '^handler .*two_args.* must be a function \(outbox.message\) RETURNS void');
SELECT pg_temp.errors_with($$SELECT outbox.register_handler('C', 'a_procedure(outbox.message)')$$, '42P13', 'must be a function');
SELECT pg_temp.errors_with($$SELECT outbox.register_handler('C', 'no_such(outbox.message)')$$, '42883', 'no_such');
SELECT pg_temp.errors_with($$SELECT outbox.unregister_handler('C')$$, '42704', '^category .C. has no handler');
SELECT pg_temp.errors_with($$SELECT outbox.drain_shard('cell''; --', 0, 1)$$, '22023', '^silo must be');
SELECT pg_temp.errors_with($$SELECT outbox.drain_shard('cell', 0, NULL)$$, '22004', '^shard_identifier must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.drain_shard('control', 0, 1)$$, '22004', '^cell_name must not be NULL for a control shard');
SELECT pg_temp.errors_with($$SELECT outbox.drain('region')$$, '22023', '^silo must be');

-- A budget already spent runs no batch at all.
SELECT is(outbox.backfill_outboxes_for('cell', 10, 10, true), false, 'a spent budget backfills nothing');
SELECT results_eq($$SELECT count(*) FROM outbox.cell_outbox UNION ALL SELECT count(*) FROM outbox.cursors$$,
                  $$VALUES (0::bigint), (0::bigint)$$, 'no failed call wrote outbox rows or cursors');

SELECT * FROM finish();
ROLLBACK;
