------------------------------------------------------------------------------
-- Backfill cursors and batches
------------------------------------------------------------------------------
-- Cursors when outbox.cursor_store = table: under PostgreSQL's access control
-- and moved in the batch's own transaction.
CREATE TABLE outbox.cursors (
    table_key   text   PRIMARY KEY,
    lower_bound bigint NOT NULL,
    version     int    NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('outbox.cursors', '');

-- What one batch did: Sentry's BackfillBatch (count is its id span) plus the
-- outbox rows actually written.
CREATE TYPE outbox.backfill_batch AS (
    low          bigint,
    up           bigint,
    version      int,
    has_more     boolean,
    count        bigint,
    rows_written bigint
);
