------------------------------------------------------------------------------
-- Handlers, draining and the worker
------------------------------------------------------------------------------
-- What a handler receives: one coalesced message.
CREATE TYPE outbox.message AS (
    silo              text,
    shard_scope       int,
    shard_identifier  bigint,
    category          int,
    object_identifier bigint,
    payload           jsonb,    -- the newest row's
    cell_name         text,     -- control silo only
    first_id          bigint,
    last_id           bigint,
    coalesced         int       -- outbox rows delivered as this message
);

-- One handler per category: a function (outbox.message) RETURNS void.
CREATE TABLE outbox.handlers (
    category int          PRIMARY KEY REFERENCES outbox.categories (id),
    handler  regprocedure NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('outbox.handlers', '');

-- The last failure of each shard that has one; removed when it drains.
CREATE TABLE outbox.shard_errors (
    silo              text        NOT NULL,
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    cell_name         text        NOT NULL DEFAULT '',
    attempts          int         NOT NULL,
    last_error        text        NOT NULL,
    last_error_at     timestamptz NOT NULL,
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    PRIMARY KEY (silo, shard_scope, shard_identifier, cell_name)
);
