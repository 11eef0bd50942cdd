-- pg_outbox: what CREATE EXTENSION pg_outbox installs, assembled by make from
-- extension/tables/*.sql (run once, by CREATE EXTENSION) and then
-- extension/functions/*.sql (run again by every upgrade).  docs/development.md,
-- gives the convention.
\echo Use "CREATE EXTENSION pg_outbox" to load this file. \quit

-- The security model (docs/security.md; SPEC section 9): the
-- extension's owner (a superuser) administers; table owners register their
-- own tables under the categories they were granted; application roles only
-- write their tables, and capture writes the outbox on their behalf; members
-- of pg_monitor read the views.  Every function that runs with the owner's
-- rights pins search_path.  The privileges are granted at the end of
-- functions/, so that each upgrade grants them again.
