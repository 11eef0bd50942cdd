------------------------------------------------------------------------------
-- Links between clusters (SPEC section 11; README, "Separate clusters")
------------------------------------------------------------------------------
-- Control side: the foreign server (postgres_fdw's, or any wrapper's: only
-- its libpq options are used) through which the worker reaches a cell's
-- database.  A cell with a server gets its control-outbox messages there.
ALTER TABLE outbox.cells ADD COLUMN server name;

-- Cell side: this database is the cell cell_name, and the control database
-- is reached through server.  Its cell-outbox messages go there.
CREATE TABLE outbox.control_link (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    server    name    NOT NULL,
    cell_name text    NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('outbox.control_link', '');

-- Receiving side: the newest outbox row of each object that a sender
-- (origin: 'control', or the sending cell's name) has handed over, per
-- shard and category.  A message is accepted only when its last_id is
-- newer, in the same transaction that puts it in the local outbox: a batch
-- sent again after a crash is taken once.
CREATE TABLE outbox.inbox (
    origin            text        NOT NULL,
    silo              text        NOT NULL CHECK (silo IN ('cell', 'control')),
    shard_scope       int         NOT NULL,
    shard_identifier  bigint      NOT NULL,
    cell_name         text        NOT NULL DEFAULT '',
    category          int         NOT NULL,
    object_identifier bigint      NOT NULL,
    last_id           bigint      NOT NULL,
    received_at       timestamptz NOT NULL DEFAULT now(),
    -- The object first: fixed-width columns before the text ones keep the
    -- index's key comparisons short (half the cost of outbox.receive()).
    PRIMARY KEY (object_identifier, category, shard_identifier, shard_scope, cell_name, origin,
                 silo)
) WITH (fillfactor = 80); -- room for the HOT update of an object sent again

SELECT pg_catalog.pg_extension_config_dump('outbox.inbox', '');

-- Sending side: how each link is doing (the worker writes it).
CREATE TABLE outbox.link_status (
    destination     text        PRIMARY KEY, -- a cell's name, or 'control'
    server          name        NOT NULL,
    messages_sent   bigint      NOT NULL DEFAULT 0, -- taken by the other side
    duplicates      bigint      NOT NULL DEFAULT 0, -- sent again, and not taken twice
    last_sent_at    timestamptz,
    failures        int         NOT NULL DEFAULT 0, -- in a row
    last_error      text,
    last_error_at   timestamptz,
    next_attempt_at timestamptz
);
