-- pg_outbox 0.6.0: drain at any depth.  Draining reads each outbox
-- partition once per pass and delivers in bounded batches (a C change);
-- compaction keeps dead tuples that a held snapshot protects from slowing
-- the drain down.  pg_outbox--0.6.0.sql is the same version as one script.
\echo Use "ALTER EXTENSION pg_outbox UPDATE TO '0.6.0'" to load this file. \quit

-- Rewrites the outbox partitions that are mostly dead tuples (a snapshot
-- held for long keeps them from VACUUM): src/drain/compaction.hpp.  The
-- worker does it every cycle; force compacts every partition with a file.
CREATE FUNCTION outbox.compact_outbox(silo text DEFAULT NULL, force boolean DEFAULT false)
    RETURNS int
    LANGUAGE c AS 'MODULE_PATHNAME', 'compact_outbox';
REVOKE ALL ON FUNCTION outbox.compact_outbox(text, boolean) FROM PUBLIC;
