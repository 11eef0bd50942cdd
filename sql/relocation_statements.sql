-- The statements relocation builds in C++, through their SQL entries:
-- the one that reads an import's staged rows with their keys mapped
-- (src/relocation/import/rows_statement.hpp: outbox._relocation_rows_sql as
-- the import calls it with a plan entry and a purpose, bad arguments to
-- outbox._relocation_rows_statement) and those it runs on an application's
-- table (table_statements.hpp: outbox._relocation_statement, names quoted,
-- bad arguments).  The texts are unit-tested (test/unit/); the import, the
-- cancel and the moves run them (relocation_import.sql, the integration
-- tests relocation_*.sh).
\set VERBOSITY terse
\set SHOW_CONTEXT never
-- A plan entry with a mapped, a deferred and a users reference: in the
-- insert step, the deferred one NULL and the users one through its map.
SELECT outbox._relocation_rows_sql('11111111-1111-1111-1111-111111111111',
    '22222222-2222-2222-2222-222222222222',
    '{"model": "public.project", "pk": "id", "refs": [
      {"column": "organization_id", "parent": "public.organization", "kind": "map", "deferred": false},
      {"column": "parent_id", "parent": "public.project", "kind": "map", "deferred": true},
      {"column": "owner_id", "parent": "public.user", "kind": "users", "deferred": false}]}', 'insert')
    ~ '''parent_id'', NULL::bigint.*m\.relocation = ''22222222-2222-2222-2222-222222222222'' AND m\.table_key = ''public\.user'''
    AS deferred_null_and_users_mapped;
-- Without references; without the users' map, their values kept.
SELECT outbox._relocation_rows_sql('11111111-1111-1111-1111-111111111111', NULL,
    '{"model": "public.team", "pk": "id", "refs": []}', 'insert') !~ 'relocation_pk_map' AS no_lookup;
SELECT outbox._relocation_rows_sql('11111111-1111-1111-1111-111111111111', NULL,
    '{"model": "public.member", "pk": "id", "refs": [
      {"column": "user_id", "parent": "public.user", "kind": "users", "deferred": false}]}', 'deferred')
    !~ 'm1' AS users_kept;
-- Bad arguments: each named.
SELECT outbox._relocation_rows_statement(NULL, NULL, 'm', 'id', '{}', '{}', '{}', '{}', 'insert');
SELECT outbox._relocation_rows_statement('r', NULL, 'm', NULL, '{}', '{}', '{}', '{}', 'insert');
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a}', '{}', '{}', '{}', 'insert');
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a,NULL}', '{p,q}', '{f,f}', '{f,f}', 'insert');
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a}', '{p}', '{NULL}', '{f}', 'insert');
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{{a}}', '{{p}}', '{{f}}', '{{f}}', 'insert');
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a}', '{p}', '{f}', '{f}', NULL);
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{a}', '{p}', '{f}', '{f}', 'update');
-- Only the extension's owner runs it.
CREATE ROLE rows_statement_nobody;
SET ROLE rows_statement_nobody;
SELECT outbox._relocation_rows_statement('r', NULL, 'm', 'id', '{}', '{}', '{}', '{}', 'insert');
SELECT outbox._relocation_statement('rows_of_keys', 'pg_class', 'oid');
RESET ROLE;
DROP ROLE rows_statement_nobody;

-- A table's statements: its names quoted with quote_identifier, its schema
-- with it; the statements run.
CREATE SCHEMA "Statements Schema";
CREATE TABLE "Statements Schema"."Table" ("Id" bigint PRIMARY KEY, "select" text, plain text);
SELECT outbox._relocation_statement('insert_rows', '"Statements Schema"."Table"', 'Id', '{select,plain}');
SELECT outbox._relocation_statement('clear_keys', '"Statements Schema"."Table"', 'Id', '{select}');
SELECT outbox._relocation_statement('values_of_keys', '"Statements Schema"."Table"', 'Id', key_column => 'select');
SELECT outbox._run_as_table_owner('"Statements Schema"."Table"',
    outbox._relocation_statement('insert_rows', '"Statements Schema"."Table"', 'Id', '{select,plain}'),
    ARRAY['{"Id": 1, "select": "a", "plain": "b"}', '{"Id": 2, "select": null, "plain": "c"}']::jsonb[]);
SELECT outbox._run_as_table_owner('"Statements Schema"."Table"',
    outbox._relocation_statement('upsert_rows', '"Statements Schema"."Table"', 'Id', '{plain}'),
    ARRAY['{"Id": 2, "select": "x", "plain": "d"}']::jsonb[]);
SELECT outbox._run_as_table_owner('"Statements Schema"."Table"',
    outbox._relocation_statement('count_keys', '"Statements Schema"."Table"', 'Id'),
    ARRAY['1', '2', '3']::jsonb[]);
-- Only row 1 has "select" set: one row cleared.
SELECT outbox._run_as_table_owner('"Statements Schema"."Table"',
    outbox._relocation_statement('clear_keys', '"Statements Schema"."Table"', 'Id', '{select}'),
    ARRAY['1', '2']::jsonb[]);
SELECT * FROM "Statements Schema"."Table" ORDER BY 1;
SELECT outbox._run_as_table_owner('"Statements Schema"."Table"',
    outbox._relocation_statement('delete_keys', '"Statements Schema"."Table"', 'Id'),
    ARRAY['1', '2', '3']::jsonb[]);
-- A collision hook with an odd name, called with the relocation and the row
-- of each element.
CREATE FUNCTION "Statements Schema"."fix Slug"(relocation uuid, r jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT r || jsonb_build_object('plain', relocation::text) $$;
SELECT outbox._relocation_statement('call_hook', '"Statements Schema"."Table"', 'Id',
    hook => '"Statements Schema"."fix Slug"(uuid, jsonb)');
SELECT outbox._run_as_table_owner('"Statements Schema"."Table"',
    outbox._relocation_statement('call_hook', '"Statements Schema"."Table"', 'Id',
                                 hook => '"Statements Schema"."fix Slug"(uuid, jsonb)'),
    ARRAY['{"relocation": "00000000-0000-0000-0000-000000000007", "row": {"Id": 4}}']::jsonb[]);
-- Bad arguments: each named.
SELECT outbox._relocation_statement('drop_table', '"Statements Schema"."Table"', 'Id');
SELECT outbox._relocation_statement(NULL, '"Statements Schema"."Table"', 'Id');
SELECT outbox._relocation_statement('rows_of_keys', NULL, 'Id');
SELECT outbox._relocation_statement('rows_of_keys', 12345678::oid::regclass, 'Id');
SELECT outbox._relocation_statement('rows_of_keys', '"Statements Schema"."Table"', NULL);
SELECT outbox._relocation_statement('rows_of_keys', '"Statements Schema"."Table"', 'Id', NULL);
SELECT outbox._relocation_statement('update_rows', '"Statements Schema"."Table"', 'Id');
SELECT outbox._relocation_statement('keys_where', '"Statements Schema"."Table"', 'Id');
SELECT outbox._relocation_statement('clear_keys', '"Statements Schema"."Table"', 'Id', '{a,NULL}');
SELECT outbox._relocation_statement('clear_keys', '"Statements Schema"."Table"', 'Id', '{{a}}');
SELECT outbox._relocation_statement('call_hook', '"Statements Schema"."Table"', 'Id');
SELECT outbox._relocation_statement('call_hook', '"Statements Schema"."Table"', 'Id', hook => 12345678::oid::regprocedure);
DROP SCHEMA "Statements Schema" CASCADE;
