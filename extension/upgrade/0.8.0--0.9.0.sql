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

-- outbox._backfill_status() gains a column (eta_at_budget): its return type
-- changes, so it and the view on it are made again by functions/.
DROP VIEW outbox.backfill_status;
DROP FUNCTION outbox._backfill_status();
