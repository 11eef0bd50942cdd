------------------------------------------------------------------------------
-- Registry
------------------------------------------------------------------------------

-- What an outbox is sharded by (organisation, user, ...).  ids are the
-- shard_scope values written into outbox rows.
CREATE TABLE outbox.scopes (
    id   int  PRIMARY KEY CHECK (id >= 0),
    name text NOT NULL UNIQUE
);

-- A category is a kind of change (an int with a name); it belongs to exactly
-- one scope.
CREATE TABLE outbox.categories (
    id    int  PRIMARY KEY CHECK (id >= 0),
    name  text NOT NULL UNIQUE,
    scope int  NOT NULL REFERENCES outbox.scopes (id)
);

-- Cells a control-silo change is fanned out to.
CREATE TABLE outbox.cells (
    name text PRIMARY KEY
);

-- Replicated tables.  relid is a regclass so that pg_dump writes the table's
-- name and a restore maps it to the new OID.
CREATE TABLE outbox.registered_tables (
    table_key           text     PRIMARY KEY,
    relid               regclass NOT NULL UNIQUE,
    silo                text     NOT NULL CHECK (silo IN ('cell', 'control')),
    category            int      NOT NULL REFERENCES outbox.categories (id),
    shard_column        name,
    cell_column         name     CHECK (cell_column IS NULL OR silo = 'control'),
    payload_columns     name[],
    replication_version int      NOT NULL CHECK (replication_version >= 1)
);

-- Version gates and other options (section 2 of the spec).  A GUC of the same
-- name overrides a row here.
CREATE TABLE outbox.options (
    key   text  PRIMARY KEY,
    value jsonb NOT NULL
);
