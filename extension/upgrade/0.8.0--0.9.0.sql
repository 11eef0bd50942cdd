-- pg_outbox 0.8.0 to 0.9.0: what changes in tables, types and other state.
-- make appends extension/functions/*.sql, which replaces every function,
-- view and event trigger and grants the privileges again.
\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- Operating control: max_attempts, paused shards, dead letters.
-- @include tables/80_operating_control.sql

-- Consumers outside the database: claims with leases.
-- @include tables/90_consumers.sql

-- Links between clusters.
-- @include tables/95_links.sql

-- Tombstone checks to try again.
-- @include tables/96_tombstone_checks.sql

-- Relocation scopes and roots.
-- @include tables/97_relocation.sql

-- Which cell may speak for a cell object.
-- @include tables/98_cell_objects.sql

-- Where each organization lives.
-- @include tables/98_organization_cells.sql

-- Moves of organizations between cells.
-- @include tables/99_organization_moves.sql

-- Targeted re-sync jobs.
-- @include tables/99_resyncs.sql

-- register_table gains relocation_scope: a new signature.
DROP FUNCTION outbox.register_table(regclass, text, text, name, name[], name, int, text);
DROP FUNCTION outbox._register_table(regclass, text, text, name, name[], name, int, text);

-- outbox._backfill_status() gains a column (eta_at_budget): its return type
-- changes, so it and the view on it are made again by functions/.
DROP VIEW outbox.backfill_status;
DROP FUNCTION outbox._backfill_status();
-- So does outbox._worker_status() (backfill_max_shard_depth).
DROP VIEW outbox.worker_status;
DROP FUNCTION outbox._worker_status();

-- A cross-silo reference from an unregistered table outside public is named
-- with its schema in its watermark keys (they were shared with a table of
-- the same name elsewhere).  Its walks start again from the smallest id
-- under the new keys, which is safe (a walk only finds rows to change); the
-- old keys are left where they are.
UPDATE outbox.registered_foreign_keys f
   SET table_key = n.nspname || '.' || c.relname
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = f.relid AND n.nspname <> 'public'
   AND NOT EXISTS (SELECT FROM outbox.registered_tables r WHERE r.relid = f.relid);
