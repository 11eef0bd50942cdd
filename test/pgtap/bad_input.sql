-- Bad input to every SQL function of pg_outbox: each gives a clear ERROR
-- with a specific SQLSTATE (never XX000) and a message naming the argument
-- or the bad value, never crashes the backend and changes nothing.
BEGIN;
SELECT plan(101);

SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_outbox CASCADE;
CREATE EXTENSION pg_outbox;
RESET client_min_messages;

\ir errors_with.psql

CREATE TABLE good (id int PRIMARY KEY, org int NOT NULL, label text);
DO $$
BEGIN
    PERFORM outbox.register_scope('S', 0);
    PERFORM outbox.register_category('C', 'S', 0);
    PERFORM outbox.register_cell('us');
    PERFORM outbox.register_table('good', 'C', shard_column => 'org');
END
$$;
CREATE TABLE spare (id int PRIMARY KEY, org int NOT NULL, label text, cell text NOT NULL);

-- A fingerprint of everything pg_outbox keeps; compared at the end.
CREATE TEMP TABLE before AS
SELECT (SELECT string_agg(s::text, ',' ORDER BY s.id) FROM outbox.scopes s) AS scopes,
       (SELECT string_agg(c::text, ',' ORDER BY c.id) FROM outbox.categories c) AS categories,
       (SELECT string_agg(c::text, ',' ORDER BY c.name) FROM outbox.cells c) AS cells,
       (SELECT string_agg(t::text, ',' ORDER BY t.table_key) FROM outbox.registered_tables t) AS tables,
       (SELECT string_agg(o::text, ',' ORDER BY o.key) FROM outbox.options o) AS options,
       (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'outbox%') AS triggers;

-- register_scope
SELECT pg_temp.errors_with($$SELECT outbox.register_scope(NULL)$$, '22004', '^name must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope('')$$, '42602', '^name .* is not a valid name');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope('x''; DROP TABLE good; --')$$, '42602', 'name .*DROP TABLE good.* is not a valid name');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope(repeat('a', 64))$$, '42602', 'is not a valid name');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope('T', -1)$$, '22023', '^id must be zero or positive');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope('T', '2147483648')$$, '22003', 'out of range');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope('S', 3)$$, '42710', 'already registered with id 0');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope('T', 0)$$, '42710', '^id 0 is already used');
SELECT pg_temp.errors_with($$SELECT outbox.register_scope('T', 'abc')$$, '22P02', 'invalid input syntax for type integer');

-- register_category
SELECT pg_temp.errors_with($$SELECT outbox.register_category(NULL, 'S')$$, '22004', '^name must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_category('D', NULL)$$, '22004', '^scope must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_category('D', 'nope')$$, '42704', '^scope .nope. is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.register_category('D', 'S''; --')$$, '42704', 'scope .* is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.register_category('D;', 'S')$$, '42602', '^name .* is not a valid name');
SELECT pg_temp.errors_with($$SELECT outbox.register_category('D', 'S', -5)$$, '22023', '^id must be zero or positive');
SELECT pg_temp.errors_with($$SELECT outbox.register_category('D', 'S', 0)$$, '42710', '^id 0 is already used');

-- register_cell / unregister_cell
SELECT pg_temp.errors_with($$SELECT outbox.register_cell(NULL)$$, '22004', '^name must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_cell('')$$, '42602', '^name .* is not a valid name');
SELECT pg_temp.errors_with($$SELECT outbox.register_cell('us''); DELETE FROM outbox.cells; --')$$, '42602', 'is not a valid name');
SELECT pg_temp.errors_with($$SELECT outbox.register_cell('a b')$$, '42602', 'is not a valid name');
SELECT pg_temp.errors_with($$SELECT outbox.unregister_cell(NULL)$$, '22004', '^name must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.unregister_cell('nowhere')$$, '42704', '^cell .nowhere. is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.unregister_cell('us''--')$$, '42704', 'is not registered');

-- register_table
SELECT pg_temp.errors_with($$SELECT outbox.register_table(NULL, 'C')$$, '22004', '^tbl must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('no_such_table', 'C')$$, '42P01', 'no_such_table');
SELECT pg_temp.errors_with($$SELECT outbox.register_table(0::regclass, 'C')$$, '42P01', '^tbl: relation with OID 0 does not exist');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', NULL)$$, '22004', '^category must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'nope')$$, '42704', '^category .nope. is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', NULL)$$, '22004', '^silo must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', 'CELL')$$, '22023', '^silo must be');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', 'cell''; --')$$, '22023', '^silo must be');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', shard_column => 'x"; DROP TABLE good; --')$$, '42703', '^shard_column .*DROP TABLE good.* does not exist');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', shard_column => 'label')$$, '42804', '^shard_column label .* not an integer type');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', payload_columns => '{"a;b"}')$$, '42703', '^payload_columns: column "a;b" does not exist');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', payload_columns => '{}')$$, '22023', '^payload_columns must not be empty');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', payload_columns => '{NULL}')$$, '22004', '^payload_columns must not contain NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', cell_column => 'cell')$$, '22023', '^cell_column is for control-silo tables only');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', 'control', cell_column => 'nope')$$, '42703', '^cell_column nope does not exist');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', replication_version => NULL)$$, '22004', '^replication_version must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', replication_version => 0)$$, '22023', '^replication_version must be at least 1, not 0');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', replication_version => -7)$$, '22023', '^replication_version must be at least 1, not -7');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', replication_version => 99999999999)$$, '42883', 'does not exist');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', table_key => '')$$, '42602', '^table_key .* is not valid');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', table_key => 'a.b')$$, '42602', '^table_key .a\.b. is not valid');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('spare', 'C', table_key => 'good')$$, '42710', '^table_key .good. is already used');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('good', 'C')$$, '42710', '^table public.good is already registered');
SELECT pg_temp.errors_with($$SELECT outbox.register_table('pg_class', 'C')$$, '42809', '^tbl pg_class is a system catalog');

