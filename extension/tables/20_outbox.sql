------------------------------------------------------------------------------
-- Outbox storage
------------------------------------------------------------------------------
-- Chosen with bench/capture (docs/benchmarks.md, "Capture").  Capture writes one
-- outbox row per changed row, so whatever the outbox costs to write is paid
-- on every write to every registered table.  Measured on 200,000-row bulk
-- inserts (ratio to the same insert without capture): a heap-only outbox
-- row costs about 0.8x on top of the insert; a btree on (shard_scope,
-- shard_identifier, id), the natural index for draining, costs another
-- 1.9x, because consecutive rows go to random shards and so to random
-- leaf pages (a full descent and, after each checkpoint, a full-page image
-- per leaf); even a btree on shard_identifier alone costs 0.8x.  Sentry's
-- outbox has three btrees.
--
-- So the outbox has no index.  It is hash-partitioned on shard_identifier
-- instead (capture routes each row to its partition itself, as cheaply as a
-- heap insert), which gives draining what it needs:
--   * walk one shard in id order: the shard's rows are in one partition, a
--     sixteenth of the outbox, scanned and sorted;
--   * find due shards: one scan per partition, which the drain does anyway
--     to take every due shard of that partition in one pass;
--   * delete what was delivered: by ctid (checked against the id) within the
--     transaction that read the rows.
-- The outbox is meant to be shallow (it is drained continuously); a deep
-- backlog costs scans of a partition, never anything on the write path.
-- id comes from a sequence without cache that capture advances a block at a
-- time (one nextval per 1,000 rows of a statement): within a shard, ids
-- follow the order in which changes to an object were written, because the
-- second of two statements changing the same row reserves its block only
-- after the first has committed (src/capture/outbox_writer.cpp).  Nothing
-- looks a row up by id alone.
CREATE SEQUENCE outbox.cell_outbox_id_seq INCREMENT BY 1000;
CREATE TABLE outbox.cell_outbox (
    id                bigint      NOT NULL DEFAULT nextval('outbox.cell_outbox_id_seq'),
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    payload           jsonb,
    scheduled_from    timestamptz NOT NULL DEFAULT now(),
    scheduled_for     timestamptz NOT NULL DEFAULT now(),
    date_added        timestamptz NOT NULL DEFAULT now()
) PARTITION BY HASH (shard_identifier);
ALTER SEQUENCE outbox.cell_outbox_id_seq OWNED BY outbox.cell_outbox.id;

CREATE SEQUENCE outbox.control_outbox_id_seq INCREMENT BY 1000;
CREATE TABLE outbox.control_outbox (
    id                bigint      NOT NULL DEFAULT nextval('outbox.control_outbox_id_seq'),
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    payload           jsonb,
    scheduled_from    timestamptz NOT NULL DEFAULT now(),
    scheduled_for     timestamptz NOT NULL DEFAULT now(),
    date_added        timestamptz NOT NULL DEFAULT now(),
    cell_name         text        NOT NULL
) PARTITION BY HASH (shard_identifier);
ALTER SEQUENCE outbox.control_outbox_id_seq OWNED BY outbox.control_outbox.id;

-- pg_dump keeps undelivered outbox rows: the data lives in the partitions.
DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format('CREATE TABLE outbox.cell_outbox_%s PARTITION OF outbox.cell_outbox '
                       'FOR VALUES WITH (MODULUS 16, REMAINDER %s)', i, i);
        EXECUTE format('CREATE TABLE outbox.control_outbox_%s PARTITION OF outbox.control_outbox '
                       'FOR VALUES WITH (MODULUS 16, REMAINDER %s)', i, i);
        PERFORM pg_catalog.pg_extension_config_dump(format('outbox.cell_outbox_%s', i), '');
        PERFORM pg_catalog.pg_extension_config_dump(format('outbox.control_outbox_%s', i), '');
    END LOOP;
END
$$;

-- pg_dump keeps the registry and the options.
SELECT pg_catalog.pg_extension_config_dump('outbox.scopes', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.categories', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.cells', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.registered_tables', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.options', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.cell_outbox_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.control_outbox_id_seq', '');
