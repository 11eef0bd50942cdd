------------------------------------------------------------------------------
-- Targeted re-sync (issue 49; docs/design.md): jobs that send again the
-- current version of chosen rows of one table, without a version bump.
------------------------------------------------------------------------------
-- The filter is typed columns, never SQL text: the ids (sorted, distinct)
-- or an id range.  The cursor is in the cursor store (key resync.<id>:
-- Redis outbox_resync.<id>, or a row of outbox.cursors), moved as a
-- backfill's is: it counts ids for an ids job, and is the next id for a
-- range job.
CREATE TABLE outbox.resync_jobs (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    relid       regclass    NOT NULL,
    ids         bigint[],
    low         bigint,
    up          bigint,
    state       text        NOT NULL DEFAULT 'running'
                            CHECK (state IN ('running', 'paused', 'done', 'cancelled', 'failed')),
    outbox_rows bigint      NOT NULL DEFAULT 0,
    last_error  text,
    created_by  regrole     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at timestamptz,
    CHECK ((ids IS NULL) <> (low IS NULL) AND (low IS NULL) = (up IS NULL) AND low <= up)
);
SELECT pg_catalog.pg_extension_config_dump('outbox.resync_jobs', '');
