-- The statement that reads an import's staged rows with their keys mapped
-- (src/relocation/import/rows_statement.hpp), through its SQL entries:
-- outbox._relocation_rows_sql as the import calls it with a plan entry, and
-- bad arguments to outbox._relocation_rows_statement.  The text itself is
-- unit-tested against what 0.9.0's PL/pgSQL built
-- (test/unit/rows_statement_test.cpp); the import runs it
-- (relocation_import.sql).
\set VERBOSITY terse
\set SHOW_CONTEXT never
-- A plan entry with a mapped, a deferred and a users reference: in the
-- insert step, the deferred one NULL and the users one through its map.
SELECT outbox._relocation_rows_sql('11111111-1111-1111-1111-111111111111',
    '22222222-2222-2222-2222-222222222222',
    '{"model": "public.project", "pk": "id", "refs": [
      {"column": "organization_id", "parent": "public.organization", "kind": "map", "deferred": false},
      {"column": "parent_id", "parent": "public.project", "kind": "map", "deferred": true},
      {"column": "owner_id", "parent": "public.user", "kind": "users", "deferred": false}]}', true)
    ~ '''parent_id'', NULL::bigint.*m\.relocation = ''22222222-2222-2222-2222-222222222222'' AND m\.table_key = ''public\.user'''
    AS deferred_null_and_users_mapped;
-- Without references; without the users' map, their values kept.
SELECT outbox._relocation_rows_sql('11111111-1111-1111-1111-111111111111', NULL,
    '{"model": "public.team", "pk": "id", "refs": []}', true) !~ 'relocation_pk_map' AS no_lookup;
SELECT outbox._relocation_rows_sql('11111111-1111-1111-1111-111111111111', NULL,
    '{"model": "public.member", "pk": "id", "refs": [
      {"column": "user_id", "parent": "public.user", "kind": "users", "deferred": false}]}', false)
    !~ 'm1' AS users_kept;
-- Bad arguments: each named.
SELECT outbox._relocation_rows_statement(NULL, NULL, 'm', 'id', '{}', '{}', '{}', '{}', true, 'BETWEEN $1 AND $2', false);
SELECT outbox._relocation_rows_statement('r', NULL, 'm', NULL, '{}', '{}', '{}', '{}', true, 'BETWEEN $1 AND $2', false);
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a}', '{}', '{}', '{}', true, 'BETWEEN $1 AND $2', false);
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a,NULL}', '{p,q}', '{f,f}', '{f,f}', true, 'BETWEEN $1 AND $2', false);
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a}', '{p}', '{NULL}', '{f}', true, 'BETWEEN $1 AND $2', false);
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{{a}}', '{{p}}', '{{f}}', '{{f}}', true, 'BETWEEN $1 AND $2', false);
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a}', '{p}', '{f}', '{f}', NULL, 'BETWEEN $1 AND $2', false);
-- Only the extension's owner runs it.
CREATE ROLE rows_statement_nobody;
SET ROLE rows_statement_nobody;
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{}', '{}', '{}', '{}', true, 'BETWEEN $1 AND $2', false);
RESET ROLE;
DROP ROLE rows_statement_nobody;