-- unregister_table / set_replication_version
SELECT pg_temp.errors_with($$SELECT outbox.unregister_table(NULL)$$, '22004', '^tbl must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.unregister_table('spare')$$, '42704', '^table public.spare is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.unregister_table('"x; DROP TABLE good"')$$, '42P01', 'x; DROP TABLE good');
SELECT pg_temp.errors_with($$SELECT outbox.set_replication_version(NULL, 2)$$, '22004', '^tbl must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.set_replication_version('good', NULL)$$, '22004', '^version must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.set_replication_version('good', 0)$$, '22023', '^version 0 is lower than');
SELECT pg_temp.errors_with($$SELECT outbox.set_replication_version('good', -1)$$, '22023', '^version -1 is lower than');
SELECT pg_temp.errors_with($$SELECT outbox.set_replication_version('spare', 2)$$, '42704', '^table public.spare is not registered');

-- options
SELECT pg_temp.errors_with($$SELECT outbox.set_option(NULL, '1')$$, '22004', '^key must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.replication_version', NULL)$$, '22004', '^value must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('bogus', '1')$$, '22023', '^key "bogus" is not a pg_outbox option');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good''; --.replication_version', '1')$$, '22023', 'is not a pg_outbox option');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.replication_version', '-1')$$, '22023', '^value for outbox_replication.good.replication_version must be an integer');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.replication_version', '1e10')$$, '22023', 'must be an integer');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.replication_version', '[1]')$$, '22023', 'must be an integer');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.replication_version', 'not json')$$, '22P02', 'invalid input syntax for type json');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.backfill.target_cells', '{"us": 1}')$$, '22023', 'must be a JSON array of cell names');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.replication_version', '2.5')$$, '22023', 'must be an integer from 0 to 2147483647, not 2.5');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.replication_version', '2147483648')$$, '22023', 'must be an integer');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.backfill.target_cells', '[["us"]]')$$, '22023', 'must be a JSON array of cell names, not \[\["us"\]\]');
SELECT pg_temp.errors_with($$SELECT outbox.set_option('outbox_replication.good.backfill.target_cells', '["us", 1]')$$, '22023', 'must be a JSON array of cell names');
SELECT lives_ok($$SELECT outbox.set_option('outbox_replication.good.replication_version', '2.0'),
                         outbox.set_option('outbox_replication.good.backfill.target_cells', 'null'),
                         outbox.unset_option('outbox_replication.good.replication_version'),
                         outbox.unset_option('outbox_replication.good.backfill.target_cells')$$,
                'an integral number and a JSON null are values');
