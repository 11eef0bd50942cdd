------------------------------------------------------------------------------
-- Cross-silo foreign keys (SPEC section 7)
------------------------------------------------------------------------------
-- Tombstones: a deleted row of a replicated table, kept where the rows that
-- refer to it live.  A deleted control row is recorded in cell_tombstone
-- (Sentry's RegionTombstone), a deleted cell row in control_tombstone.
-- table_name is the parent's table_key.  The cascade job walks them by id.
CREATE TABLE outbox.cell_tombstone (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name        text        NOT NULL,
    object_identifier bigint      NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (table_name, object_identifier)
);
CREATE TABLE outbox.control_tombstone (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_name        text        NOT NULL,
    object_identifier bigint      NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (table_name, object_identifier)
);

-- Cross-silo references (Sentry's HybridCloudForeignKey): column_name of
-- relid holds ids of parent_table's rows, in the other silo.  table_key names
-- the child in the cascade's watermark keys: its registered table_key, or
-- its name.  parent_silo chooses the tombstones: a control parent's are in
-- cell_tombstone.
CREATE TABLE outbox.registered_foreign_keys (
    relid        regclass NOT NULL,
    column_name  name     NOT NULL,
    table_key    text     NOT NULL,
    parent_table text     NOT NULL,
    parent_silo  text     NOT NULL CHECK (parent_silo IN ('cell', 'control')),
    on_delete    text     NOT NULL CHECK (on_delete IN ('CASCADE', 'SET_NULL', 'DO_NOTHING')),
    PRIMARY KEY (relid, column_name)
);

-- The cascade's watermarks when outbox.cursor_store = table (in Redis:
-- the keys row.<table_key>.<column> and tombstone.<table_key>.<column>,
-- holding [low, "<transaction id>"], as Sentry keeps them).
CREATE TABLE outbox.watermarks (
    key            text   PRIMARY KEY,
    low            bigint NOT NULL,
    transaction_id text   NOT NULL
);

SELECT pg_catalog.pg_extension_config_dump('outbox.cell_tombstone', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.control_tombstone', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.registered_foreign_keys', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.watermarks', '');
