-- pg_outbox 0.7.0 to 0.8.0: what changes in tables, types and other state.
-- make appends extension/functions/*.sql, which replaces every function,
-- view and event trigger and grants the privileges again.
\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- Cross-silo foreign keys: new tables.
-- @include tables/70_foreign_keys.sql