SELECT is(set_config('outbox_replication.good.replication_version', '{', true), '{', 'a setting that is not JSON');
SELECT pg_temp.errors_with($$SELECT outbox.get_option('outbox_replication.good.replication_version')$$, '22023', '^setting outbox_replication.good.replication_version = ''\{'' is not JSON');
SELECT is(set_config('outbox_replication.good.replication_version', '', true), '', 'unset again');
SELECT is(set_config('outbox_replication.good.backfill.target_cells', '"us"', true), '"us"', 'a setting of the wrong kind');
SELECT pg_temp.errors_with($$SELECT outbox.get_option('outbox_replication.good.backfill.target_cells')$$, '22023', '^setting for outbox_replication.good.backfill.target_cells must be a JSON array');
SELECT is(set_config('outbox_replication.good.backfill.target_cells', '', true), '', 'unset again');
SELECT pg_temp.errors_with($$SELECT outbox.get_option(NULL)$$, '22004', '^key must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.get_option('outbox_replication.GOOD.replication_version')$$, '22023', 'is not a pg_outbox option');
SELECT pg_temp.errors_with($$SELECT outbox.unset_option(NULL)$$, '22004', '^key must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.unset_option('x')$$, '22023', '^key "x" is not a pg_outbox option');
SELECT pg_temp.errors_with($$SELECT outbox.find_replication_version(NULL)$$, '22004', '^tbl must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.find_replication_version('spare')$$, '42704', '^table public.spare is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.find_replication_version('good', NULL)$$, '22004', '^force_synchronous must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.target_cells(NULL)$$, '22004', '^tbl must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.target_cells('spare')$$, '42704', '^table public.spare is not registered');

-- grant_category / revoke_category
SELECT pg_temp.errors_with($$SELECT outbox.grant_category(NULL, 'postgres')$$, '22004', '^category must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.grant_category('C', NULL)$$, '22004', '^role must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.grant_category('C', 'postgres', NULL)$$, '22004', '^privilege must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox.grant_category('nope', 'postgres')$$, '42704', '^category ''nope'' is not registered');
SELECT pg_temp.errors_with($$SELECT outbox.grant_category('C', 'no_such_role')$$, '42704', 'role "no_such_role" does not exist');
SELECT pg_temp.errors_with($$SELECT outbox.grant_category('C', 'postgres', 'OWN')$$, '22023', '^privilege must be .REGISTER. or .CONSUME., not .OWN.');
SELECT pg_temp.errors_with($$SELECT outbox.revoke_category('C', 'postgres', 'CONSUME')$$, '42704', '^role postgres holds no CONSUME privilege on category .C.');
SELECT pg_temp.errors_with($$SELECT outbox.revoke_category('C', 'postgres', 'ALL')$$, '22023', '^privilege must be');

-- internals called the wrong way
SELECT pg_temp.errors_with($$SELECT outbox._cursor_set(NULL, 1, 1)$$, '22004', '^table_key must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox._cursor_set('good', NULL, 1)$$, '22004', '^lower_bound must not be NULL');
SELECT pg_temp.errors_with($$SELECT * FROM outbox._cursor_get(NULL)$$, '22004', '^table_key must not be NULL');
SELECT pg_temp.errors_with($$SELECT * FROM outbox._cursor_peek(NULL)$$, '22004', '^table_key must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox._capture_partition_rows('spare', 0)$$, '22023', '^root must be a registered table');
SELECT pg_temp.errors_with($$SELECT outbox.capture_row()$$, '0A000|39P01', 'trigger');
SELECT pg_temp.errors_with($$SELECT outbox._option_kind(NULL)$$, '22004', '^key must not be NULL');
SELECT pg_temp.errors_with($$SELECT outbox._valid_table_key(NULL)$$, '22004', '^table_key must not be NULL');

-- Nothing changed.
SELECT results_eq(
    $$SELECT (SELECT string_agg(s::text, ',' ORDER BY s.id) FROM outbox.scopes s),
             (SELECT string_agg(c::text, ',' ORDER BY c.id) FROM outbox.categories c),
             (SELECT string_agg(c::text, ',' ORDER BY c.name) FROM outbox.cells c),
             (SELECT string_agg(t::text, ',' ORDER BY t.table_key) FROM outbox.registered_tables t),
             (SELECT string_agg(o::text, ',' ORDER BY o.key) FROM outbox.options o),
             (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'outbox%')$$,
    $$SELECT * FROM before$$,
    'no failed call changed the registry, the options or the triggers');

SELECT * FROM finish();
ROLLBACK;
