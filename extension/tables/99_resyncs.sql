------------------------------------------------------------------------------
-- Targeted re-sync (issue 49; docs/design.md): jobs that send again the
-- current version of chosen rows, without a version bump.
------------------------------------------------------------------------------
-- The filter is typed columns, never SQL text, one kind per job (target):
--   ids: one table's rows among ids (sorted, distinct, in
--     outbox.resync_rows);
--   range: one table's rows with ids in [low, up];
--   shard: one table's rows of the shard (shard_scope, shard_identifier);
--   organization: the rows of every registered table that belong to
--     organization, resolved once, when the job starts, into
--     outbox.resync_rows, in the export's order (parents first).
-- The cursor is in the cursor store (key resync.<id>: Redis
-- outbox_resync.<id>, or a row of outbox.cursors), moved as a backfill's
-- is: the next position for ids and organization jobs, the next id for
-- range and shard jobs.  rows_total is what matched when the job started
-- (rows meanwhile inserted or deleted make rows_done / rows_total an
-- estimate), in that many shards; throttled: its last batch waited for a shard at
-- outbox.backfill_max_shard_depth.  stopped_for: how long the job was
-- paused or failed before it last resumed (paused_at: since when it is
-- paused), which its ETA leaves out.
CREATE TABLE outbox.resync_jobs (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    target           text        NOT NULL
                                 CHECK (target IN ('ids', 'range', 'shard', 'organization')),
    relid            regclass,
    low              bigint,
    up               bigint,
    shard_scope      integer,
    shard_identifier bigint,
    organization     bigint,
    state            text        NOT NULL DEFAULT 'running'
                                 CHECK (state IN ('running', 'paused', 'done', 'cancelled', 'failed')),
    rows_total       bigint      NOT NULL DEFAULT 0,
    shards           bigint      NOT NULL DEFAULT 0,
    rows_done        bigint      NOT NULL DEFAULT 0,
    outbox_rows      bigint      NOT NULL DEFAULT 0,
    throttled        boolean     NOT NULL DEFAULT false,
    last_error       text,
    created_by       regrole     NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at      timestamptz,
    paused_at        timestamptz,
    stopped_for      interval    NOT NULL DEFAULT '0',
    CHECK (CASE target
           WHEN 'ids' THEN relid IS NOT NULL
           WHEN 'range' THEN relid IS NOT NULL AND low <= up
           WHEN 'shard' THEN relid IS NOT NULL AND shard_scope IS NOT NULL
                             AND shard_identifier IS NOT NULL
           ELSE relid IS NULL AND organization IS NOT NULL END)
);
SELECT pg_catalog.pg_extension_config_dump('outbox.resync_jobs', '');

-- An ids or organization job's rows, in the order they are sent, a chunk
-- of one table's ids a row (src/resync/id_chunks.hpp: varints of each id's
-- difference from the one before, at most 1,900 bytes): first is the
-- position of the chunk's first id in the job.  Chunks, not a row per id:
-- writing an organization of 100,000 rows a row each took longer than
-- sending them (bench/resync).  No foreign key to resync_jobs, for the
-- same reason: the job's own functions write and delete them (deleted when
-- it ends).
CREATE TABLE outbox.resync_rows (
    job   bigint   NOT NULL,
    first bigint   NOT NULL,
    relid regclass NOT NULL,
    ids   bytea    NOT NULL,
    PRIMARY KEY (job, first)
);
SELECT pg_catalog.pg_extension_config_dump('outbox.resync_rows', '');
