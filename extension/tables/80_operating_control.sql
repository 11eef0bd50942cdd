------------------------------------------------------------------------------
-- Operating control (SPEC section 10)
------------------------------------------------------------------------------
-- A message whose handler failed max_attempts times in a row moves to
-- outbox.dead_letters and its shard goes on (0: retry forever, Sentry's
-- behaviour).
ALTER TABLE outbox.categories
    ADD COLUMN max_attempts int NOT NULL DEFAULT 0 CHECK (max_attempts >= 0);

-- Shards the drain skips, with their rows and the rows written later, until
-- outbox.resume_shard.  cell_name is '' in the cell silo.
CREATE TABLE outbox.paused_shards (
    silo             text        NOT NULL CHECK (silo IN ('cell', 'control')),
    shard_scope      int         NOT NULL,
    shard_identifier bigint      NOT NULL,
    cell_name        text        NOT NULL DEFAULT '',
    paused_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (silo, shard_scope, shard_identifier, cell_name)
);

-- Outbox rows taken out of their shard: by max_attempts, or by
-- outbox.skip_message.  outbox_id is the row's id in the outbox (its place
-- in the shard); outbox.requeue_dead_letters puts rows back in that order.
CREATE TABLE outbox.dead_letters (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    silo              text        NOT NULL CHECK (silo IN ('cell', 'control')),
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    cell_name         text,       -- control silo only
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    payload           jsonb,
    outbox_id         bigint      NOT NULL,
    date_added        timestamptz NOT NULL,
    attempts          int         NOT NULL,
    last_error        text        NOT NULL,
    dead_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON outbox.dead_letters (silo, shard_scope, shard_identifier, cell_name, outbox_id);

SELECT pg_catalog.pg_extension_config_dump('outbox.paused_shards', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.dead_letters', '');
